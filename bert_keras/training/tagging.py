"""The tagging recipe: tagged sentences -> a `BertTokenClassifier` fine-tuned, scored by entity F1, exported.

`finetune_tagger` runs `TaggerRecipe` in the one pipeline
(`training.recipe.run_recipe`: the classifier's shell and two phases). A
sentence's words are joined by single spaces and cut into the windows the
tagger export serves (`text.windows.tagging_windows`: windows of
`seq_length - 2` pieces with `stride` pieces of overlap, none dropped); the
first piece of each word carries its label, the other positions weigh
nothing in the loss. The model trained is the tagger on those packed
windows, sharing its encoder with the raw-string tagger that is scored and
exported. The test score is conlleval's entity-level precision, recall and
F1 (`bert_keras.entities`) of the tags read through the export's own
computation (`export.tagger.serving_pieces`: its windows, each piece's
copy with the most context, each word's first piece), so the F1 in the
export's `metrics.json` is the F1 `bert-keras evaluate` gets from the export.
"""

import dataclasses
import logging
import math
import os

import keras
import numpy as np
import tensorflow as tf

from bert_keras.entities import entity_scores, format_entity_report
from bert_keras.export import export_tagger
from bert_keras.export.tagger import sentence_tags, serving_pieces
from bert_keras.formats import read_checkpoint, tables
from bert_keras.tasks import BertTokenClassifier, load_encoder_and_preprocessor
from bert_keras.text.alignment import IGNORE_LABEL, join_words
from bert_keras.text.windows import INPUT_KEYS, check_stride, tagging_windows
from bert_keras.training.backup import fingerprint
from bert_keras.training.config import FineTuneConfig
from bert_keras.training.data import example_dataset
from bert_keras.training.finetune import offsets_tokenizer, random_split
from bert_keras.training.recipe import Batches, Recipe, run_recipe

logger = logging.getLogger(__name__)

# Sentences cut into windows per call of `tagging_windows` (bounds the memory of one call, not the result).
_WINDOW_CHUNK = 1024
# Options that suit tagging better than the classifier's defaults, used where the caller sets none: small
# datasets of short sentences (CoNLL, WNUT) want more, smaller steps (transformers' token-classification
# example trains 3 epochs at batch 8-32 with 5e-5).
TAGGER_DEFAULTS = {"batch_size": 16, "epochs": 3}


def tagger_config(config=None, **options):
    """A `FineTuneConfig` for tagging: `TAGGER_DEFAULTS` under `config` (when given) and `options`."""
    if config is not None:
        return FineTuneConfig.of(config, **options)
    return FineTuneConfig.of(None, **{**TAGGER_DEFAULTS, **options})


def tagging_examples(tokenizer, data, seq_length, stride=None):
    """`TaggedText` -> the packed windows a tagger trains on: numpy arrays, one row per window.

    Returns:
        A dict with `input_word_ids`, `input_mask`, `input_type_ids`, `labels`
        (int32 `(windows, seq_length)`, `IGNORE_LABEL` off the words' first
        pieces) and `sentence` (int64 `(windows,)`).
    """
    parts = []
    for begin in range(0, len(data.words), _WINDOW_CHUNK):
        joined = [join_words(words) for words in data.words[begin : begin + _WINDOW_CHUNK]]
        windows = tagging_windows(tokenizer, [text for text, _, _ in joined], [starts for _, starts, _ in joined],
                                  [ends for _, _, ends in joined], data.tag_ids[begin : begin + _WINDOW_CHUNK],
                                  seq_length=seq_length, stride=stride)
        windows = {key: value.numpy() for key, value in windows.items()}
        windows["sentence"] = windows.pop("text_index") + begin
        parts.append(windows)
    empty = {key: np.zeros((0, seq_length), np.int32) for key in (*INPUT_KEYS, "labels")}
    return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]} if parts else {
        **empty, "sentence": np.zeros((0,), np.int64)}


def _trimmed(inputs, labels, weights):
    """A batch of windows cut to its longest window (the rest is padding): attention costs the square."""
    width = tf.maximum(tf.reduce_max(tf.reduce_sum(inputs["input_mask"], axis=1)), 1)
    return {key: value[:, :width] for key, value in inputs.items()}, labels[:, :width], weights[:, :width]


class TaggerRecipe(Recipe):
    """A `BertTokenClassifier` on the sequence output: cross-entropy on each word's first piece."""

    kind = "tagger"
    unit = "sentences"
    token_level = True

    def __init__(self, config, stride=None, new_head=False):
        super().__init__(config)
        self.stride = check_stride(stride, config.seq_length)
        self.new_head = new_head  # a checkpoint's own head of other tags is left unread (`checkpoint_head_plan`)

    def fingerprint(self, data):
        if data is None:
            return fingerprint(self.stride)
        return fingerprint(data.words, data.tags, list(data.tag_names), data.scheme, self.stride)

    def split(self, train):
        return random_split(train, self.config.validation_fraction, self.config.seed)

    def prepare(self, train, report):
        return f"; tags: {list(train.tag_names)}"

    def build(self, harness, source, train):
        tag_names = list(train.tag_names)
        with harness.building(self.config.dtype):
            if self.new_head:
                encoder, preprocessor = load_encoder_and_preprocessor(source, seq_length=self.config.seq_length)
                model = BertTokenClassifier(encoder, num_classes=len(tag_names), preprocessor=preprocessor,
                                            label_names=tag_names, dropout=self.config.dropout)
            else:
                model = BertTokenClassifier.from_checkpoint(source, seq_length=self.config.seq_length,
                                                            num_classes=len(tag_names), label_names=tag_names,
                                                            dropout=self.config.dropout)
            offsets_tokenizer(model, "tagger")
            trainer = BertTokenClassifier(model.encoder, num_classes=len(tag_names), dropout=self.config.dropout,
                                          name="tagger_on_windows")
            trainer.classifier_head.set_weights(model.classifier_head.get_weights())
        return model, trainer

    def batches(self, harness, model, trainer, data, shuffle_seed=None):
        windows = tagging_examples(model.preprocessor.tokenizer, data, self.config.seq_length, self.stride)
        inputs = {key: tf.constant(windows[key]) for key in INPUT_KEYS}
        labels = windows["labels"]
        columns = (inputs, tf.constant(np.maximum(labels, 0)), tf.constant((labels != IGNORE_LABEL).astype(np.float32)))
        size = len(labels)
        return Batches(example_dataset(columns, size, self.config.batch_size, shuffle_seed).map(_trimmed),
                       math.ceil(size / self.config.batch_size))

    def compile_arguments(self, harness, trainer):
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight")
        return {"loss": loss, "metrics": (), "weighted_metrics": ["accuracy"]}

    def trained(self, model, trainer):
        model.classifier_head.set_weights(trainer.classifier_head.get_weights())  # the encoder is one object in both

    def score(self, harness, model, test, train):
        harness.report(f"Tagging the test set ({len(test)} sentences) as the export serves it")
        predicted = sentence_tags(serving_pieces(model, self.stride), test.words, model.label_names)
        evaluation = entity_scores(test.tags, predicted, scheme=test.scheme)
        scores = {key: evaluation[key] for key in ("precision", "recall", "f1")}
        return scores, evaluation, None, (f"Test set ({len(test)} sentences), entities (exact type and span):\n"
                                          f"{format_entity_report(evaluation)}")

    def export(self, model, export_dir, run, evaluation, scores, overwrite):
        metrics = {"tag_names": model.label_names, "stride": self.stride, **run}
        if evaluation is not None:
            metrics["test"] = evaluation
        export_tagger(model, export_dir, model.label_names, overwrite=overwrite, extra_assets={"metrics.json": metrics},
                      dtype=self.config.export_dtype, stride=self.stride)
        return f"Exported the tagger (raw strings in; entities with character offsets out) to {export_dir}"


def finetune_tagger(source, train, validation=None, test=None, export_dir=None, config=None, *, stride=None,
                    backup_dir=None, strategy=None, overwrite=False, verbose="auto", report=logger.info, **options):
    """The tagging pipeline: tagged sentences -> scope -> build -> finetune -> entity F1 -> export.

    Args:
        source: a checkpoint folder `BertTokenClassifier.from_checkpoint` reads
            (the tagger keeps each piece's characters through the package's own
            tokenizer, so Hub module pairs are not taken). A folder with its
            own token-classification head of the data's tags, in any order,
            is fine-tuned from that head in its order; one of other tags gets
            a new head (`checkpoint_head_plan`, said by `report`).
        train: `bert_keras.data.tagged.TaggedText`, with at least one entity tag.
        validation: optional `TaggedText` with train's tag names; by default a
            random `validation_fraction` of `train`'s sentences.
        test: optional `TaggedText` with train's tag names, scored after
            training through the export's computation.
        export_dir: optional str. Where the tagger is exported (`export.export_tagger`).
        config: optional `FineTuneConfig`; `options` replace its fields. Without
            a config, `TAGGER_DEFAULTS` replace the classifier's batch size and epochs.
        stride: optional int. Pieces shared by consecutive windows of a long
            sentence, in training, scoring and the export. Defaults to a
            quarter of a window (`text.windows.default_stride`).
        backup_dir, strategy, overwrite, verbose, report: as `finetune_classifier`'s.

    Returns:
        `FineTuneResult`: `scores` holds the test's micro `precision`, `recall`
        and `f1`, `evaluation` the whole `entities.entity_scores`.
    """
    config = tagger_config(config, **options)
    if config.class_weights is not None:
        raise ValueError("`class_weights` weigh a classifier's classes; a tagger's loss counts every labelled word once. "
                         f"Received: class_weights={config.class_weights!r}")
    if len(train.tag_names) < 2:
        raise ValueError(f"Received training data with the tags {list(train.tag_names)}: a tagger needs at least one "
                         "entity tag besides 'O' to learn anything.")
    for name, part in (("validation", validation), ("test", test)):
        if part is not None and list(part.tag_names) != list(train.tag_names):
            raise ValueError(f"The {name} data's tags {part.tag_names} are not the training data's {train.tag_names}: "
                             f"read it with `tag_names=train.tag_names`.")
    head_tags, new_head = checkpoint_head_plan(source, train.tag_names, report)
    if head_tags is not None:  # the head's own order: the data's tags name its outputs
        train, validation, test = (None if part is None else dataclasses.replace(part, tag_names=list(head_tags))
                                   for part in (train, validation, test))
    return run_recipe(TaggerRecipe(config, stride, new_head), source, train, validation, test, export_dir,
                      backup_dir=backup_dir, strategy=strategy, overwrite=overwrite, verbose=verbose, report=report)


def checkpoint_head_plan(source, tag_names, report=logger.info):
    """What becomes of a token-classification head that `source` holds (a fine-tuned tagger), said by `report`.

    The head's tags (config.json's `id2label`, in the order of its outputs)
    are the data's `tag_names` in another order, or the same: the head is
    reused in its own order, the data's tags mapped to its outputs. Other
    tags: a new head of the data's tags replaces it (its encoder is read alone).

    Returns:
        `(head_tags, new_head)`: the head's tags where it is reused (else
        None), and whether a new head replaces one of other tags.
    """
    head_tags = _head_tags(source)
    if head_tags is None:
        return None, False
    if sorted(head_tags) == sorted(tag_names):
        report(f"Reusing the checkpoint's token-classification head in its own order of tags {list(head_tags)}: the "
               "data's tags are mapped to its outputs")
        return list(head_tags), False
    only_data = [tag for tag in tag_names if tag not in head_tags]
    only_head = [tag for tag in head_tags if tag not in tag_names]
    report(f"Replacing the checkpoint's token-classification head (tags {list(head_tags)}) with a new head of the "
           f"data's tags {list(tag_names)}: " + "; ".join(
               part for part in (f"{only_data} only in the data" if only_data else "",
                                 f"{only_head} only in the head" if only_head else "") if part))
    return None, True


def _head_tags(source):
    """The tags of the token-classification head `source` holds (with `id2label`), or None: no such head read."""
    if not isinstance(source, (str, os.PathLike)):
        return None
    try:  # read as data: weights, no graph; a source that cannot be read is reported by the model's builder
        weights = read_checkpoint(source, with_heads=[tables.TOKEN_CLASSIFIER], allow_modules=False)
    except (OSError, ValueError):
        return None
    if tables.TOKEN_CLASSIFIER not in weights.heads:
        return None
    return weights.label_names or [f"LABEL_{index}" for index in range(weights.num_labels or 0)] or None
