"""Fine-tuning: freeze -> adapt -> unfreeze with BERT's optimizer recipe, and the shell every fine-tune runs in.

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

`run_pipeline` is the shell of every fine-tune (checks, the output's lock,
the backup and its run record, the harness); `training.recipe.run_recipe`
runs a task's `Recipe` in it (`finetune_classifier`, `finetune_tagger`,
`finetune_reader`).
"""

import contextlib
import dataclasses
import logging
import os
import warnings

import keras
import numpy as np
import tensorflow as tf

from bert_keras import lora
from bert_keras._faults import fault_point
from bert_keras._files import check_target, output_lock
from bert_keras.dtypes import check_compute_dtype
from bert_keras.export import outputs_probabilities
from bert_keras.optimization import bert_optimizer
from bert_keras.training.config import FineTuneConfig
from bert_keras.training.backup import held_backup, remove_backup
from bert_keras.training.feeding import check_global_batch
from bert_keras.training.harness import Harness
from bert_keras.training.record import RunRecord
from bert_keras.training.strategy import is_chief

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
            probabilities (`bert_keras.export.outputs_probabilities`).
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
            sources = [_as_recorded(path) for path in ([source] if isinstance(source, str) else list(source))]
            run = dict(source=sources[0] if isinstance(source, str) else sources, **config.record(),
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


def _as_recorded(source):
    """A source as the run record keeps it: a local path resolved (`ckpt`, `./ckpt/` and its absolute path are one
    folder, whose files' fingerprints say whether it changed), a URL as it is."""
    if isinstance(source, str) and os.path.exists(source):
        return os.path.realpath(source)
    return source
