"""Backups: a resumed run equals an uninterrupted one with its callbacks' state, and one backup has one run.

Findings 8 and 9 of the second adversarial review: resuming with early stopping lost its state (the resumed
run trained an epoch the uninterrupted one never trained, and restored nothing), and two runs shared one live
backup. Kills inside a backup's write (finding 7) are in tests/fault_injection (real SIGKILLs).
"""

import fcntl
import os
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import cli
from bert_keras._files import OutputLockedError
from bert_keras.datasets import LabelledText
from bert_keras.training import finetune, finetune_classifier
from bert_keras.training.backup import held_backup, read_state
from tests.training.test_finetune import _classifier, _data


def _stream(n=32):
    """Passes ordered by their index (as `training.text_dataset`'s): what an exact resume needs."""
    features, labels = next(iter(_data(n=n, batch=n)))
    data = tf.data.Dataset.from_tensor_slices((features, labels))
    return tf.data.Dataset.range(1000).flat_map(lambda k: data.shuffle(n, seed=k, reshuffle_each_iteration=False).batch(8))


class _Stop(Exception):
    pass


class _InterruptAt(keras.callbacks.Callback):
    """Raises at the start of epoch `epoch` (after the last one's backup), or at the end of training."""

    def __init__(self, epoch=None, at_end=False):
        super().__init__()
        self.epoch, self.at_end = epoch, at_end

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            raise _Stop(f"before epoch {epoch}")

    def on_train_end(self, logs=None):
        if self.at_end:
            raise _Stop("at the end of training, after the last backup")


def _early_stopped_run(backup_dir, interrupt=None):
    keras.utils.set_random_seed(5)
    model, encoder = _classifier()
    stopping = keras.callbacks.EarlyStopping(monitor="val_loss", patience=1, restore_best_weights=True)
    callbacks = ([interrupt] if interrupt else []) + [stopping]
    # AdamW at 0.1 on a tiny model: the validation loss soon rises, and early stopping ends the phase.
    history = finetune(model, _stream(), _data(n=16), encoder=encoder, head_epochs=0, epochs=10, learning_rate=0.1,
                       steps_per_epoch=4, callbacks=callbacks, backup_dir=backup_dir, verbose=0)
    return model, history, stopping


@pytest.mark.slow
@pytest.mark.parametrize("interrupt", ["after the best epoch", "after the stop, before the best weights are restored"])
def test_early_stopping_resumes_exactly(tmp_path, interrupt):
    model, straight, stopping = _early_stopped_run(str(tmp_path / "straight"))
    best, stopped = stopping.best_epoch, stopping.stopped_epoch
    assert 0 <= best < stopped < 9  # the scenario: training stopped early, after its best epoch
    expected = [w.numpy() for w in model.weights]

    backup = str(tmp_path / "b")
    where = _InterruptAt(epoch=best + 1) if interrupt == "after the best epoch" else _InterruptAt(at_end=True)
    with pytest.raises(_Stop):
        _early_stopped_run(backup, where)
    recorded = read_state(os.path.join(backup, "full"))
    assert recorded["epoch"] == (best + 1 if interrupt == "after the best epoch" else stopped + 1)
    assert recorded["stopped"] == (interrupt != "after the best epoch")
    assert recorded["callbacks"]["EarlyStopping:0"]["state"]["best_epoch"] == best  # early stopping's state travels in the backup

    model, resumed, stopping = _early_stopped_run(backup)
    assert (stopping.best_epoch, stopping.stopped_epoch) == (best, stopped)
    assert resumed.full == straight.full  # no epoch trained that the uninterrupted run did not train
    for ours, theirs in zip(model.weights, expected):
        np.testing.assert_array_equal(ours.numpy(), theirs)  # the best epoch's weights, bit for bit


def test_a_held_backup_refuses_a_second_run_before_any_work(tmp_path):
    backup = str(tmp_path / "backup")
    train = LabelledText(["good", "bad"] * 4, [1, 0] * 4, ["neg", "pos"])
    with held_backup(backup):
        with pytest.raises(OutputLockedError, match=rf"Another process \(pid {os.getpid()}\) is writing .*backup"):
            finetune_classifier(str(tmp_path / "no-checkpoint"), train, export_dir=str(tmp_path / "clf"), backup_dir=backup)
    assert sorted(os.listdir(backup)) == [".bert_keras_output.json"]  # no run record of the refused run


def test_two_finetunes_of_one_out_or_one_backup_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.csv").write_text("text,label\n" + "good,pos\nbad,neg\n" * 4)
    (tmp_path / "checkpoint").mkdir()  # exists, so the lock is what refuses (never read: the lock comes first)
    argv = ["finetune", "--train", "train.csv", "--checkpoint", "checkpoint"]
    with held_backup(".clf.backup"):  # the first run of `--out clf`, training
        assert cli.main(argv + ["--out", "clf"]) == 2
        assert "is writing '" in (err := capsys.readouterr().err) and err.rstrip().endswith(".clf.backup'; wait for it to finish or pick another directory.")
    with held_backup("shared"):  # the first run with `--backup-dir shared`
        assert cli.main(argv + ["--out", "other", "--backup-dir", "shared"]) == 2
        assert "is writing 'shared'; wait for it to finish" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == [".clf.backup", "checkpoint", "shared", "train.csv"]


def test_a_second_run_of_one_out_is_refused_before_it_trains_whatever_its_backup_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.csv").write_text("text,label\n" + "good,pos\nbad,neg\n" * 4)
    (tmp_path / "checkpoint").mkdir()  # exists, so the lock is what refuses (never read: the lock comes first)
    with open(tmp_path / ".clf.lock", "w") as lock:  # the first run of `--out clf` (its own --backup-dir), training
        lock.write("4242")
        lock.flush()
        fcntl.flock(lock, fcntl.LOCK_EX)
        argv = ["finetune", "--train", "train.csv", "--checkpoint", "checkpoint", "--out", "clf", "--backup-dir", "bk"]
        assert cli.main(argv) == 2
    assert "Another process (pid 4242) is writing 'clf'; wait for it to finish" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == [".clf.lock", "checkpoint", "train.csv"]  # no backup begun


def test_the_run_that_holds_its_output_writes_it(tmp_path):
    from bert_keras._files import output_lock, staged_directory

    target = str(tmp_path / "out")
    with output_lock(target, reentrant=True):  # held from the start of a run ...
        with staged_directory(target, kind="test") as staging:  # ... and taken again by the write itself
            open(os.path.join(staging, "data.txt"), "w").close()
        assert os.path.exists(tmp_path / ".out.lock")  # still held by the outer block
        refused = []

        def second_writer():  # another thread (as another process) is refused
            try:
                with output_lock(target):
                    pass
            except OutputLockedError as error:
                refused.append(str(error))

        thread = threading.Thread(target=second_writer)
        thread.start()
        thread.join()
        assert len(refused) == 1 and "is writing" in refused[0]
    assert sorted(os.listdir(tmp_path)) == ["out"]


@pytest.mark.parametrize("content", ["[" * 100000 + "]" * 100000, "[1, 2]", "{"], ids=["nested too deep", "a list", "torn"])
def test_a_damaged_run_record_is_refused_naming_it(tmp_path, content):
    from bert_keras.training.backup import RUN_FILE, check_run_record

    (tmp_path / RUN_FILE).write_text(content)
    with pytest.raises(ValueError, match=rf"cannot be read \(.*{RUN_FILE}.*Remove that directory"):
        check_run_record(str(tmp_path), {"source": "x"})


def test_a_marker_nested_too_deep_is_no_marker(tmp_path):
    from bert_keras._files import MARKER, read_marker

    (tmp_path / MARKER).write_text("[" * 100000 + "]" * 100000)
    assert read_marker(str(tmp_path)) is None
