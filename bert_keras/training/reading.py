"""The reading recipe: SQuAD examples -> a `BertSpanLabeler` fine-tuned, scored by exact match and F1, exported.

`finetune_reader` runs `ReaderRecipe` in the one pipeline
(`training.recipe.run_recipe`: the classifier's shell and two phases), on
the windows of `text.windows.qa_features` (`[CLS] question [SEP] context [SEP]`,
contexts longer than a window cut with a document stride, as transformers'
`run_qa.py` does). Each window is labelled with the answer's first and last
piece, or `[CLS]` where it does not hold the whole answer; the loss is the
mean of the start and end cross-entropies (as `BertForQuestionAnswering`'s).
The model trained is the span labeler on the packed windows, sharing its
encoder and head with the raw-string model that is scored and exported:
scores come from the export's own decoding (`export.reader`), on every
window of every test question.
"""

import logging
import math

import keras
import tensorflow as tf

from bert_keras.export import export_reader
from bert_keras.export.reader import best_answers, window_probabilities
from bert_keras.data.squad import squad_scores
from bert_keras.tasks import BertSpanLabeler
from bert_keras.text.windows import INPUT_KEYS, check_window_arguments, qa_features
from bert_keras.training.backup import fingerprint
from bert_keras.training.config import FineTuneConfig
from bert_keras.training.data import example_dataset
from bert_keras.training.finetune import offsets_tokenizer, random_split
from bert_keras.training.recipe import Batches, Recipe, run_recipe

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


class ReaderRecipe(Recipe):
    """A `BertSpanLabeler` trained on packed question + context windows; scored as its export decodes."""

    kind = "reader"
    unit = "questions"
    token_level = True

    def __init__(self, config, doc_stride=128, max_question_length=64):
        super().__init__(config)
        self.windows = dict(doc_stride=doc_stride, max_question_length=max_question_length)

    def fingerprint(self, data):  # the window settings decide the trained weights too
        if data is None:
            return fingerprint(self.windows)
        return fingerprint(data.ids, data.questions, data.contexts, data.answers, self.windows)

    def split(self, train):
        return random_split(train, self.config.validation_fraction, self.config.seed)

    def build(self, harness, source, train):
        """`(model, trainer)`: the raw-string reader, and the span labeler on packed windows that shares its layers.

        RoBERTa's packing has no segments to find the context by: its labeler scores every position, as
        transformers' run_qa.py trains, and the export's windows mask the question.
        """
        with harness.building(self.config.dtype):
            model = BertSpanLabeler.from_checkpoint(source, seq_length=self.config.seq_length)
            if offsets_tokenizer(model, "reader").packing == "roberta":
                loaded, model = model, BertSpanLabeler(model.encoder, preprocessor=model.preprocessor,
                                                       context_segment_id=None, name=model.name)
                model.span_head.set_weights(loaded.span_head.get_weights())
            trainer = BertSpanLabeler(model.encoder, context_segment_id=model.context_segment_id,
                                      name="reader_on_windows")
            trainer.span_head.set_weights(model.span_head.get_weights())
        return model, trainer

    def batches(self, harness, model, trainer, data, shuffle_seed=None):
        features = qa_features(model.preprocessor.tokenizer, data, self.config.seq_length, **self.windows)
        size = len(features["start_positions"])
        if shuffle_seed is not None:
            harness.report(f"Windows of {self.config.seq_length} pieces, stride {self.windows['doc_stride']}: "
                           f"{len(data)} training questions make {size} windows")
        return Batches(window_dataset(features, self.config.batch_size, shuffle_seed),
                       math.ceil(size / self.config.batch_size))

    def compile_arguments(self, harness, trainer):
        losses = {key: keras.losses.SparseCategoricalCrossentropy(from_logits=True)
                  for key in ("start_logits", "end_logits")}
        return {"loss": losses, "loss_weights": {"start_logits": 0.5, "end_logits": 0.5}, "metrics": ()}

    def trained(self, model, trainer):
        model.span_head.set_weights(trainer.span_head.get_weights())  # the encoder is the same object in both

    def score(self, harness, model, test, train):
        harness.report(f"Answering the {len(test)} test questions as the export decodes them")
        answers = predict_answers(model, test, self.config.seq_length, **self.windows)
        evaluation = squad_scores(answers, test)
        scores = {key: evaluation[key] for key in ("exact_match", "f1")}
        return scores, evaluation, None, (f"Test set ({len(test)} questions): exact match "
                                          f"{evaluation['exact_match']:.2f}, F1 {evaluation['f1']:.2f}")

    def export(self, model, export_dir, run, evaluation, scores, overwrite):
        metrics = {**run, **self.windows}
        if evaluation is not None:
            metrics["test"] = evaluation
        export_reader(model, export_dir, overwrite=overwrite, extra_assets={"metrics.json": metrics},
                      dtype=self.config.export_dtype, seq_length=self.config.seq_length, **self.windows)
        return f"Exported the reader (a raw question and context in; the answer's characters out) to {export_dir}"


def finetune_reader(source, train, validation=None, test=None, export_dir=None, config=None, *, doc_stride=128,
                    max_question_length=64, backup_dir=None, strategy=None, overwrite=False, verbose="auto",
                    report=logger.info, **options):
    """The reading pipeline: SQuAD examples -> scope -> build -> finetune -> exact match and F1 -> export.

    Args:
        source: a checkpoint folder `BertSpanLabeler.from_checkpoint` reads (a
            `BertForQuestionAnswering` brings its head).
        train: `bert_keras.data.squad.SquadExamples`.
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
    return run_recipe(ReaderRecipe(config, doc_stride, max_question_length), source, train, validation, test,
                      export_dir, backup_dir=backup_dir, strategy=strategy, overwrite=overwrite, verbose=verbose,
                      report=report)
