"""Fine-tuning: freeze -> adapt -> unfreeze with BERT's optimizer recipe, and the one fine-tune pipeline.

`finetune` trains a model in two phases. Phase 1 trains the head with the
encoder frozen (Adam at `head_learning_rate`). Phase 2 unfreezes the encoder
and trains everything with `bert_keras.optimization.bert_optimizer` (AdamW
at `learning_rate`, linear warmup over the first 10% of the steps then linear
decay to zero, weight decay 0.01 on weights of rank >= 2, global
gradient-norm clipping at 1.0). The model is recompiled between the phases.
Models are built by the caller under a `tf.distribute` strategy scope;
compiling here happens in that same scope. With a strategy of more than one
replica (mirrored, or multi-worker: see `bert_keras.distribute`) every
replica takes its slice of each global batch, so the run computes what one
replica with the same global batch would; progress is shown and results
are written by the chief only, and every worker keeps its own backup.

`finetune_classifier` is the pipeline the CLI and the demo run: labelled
texts -> strategy scope -> `BertClassifier.from_checkpoint` -> `finetune`
-> test scores -> `export_classifier`.
"""

import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import time

import keras
import numpy as np
import tensorflow as tf
from sklearn.utils.class_weight import compute_class_weight

from bert_keras import distribute, lora
from bert_keras._files import check_target, claim_directory, fault_point, remove_output, write_json_atomically
from bert_keras.datasets import stratified_split
from bert_keras.hub.export import check_compute_dtype
from bert_keras.evaluate import classification_report, classification_scores, format_report, report_files  # noqa: F401
from bert_keras.optimization import bert_optimizer
from bert_keras.saved_model import export_classifier, outputs_probabilities
from bert_keras.tasks import BertClassifier

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class FineTuneHistory:
    """The Keras histories of both phases (`history.history` dicts)."""

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


def finetune(
    model,
    train_data,
    validation_data=None,
    *,
    encoder=None,
    loss=None,
    metrics=("accuracy",),
    head_epochs=1,
    head_learning_rate=1e-3,
    epochs=2,
    learning_rate=2e-5,
    warmup_fraction=0.1,
    weight_decay=0.01,
    clipnorm=1.0,
    steps_per_epoch=None,
    callbacks=None,
    class_weight=None,
    backup_dir=None,
    verbose="auto",
    strategy=None,
    batch_size=None,
    validation_steps=None,
    lora_rank=None,
    lora_targets=lora.DEFAULT_TARGETS,
):
    """Fine-tunes a classifier in two phases: head only, then everything (or LoRA adapters).

    Args:
        model: a compiled-or-not `keras.Model` (e.g. string input -> Hub
            preprocess -> Hub encoder -> Dense), built under the strategy scope.
        train_data: a batched `tf.data.Dataset` of `(inputs, labels)`.
        validation_data: optional dataset for `fit`'s validation.
        encoder: the layer to freeze in phase 1; defaults to `model.encoder`.
        loss: passed to `compile` in both phases. Defaults to sparse
            categorical cross-entropy, from logits unless the model outputs
            probabilities (see `bert_keras.saved_model.outputs_probabilities`).
        metrics: passed to `compile` in both phases.
        head_epochs: int. Epochs of phase 1 (0 skips it). Defaults to `1`.
        head_learning_rate: float. Adam's rate in phase 1. Defaults to `1e-3`.
        epochs: int. Epochs of phase 2. Defaults to `2`.
        learning_rate: float. Peak AdamW rate of phase 2. Defaults to `2e-5`.
        warmup_fraction, weight_decay, clipnorm: BERT's recipe (0.1, 0.01, 1.0).
        steps_per_epoch: int, optional. Needed when `train_data` has unknown size.
        callbacks: list of Keras callbacks, used in both phases.
        class_weight: optional dict of class id -> loss weight, passed to `fit`.
        backup_dir: str, optional. Makes the run resumable: each phase backs
            up every epoch (`BackupAndRestore`), a finished phase 1 is
            recorded, and a rerun continues where the last one stopped, fed the
            batches an uninterrupted run would have fed (a dataset is repeated
            and the epochs already done are skipped). In a cluster, each
            worker keeps its own subdirectory (`distribute.worker_backup_dir`)
            and the workers agree on the epoch to resume from.
        verbose: passed to `fit` (0 on the workers other than the chief).
        strategy: the `tf.distribute.Strategy` the model was built under.
            Defaults to the model's. With more than one replica the datasets
            (of global batches) are split among the replicas
            (`distribute.distribute_batches`).
        batch_size: int. The global batch size of `train_data`'s batches;
            needed with more than one replica.
        validation_steps: int, optional. Batches per validation pass; needed
            with more than one replica when `validation_data`'s size is unknown.
        lora_rank: int, optional. Train LoRA adapters of this rank instead of
            the whole encoder in phase 2 (`bert_keras.lora.enable_lora`; a
            native `BertEncoder` only). Phase 2 then trains the adapters and
            the head; call `bert_keras.lora.merge_lora(model)` before an
            export (`finetune_classifier` does). LoRA takes a larger
            `learning_rate` than full fine-tuning (e.g. 5e-4).
        lora_targets: the projections that get adapters (see
            `bert_keras.lora.LORA_TARGETS`). Defaults to query and value.

    Returns:
        `FineTuneHistory` with both phases' histories.
    """
    encoder = _find_encoder(model, encoder)
    strategy = strategy or model.distribute_strategy
    _check_built_under(model, strategy)
    if lora_rank is not None:
        with strategy.scope():  # the adapters are variables of the strategy too
            lora.enable_lora(model, rank=lora_rank, targets=lora_targets)
    steps = _steps_per_epoch(train_data, steps_per_epoch)
    replicas = strategy.num_replicas_in_sync
    if replicas > 1:
        if batch_size is None:
            raise ValueError("Pass `batch_size` (the global batch size of `train_data`): the strategy has "
                             f"{replicas} replicas, among which each batch is split.")
        distribute.check_global_batch(batch_size, replicas)
        if class_weight is not None:
            raise ValueError("`class_weight` with more than one replica: use `finetune_classifier(class_weights=...)`, "
                             "which folds the weights into the data.")
        model = distribute.trainable_model(model, strategy)
        if not distribute.is_chief(strategy):
            verbose = 0
    if backup_dir is not None:
        claim_backup(backup_dir)
    backup_dir = distribute.worker_backup_dir(backup_dir, strategy)
    if backup_dir is not None:
        claim_backup(backup_dir)
    if loss is None:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=not outputs_probabilities(model))
    callbacks = list(callbacks or [])
    metrics = list(metrics)
    fit_kwargs = dict(validation_data=validation_data, verbose=verbose, class_weight=class_weight)
    if isinstance(train_data, tf.data.Dataset):
        fit_kwargs["shuffle"] = False  # a dataset brings its own order
    if steps_per_epoch is not None:
        fit_kwargs["steps_per_epoch"] = steps
    if replicas > 1:
        # Keras keeps one iterator over a distributed dataset: endless streams, steps given.
        train_data = train_data.repeat()
        fit_kwargs["steps_per_epoch"] = steps
        if validation_data is not None:
            fit_kwargs["validation_steps"] = validation_steps or _steps_per_epoch(validation_data, None)
            fit_kwargs["validation_data"] = distribute.distribute_batches(
                strategy, validation_data.repeat(), batch_size, scale_partial=False
            )
    elif backup_dir is not None and isinstance(train_data, tf.data.Dataset):
        # Epoch k is the k-th pass of one stream, so a resumed run can skip to it. (A dataset that
        # reshuffles by its own state orders a pass by how often it was iterated before: for exact
        # resumption give one whose passes are ordered by their index, as `text_dataset`'s are.)
        train_data = train_data.repeat()
        fit_kwargs["steps_per_epoch"] = steps

    feed = _Feed(train_data, strategy, batch_size, steps, backup_dir)
    head_history = _run_head_phase(
        model, encoder, feed, loss, metrics, head_epochs, head_learning_rate, callbacks, backup_dir, fit_kwargs
    )

    encoder.trainable = True
    with strategy.scope():
        model.compile(
            optimizer=bert_optimizer(
                learning_rate, epochs * steps, warmup_fraction=warmup_fraction, weight_decay=weight_decay, clipnorm=clipnorm
            ),
            loss=loss,
            metrics=metrics,
        )
    logger.info("Phase 2: encoder unfrozen, AdamW peak %g over %d steps", learning_rate, epochs * steps)
    phase_callbacks = _backup(backup_dir, "full") + callbacks
    full = model.fit(feed.resumed("full"), epochs=epochs, callbacks=phase_callbacks, **fit_kwargs)
    return FineTuneHistory(head=head_history, full=dict(full.history))


def _check_built_under(model, strategy):
    # `.value`: the tf.Variable of a Keras variable, which knows the strategy it was made under
    if model.weights and not strategy.extended.variable_created_in_scope(model.weights[0].value):
        raise ValueError(
            f"The model's weights were not created under the strategy passed ({type(strategy).__name__}): "
            "build the model inside `with strategy.scope():`."
        )


class _Feed:
    """The training batches of one phase: the epochs a backup has done skipped, split among replicas."""

    def __init__(self, data, strategy, batch_size, steps_per_epoch, backup_dir):
        self.data, self.strategy, self.batch_size = data, strategy, batch_size
        self.steps_per_epoch, self.backup_dir = steps_per_epoch, backup_dir

    def resumed(self, phase):
        data = self.data
        if self.backup_dir is not None and isinstance(data, tf.data.Dataset):
            done = distribute.agree_on_backup(self.strategy, os.path.join(self.backup_dir, phase), resumed_epoch)
            data = data.skip(done * self.steps_per_epoch) if done else data
        if self.strategy.num_replicas_in_sync > 1:
            data = distribute.distribute_batches(self.strategy, data, self.batch_size)
        return data


class _FaultPoints(keras.callbacks.Callback):
    """Test hook: `fault_point("epoch-end:PHASE:EPOCH")` after each epoch's backup (see `_files.fault_point`)."""

    def __init__(self, phase):
        super().__init__()
        self.phase = phase

    def on_epoch_end(self, epoch, logs=None):
        fault_point(f"epoch-end:{self.phase}:{epoch + 1}")


class BackupAndRestore(keras.callbacks.BackupAndRestore):
    """Keras' `BackupAndRestore` whose restore errors name the backup and say how to start over.

    Backs up every epoch with two copies (`double_checkpoint=True`: a kill
    during a save leaves the previous one) and keeps the backup after `fit`
    (`delete_checkpoint=False`); whoever made it removes it once the run's
    output is written. The metadata also records the seed states (dropout's),
    which Keras' weights file leaves out, so a resumed run draws the same
    random numbers as an uninterrupted one.
    """

    def __init__(self, backup_dir):
        super().__init__(backup_dir, save_freq="epoch", double_checkpoint=True, delete_checkpoint=False)
        self.backup_dir = backup_dir

    def on_train_begin(self, logs=None):
        try:
            super().on_train_begin(logs)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"The training backup in {self.backup_dir} cannot be restored ({type(error).__name__}: {error}). "
                "It is torn or was made by a different model; remove that directory to start over."
            ) from None

    def _save_model(self):
        # Keras' own save writes the weights file in place: a kill during it leaves a truncated file, and
        # on the first epoch no previous copy to fall back to. Here every file is replaced whole.
        os.makedirs(self.backup_dir, exist_ok=True)
        if self.double_checkpoint and os.path.exists(self._weights_path):
            _copy_atomically(self._weights_path, self._prev_weights_path)
            if os.path.exists(self._training_metadata_path):
                _copy_atomically(self._training_metadata_path, self._prev_training_metadata_path)
        staged = self._weights_path[: -len(".weights.h5")] + ".partial.weights.h5"
        self.model.save_weights(staged, overwrite=True)
        os.replace(staged, self._weights_path)
        # Keras' weights file leaves out the seed states (dropout): kept in the metadata, so that a
        # resumed run draws the masks an uninterrupted one would.
        seeds = [keras.ops.convert_to_numpy(state).tolist() for state in _seed_states(self.model)]
        metadata = {"epoch": self._current_epoch, "batch": self._last_batch_seen, SEED_STATES: seeds}
        write_json_atomically(self._training_metadata_path, metadata)

    def _load_model(self):
        super()._load_model()
        _restore_seed_states(self.model, self.backup_dir)

    def on_train_end(self, logs=None):
        super().on_train_end(logs)
        # Keras leaves the restored epoch on the model, where the next `fit` (phase 2) would start too.
        self.model._initial_epoch = None


SEED_STATES = "seed_states"


def _copy_atomically(source, target):
    staged = target + ".partial"
    shutil.copyfile(source, staged)
    os.replace(staged, target)


def _seed_states(model):
    """The random seed states of `model` (dropout's): its `variables` less its `weights`, which `save_weights` keeps."""
    weights = {id(weight) for weight in model.weights}
    return [variable for variable in model.variables if id(variable) not in weights]


def _restore_seed_states(model, backup_dir):
    """Puts back the seed states a `BackupAndRestore` backup recorded (backups without them are left as they are)."""
    path = os.path.join(backup_dir, "training_metadata.json")
    if not os.path.exists(path):
        return
    with open(path) as f:
        seeds = json.load(f).get(SEED_STATES)
    if seeds is None:
        return
    states = _seed_states(model)
    if len(seeds) != len(states):
        raise ValueError(f"{path} records {len(seeds)} seed states; the model has {len(states)}.")
    for state, seed in zip(states, seeds):
        state.assign(np.asarray(seed, dtype=state.dtype))


def resumed_epoch(backup_dir):
    """The epoch a `BackupAndRestore` backup resumes from (0 without one); a torn record is a clear error."""
    path = os.path.join(backup_dir, "training_metadata.json")
    if not os.path.exists(path):
        return 0
    try:
        with open(path) as f:
            return int(json.load(f)["epoch"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"The training backup in {backup_dir} is torn: {path} cannot be read ({type(error).__name__}: {error}). "
            "Remove that directory to start over."
        ) from None


BACKUP_KIND = "training_backup"


def claim_backup(backup_dir):
    """Marks `backup_dir` as a training backup of this package, refusing any other directory before any work.

    The backup is removed once the run's output is written, so it must be a
    directory this package may delete: a new or empty one, or a backup it
    made. The current directory, its parents, home, root, a link, a user's
    directory and any other bert_keras output are refused (`_files.check_target`).
    """
    claim_directory(backup_dir, kind=BACKUP_KIND, argument="backup_dir")


def _check_apart(export_dir, backup_dir):
    """Refuses a backup directory that is, holds or lies inside the export directory."""
    export, backup = os.path.realpath(export_dir), os.path.realpath(backup_dir)
    if export == backup or backup.startswith(export + os.sep) or export.startswith(backup + os.sep):
        raise ValueError(
            f"`backup_dir` ({backup_dir!r}) and `export_dir` ({export_dir!r}) overlap: the backup is removed once "
            "the export is written, and the export replaces its directory. Pick two separate directories."
        )


def _backup(backup_dir, phase):
    if backup_dir is None:
        return []
    # Kept after `fit` (delete_checkpoint=False): the pipeline removes it once the export is in place.
    path = os.path.join(backup_dir, phase)
    resumed_epoch(path)
    return [BackupAndRestore(path), _FaultPoints(phase)]


def _run_head_phase(model, encoder, feed, loss, metrics, epochs, learning_rate, callbacks, backup_dir, fit_kwargs):
    done_weights = done_history = None
    if backup_dir is not None:
        os.makedirs(backup_dir, exist_ok=True)
        done_weights = os.path.join(backup_dir, "head_phase.weights.h5")
        done_history = os.path.join(backup_dir, "head_phase.history.json")
        # Written last, after the weights; in a cluster, phase 1 counts as done when it is so on every worker
        # (a worker without the record reruns it from its backup, which has its last epoch: no steps).
        if distribute.all_workers(feed.strategy, os.path.exists(done_history)):
            logger.info("Phase 1 finished in an earlier run; restoring its weights from %s", done_weights)
            model.load_weights(done_weights)
            _restore_seed_states(model, os.path.join(backup_dir, "head"))  # as they were when phase 1 ended
            with open(done_history) as f:
                return json.load(f)
    if epochs <= 0:
        return {}
    encoder.trainable = False
    with feed.strategy.scope():
        model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss=loss, metrics=metrics)
    logger.info("Phase 1: encoder frozen, head trained with Adam at %g", learning_rate)
    history = model.fit(feed.resumed("head"), epochs=epochs, callbacks=_backup(backup_dir, "head") + callbacks, **fit_kwargs)
    history = {key: [float(v) for v in values] for key, values in history.history.items()}
    if done_weights is not None:
        staged = done_weights.replace(".weights.h5", ".partial.weights.h5")
        model.save_weights(staged)
        os.replace(staged, done_weights)
        write_json_atomically(done_history, history)
        fault_point("after-head-phase")
    return history


def text_dataset(data, batch_size, shuffle_seed=None, class_weight=None):
    """Batches of `(texts, labels)` (`((texts, pairs), labels)` for pairs) from labelled texts.

    Without `shuffle_seed`: one pass in the data's order (finite). With it:
    an endless stream of passes, pass `k` in the order of a stateless shuffle
    seeded by `(shuffle_seed, k)` and batched on its own; so the batches of an
    epoch depend on its index alone, and a resumed run (which skips the epochs
    it has done) is fed exactly what an uninterrupted one would be. Pass
    `steps_per_epoch=math.ceil(len(data) / batch_size)` to `fit`.

    Args:
        data: a `bert_keras.datasets.LabelledText`.
        batch_size: int.
        shuffle_seed: optional int.
        class_weight: optional dict of class id -> weight: then the batches
            are `(x, y, sample_weight)` with each example weighted by its
            class (what `fit(class_weight=...)` does, which distributed
            datasets do not take).
    """
    texts = tf.constant(data.texts, dtype=tf.string)
    features = texts if data.text_pairs is None else (texts, tf.constant(data.text_pairs, dtype=tf.string))
    labels = tf.constant(data.labels, dtype=tf.int32)
    columns = (features, labels)
    if class_weight is not None:
        table = np.ones(len(data.label_names), dtype=np.float32)
        for label, weight in class_weight.items():
            table[int(label)] = weight
        columns = (features, labels, tf.gather(tf.constant(table), labels))
    if shuffle_seed is None:
        return tf.data.Dataset.from_tensor_slices(columns).batch(batch_size).prefetch(tf.data.AUTOTUNE)
    size = len(data)

    def one_pass(index):
        # order: (size,) a permutation that depends on (shuffle_seed, index) only
        order = tf.random.experimental.stateless_shuffle(tf.range(size), seed=tf.stack([tf.constant(shuffle_seed, tf.int64), index]))
        return tf.data.Dataset.from_tensor_slices(order).batch(batch_size)

    def gather(indices):
        return tf.nest.map_structure(lambda tensor: tf.gather(tensor, indices), columns)

    return tf.data.Dataset.counter().flat_map(one_pass).map(gather).prefetch(tf.data.AUTOTUNE)


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


def finetune_classifier(
    source,
    train,
    validation=None,
    test=None,
    export_dir=None,
    *,
    seq_length=128,
    batch_size=32,
    head_epochs=1,
    head_learning_rate=1e-3,
    epochs=2,
    learning_rate=2e-5,
    dropout=0.1,
    seed=0,
    validation_fraction=0.1,
    dtype=None,
    early_stopping=None,
    class_weights=None,
    backup_dir=None,
    overwrite=False,
    verbose="auto",
    report=logger.info,
    strategy=None,
    lora_rank=None,
    lora_targets=lora.DEFAULT_TARGETS,
    export_dtype="float32",
):
    """The fine-tune pipeline: labelled texts -> scope -> build -> finetune -> score -> export.

    Args:
        source: where the pretrained model comes from: a checkpoint folder or
            a Hub module pair directory (`BertClassifier.from_checkpoint`), or
            a pair of Hub handles `(encoder, preprocess)`.
        train: `bert_keras.datasets.LabelledText` (texts, or text pairs).
        validation: optional `LabelledText`; by default a stratified
            `validation_fraction` of `train`.
        test: optional `LabelledText`, scored after training.
        export_dir: optional str. Where the classifier is exported (checked
            before any training).
        seq_length, batch_size: packing length and the global batch size
            (split among the strategy's replicas: a multiple of their number).
        head_epochs, head_learning_rate, epochs, learning_rate: see `finetune`.
        dropout: float. Dropout on the pooled output. Defaults to `0.1`.
        seed: int. Seeds the split, the shuffling and the head's initialisation.
        validation_fraction: float. Used when `validation` is None.
        dtype: optional Keras dtype policy of the model (e.g.
            `"mixed_bfloat16"`), set while the model is built.
        early_stopping: optional int. Patience in epochs: stop a phase when
            the validation loss has not improved for that many epochs, and
            keep the best weights (`keras.callbacks.EarlyStopping`).
        class_weights: optional `"balanced"` (weights inversely proportional
            to the class frequencies of `train`, scikit-learn's rule) or a dict
            of class id -> weight.
        backup_dir: optional str. Makes training resumable (see `finetune`).
        overwrite: bool. Replace an earlier export in `export_dir`.
        verbose: `fit` verbosity.
        report: callable taking one line of progress text. Defaults to logging.
        strategy: optional `tf.distribute.Strategy` (see
            `bert_keras.distribute.make_strategy`); defaults to the current
            one. The model and optimizer are made under its scope; with more
            than one replica the test scores and the export are made by the
            chief, from a copy of the trained model outside the strategy, and
            the other workers return with `export_dir` None.
        lora_rank, lora_targets: train LoRA adapters in phase 2 (see
            `finetune`); they are merged into the kernels after training, so
            the model returned and exported is an ordinary one.
        export_dtype: `"float32"` or `"bfloat16"`: the compute dtype of the
            exported classifier (`saved_model.export_classifier`; float32
            inputs and outputs either way). Checked before training.

    Returns:
        `FineTuneResult`.
    """
    strategy = strategy or tf.distribute.get_strategy()
    replicas = strategy.num_replicas_in_sync
    if replicas > 1:
        distribute.check_global_batch(batch_size, replicas)
    if not distribute.is_chief(strategy):
        report = logger.debug  # progress is the chief's to show
    if export_dir is not None:
        check_target(export_dir, overwrite, argument="export_dir")
        check_compute_dtype(export_dtype, argument="export_dtype")
    if backup_dir is not None:
        check_target(backup_dir, overwrite=True, argument="backup_dir")  # before anything is written
        if export_dir is not None:
            _check_apart(export_dir, backup_dir)
        claim_backup(backup_dir)
        arguments = dict(
            seq_length=seq_length, batch_size=batch_size, head_epochs=head_epochs, head_learning_rate=head_learning_rate,
            epochs=epochs, learning_rate=learning_rate, dropout=dropout, seed=seed, validation_fraction=validation_fraction,
        )
        options = dict(dtype=dtype, early_stopping=early_stopping, class_weights=class_weights, lora_rank=lora_rank,
                       lora_targets=list(lora_targets) if lora_rank is not None else None)
        arguments.update({key: value for key, value in options.items() if value is not None})  # older backups still match
        _check_backup(backup_dir, source, train, validation, test, arguments, report)
    if validation is None:
        train_idx, val_idx = stratified_split(train.labels, (1 - validation_fraction, validation_fraction), seed=seed)
        train, validation = train.subset(train_idx), train.subset(val_idx)
    sizes = {"train": len(train), "validation": len(validation), "test": 0 if test is None else len(test)}
    report(
        f"Training examples: {sizes['train']}, validation: {sizes['validation']}"
        + (f", test: {sizes['test']}" if test is not None else "")
        + f"; labels: {train.label_names}"
    )

    callbacks, class_weight = _training_options(train, validation, early_stopping, class_weights, report)
    keras.utils.set_random_seed(seed)
    model = _build_classifier(source, train, seq_length, dropout, dtype, strategy)
    batching = f"batch {batch_size}"
    if replicas > 1:
        batching = f"global batch {batch_size} = {batch_size // replicas} per replica x {replicas} replicas"
        report(f"Strategy: {type(strategy).__name__}, {replicas} replicas ({distribute.task_name(strategy)} here)")
    report(
        f"Fine-tuning (seq_length {seq_length}, {batching}): {head_epochs} epoch(s) with the encoder "
        f"frozen, then {epochs} with it unfrozen (AdamW {learning_rate:g})"
    )
    started = time.time()
    if not len(validation):
        report("No validation examples (the training data is too small to hold some back): validation skipped")
    folded = class_weight if replicas > 1 else None  # distributed datasets carry class weights as sample weights
    history = finetune(
        model,
        text_dataset(train, batch_size, shuffle_seed=seed, class_weight=folded),
        text_dataset(validation, batch_size) if len(validation) else None,
        steps_per_epoch=math.ceil(len(train) / batch_size),
        head_epochs=head_epochs,
        head_learning_rate=head_learning_rate,
        epochs=epochs,
        learning_rate=learning_rate,
        callbacks=callbacks,
        class_weight=None if folded else class_weight,
        backup_dir=backup_dir,
        verbose=verbose,
        strategy=strategy,
        batch_size=batch_size,
        lora_rank=lora_rank,
        lora_targets=lora_targets,
    )
    fit_seconds = time.time() - started
    if lora_rank is not None:
        lora.merge_lora(model)  # an ordinary model from here on: scored, copied and exported as one
    if replicas > 1:
        if not distribute.is_chief(strategy):
            if backup_dir is not None:
                remove_output(distribute.worker_backup_dir(backup_dir, strategy), BACKUP_KIND)
            return FineTuneResult(model, history, None, None, None, fit_seconds, sizes)
        # A copy outside the strategy, built as the model was: scored and exported with no collectives.
        trained, model = model, _build_classifier(source, train, seq_length, dropout, dtype, tf.distribute.get_strategy())
        model.set_weights(trained.get_weights())

    scores = probabilities = evaluation = None
    if test is not None:
        logits = model.predict(text_dataset(test, 64).map(lambda x, y: x), verbose=0)
        probabilities = keras.ops.convert_to_numpy(keras.ops.softmax(keras.ops.cast(logits, "float32"), axis=-1))
        evaluation = classification_report(test.labels, probabilities, train.label_names)
        scores = {"accuracy": evaluation["accuracy"], "macro_f1": evaluation["macro_f1"]}
        report(f"Test accuracy: {scores['accuracy']:.4f}, macro-F1: {scores['macro_f1']:.4f}")
        report(format_report(evaluation))
    if export_dir is not None:
        metrics = {"label_names": train.label_names, "history": dataclasses.asdict(history), "fit_seconds": round(fit_seconds, 1)}
        if scores is not None:
            metrics.update(test_accuracy=scores["accuracy"], test_macro_f1=scores["macro_f1"])
        # Next to the model, in assets.extra/: the test report (JSON, confusion-matrix PNG) and the training curves (PNG).
        assets = {"metrics.json": metrics, **report_files(evaluation, dataclasses.asdict(history))}
        export_classifier(model, export_dir, train.label_names, overwrite=overwrite, extra_assets=assets, dtype=export_dtype)
        report(f"Exported the classifier (raw strings in; probabilities and label names out) to {export_dir}")
    if backup_dir is not None:
        remove_output(backup_dir, BACKUP_KIND)  # only now: everything it protected is written
    return FineTuneResult(model, history, scores, probabilities, export_dir, fit_seconds, sizes, evaluation)


def _training_options(train, validation, early_stopping, class_weights, report):
    """`(callbacks, class_weight)` for `finetune` from the pipeline's `early_stopping` and `class_weights`."""
    callbacks = []
    if early_stopping is not None:
        if not len(validation):
            raise ValueError("`early_stopping` watches the validation loss, but there are no validation examples.")
        callbacks.append(keras.callbacks.EarlyStopping(monitor="val_loss", patience=int(early_stopping), restore_best_weights=True))
    if class_weights is None or isinstance(class_weights, dict):
        return callbacks, class_weights
    if class_weights != "balanced":
        raise ValueError(f"Received an invalid value for argument `class_weights`, expected None, \"balanced\" or a dict. "
                         f"Received: class_weights={class_weights!r}")
    present = np.unique(train.labels)
    weights = dict(zip(present.tolist(), compute_class_weight("balanced", classes=present, y=train.labels).tolist()))
    report("Class weights (balanced): " + ", ".join(f"{train.label_names[i]} {w:.3f}" for i, w in weights.items()))
    return callbacks, weights


def _build_classifier(source, train, seq_length, dropout, dtype, strategy):
    """The pipeline's classifier, made under `strategy`'s scope with the dtype policy `dtype` (None: the current one)."""
    policy = keras.config.dtype_policy()
    try:
        if dtype is not None:
            keras.config.set_dtype_policy(dtype)
        with strategy.scope():
            return BertClassifier.from_checkpoint(
                source,
                seq_length=seq_length,
                num_classes=len(train.label_names),
                text_pairs=train.text_pairs is not None,
                dropout=dropout,
            )
    finally:
        keras.config.set_dtype_policy(policy)


RUN_FILE = "run.json"


def _fingerprint(data):
    digest = hashlib.sha256()
    if data is not None:
        for part in (data.texts, data.text_pairs or [], [int(label) for label in data.labels], data.label_names):
            digest.update(json.dumps(part, ensure_ascii=False).encode())
    return digest.hexdigest()


def _check_backup(backup_dir, source, train, validation, test, arguments, report):
    """Records what a backed-up run trains; refuses a backup made by a run with other data or arguments."""
    run = {
        "source": source if isinstance(source, str) else list(source),
        "arguments": arguments,
        "data": {name: _fingerprint(part) for name, part in (("train", train), ("validation", validation), ("test", test))},
    }
    path = os.path.join(backup_dir, RUN_FILE)
    if not os.path.exists(path):
        os.makedirs(backup_dir, exist_ok=True)
        write_json_atomically(path, run)
        return
    try:
        with open(path) as f:
            recorded = json.load(f)
    except (OSError, ValueError) as error:
        raise ValueError(f"The backup in {backup_dir} cannot be read ({path}: {error}). Remove that directory to start over.") from None
    differing = sorted(key for key in run if json.dumps(run[key], sort_keys=True) != json.dumps(recorded.get(key), sort_keys=True))
    if differing:
        raise ValueError(
            f"The backup in {backup_dir} belongs to a run with other {' and '.join(differing)}; resuming it would mix "
            "two runs. Rerun the same command to resume it, or remove that directory to start over."
        )
    report(f"Resuming from the backup in {backup_dir}")
