"""The run harness: what every training recipe (fine-tuning, pre-training) needs, in one place.

A `Harness` owns one run: the `tf.distribute` strategy and the dtype policy
the model is built under (`building`), the feeding of global batches (split
among replicas by `training.feeding.distribute_batches`, the epochs a backup has
done skipped), the per-epoch snapshots and the exact resume of each phase
(`training.backup`), and who reports and writes (the chief). Recipes build a
model inside `harness.building(dtype)`, compile with `harness.compile` and
train each phase with `harness.fit`.

Models are plain Keras models. What Keras 3's `fit` lacks under a strategy of
several replicas (keras#20585: `keras_private.strategy_fit`) is applied here,
to the model being fitted, for that `fit` alone, as Model Garden's trainer
owns its strategy rather than its models: the same model (its variables, its
compiled optimizer) is trained and handed back.
"""

import contextlib
import logging
import os
import time

import keras
import tensorflow as tf

from bert_keras._platform.keras_private import strategy_fit
from bert_keras.training.backup import EpochBackup, agree_on_epoch, read_state
from bert_keras.training.feeding import check_global_batch, distribute_batches
from bert_keras.training.strategy import is_chief

logger = logging.getLogger(__name__)

# Within an epoch at verbosity 2, the seconds between two progress lines.
LINE_SECONDS = 10.0


class ProgressLines(keras.callbacks.Callback):
    """Reports `phase: epoch e/E, step s/S (p%), loss x, t s` every `seconds` of an epoch (a line, not a bar), and a
    line where a long wait between steps begins: before the first step (the trace), before each validation.

    Args:
        report: callable taking one line.
        phase: str, the phase's name in the line.
        steps: int, the steps of an epoch.
        seconds: float. Defaults to `LINE_SECONDS`.
        clock: callable returning seconds (a test's own clock). Defaults to `time.monotonic`.
        step_lines: bool. False: only the lines where a wait begins (beside Keras' progress bar, which shows the
            steps). Defaults to True.
    """

    def __init__(self, report, phase, steps, seconds=LINE_SECONDS, clock=None, step_lines=True):
        super().__init__()
        self.report, self.phase, self.steps, self.seconds = report, phase, steps, seconds
        self.clock = clock or time.monotonic
        self.step_lines = step_lines

    def on_train_begin(self, logs=None):
        # Keras traces the train step before the first step ends: tens of seconds on a loaded 2-core machine.
        self.report(f"{self.phase}: preparing the first step (tracing the model)")

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self.started = epoch, self.clock()
        self.last = self.started

    def on_test_begin(self, logs=None):
        # Within `fit`: the validation after an epoch, its own trace the first time (Keras' bar stands still meanwhile).
        self.report(f"{self.phase}: validating after epoch {self.epoch + 1}/{self.params.get('epochs', '?')}")

    def on_predict_begin(self, logs=None):
        self.epoch, self.started = None, self.clock()
        self.last = self.started

    def on_train_batch_end(self, batch, logs=None):
        self._line(batch, logs)

    def on_predict_batch_end(self, batch, logs=None):
        self._line(batch, None)

    def _line(self, batch, logs):
        if not self.step_lines:
            return
        now = self.clock()
        if now - self.last < self.seconds:
            return
        self.last = now
        loss = (logs or {}).get("loss")
        shown = "" if loss is None else f", loss {float(loss):.4f}"
        epoch = "" if self.epoch is None else f" epoch {self.epoch + 1}/{self.params.get('epochs', '?')},"
        self.report(f"{self.phase}:{epoch} step {batch + 1}/{self.steps} "
                    f"({100 * (batch + 1) // max(self.steps, 1)}%){shown}, {now - self.started:.0f} s")


class Harness:
    """One training run's strategy, dtype scope, feeding, backups and chief.

    Args:
        strategy: optional `tf.distribute.Strategy`; defaults to the current one.
        backup_dir: optional str. This worker's backup directory, already held
            (`training.backup.held_backup`); None trains without backups.
        batch_size: optional int. The global batch size of the datasets fed;
            needed with more than one replica (a multiple of their number).
        verbose: `fit` verbosity on the chief (the other workers are silent).
            With 2 (Keras' line per epoch, what the command line uses when its
            output is piped or logged) a progress line also goes to `report`
            every `LINE_SECONDS` within an epoch, so that no epoch is silent.
        report: callable taking one line of progress (the phases, a resume);
            defaults to the module logger's `info`. Silent on other workers.
        record: optional `training.record.RunRecord` of the backup, written
            when training starts (the first `fit`), not before: a run refused
            or failed before it trains leaves no record.
    """

    def __init__(self, strategy=None, backup_dir=None, batch_size=None, verbose="auto", report=None, record=None):
        self.strategy = strategy or tf.distribute.get_strategy()
        self.replicas = self.strategy.num_replicas_in_sync
        if self.replicas > 1:
            if batch_size is None:
                raise ValueError("Pass `batch_size` (the global batch size of the training data): the strategy has "
                                 f"{self.replicas} replicas, among which each batch is split.")
            check_global_batch(batch_size, self.replicas)
        self.batch_size = batch_size
        self.backup_dir = backup_dir
        self.chief = is_chief(self.strategy)
        self.verbose = verbose if self.chief else 0
        self.report = (report or logger.info) if self.chief else logger.debug
        self.resumed_epoch = 0  # the epoch the last `fit` resumed from
        self.record = record

    @contextlib.contextmanager
    def building(self, dtype=None):
        """The scope a model is built in: the strategy's, with the Keras dtype policy `dtype` (None: the current one)."""
        policy = keras.config.dtype_policy()
        try:
            if dtype is not None:
                keras.config.set_dtype_policy(dtype)
            with self.strategy.scope():
                yield
        finally:
            keras.config.set_dtype_policy(policy)

    def check_built_here(self, model):
        """Refuses a model whose weights were made under another strategy than the run's."""
        # `.value`: the tf.Variable of a Keras variable, which knows the strategy it was made under
        if model.weights and not self.strategy.extended.variable_created_in_scope(model.weights[0].value):
            raise ValueError(
                f"The model's weights were not created under the strategy passed ({type(self.strategy).__name__}): "
                "build the model inside `with strategy.scope():`."
            )

    def compile(self, model, make_optimizer, **kwargs):
        """`model.compile(optimizer=make_optimizer(), **kwargs)` under the strategy.

        The optimizer is made inside the scope (hence a callable): its variables
        are created with it and must be the strategy's.
        """
        with self.strategy.scope():
            model.compile(optimizer=make_optimizer(), **kwargs)

    def _phase_dir(self, phase):
        if self.backup_dir is None:
            return None
        return os.path.join(self.backup_dir, phase) if phase else self.backup_dir

    def fit(self, model, data, *, epochs, steps_per_epoch, phase="", validation_data=None, validation_steps=None,
            callbacks=(), scale_partial_validation=False, **fit_kwargs):
        """Trains one phase of `epochs` epochs, resuming it from its backup; returns its whole history.

        Args:
            model: the compiled model.
            data: a `tf.data.Dataset` of global batches whose epoch `k` is its
                `k`-th run of `steps_per_epoch` batches (an endless stream
                ordered by epoch index, as `training.text_dataset` makes, or a
                finite dataset of one epoch without a backup).
            epochs, steps_per_epoch: ints.
            phase: str. The phase's subdirectory of the backup ("" for the backup itself).
            validation_data, validation_steps: as `fit`'s; with several
                replicas `validation_data` is a dataset of global batches.
            callbacks: Keras callbacks; their state travels in the backup.
            **fit_kwargs: more `fit` arguments (`class_weight`).

        Returns:
            `(history, whole)`: this call's `keras.callbacks.History`, and the
            phase's history dict of every epoch, those of earlier runs included.
        """
        if self.record is not None:
            self.record.write()  # training starts: from here on the backup is this run's
        phase_dir = self._phase_dir(phase)
        done = agree_on_epoch(self.strategy, phase_dir) if phase_dir else 0
        initial_epoch = self.resumed_epoch = done
        if done and read_state(phase_dir, done)["stopped"]:
            initial_epoch = epochs  # early stopping ended this phase: nothing more to train
        callbacks = list(callbacks)
        backup = EpochBackup(phase_dir, callbacks, phase or "train", done) if phase_dir else None
        feed = dict(fit_kwargs, verbose=self.verbose, epochs=epochs, initial_epoch=initial_epoch)
        if isinstance(data, tf.data.Dataset):
            feed["shuffle"] = False  # a dataset brings its own order
        if isinstance(data, tf.data.Dataset) and (phase_dir is not None or self.replicas > 1):
            # Epoch k is the k-th run of one stream, so a resumed run can skip to it; and Keras keeps one
            # iterator over a distributed dataset: endless streams, steps given.
            data = data.repeat()
            if done:
                data = data.skip(done * steps_per_epoch)
            feed["steps_per_epoch"] = steps_per_epoch
        elif not _one_epoch(data, steps_per_epoch):
            feed["steps_per_epoch"] = steps_per_epoch
        if self.replicas > 1:
            data = distribute_batches(self.strategy, data, self.batch_size)
            if validation_data is not None:
                feed["validation_steps"] = validation_steps
                validation_data = distribute_batches(
                    self.strategy, validation_data.repeat(), self.batch_size, scale_partial=scale_partial_validation
                )
        elif validation_steps is not None:
            feed["validation_steps"] = validation_steps
        if done >= epochs:
            self.report(f"{(phase or 'training').capitalize()}: all {epochs} epoch(s) done in the backup {phase_dir}")
        elif done:
            self.report(f"{(phase or 'training').capitalize()}: resuming at epoch {done + 1} of {epochs} (epochs 1-{done} "
                        f"restored from the backup {phase_dir})")
        # Under several replicas Keras' own fit fails (keras#20585); in one process this builds the model before the
        # step is traced, which saves TensorFlow a second trace of each step function.
        lines = self._progress_lines(phase or "training", steps_per_epoch)
        with strategy_fit(model):
            history = model.fit(data, validation_data=validation_data,
                                callbacks=callbacks + ([backup] if backup else []) + lines, **feed)
        whole = backup.history if backup is not None else {key: [float(v) for v in values] for key, values in history.history.items()}
        return history, whole

    def predict(self, model, data, *, steps, what="predicting"):
        """`model.predict(data)` (a finite dataset of `steps` batches): `what` reported first (with a progress bar or
        lines), then progress lines at verbosity 2."""
        if self.verbose in (1, 2):
            self.report(what)
        return model.predict(data, verbose=0, callbacks=self._progress_lines(what, steps))

    def _progress_lines(self, phase, steps):
        """At verbosity 2 (piped), lines within each epoch; at 1 (Keras' bar), the lines where a wait begins."""
        if self.verbose not in (1, 2):
            return []
        return [ProgressLines(self.report, phase, steps, step_lines=self.verbose == 2)]


def _one_epoch(data, steps):
    """Whether `data` is a finite dataset of exactly `steps` batches (Keras then runs it once per epoch)."""
    return isinstance(data, tf.data.Dataset) and int(data.cardinality()) == steps
