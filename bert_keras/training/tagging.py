"""The tagging pipeline: tagged sentences -> a `BertTokenClassifier` fine-tuned, scored by entity F1, exported.

`finetune_tagger` is `finetune_classifier`'s sibling for named entities:
the same shell (`run_pipeline`: checks, lock, backup and exact resume,
strategies, dtype policies) and the same two phases (`finetune`'s recipe),
on other examples. A sentence becomes one or more windows of whole words
(`text.alignment.window_sentences`: none is cut off, however long); each
window's raw text is what the model reads, and its word labels go to the
first piece of each word (`text.alignment.align_word_labels`), the other
positions weighing nothing in the loss. The test score is conlleval's
entity-level precision, recall and F1 (`bert_keras.entities`), on every word
of every test sentence.
"""

import dataclasses
import logging
import math
import time

import keras
import numpy as np
import tensorflow as tf

from bert_keras import export, lora
from bert_keras.entities import entity_scores, format_entity_report
from bert_keras.tasks import BertTokenClassifier
from bert_keras.text.alignment import IGNORE_LABEL, align_word_labels, merge_windows, window_sentences
from bert_keras.training.backup import fingerprint
from bert_keras.training.config import FineTuneConfig
from bert_keras.training.data import example_dataset
from bert_keras.training.finetune import (FineTuneResult, _two_phases, early_stopping, offsets_tokenizer,
                                            pooler_left_out, random_split, run_pipeline)
from bert_keras.training.harness import Harness

logger = logging.getLogger(__name__)

# Windows aligned per call of `align_word_labels` (bounds the memory of one call, not the result).
_ALIGN_CHUNK = 1024
# Options that suit tagging better than the classifier's defaults, used where the caller sets none: small
# datasets of short sentences (CoNLL, WNUT) want more, smaller steps (transformers' token-classification
# example trains 3 epochs at batch 8-32 with 5e-5).
TAGGER_DEFAULTS = {"batch_size": 16, "epochs": 3}


def tagger_config(config=None, **options):
    """A `FineTuneConfig` for tagging: `TAGGER_DEFAULTS` under `config` (when given) and `options`."""
    if config is not None:
        return FineTuneConfig.of(config, **options)
    return FineTuneConfig.of(None, **{**TAGGER_DEFAULTS, **options})


@dataclasses.dataclass
class TaggingExamples:
    """Tagged sentences as model examples: windows of whole words with per-piece labels.

    Attributes:
        windows: the dict of `window_sentences` (`text`, `sentence`, `first_word`, `num_words`, ...).
        labels: int32 `(windows, seq_length)`: the word labels on each word's first piece,
            `IGNORE_LABEL` elsewhere.
        word_index: int32 `(windows, seq_length)`: each piece's word within its window, -1 for none.
    """

    windows: dict
    labels: np.ndarray
    word_index: np.ndarray

    def __len__(self):
        return len(self.windows["text"])

    def dataset(self, batch_size, shuffle_seed=None, with_labels=True):
        """Batches of `(texts, labels, weights)` (labels >= 0, weight 1 on labelled pieces), or of texts alone."""
        texts = tf.constant(self.windows["text"], tf.string)
        if not with_labels:
            return example_dataset(texts, len(self), batch_size)
        weights = (self.labels != IGNORE_LABEL).astype(np.float32)
        columns = (texts, tf.constant(np.maximum(self.labels, 0)), tf.constant(weights))
        return example_dataset(columns, len(self), batch_size, shuffle_seed)


def tagging_examples(tokenizer, data, seq_length):
    """`TaggedText` -> `TaggingExamples` for a tagger whose preprocessor uses `tokenizer` at `seq_length`."""
    windows = window_sentences(tokenizer, data.words, seq_length, labels=data.tag_ids)
    labels, word_index = [], []
    for begin in range(0, len(windows["text"]), _ALIGN_CHUNK):
        part = slice(begin, begin + _ALIGN_CHUNK)
        packed = align_word_labels(tokenizer, windows["text"][part], windows["word_starts"][part],
                                   windows["word_ends"][part], labels=windows["labels"][part], seq_length=seq_length)
        labels.append(packed["labels"].numpy())
        word_index.append(packed["word_index"].numpy())
    empty = np.zeros((0, seq_length), np.int32)
    return TaggingExamples(windows, np.concatenate(labels or [empty]), np.concatenate(word_index or [empty]))


def predict_tags(model, examples, tag_names, batch_size=64, harness=None):
    """The tagger's tag for every word of every sentence (its first piece's argmax; `"O"` for a word without pieces).

    With a `harness`, its `predict` runs the model (progress lines at verbosity 2).
    """
    data = examples.dataset(batch_size, with_labels=False)
    if harness is None:
        logits = model.predict(data, verbose=0)
    else:
        logits = harness.predict(model, data, steps=math.ceil(len(examples) / batch_size),
                                 what=f"Tagging the test set ({len(examples)} examples)")
    predicted = np.argmax(keras.ops.convert_to_numpy(keras.ops.cast(logits, "float32")), axis=-1)
    merged = merge_windows(examples.windows, examples.word_index, predicted)
    return [[tag_names[tag] if tag is not None else "O" for tag in sentence] for sentence in merged]


def finetune_tagger(source, train, validation=None, test=None, export_dir=None, config=None, *, backup_dir=None,
                    strategy=None, overwrite=False, verbose="auto", report=logger.info, **options):
    """The tagging pipeline: tagged sentences -> scope -> build -> finetune -> entity F1 -> export.

    Args:
        source: a checkpoint folder `BertTokenClassifier.from_checkpoint` reads
            (the tagger keeps each piece's characters through the package's own
            tokenizer, so Hub module pairs are not taken).
        train: `bert_keras.tagged_data.TaggedText`.
        validation: optional `TaggedText` with train's tag names; by default a
            random `validation_fraction` of `train`'s sentences.
        test: optional `TaggedText` with train's tag names, scored after training.
        export_dir: optional str. Where the tagger is exported (`export.export_tagger`).
        config: optional `FineTuneConfig`; `options` replace its fields. Without
            a config, `TAGGER_DEFAULTS` replace the classifier's batch size and epochs.
        backup_dir, strategy, overwrite, verbose, report: as `finetune_classifier`'s.

    Returns:
        `FineTuneResult`: `scores` holds the test's micro `precision`, `recall`
        and `f1`, `evaluation` the whole `entities.entity_scores`.
    """
    config = tagger_config(config, **options)
    if config.class_weights is not None:
        raise ValueError("`class_weights` weigh a classifier's classes; a tagger's loss counts every labelled word once. "
                         f"Received: class_weights={config.class_weights!r}")
    for name, part in (("validation", validation), ("test", test)):
        if part is not None and list(part.tag_names) != list(train.tag_names):
            raise ValueError(f"The {name} data's tags {part.tag_names} are not the training data's {train.tag_names}: "
                             f"read it with `tag_names=train.tag_names`.")
    return run_pipeline(_train_and_export, source, dict(train=train, validation=validation, test=test), export_dir,
                        config, kind="tagger", fingerprint=_fingerprint, backup_dir=backup_dir, strategy=strategy,
                        overwrite=overwrite, verbose=verbose, report=report)


def _train_and_export(harness, source, train, validation, test, export_dir, config, overwrite, report):
    if validation is None:
        train, validation = random_split(train, config.validation_fraction, config.seed)
    tag_names = list(train.tag_names)
    sizes = {"train": len(train), "validation": len(validation), "test": 0 if test is None else len(test)}
    report(f"Training sentences: {sizes['train']}, validation: {sizes['validation']}"
           + (f", test: {sizes['test']}" if test is not None else "") + f"; tags: {tag_names}")
    keras.utils.set_random_seed(config.seed)
    model = _build_tagger(harness, source, tag_names, config)
    tokenizer = offsets_tokenizer(model, "tagger")
    train_examples, validation_examples = (tagging_examples(tokenizer, part, config.seq_length) for part in (train, validation))
    if len(train_examples) > len(train):
        report(f"Sentences longer than {config.seq_length - 2} pieces are split at word boundaries: "
               f"{len(train)} training sentences make {len(train_examples)} examples")
    report(f"Fine-tuning the tagger (seq_length {config.seq_length}, batch {config.batch_size}): {config.head_epochs} "
           f"epoch(s) with the encoder frozen, then {config.epochs} with it unfrozen (AdamW {config.phase_2_learning_rate:g})")
    callbacks = early_stopping(config, len(validation), "sentences")
    started = time.time()
    with pooler_left_out():
        history = _tagger_phases(harness, model, config, train_examples, validation_examples, callbacks)
    fit_seconds = time.time() - started
    if config.lora_rank is not None:
        lora.merge_lora(model)  # an ordinary model from here on: scored, copied and exported as one
    if harness.replicas > 1:
        if not harness.chief:
            return FineTuneResult(model, history, None, None, None, fit_seconds, sizes)
        trained, model = model, _build_tagger(Harness(tf.distribute.get_strategy()), source, tag_names, config)
        model.set_weights(trained.get_weights())
    scores = evaluation = None
    if test is not None:
        predicted = predict_tags(model, tagging_examples(tokenizer, test, config.seq_length), tag_names, harness=harness)
        evaluation = entity_scores(test.tags, predicted, scheme=train.scheme)
        scores = {key: evaluation[key] for key in ("precision", "recall", "f1")}
        report(f"Test set ({len(test)} sentences), entities (exact type and span):\n{format_entity_report(evaluation)}")
    if export_dir is not None:
        metrics = {"tag_names": tag_names, "scheme": train.scheme, "history": dataclasses.asdict(history),
                   "fit_seconds": round(fit_seconds, 1)}
        if evaluation is not None:
            metrics["test"] = evaluation
        export.export_tagger(model, export_dir, tag_names, overwrite=overwrite, extra_assets={"metrics.json": metrics},
                             dtype=config.export_dtype)
        report(f"Exported the tagger (raw strings in; entities with character offsets out) to {export_dir}")
    return FineTuneResult(model, history, scores, None, export_dir, fit_seconds, sizes, evaluation)


def _tagger_phases(harness, model, config, train_examples, validation_examples, callbacks):
    """`finetune`'s two phases on tagging examples: the loss is the mean over labelled pieces only."""
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight")
    return _two_phases(
        harness, model, config, train_examples.dataset(config.batch_size, shuffle_seed=config.seed),
        encoder=model.encoder, loss=loss, metrics=(), weighted_metrics=["accuracy"],
        validation_data=validation_examples.dataset(config.batch_size) if len(validation_examples) else None,
        steps_per_epoch=math.ceil(len(train_examples) / config.batch_size), callbacks=callbacks,
    )


def _build_tagger(harness, source, tag_names, config):
    """The pipeline's tagger, made under the harness's strategy with the config's dtype policy."""
    with harness.building(config.dtype):
        return BertTokenClassifier.from_checkpoint(source, seq_length=config.seq_length, num_classes=len(tag_names),
                                                   label_names=tag_names, dropout=config.dropout)


def _fingerprint(data):
    if data is None:
        return fingerprint()
    return fingerprint(data.words, data.tags, list(data.tag_names), data.scheme)
