"""The reading pipeline: SQuAD examples -> a `BertSpanLabeler` fine-tuned, scored by exact match and F1, exported.

`finetune_reader` is `finetune_classifier`'s sibling for extractive
question answering: the same shell (`run_pipeline`) and two phases, on the
windows of `text.windows.qa_features` (`[CLS] question [SEP] context [SEP]`,
contexts longer than a window cut with a document stride, as transformers'
`run_qa.py` does). Each window is labelled with the answer's first and last
piece, or `[CLS]` where it does not hold the whole answer; the loss is the
mean of the start and end cross-entropies (as `BertForQuestionAnswering`'s).
The model trained is the span labeler on the packed windows, sharing its
encoder and head with the raw-string model that is scored and exported:
scores come from the export's own decoding (`export.reader`), on every
window of every test question.
"""

import dataclasses
import logging
import math
import time

import keras
import tensorflow as tf

from bert_keras import export, lora
from bert_keras.export.reader import best_answers, window_probabilities
from bert_keras.squad import squad_scores
from bert_keras.tasks import BertSpanLabeler
from bert_keras.text.windows import (INPUT_KEYS, ROBERTA_SPECIAL_TOKENS, check_window_arguments, qa_features,
                                     special_tokens)
from bert_keras.training.backup import fingerprint
from bert_keras.training.config import FineTuneConfig
from bert_keras.training.data import example_dataset
from bert_keras.training.finetune import (FineTuneResult, _two_phases, early_stopping, offsets_tokenizer,
                                            pooler_left_out, random_split, run_pipeline)
from bert_keras.training.harness import Harness

logger = logging.getLogger(__name__)

# transformers' run_qa.py recipe for BERT on SQuAD (384 pieces, batch 12, 2 epochs at 3e-5), used where the
# caller sets none of these; the document stride (128) and question length (64) are `finetune_reader`'s own.
READER_DEFAULTS = {"seq_length": 384, "batch_size": 12, "epochs": 2, "learning_rate": 3e-5}
_SCORING_BATCH = 16  # questions per scoring call


def reader_config(config=None, **options):
    """A `FineTuneConfig` for reading: `READER_DEFAULTS` under `config` (when given) and `options`."""
    if config is not None:
        return FineTuneConfig.of(config, **options)
    return FineTuneConfig.of(None, **{**READER_DEFAULTS, **options})


def _trimmed(inputs, labels):
    """A batch of windows cut to its longest window (the rest is padding): attention costs the square."""
    width = tf.maximum(tf.reduce_max(tf.reduce_sum(inputs["input_mask"], axis=1)), 1)
    return {key: value[:, :width] for key, value in inputs.items()}, labels


def window_dataset(features, batch_size, shuffle_seed=None):
    """Batches of `(packed windows, {"start_logits": first piece, "end_logits": last piece})`, padding trimmed."""
    inputs = {key: tf.constant(features[key]) for key in INPUT_KEYS}
    labels = {"start_logits": tf.constant(features["start_positions"]), "end_logits": tf.constant(features["end_positions"])}
    size = len(features["start_positions"])
    return example_dataset((inputs, labels), size, batch_size, shuffle_seed).map(_trimmed)


def predict_answers(model, examples, seq_length, doc_stride=128, max_question_length=64, max_answer_len=15):
    """The best answer of every example, decoded as the export decodes (`export.reader.best_answers`).

    An example whose best span scores below its null score (`[CLS]`) gets `""` when the examples hold
    unanswerable questions (SQuAD v2.0), as transformers' `handle_impossible_answer=True`.

    Returns:
        A list of str, one answer per example.
    """
    tokenizer = offsets_tokenizer(model, "reader")
    with_null = any(examples.is_impossible)

    @tf.function(reduce_retracing=True)
    def decode(questions, contexts):
        windows = window_probabilities(model, tokenizer, questions, contexts, seq_length, doc_stride, max_question_length)
        return best_answers(windows, contexts, max_answer_len)

    answers = []
    for begin in range(0, len(examples), _SCORING_BATCH):
        part = slice(begin, begin + _SCORING_BATCH)
        found = decode(tf.constant(examples.questions[part]), tf.constant(examples.contexts[part]))
        for answer, score, null in zip(found["answer"].numpy(), found["score"].numpy(), found["null_score"].numpy()):
            answers.append("" if with_null and null > score else answer.decode("utf-8"))
    return answers


def finetune_reader(source, train, validation=None, test=None, export_dir=None, config=None, *, doc_stride=128,
                    max_question_length=64, backup_dir=None, strategy=None, overwrite=False, verbose="auto",
                    report=logger.info, **options):
    """The reading pipeline: SQuAD examples -> scope -> build -> finetune -> exact match and F1 -> export.

    Args:
        source: a checkpoint folder `BertSpanLabeler.from_checkpoint` reads (a
            `BertForQuestionAnswering` brings its head).
        train: `bert_keras.squad.SquadExamples`.
        validation: optional `SquadExamples`; by default a random
            `validation_fraction` of `train`'s questions.
        test: optional `SquadExamples`, scored after training (SQuAD's exact match and F1, in percent).
        export_dir: optional str. Where the reader is exported (`export.export_reader`).
        config: optional `FineTuneConfig`; `options` replace its fields. Without
            a config, `READER_DEFAULTS` replace the classifier's.
        doc_stride: int. Context pieces shared by consecutive windows. Defaults to `128`.
        max_question_length: int. Longer questions keep their first pieces. Defaults to `64`.
        backup_dir, strategy, overwrite, verbose, report: as `finetune_classifier`'s.

    Returns:
        `FineTuneResult`: `scores` holds the test's `exact_match` and `f1`,
        `evaluation` every `squad.squad_scores` figure.
    """
    config = reader_config(config, **options)
    check_window_arguments(config.seq_length, doc_stride, max_question_length)
    if config.class_weights is not None:
        raise ValueError(f"`class_weights` weigh a classifier's classes; a reader has none. "
                         f"Received: class_weights={config.class_weights!r}")
    windows = dict(doc_stride=doc_stride, max_question_length=max_question_length)

    def train_and_export(*arguments):
        return _train_and_export(*arguments, windows=windows)

    def fingerprint_of(data):  # the window settings decide the trained weights too
        return _fingerprint(data, windows)

    return run_pipeline(train_and_export, source, dict(train=train, validation=validation, test=test), export_dir,
                        config, kind="reader", fingerprint=fingerprint_of, backup_dir=backup_dir, strategy=strategy,
                        overwrite=overwrite, verbose=verbose, report=report)


def _train_and_export(harness, source, train, validation, test, export_dir, config, overwrite, report, *, windows):
    if validation is None:
        train, validation = random_split(train, config.validation_fraction, config.seed)
    sizes = {"train": len(train), "validation": len(validation), "test": 0 if test is None else len(test)}
    report(f"Training questions: {sizes['train']}, validation: {sizes['validation']}"
           + (f", test: {sizes['test']}" if test is not None else ""))
    keras.utils.set_random_seed(config.seed)
    model, trainer = _build_reader(harness, source, config)
    tokenizer = offsets_tokenizer(model, "reader")
    features = {name: qa_features(tokenizer, part, config.seq_length, **windows) if len(part) else None
                for name, part in (("train", train), ("validation", validation))}
    report(f"Windows of {config.seq_length} pieces, stride {windows['doc_stride']}: {len(train)} training questions make "
           f"{len(features['train']['start_positions'])} windows")
    report(f"Fine-tuning the reader (batch {config.batch_size}): {config.head_epochs} epoch(s) with the encoder frozen, "
           f"then {config.epochs} with it unfrozen (AdamW {config.phase_2_learning_rate:g})")
    callbacks = early_stopping(config, len(validation), "questions")
    started = time.time()
    with pooler_left_out():
        history = _reader_phases(harness, trainer, config, features, callbacks)
    fit_seconds = time.time() - started
    if config.lora_rank is not None:
        lora.merge_lora(trainer)
    model.span_head.set_weights(trainer.span_head.get_weights())  # the encoder is the same object in both
    if harness.replicas > 1:
        if not harness.chief:
            return FineTuneResult(model, history, None, None, None, fit_seconds, sizes)
        trained, (model, _) = model, _build_reader(Harness(tf.distribute.get_strategy()), source, config)
        model.set_weights(trained.get_weights())
    scores = evaluation = None
    if test is not None:
        report(f"Answering the {len(test)} test questions")
        answers = predict_answers(model, test, config.seq_length, **windows)
        evaluation = squad_scores(answers, test)
        scores = {key: evaluation[key] for key in ("exact_match", "f1")}
        report(f"Test set ({len(test)} questions): exact match {evaluation['exact_match']:.2f}, F1 {evaluation['f1']:.2f}")
    if export_dir is not None:
        metrics = {"history": dataclasses.asdict(history), "fit_seconds": round(fit_seconds, 1), **windows}
        if evaluation is not None:
            metrics["test"] = evaluation
        export.export_reader(model, export_dir, overwrite=overwrite, extra_assets={"metrics.json": metrics},
                             dtype=config.export_dtype, seq_length=config.seq_length, **windows)
        report(f"Exported the reader (a raw question and context in; the answer's characters out) to {export_dir}")
    return FineTuneResult(model, history, scores, None, export_dir, fit_seconds, sizes, evaluation)


def _reader_phases(harness, trainer, config, features, callbacks):
    """`finetune`'s two phases on the windows: the mean of the start and end cross-entropies."""
    losses = {key: keras.losses.SparseCategoricalCrossentropy(from_logits=True) for key in ("start_logits", "end_logits")}
    return _two_phases(
        harness, trainer, config, window_dataset(features["train"], config.batch_size, shuffle_seed=config.seed),
        encoder=trainer.encoder, loss=losses, loss_weights={"start_logits": 0.5, "end_logits": 0.5}, metrics=(),
        validation_data=(window_dataset(features["validation"], config.batch_size)
                         if features["validation"] is not None else None),
        steps_per_epoch=math.ceil(len(features["train"]["start_positions"]) / config.batch_size), callbacks=callbacks,
    )


def _build_reader(harness, source, config):
    """`(model, trainer)`: the raw-string reader, and the span labeler on packed windows that shares its layers.

    RoBERTa's packing has no segments to find the context by: its labeler scores every position, as
    transformers' run_qa.py trains, and the export's windows mask the question.
    """
    with harness.building(config.dtype):
        model = BertSpanLabeler.from_checkpoint(source, seq_length=config.seq_length)
        if special_tokens(offsets_tokenizer(model, "reader")) == ROBERTA_SPECIAL_TOKENS:
            loaded, model = model, BertSpanLabeler(model.encoder, preprocessor=model.preprocessor,
                                                   context_segment_id=None, name=model.name)
            model.span_head.set_weights(loaded.span_head.get_weights())
        trainer = BertSpanLabeler(model.encoder, context_segment_id=model.context_segment_id, name="reader_on_windows")
        trainer.span_head.set_weights(model.span_head.get_weights())
    return model, trainer


def _fingerprint(data, windows):
    if data is None:
        return fingerprint(windows)
    return fingerprint(data.ids, data.questions, data.contexts, data.answers, windows)
