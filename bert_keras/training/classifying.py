"""The classifying recipe: labelled texts -> a `BertClassifier` fine-tuned, scored by accuracy and macro F1, exported.

`finetune_classifier` is the pipeline the CLI and the demo run: labelled
texts -> strategy scope -> `BertClassifier.from_checkpoint` -> `finetune`'s
two phases -> test scores -> `export_classifier`, as one `Recipe` of
`training.recipe.run_recipe`. What it trains is one `FineTuneConfig`, which
the CLI fills and the backup's run record stores.
"""

import logging
import math

import keras
import numpy as np

from bert_keras.data.texts import stratified_split
from bert_keras.evaluate import classification_report, format_report, report_files
from bert_keras.export import export_classifier
from bert_keras.tasks import BertClassifier
from bert_keras.training.backup import fingerprint
from bert_keras.training.config import FineTuneConfig
from bert_keras.training.data import text_dataset
from bert_keras.training.recipe import Batches, Recipe, run_recipe

logger = logging.getLogger(__name__)


class ClassifierRecipe(Recipe):
    """A `BertClassifier` on the pooled output, from raw strings: cross-entropy over the classes."""

    kind = "classifier"

    def __init__(self, config):
        super().__init__(config)
        self._class_weight = None

    def fingerprint(self, data):
        if data is None:
            return fingerprint()
        return fingerprint(data.texts, data.text_pairs or [], [int(label) for label in data.labels], data.label_names)

    def split(self, train):
        fraction = self.config.validation_fraction
        train_idx, val_idx = stratified_split(train.labels, (1 - fraction, fraction), seed=self.config.seed)
        return train.subset(train_idx), train.subset(val_idx)

    def prepare(self, train, report):
        weights = self.config.class_weights
        if weights is not None and not isinstance(weights, dict):
            if weights != "balanced":
                raise ValueError("Received an invalid value for argument `class_weights`, expected None, \"balanced\" "
                                 f"or a dict. Received: class_weights={weights!r}")
            present = np.unique(train.labels)
            counts = np.bincount(np.asarray(train.labels))[present]  # "balanced": n / (classes * count), as sklearn's
            balanced = (len(train.labels) / (len(present) * counts)).tolist()
            weights = dict(zip(present.tolist(), balanced))
            report("Class weights (balanced): " + ", ".join(f"{train.label_names[i]} {w:.3f}" for i, w in weights.items()))
        self._class_weight = weights
        return f"; labels: {train.label_names}"

    def build(self, harness, source, train):
        with harness.building(self.config.dtype):
            model = BertClassifier.from_checkpoint(
                source, seq_length=self.config.seq_length, num_classes=len(train.label_names),
                label_names=train.label_names, text_pairs=train.text_pairs is not None, dropout=self.config.dropout)
        return model, model

    def batches(self, harness, model, trainer, data, shuffle_seed=None):
        # Distributed datasets carry class weights as sample weights (`fit(class_weight=)` does not take them).
        folded = self._class_weight if shuffle_seed is not None and harness.replicas > 1 else None
        return Batches(text_dataset(data, self.config.batch_size, shuffle_seed=shuffle_seed, class_weight=folded),
                       math.ceil(len(data) / self.config.batch_size))

    def compile_arguments(self, harness, trainer):
        return {"class_weight": None if harness.replicas > 1 else self._class_weight}  # folded into the batches

    def score(self, harness, model, test, train):
        logits = harness.predict(model, text_dataset(test, 64).map(lambda x, y: x), steps=math.ceil(len(test) / 64),
                                 what=f"Scoring the test set ({len(test)} examples)")
        probabilities = keras.ops.convert_to_numpy(keras.ops.softmax(keras.ops.cast(logits, "float32"), axis=-1))
        evaluation = classification_report(test.labels, probabilities, train.label_names)
        scores = {"accuracy": evaluation["accuracy"], "macro_f1": evaluation["macro_f1"]}
        return scores, evaluation, probabilities, f"Test set ({len(test)} examples):\n{format_report(evaluation)}"

    def export(self, model, export_dir, run, evaluation, scores, overwrite):
        metrics = {"label_names": model.label_names, **run}
        if scores is not None:
            metrics.update(test_accuracy=scores["accuracy"], test_macro_f1=scores["macro_f1"])
        # Next to the model, in assets.extra/: the test report (JSON, confusion-matrix PNG) and the training curves (PNG).
        assets = {"metrics.json": metrics, **report_files(evaluation, run["history"])}
        export_classifier(model, export_dir, model.label_names, overwrite=overwrite, extra_assets=assets,
                          dtype=self.config.export_dtype)
        return f"Exported the classifier (raw strings in; probabilities and label names out) to {export_dir}"


def finetune_classifier(source, train, validation=None, test=None, export_dir=None, config=None, *, backup_dir=None,
                        strategy=None, overwrite=False, verbose="auto", report=logger.info, **options):
    """The fine-tune pipeline: labelled texts -> scope -> build -> finetune -> score -> export.

    Args:
        source: where the pretrained model comes from: a checkpoint folder or
            a Hub module pair directory (`BertClassifier.from_checkpoint`), or
            a pair of Hub handles `(encoder, preprocess)`.
        train: `bert_keras.data.texts.LabelledText` (texts, or text pairs).
        validation: optional `LabelledText`; by default a stratified
            `validation_fraction` of `train`.
        test: optional `LabelledText`, scored after training.
        export_dir: optional str. Where the classifier is exported (checked before any training).
        config: optional `FineTuneConfig`; `options` replace its fields
            (`seq_length=64`, `learning_rate=5e-5`, `early_stopping=2`, ...).
        backup_dir: optional str. Makes training resumable (see `finetune`):
            a new directory, or the backup of an interrupted run of the same
            source, data and config. Removed once the export is written.
        strategy: optional `tf.distribute.Strategy` (see
            `training.strategy.make_strategy`); defaults to the current
            one. With more than one replica the test scores and the export are
            made by the chief, from a copy of the trained model outside the
            strategy; the other workers return with `export_dir` None.
        overwrite: bool. Replace an earlier export in `export_dir`.
        verbose: `fit` verbosity.
        report: callable taking one line of progress text. Defaults to logging.

    Returns:
        `FineTuneResult`.
    """
    recipe = ClassifierRecipe(FineTuneConfig.of(config, **options))
    return run_recipe(recipe, source, train, validation, test, export_dir, backup_dir=backup_dir, strategy=strategy,
                      overwrite=overwrite, verbose=verbose, report=report)


__all__ = ["ClassifierRecipe", "finetune_classifier"]
