"""Backups that resume a training run exactly: one atomic snapshot per epoch, one lock, one run record.

A backup directory (`finetune_classifier(backup_dir=...)`, `bert-keras finetune
--backup-dir`, a pre-training run's `OUT/backup`) holds:

- the marker of a `training_backup` (`_files.claim_directory`): the package
  removes it once the run's output is written, and takes nothing else for one
  (a user's directory, the current one, another output are refused before any
  work);
- `run.json`: what the run trains (model source, arguments, fingerprints of
  the data and of the files it starts from), written when training starts;
  a rerun with anything else refuses to resume it (`training.record`);
- per phase (`head` and `full` for fine-tuning, the directory itself for
  pre-training) the snapshots of the last two epochs, `epoch-0001`, ... A
  phase folder is made with a marker of its own (`PHASE_KIND`), in one step:
  every level a snapshot is written under is a real directory the package
  made, or is refused (`_files.directory_under`), so a link or a user's
  directory put in its place is never written into, nor read from.

A snapshot is written into a staging directory that is put in place in one
step (`_files.staged_directory`), so it is whole or absent whatever the moment
of a kill. It holds everything a resumed `fit` needs to continue as if never
stopped: the weights with the optimizer's state (`model.weights.h5`), the
random seed states (dropout's), the state of every stateful callback (early
stopping's best weights and patience; any callback with `get_backup_state` /
`set_backup_state`), the history so far and whether training stopped early.

The backup's lock (`.lock` inside it, `_files.output_lock`) is taken
before any work and held for the whole run: a second run that names the same
backup, directly or through the same `--out`, is refused at once. A run that
ends in an error before its first epoch is backed up leaves no backup.
"""

import contextlib
import hashlib
import json
import logging
import os
import re

import keras
import numpy as np

from bert_keras._files import (
    claim_directory,
    directory_under,
    enclosing_output,
    fault_point,
    output_lock,
    read_marker,
    remove_output,
    staged_directory,
    write_json_atomically,
)
from bert_keras.training.strategy import all_gather_ints, is_multi_worker, task_name

logger = logging.getLogger(__name__)

BACKUP_KIND = "training_backup"
SNAPSHOT_KIND = "training_snapshot"
PHASE_KIND = "training_phase"
RUN_FILE = "run.json"
LOCK_FILE = ".lock"
WEIGHTS_FILE = "model.weights.h5"
STATE_FILE = "state.json"
CALLBACKS_FILE = "callbacks.npz"
_SNAPSHOT = re.compile(r"epoch-(\d{4,})")
_KEEP = 2  # the last snapshot and the one before (a worker one epoch ahead of the others goes back to it)


# The outputs a backup may lie inside: a pre-training run's directory (its `backup/`) and, for a worker's part of
# a cluster's backup (`chief/`, `worker-1/`), that backup.
_HOLDS_BACKUPS = ("pretraining_run",)


def claim_backup(backup_dir, within=None):
    """Marks `backup_dir` as a training backup, refusing any directory this package may not later delete.

    A new or empty directory, or a backup this package made. The current
    directory, its parents, home, root, a link, a user's directory and any
    other bert_keras output are refused (`_files.check_target`), before
    anything is written; so is a directory inside another bert_keras output
    (another run's backup, an export), which that output's removal or
    replacement would take with it or leave half there. `within` is the one
    backup it may lie in (a worker's part of a cluster's backup).
    """
    enclosing, kind = enclosing_output(backup_dir)
    if enclosing is not None and kind not in _HOLDS_BACKUPS and os.path.realpath(enclosing) != (
            within and os.path.realpath(within)):
        raise FileExistsError(
            f"{backup_dir!r} (backup_dir) is inside {enclosing!r}, a bert_keras {kind!r} output; a backup is never put "
            "inside another output or another run's backup. Pick a directory outside it."
        )
    claim_directory(backup_dir, kind=BACKUP_KIND, argument="backup_dir")


def worker_backup_dir(backup_dir, strategy=None):
    """This worker's backup: `backup_dir` itself, or `backup_dir/chief`, `backup_dir/worker-1`, ... in a cluster."""
    if backup_dir is None or not is_multi_worker(strategy):
        return backup_dir
    return os.path.join(backup_dir, task_name(strategy))


@contextlib.contextmanager
def held_backup(backup_dir, strategy=None):
    """Claims `backup_dir` (and this worker's part of it), holds its lock while the block runs; yields this worker's.

    Yields None when `backup_dir` is None (a run without a backup). When the
    block ends in an error and this worker's backup holds no trained epoch
    (a run refused before it trained, or stopped in its first epoch), the
    backup is removed: nothing in it is worth keeping, and nothing is left to
    get in the way of the next run.

    Raises:
        FileExistsError, ValueError: `backup_dir` may not be used (see `claim_backup`).
        OutputLockedError: another run holds the backup.
    """
    if backup_dir is None:
        yield None
        return
    claim_backup(backup_dir)
    own = worker_backup_dir(backup_dir, strategy)
    if own != backup_dir:
        claim_backup(own, within=backup_dir)
    with output_lock(own, lock_path=os.path.join(own, LOCK_FILE)):  # inside: it goes with the backup
        _check_folders(own)
        try:
            yield own
        except BaseException:
            if not holds_trained_state(own):
                _remove_untrained(own)
            raise


def _remove_untrained(backup_dir):
    """Removes a backup that holds no trained epoch, after an error (which it must not hide)."""
    try:
        remove_backup(backup_dir)
    except (OSError, ValueError) as error:
        logger.warning("Could not remove the backup %s, which holds no trained epoch: %s", backup_dir, error)


def _check_folders(backup_dir):
    """Refuses, before any work, a phase folder or snapshot of `backup_dir` that the package did not make (a link)."""
    _snapshots(backup_dir)
    for name in sorted(os.listdir(backup_dir)):
        if _PHASES.fullmatch(name):
            _snapshots(directory_under(backup_dir, name, kind=PHASE_KIND, argument="backup"))


_PHASES = re.compile(r"head|full")  # the phase folders of a fine-tune's backup (`Harness.fit(phase=...)`)
# The folders of a backup (phases, workers) whose entries are judged one by one when it is removed.
_FOLDERS = re.compile(r"head|full|chief|worker-\d+")
_OWNED = re.compile(r"(\.bert_keras_output\.json|run\.json|run\.json\.partial-[a-z0-9_]{8}|\.lock|head|full|chief|worker-\d+|epoch-\d{4,}"
                    r"|\.partial-epoch-\d{4,}-[a-z0-9_]{8}|\.epoch-\d{4,}\.lock|\.(head|full|chief|worker-\d+)\.lock"
                    r"|\.claim-(head|full|chief|worker-\d+)-[a-z0-9_]{8})")  # `.claim-*`: a claim killed before its rename


def remove_backup(backup_dir):
    """Removes a backup once what it protected is written (a marked training backup: `_files.remove_output`).

    Only what a backup holds is removed: a directory in which a user put
    files of their own keeps them (and stays).
    """
    if backup_dir is not None:
        remove_output(backup_dir, BACKUP_KIND, owned=lambda name: _OWNED.fullmatch(name) is not None,
                      walk=lambda name: _FOLDERS.fullmatch(name) is not None)


def fingerprint(*parts):
    """A SHA-256 of JSON-serialisable parts (texts, labels, ...): what identifies a run's data in its record."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(json.dumps(part, ensure_ascii=False, sort_keys=True).encode())
    return digest.hexdigest()


def holds_trained_state(backup_dir):
    """Whether `backup_dir` holds a trained epoch: a whole snapshot in it, its phase folders or its workers' parts.

    Links are not followed (a link is never a snapshot of this package's).
    """
    pending = [(backup_dir, 0)]
    while pending:
        directory, depth = pending.pop()
        try:
            names = os.listdir(directory)
        except OSError:  # absent, or not a directory
            continue
        for name in names:
            path = os.path.join(directory, name)
            if os.path.islink(path) or not os.path.isdir(path):
                continue
            if _SNAPSHOT.fullmatch(name) and read_marker(path) is not None:
                return True
            if depth < 2 and _FOLDERS.fullmatch(name):  # `chief/full/epoch-0001`: two levels down at most
                pending.append((path, depth + 1))
    return False


# === Snapshots ===


def _snapshots(phase_dir):
    """`{epoch: path}` of the complete snapshots in `phase_dir`.

    Refuses, before any training, a phase folder or a snapshot that is a link
    (or a folder the package did not mark): a rerun reads from, and writes
    into, only the directories its backup made.
    """
    found = {}
    if phase_dir is None or not os.path.lexists(phase_dir):
        return found
    directory_under(phase_dir, argument="backup")
    for name in os.listdir(phase_dir):
        match = _SNAPSHOT.fullmatch(name)
        path = os.path.join(phase_dir, name)
        if match and os.path.islink(path):
            raise FileExistsError(f"{path!r} (in the backup) is a symbolic link; bert_keras reads and writes through no "
                                  "link it did not create. It was left as it is; remove it (or the whole backup, to start "
                                  "over) and rerun.")
        if match and read_marker(path) is not None:
            found[int(match.group(1))] = path
    return found


def read_state(phase_dir, epoch=None):
    """The state of the snapshot of `epoch` (default: the latest) in `phase_dir`, or None without one."""
    snapshots = _snapshots(phase_dir)
    if not snapshots:
        return None
    path = snapshots[max(snapshots) if epoch is None else epoch]
    state_path = os.path.join(path, STATE_FILE)
    try:
        with open(state_path) as f:
            state = json.load(f)
        int(state["epoch"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as error:  # RecursionError: JSON nested too deep
        raise ValueError(
            f"The training backup in {phase_dir} is torn: {state_path} cannot be read ({type(error).__name__}: {error}). "
            "Remove that directory to start over."
        ) from None
    return dict(state, path=path)


def resumed_epoch(phase_dir):
    """The epoch a phase's backup resumes from: 0 without one."""
    state = read_state(phase_dir)
    return 0 if state is None else int(state["epoch"])


def agree_on_epoch(strategy, phase_dir):
    """The epoch every worker resumes the phase from: the smallest any worker has (this worker's own without a cluster).

    A kill between the workers' end-of-epoch snapshots can leave one worker an
    epoch ahead; it goes back to its previous snapshot, which it keeps.
    """
    epoch = resumed_epoch(phase_dir)
    if not is_multi_worker(strategy):
        return epoch
    epochs = all_gather_ints(strategy, epoch)
    agreed = min(epochs)
    if agreed and agreed not in _snapshots(phase_dir):
        raise ValueError(
            f"The workers' backups disagree (epochs {epochs}) and this worker's backup in {phase_dir} has no snapshot "
            f"of epoch {agreed}. Remove every worker's backup directory to start over."
        )
    if epoch != agreed:
        logger.info("Backup in %s goes back from epoch %d to %d, where the other workers are", phase_dir, epoch, agreed)
    return agreed


def _seed_states(model):
    """The random seed states of `model` (dropout's): its `variables` less its `weights`, which `save_weights` keeps."""
    weights = {id(weight) for weight in model.weights}
    return [variable for variable in model.variables if id(variable) not in weights]


def _restore_seed_states(model, seeds, path):
    states = _seed_states(model)
    if len(seeds) != len(states):
        raise ValueError(f"{path} records {len(seeds)} seed states; the model has {len(states)}.")
    for state, seed in zip(states, seeds):
        state.assign(np.asarray(seed, dtype=state.dtype))


class _EarlyStoppingState:
    """The state of `keras.callbacks.EarlyStopping` (its public attributes), which `on_train_begin` resets."""

    FIELDS = ("wait", "stopped_epoch", "best", "best_epoch")

    @classmethod
    def get(cls, callback):
        state = {field: _plain(getattr(callback, field)) for field in cls.FIELDS}
        return state, callback.best_weights

    @classmethod
    def set(cls, callback, state, arrays):
        for field in cls.FIELDS:
            setattr(callback, field, state[field])
        callback.best_weights = arrays


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def _keyed(callbacks):
    """`(key, callback)`: keys by class and rank among callbacks of that class (`EarlyStopping:0`), so that a
    rerun with other stateless callbacks (a progress display, a test's interrupter) still finds each state."""
    seen = {}
    for callback in callbacks:
        name = type(callback).__name__
        seen[name] = seen.get(name, -1) + 1
        yield f"{name}:{seen[name]}", callback


def _callback_state(callback):
    """`(json state, list of arrays or None)` of a stateful callback; None for a callback without state."""
    if isinstance(callback, keras.callbacks.EarlyStopping):
        return _EarlyStoppingState.get(callback)
    if hasattr(callback, "get_backup_state"):
        return callback.get_backup_state(), None
    return None


def _set_callback_state(callback, state, arrays):
    if isinstance(callback, keras.callbacks.EarlyStopping):
        _EarlyStoppingState.set(callback, state, arrays)
    elif hasattr(callback, "set_backup_state"):
        callback.set_backup_state(state)


class EpochBackup(keras.callbacks.Callback):
    """Snapshots the whole training state after every epoch; restores the latest one when `fit` begins.

    Put it last in the callback list: it restores the other callbacks' state
    after their own `on_train_begin` has reset it, and records it after their
    `on_epoch_end` has updated it. `fit` must be called with `initial_epoch`
    set to the resumed epoch (`Harness.fit` does).

    Args:
        phase_dir: str. Where the snapshots of this phase go.
        callbacks: the other callbacks of the same `fit`, whose state travels.
        phase: str. Names the fault points (`epoch-end:PHASE:EPOCH`) and the
            folder: `phase_dir` is the backup's folder `phase` (made marked,
            `PHASE_KIND`), or for `"train"` the backup itself (`Harness.fit`).
        epoch: int. The epoch to restore (0: none), agreed among workers.
    """

    def __init__(self, phase_dir, callbacks=(), phase="train", epoch=0):
        super().__init__()
        self.phase_dir = phase_dir
        # The claimed backup and the levels below it that the snapshots go in (`_files.directory_under`).
        self._tree = (phase_dir,) if phase == "train" else os.path.split(os.path.abspath(phase_dir))
        self.callbacks = list(callbacks)
        self.phase = phase
        self.epoch = epoch
        self.history = {}
        self.stopped = False

    def on_train_begin(self, logs=None):
        if not self.epoch:
            return
        state = read_state(self.phase_dir, self.epoch)
        path = state["path"]
        optimizer = self.model.optimizer
        if optimizer is not None and not optimizer.built:
            optimizer.build(self.model.trainable_variables)  # its variables must exist to be restored
        try:
            self.model.load_weights(os.path.join(path, WEIGHTS_FILE))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"The training backup in {path} cannot be restored ({type(error).__name__}: {error}). It was made by a "
                "different model or damaged; remove the backup directory to start over."
            ) from None
        _restore_seed_states(self.model, state["seed_states"], path)
        arrays = np.load(os.path.join(path, CALLBACKS_FILE)) if os.path.exists(os.path.join(path, CALLBACKS_FILE)) else {}
        for key, callback in _keyed(self.callbacks):
            recorded = state["callbacks"].get(key)
            if recorded is not None:
                weights = [arrays[f"{key}/{i}"] for i in range(recorded["arrays"])] if recorded["arrays"] >= 0 else None
                _set_callback_state(callback, recorded["state"], weights)
        self.history = {key: list(values) for key, values in state["history"].items()}
        self.stopped = bool(state["stopped"])

    def on_epoch_end(self, epoch, logs=None):
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(float(value))
        self.stopped = bool(self.model.stop_training)
        self._write(epoch + 1)
        fault_point(f"epoch-end:{self.phase}:{epoch + 1}")

    def _write(self, epoch):
        phase_dir = directory_under(*self._tree, kind=PHASE_KIND, argument="backup")
        target = os.path.join(phase_dir, f"epoch-{epoch:04d}")
        with staged_directory(target, overwrite=True, kind=SNAPSHOT_KIND, info={"epoch": epoch}, argument="backup",
                              within=phase_dir) as staging:
            self.model.save_weights(os.path.join(staging, WEIGHTS_FILE))
            fault_point(f"backup-weights-written:{self.phase}:{epoch}")
            states, arrays = {}, {}
            for key, callback in _keyed(self.callbacks):
                found = _callback_state(callback)
                if found is None:
                    continue
                state, weights = found
                states[key] = {"state": state, "arrays": -1 if weights is None else len(weights)}
                arrays.update({f"{key}/{i}": np.asarray(w) for i, w in enumerate(weights or [])})
            if arrays:
                np.savez(os.path.join(staging, CALLBACKS_FILE), **arrays)
            seeds = [keras.ops.convert_to_numpy(state).tolist() for state in _seed_states(self.model)]
            record = {"epoch": epoch, "seed_states": seeds, "callbacks": states, "history": self.history, "stopped": self.stopped}
            write_json_atomically(os.path.join(staging, STATE_FILE), record)
            fault_point(f"backup-state-written:{self.phase}:{epoch}")
        for old in sorted(_snapshots(self.phase_dir))[:-_KEEP]:
            remove_output(os.path.join(self.phase_dir, f"epoch-{old:04d}"), SNAPSHOT_KIND)
