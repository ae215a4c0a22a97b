"""One training recipe, as Model Garden's Task: what a fine-tune builds, feeds, scores and exports; one pipeline.

A `Recipe` says only what differs between the classifier, the tagger and
the reader: how its model is built (and the model trained, where that is
another view of the same layers: the tagger and the reader train on packed
windows), its examples, its loss and metrics, how the test data is scored
and what is exported. `run_recipe` is the one pipeline every fine-tune runs:
the shell (`finetune.run_pipeline`: checks, the output's lock, the backup and
its run record, the harness), the split, the seed, the build, the two phases
(`finetune`'s recipe), the LoRA merge, the chief's copy outside the
strategy, the score and the export.
"""

import contextlib
import dataclasses
import functools
import logging
import time

import keras
import tensorflow as tf

from bert_keras import lora
from bert_keras.training.finetune import FineTuneResult, _two_phases, early_stopping, pooler_left_out, run_pipeline
from bert_keras.training.harness import Harness

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Batches:
    """What one phase of `fit` reads: a batched dataset and how many of its batches make an epoch."""

    dataset: tf.data.Dataset
    steps: int


class Recipe:
    """What a fine-tune of one task does; `run_recipe` runs it.

    Subclasses set `kind` (what is exported: `"classifier"`, `"tagger"`,
    `"reader"`), `unit` (what an example is called in messages) and
    `token_level` (the encoder's pooler gets no gradient), and implement the
    methods below. `config` is the run's `FineTuneConfig`.
    """

    kind = None
    unit = "examples"
    token_level = False

    def __init__(self, config):
        self.config = config

    def fingerprint(self, data):
        """What identifies `data` (or None) in the backup's run record."""
        raise NotImplementedError

    def split(self, train):
        """`(train, validation)` when no validation data is given."""
        raise NotImplementedError

    def prepare(self, train, report):
        """What the training data holds, for the report after its counts (`"; labels: [...]"`); what the recipe
        derives from it (a classifier's class weights) is derived here."""
        return ""

    def build(self, harness, source, train):
        """`(model, trainer)`: the raw-string model (scored, exported) and the model `fit` trains (often the same)."""
        raise NotImplementedError

    def batches(self, harness, model, trainer, data, shuffle_seed=None):
        """`Batches` of `data` for `trainer`: shuffled per epoch with `shuffle_seed`, one pass without."""
        raise NotImplementedError

    def compile_arguments(self, harness, trainer):
        """`finetune`'s `loss`, `metrics`, `weighted_metrics`, `loss_weights`, `class_weight` for this task."""
        raise NotImplementedError

    def trained(self, model, trainer):
        """After training: what `trainer` learnt, carried into `model` where they do not share it."""

    def score(self, harness, model, test, train):
        """`(scores, evaluation, probabilities, report text)` of `model` on the test data."""
        raise NotImplementedError

    def export(self, model, export_dir, run, evaluation, scores, overwrite):
        """Writes `model`'s export, `run` (its `history` and `fit_seconds`) and the test's `evaluation` in its
        `assets.extra/metrics.json`; returns a line for the report."""
        raise NotImplementedError


def run_recipe(recipe, source, train, validation=None, test=None, export_dir=None, *, backup_dir=None,
               strategy=None, overwrite=False, verbose="auto", report=logger.info):
    """The one fine-tune pipeline: labelled data -> scope -> build -> two phases -> score -> export.

    Args:
        recipe: a `Recipe` (its `config` is the run's `FineTuneConfig`).
        source, train, validation, test, export_dir, backup_dir, strategy,
            overwrite, verbose, report: as `finetune_classifier`'s.

    Returns:
        `FineTuneResult`.
    """
    return run_pipeline(functools.partial(_run, recipe), source, dict(train=train, validation=validation, test=test),
                        export_dir, recipe.config, kind=recipe.kind, fingerprint=recipe.fingerprint,
                        backup_dir=backup_dir, strategy=strategy, overwrite=overwrite, verbose=verbose, report=report)


def _run(recipe, harness, source, train, validation, test, export_dir, config, overwrite, report):
    if validation is None:
        train, validation = recipe.split(train)
    sizes = {"train": len(train), "validation": len(validation), "test": 0 if test is None else len(test)}
    report(f"Training {recipe.unit}: {sizes['train']}, validation: {sizes['validation']}"
           + (f", test: {sizes['test']}" if test is not None else "") + recipe.prepare(train, report))
    keras.utils.set_random_seed(config.seed)
    report(f"Building the {recipe.kind} from {source if isinstance(source, str) else ', '.join(source)}")
    model, trainer = recipe.build(harness, source, train)
    training = recipe.batches(harness, model, trainer, train, shuffle_seed=config.seed)
    checking = recipe.batches(harness, model, trainer, validation) if len(validation) else None
    replicas, batching = harness.replicas, f"batch {config.batch_size}"
    if replicas > 1:
        batching = f"global batch {config.batch_size} = {config.batch_size // replicas} per replica x {replicas} replicas"
    phase_2 = "unfrozen" if config.lora_rank is None else f"adapted by LoRA (rank {config.lora_rank})"
    report(f"Fine-tuning the {recipe.kind} (seq_length {config.seq_length}, {batching}): {config.head_epochs} "
           f"epoch(s) with the encoder frozen, then {config.epochs} with it {phase_2} "
           f"(AdamW {config.phase_2_learning_rate:g})")
    if checking is None:
        report(f"No validation {recipe.unit} (the training data is too small to hold some back): validation skipped")
    started = time.time()
    with pooler_left_out() if recipe.token_level else contextlib.nullcontext():
        history = _two_phases(
            harness, trainer, config, training.dataset, encoder=trainer.encoder,
            validation_data=None if checking is None else checking.dataset,
            validation_steps=None if checking is None else checking.steps, steps_per_epoch=training.steps,
            callbacks=early_stopping(config, len(validation), recipe.unit), **recipe.compile_arguments(harness, trainer))
    fit_seconds = time.time() - started
    if config.lora_rank is not None:
        lora.merge_lora(trainer)  # an ordinary model from here on: scored, copied and exported as one
    recipe.trained(model, trainer)
    if replicas > 1:
        if not harness.chief:
            return FineTuneResult(model, history, None, None, None, fit_seconds, sizes)
        # A copy outside the strategy, built as the model was: scored and exported with no collectives.
        trained, (model, _) = model, recipe.build(Harness(tf.distribute.get_strategy()), source, train)
        model.set_weights(trained.get_weights())
    scores = evaluation = probabilities = None
    if test is not None:
        scores, evaluation, probabilities, text = recipe.score(harness, model, test, train)
        report(text)
    if export_dir is not None:
        run = {"history": dataclasses.asdict(history), "fit_seconds": round(fit_seconds, 1)}
        report(f"Exporting the {recipe.kind} to {export_dir}")
        report(recipe.export(model, export_dir, run, evaluation, scores, overwrite))
    return FineTuneResult(model, history, scores, probabilities, export_dir, fit_seconds, sizes, evaluation)
