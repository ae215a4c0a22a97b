"""Fine-tuning: freeze -> adapt -> unfreeze with BERT's optimizer recipe, and the one fine-tune pipeline.

`finetune` trains a model in two phases. Phase 1 trains the head with the
encoder frozen (Adam at `head_learning_rate`). Phase 2 unfreezes the encoder
and trains everything with `bert_keras.optimization.bert_optimizer` (AdamW
at `learning_rate`, linear warmup over the first 10% of the steps then linear
decay to zero, weight decay 0.01 on weights of rank >= 2, global
gradient-norm clipping at 1.0). The model is recompiled between the phases.
Both phases run on the one `Harness`: the strategy the model was built under
(every replica takes its slice of each global batch, so N replicas compute
what one replica with the same global batch would), per-epoch snapshots and
an exact resume, progress and results on the chief only.

`finetune_classifier` is the pipeline the CLI and the demo run: labelled
texts -> strategy scope -> `BertClassifier.from_checkpoint` -> `finetune`
-> test scores -> `export_classifier`. What it trains is one
`FineTuneConfig`, which the CLI fills and the backup's run record stores.
"""

import contextlib
import dataclasses
import logging
import math
import os
import time
import warnings

import keras
import numpy as np
import tensorflow as tf
from sklearn.utils.class_weight import compute_class_weight

from bert_keras import lora
from bert_keras._faults import fault_point
from bert_keras._files import check_target, output_lock
from bert_keras.datasets import stratified_split
from bert_keras.dtypes import check_compute_dtype
from bert_keras.evaluate import classification_report, format_report, report_files
from bert_keras.export import export_classifier, outputs_probabilities
from bert_keras.optimization import bert_optimizer
from bert_keras.tasks import BertClassifier
from bert_keras.training.config import FineTuneConfig
from bert_keras.training.backup import fingerprint, held_backup, remove_backup
from bert_keras.training.data import text_dataset
from bert_keras.training.feeding import check_global_batch
from bert_keras.training.harness import Harness
from bert_keras.training.record import RunRecord
from bert_keras.training.strategy import is_chief, task_name

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class FineTuneHistory:
    """The Keras histories of both phases (`history.history` dicts, earlier runs' epochs included)."""

    head: dict
    full: dict


def _steps_per_epoch(data, steps_per_epoch):
    if steps_per_epoch is not None:
        return int(steps_per_epoch)
    if isinstance(data, tf.data.Dataset):
        cardinality = int(data.cardinality())
        if cardinality > 0:
            return cardinality
    raise ValueError(
        "Cannot tell the number of steps per epoch of `train_data` (the learning-rate schedule needs "
        "it). Pass a batched tf.data.Dataset of known size, or `steps_per_epoch`."
    )


def _find_encoder(model, encoder):
    if encoder is not None:
        return encoder
    found = getattr(model, "encoder", None)
    if found is None:
        raise ValueError(
            "Pass `encoder=`: the layer or sub-model to freeze in phase 1 (e.g. the "
            "bert_keras.hub.KerasLayer or BertEncoder inside the model). The model has no `.encoder`."
        )
    return found


def finetune(model, train_data, validation_data=None, config=None, *, encoder=None, loss=None, metrics=("accuracy",),
             steps_per_epoch=None, validation_steps=None, callbacks=None, class_weight=None, backup_dir=None,
             verbose="auto", strategy=None, **options):
    """Fine-tunes a classifier in two phases: head only, then everything (or LoRA adapters).

    Args:
        model: a `keras.Model` (e.g. string input -> Hub preprocess -> Hub
            encoder -> Dense), built under the strategy's scope.
        train_data: a batched `tf.data.Dataset` of `(inputs, labels)` (of
            global batches of `batch_size`). For an exact resume, its epoch
            `k` must depend on `k` alone (`training.text_dataset`'s do).
        validation_data: optional dataset for `fit`'s validation.
        config: optional `FineTuneConfig`; `options` replace its fields
            (`head_epochs`, `epochs`, `learning_rate`, `batch_size`, `lora_rank`, ...).
        encoder: the layer to freeze in phase 1; defaults to `model.encoder`.
        loss: passed to `compile` in both phases. Defaults to sparse
            categorical cross-entropy, from logits unless the model outputs
            probabilities (`bert_keras.saved_model.outputs_probabilities`).
        metrics: passed to `compile` in both phases.
        steps_per_epoch: int, optional. Needed when `train_data` has unknown size.
        validation_steps: int, optional. Batches per validation pass; needed
            with more than one replica when `validation_data`'s size is unknown.
        callbacks: Keras callbacks, used in both phases; their state (early
            stopping's) travels in the backup.
        class_weight: optional dict of class id -> loss weight (one replica only).
        backup_dir: optional str. Makes the run resumable: each phase snapshots
            every epoch (`training.backup`), and a rerun continues where the last
            one stopped, fed the batches an uninterrupted run would have been fed.
        verbose: `fit` verbosity (0 on the workers other than the chief).
        strategy: the `tf.distribute.Strategy` the model was built under. Defaults to the model's.

    Returns:
        `FineTuneHistory` with both phases' histories.
    """
    config = FineTuneConfig.of(config, **options)
    encoder = _find_encoder(model, encoder)
    strategy = strategy or model.distribute_strategy
    with held_backup(backup_dir, strategy) as own_backup:
        harness = Harness(strategy, own_backup, config.batch_size if strategy.num_replicas_in_sync > 1 else None, verbose)
        harness.check_built_here(model)
        return _two_phases(harness, model, config, train_data, encoder=encoder, validation_data=validation_data, loss=loss,
                           metrics=metrics, steps_per_epoch=steps_per_epoch, validation_steps=validation_steps,
                           callbacks=callbacks, class_weight=class_weight)


def _two_phases(harness, model, config, train_data, *, encoder, validation_data=None, loss=None, metrics=("accuracy",),
                steps_per_epoch=None, validation_steps=None, callbacks=None, class_weight=None, weighted_metrics=None, loss_weights=None):
    """`finetune`'s two phases on `harness`, with `finetune`'s arguments; returns the `FineTuneHistory`.

    `weighted_metrics` and `loss_weights` are Keras' `compile` arguments (metrics counted by the data's sample
    weights; the weight of each output's loss).
    """
    if config.lora_rank is not None:
        with harness.strategy.scope():  # the adapters are variables of the strategy too
            lora.enable_lora(model, rank=config.lora_rank, targets=config.lora_targets)
    steps = _steps_per_epoch(train_data, steps_per_epoch)
    if harness.replicas > 1:
        if class_weight is not None:
            raise ValueError("`class_weight` with more than one replica: use `finetune_classifier(class_weights=...)`, "
                             "which folds the weights into the data.")
        if validation_data is not None:
            validation_steps = validation_steps or _steps_per_epoch(validation_data, None)
    if loss is None:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=not outputs_probabilities(model))
    metrics, callbacks = list(metrics), list(callbacks or [])
    fit = dict(steps_per_epoch=steps, validation_data=validation_data, validation_steps=validation_steps,
               callbacks=callbacks, class_weight=class_weight)

    head = {}
    if config.head_epochs > 0:
        encoder.trainable = False
        harness.compile(model, lambda: keras.optimizers.Adam(config.head_learning_rate), loss=loss, metrics=metrics,
                        weighted_metrics=weighted_metrics, loss_weights=loss_weights)
        harness.report(f"Phase 1 of 2, head: encoder frozen, {config.head_epochs} epoch(s) of the head alone "
                       f"(Adam {config.head_learning_rate:g})")
        _, head = harness.fit(model, train_data, phase="head", epochs=config.head_epochs, **fit)
        fault_point("after-head-phase")

    encoder.trainable = True
    total, rate = config.epochs * steps, config.phase_2_learning_rate
    harness.compile(model, lambda: bert_optimizer(rate, total, warmup_fraction=config.warmup_fraction,
                                                  weight_decay=config.weight_decay, clipnorm=config.clipnorm),
                    loss=loss, metrics=metrics, weighted_metrics=weighted_metrics, loss_weights=loss_weights)
    trains = ("full: encoder unfrozen" if config.lora_rank is None else
              f"LoRA: adapters of rank {config.lora_rank} on {', '.join(config.lora_targets)} and the head")
    harness.report(f"Phase {2 if config.head_epochs > 0 else 1} of {2 if config.head_epochs > 0 else 1}, {trains}, "
                   f"{config.epochs} epoch(s) (AdamW, peak {rate:g} over {total} steps)")
    _, full = harness.fit(model, train_data, phase="full", epochs=config.epochs, **fit)  # the stream from its first epoch
    return FineTuneHistory(head=head, full=full)


@contextlib.contextmanager
def pooler_left_out():
    """Training a token-level head, which reads the sequence output: the encoder's pooler gets no gradient.

    transformers' token-level models have no pooler; Keras would warn of its missing gradients every step.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Gradients do not exist for variables \['pooler_dense/")
        yield


@dataclasses.dataclass
class FineTuneResult:
    """What `finetune_classifier` returns.

    Attributes:
        model: the fine-tuned `BertClassifier` (raw strings in, logits out).
        history: `FineTuneHistory` of both phases.
        scores: dict with `accuracy` and `macro_f1` on the test data, or None.
        test_probabilities: `(n, num_classes)` array for the test data, or None.
        export_dir: str or None. Where the classifier was exported.
        fit_seconds: float. Wall time of both training phases.
        sizes: dict of the train / validation / test example counts.
        evaluation: the test data's `bert_keras.evaluate.classification_report`, or None.
    """

    model: keras.Model
    history: FineTuneHistory
    scores: dict | None
    test_probabilities: np.ndarray | None
    export_dir: str | None
    fit_seconds: float
    sizes: dict
    evaluation: dict | None = None


def finetune_classifier(source, train, validation=None, test=None, export_dir=None, config=None, *, backup_dir=None,
                        strategy=None, overwrite=False, verbose="auto", report=logger.info, **options):
    """The fine-tune pipeline: labelled texts -> scope -> build -> finetune -> score -> export.

    Args:
        source: where the pretrained model comes from: a checkpoint folder or
            a Hub module pair directory (`BertClassifier.from_checkpoint`), or
            a pair of Hub handles `(encoder, preprocess)`.
        train: `bert_keras.datasets.LabelledText` (texts, or text pairs).
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
    config = FineTuneConfig.of(config, **options)
    return run_pipeline(_train_and_export, source, dict(train=train, validation=validation, test=test), export_dir,
                        config, kind="classifier", fingerprint=_fingerprint, backup_dir=backup_dir, strategy=strategy,
                        overwrite=overwrite, verbose=verbose, report=report)


def run_pipeline(train_and_export, source, data, export_dir, config, *, kind, fingerprint, backup_dir=None,
                 strategy=None, overwrite=False, verbose="auto", report=logger.info):
    """The shell of every fine-tune pipeline: checks, the output's lock, the backup and its run record, the harness.

    Args:
        train_and_export: callable `(harness, source, train, validation, test,
            export_dir, config, overwrite, report)` -> the result; it builds,
            trains, scores and exports.
        source: where the pretrained model comes from (recorded in the run record).
        data: dict with the `train`, `validation` and `test` data (None where absent).
        export_dir, config, backup_dir, strategy, overwrite, verbose, report:
            as `finetune_classifier`'s.
        kind: str. What is exported (in messages: "classifier", "tagger", ...).
        fingerprint: callable `(part or None)` -> the part's fingerprint for the run record.

    The backup's run record (`training.record.RunRecord`) holds the source's
    files' fingerprints too: a checkpoint rebuilt at the same path is not
    resumed from a backup of the old one.
    """
    strategy = strategy or tf.distribute.get_strategy()
    if strategy.num_replicas_in_sync > 1:
        check_global_batch(config.batch_size, strategy.num_replicas_in_sync)
    if not is_chief(strategy):
        report = logger.debug  # progress is the chief's to show
    if export_dir is not None:
        check_target(export_dir, overwrite, argument="export_dir", kind=kind)
        check_compute_dtype(config.export_dtype, argument="export_dtype")
    if backup_dir is not None:
        check_target(backup_dir, overwrite=True, argument="backup_dir")  # before anything is written
        if export_dir is not None:
            _check_apart(export_dir, backup_dir)
    # The output's lock from the start (the chief writes it): a second run of the same export_dir is refused
    # before it trains, not after.
    locked = output_lock(export_dir, reentrant=True) if export_dir is not None and is_chief(strategy) else contextlib.nullcontext()
    with locked, held_backup(backup_dir, strategy) as own_backup:
        record = None
        if backup_dir is not None:
            sources = [source] if isinstance(source, str) else list(source)
            run = dict(source=source if isinstance(source, str) else sources, **config.record(),
                       **{f"{name}_data": fingerprint(data.get(name)) for name in ("train", "validation", "test")})
            record = RunRecord(backup_dir, run, sources=sources, report=report)  # written when training starts
            if record.resuming:
                report(f"Resuming from the backup in {backup_dir}")
        harness = Harness(strategy, own_backup, config.batch_size, verbose, report=report, record=record)
        result = train_and_export(harness, source, data["train"], data.get("validation"), data.get("test"), export_dir,
                                  config, overwrite, report)
        if harness.chief:
            remove_backup(backup_dir)  # only now: everything it protected is written
        else:
            remove_backup(own_backup)
    return result


def _train_and_export(harness, source, train, validation, test, export_dir, config, overwrite, report):
    if validation is None:
        train_idx, val_idx = stratified_split(train.labels, (1 - config.validation_fraction, config.validation_fraction), seed=config.seed)
        train, validation = train.subset(train_idx), train.subset(val_idx)
    sizes = {"train": len(train), "validation": len(validation), "test": 0 if test is None else len(test)}
    report(f"Training examples: {sizes['train']}, validation: {sizes['validation']}"
           + (f", test: {sizes['test']}" if test is not None else "") + f"; labels: {train.label_names}")
    callbacks, class_weight = _training_options(train, validation, config, report)
    keras.utils.set_random_seed(config.seed)
    model = _build_classifier(harness, source, train, config)
    replicas, batching = harness.replicas, f"batch {config.batch_size}"
    if replicas > 1:
        batching = f"global batch {config.batch_size} = {config.batch_size // replicas} per replica x {replicas} replicas"
        report(f"Strategy: {type(harness.strategy).__name__}, {replicas} replicas ({task_name(harness.strategy)} here)")
    phase_2 = "unfrozen" if config.lora_rank is None else f"adapted by LoRA (rank {config.lora_rank})"
    report(f"Fine-tuning (seq_length {config.seq_length}, {batching}): {config.head_epochs} epoch(s) with the encoder "
           f"frozen, then {config.epochs} with it {phase_2} (AdamW {config.phase_2_learning_rate:g})")
    if not len(validation):
        report("No validation examples (the training data is too small to hold some back): validation skipped")
    started = time.time()
    folded = class_weight if replicas > 1 else None  # distributed datasets carry class weights as sample weights
    encoder = _find_encoder(model, None)
    history = _two_phases(
        harness, model, config, text_dataset(train, config.batch_size, shuffle_seed=config.seed, class_weight=folded),
        encoder=encoder, validation_data=text_dataset(validation, config.batch_size) if len(validation) else None,
        steps_per_epoch=math.ceil(len(train) / config.batch_size), callbacks=callbacks,
        class_weight=None if folded else class_weight,
    )
    fit_seconds = time.time() - started
    if config.lora_rank is not None:
        lora.merge_lora(model)  # an ordinary model from here on: scored, copied and exported as one
    if replicas > 1:
        if not harness.chief:
            return FineTuneResult(model, history, None, None, None, fit_seconds, sizes)
        # A copy outside the strategy, built as the model was: scored and exported with no collectives.
        trained, model = model, _build_classifier(Harness(tf.distribute.get_strategy()), source, train, config)
        model.set_weights(trained.get_weights())
    scores = probabilities = evaluation = None
    if test is not None:
        logits = harness.predict(model, text_dataset(test, 64).map(lambda x, y: x), steps=math.ceil(len(test) / 64),
                                 what=f"Scoring the test set ({len(test)} examples)")
        probabilities = keras.ops.convert_to_numpy(keras.ops.softmax(keras.ops.cast(logits, "float32"), axis=-1))
        evaluation = classification_report(test.labels, probabilities, train.label_names)
        scores = {"accuracy": evaluation["accuracy"], "macro_f1": evaluation["macro_f1"]}
        report(f"Test set ({len(test)} examples):\n{format_report(evaluation)}")
    if export_dir is not None:
        metrics = {"label_names": train.label_names, "history": dataclasses.asdict(history), "fit_seconds": round(fit_seconds, 1)}
        if scores is not None:
            metrics.update(test_accuracy=scores["accuracy"], test_macro_f1=scores["macro_f1"])
        # Next to the model, in assets.extra/: the test report (JSON, confusion-matrix PNG) and the training curves (PNG).
        assets = {"metrics.json": metrics, **report_files(evaluation, dataclasses.asdict(history))}
        export_classifier(model, export_dir, train.label_names, overwrite=overwrite, extra_assets=assets, dtype=config.export_dtype)
        report(f"Exported the classifier (raw strings in; probabilities and label names out) to {export_dir}")
    return FineTuneResult(model, history, scores, probabilities, export_dir, fit_seconds, sizes, evaluation)


def random_split(data, fraction, seed):
    """`(rest, held)`: a seeded random `fraction` of `data` (anything with `len` and `subset`) held out, order kept."""
    order = np.random.default_rng(seed).permutation(len(data))
    held = int(round(len(data) * fraction))
    return data.subset(np.sort(order[held:])), data.subset(np.sort(order[:held]))


def early_stopping(config, validation_size, what="examples"):
    """The callbacks of the config's `early_stopping` (none without it); refused without validation data."""
    if config.early_stopping is None:
        return []
    if not validation_size:
        raise ValueError(f"`early_stopping` watches the validation loss, but there are no validation {what}.")
    return [keras.callbacks.EarlyStopping(monitor="val_loss", patience=int(config.early_stopping), restore_best_weights=True)]


def offsets_tokenizer(model, what):
    """The tokenizer of `model`'s preprocessor, which must report each piece's characters (a token-level task's)."""
    tokenizer = getattr(getattr(model, "preprocessor", None), "tokenizer", None)
    if not hasattr(tokenizer, "tokenize_with_char_offsets"):
        raise ValueError(f"The {what}'s preprocessing cannot report where each piece is in the text (a Hub preprocess "
                         f"module): fine-tune a {what} from a checkpoint folder (Hugging Face, Google BERT, keras-nlp).")
    return tokenizer


def _check_apart(export_dir, backup_dir):
    """Refuses a backup directory that is, holds or lies inside the export directory."""
    export, backup = os.path.realpath(export_dir), os.path.realpath(backup_dir)
    if export == backup or backup.startswith(export + os.sep) or export.startswith(backup + os.sep):
        raise ValueError(
            f"`backup_dir` ({backup_dir!r}) and `export_dir` ({export_dir!r}) overlap: the backup is removed once "
            "the export is written, and the export replaces its directory. Pick two separate directories."
        )


def _training_options(train, validation, config, report):
    """`(callbacks, class_weight)` for `finetune` from the config's `early_stopping` and `class_weights`."""
    callbacks, class_weights = early_stopping(config, len(validation)), config.class_weights
    if class_weights is None or isinstance(class_weights, dict):
        return callbacks, class_weights
    if class_weights != "balanced":
        raise ValueError(f"Received an invalid value for argument `class_weights`, expected None, \"balanced\" or a dict. "
                         f"Received: class_weights={class_weights!r}")
    present = np.unique(train.labels)
    weights = dict(zip(present.tolist(), compute_class_weight("balanced", classes=present, y=train.labels).tolist()))
    report("Class weights (balanced): " + ", ".join(f"{train.label_names[i]} {w:.3f}" for i, w in weights.items()))
    return callbacks, weights


def _build_classifier(harness, source, train, config):
    """The pipeline's classifier, made under the harness's strategy with the config's dtype policy."""
    with harness.building(config.dtype):
        return BertClassifier.from_checkpoint(source, seq_length=config.seq_length, num_classes=len(train.label_names),
                                              label_names=train.label_names, text_pairs=train.text_pairs is not None,
                                              dropout=config.dropout)


def _fingerprint(data):
    if data is None:
        return fingerprint()
    return fingerprint(data.texts, data.text_pairs or [], [int(label) for label in data.labels], data.label_names)
