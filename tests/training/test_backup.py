"""Backups: a resumed run equals an uninterrupted one with its callbacks' state, and one backup has one run.

Findings 8 and 9 of the second adversarial review: resuming with early stopping lost its state (the resumed
run trained an epoch the uninterrupted one never trained, and restored nothing), and two runs shared one live
backup. Kills inside a backup's write (finding 7) are in tests/fault_injection (real SIGKILLs).
"""

import fcntl
import functools
import importlib
import json
import os
import re
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import cli
from bert_keras._files import OutputLockedError, directory_under, staged_directory
from bert_keras.data.texts import LabelledText
from bert_keras.formats import CheckpointError
from bert_keras.training import claim_backup, finetune, finetune_classifier, finetune_reader, finetune_tagger
from bert_keras.training.backup import PHASE_KIND, RUN_FILE, SNAPSHOT_KIND, STATE_FILE, held_backup, read_state, resumed_epoch
from bert_keras.training.record import RunRecord, source_files
from tests.helpers import save_tiny_bert
from tests.training.test_finetune import _classifier, _data

finetune_module = importlib.import_module("bert_keras.training.finetune")  # the module (`training.finetune` is the function)


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


@pytest.fixture(scope="module")
def uninterrupted_early_stopping(tmp_path_factory):
    """The uninterrupted run both interruptions are compared with (seeded: the same run for each), made once:
    `(history, best epoch, stopped epoch, final weights)`."""
    model, straight, stopping = _early_stopped_run(str(tmp_path_factory.mktemp("straight") / "backup"))
    return straight, stopping.best_epoch, stopping.stopped_epoch, [w.numpy() for w in model.weights]


@pytest.mark.slow
@pytest.mark.parametrize("interrupt", ["after the best epoch", "after the stop, before the best weights are restored"])
def test_early_stopping_resumes_exactly(tmp_path, interrupt, uninterrupted_early_stopping):
    straight, best, stopped, expected = uninterrupted_early_stopping
    assert 0 <= best < stopped < 9  # the scenario: training stopped early, after its best epoch

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
def test_a_damaged_run_record_is_refused_naming_it_where_epochs_were_trained(tmp_path, content):
    backup = tmp_path / "bk"
    claim_backup(str(backup))
    (backup / RUN_FILE).write_text(content)
    assert _record(backup).resuming is False  # nothing trained: a new run, the damaged record replaced
    _trained(backup)
    with pytest.raises(ValueError, match=rf"cannot be read \(.*{RUN_FILE}.*Remove that directory"):
        _record(backup)


def test_a_marker_nested_too_deep_is_no_marker(tmp_path):
    from bert_keras._files import MARKER, read_marker

    (tmp_path / MARKER).write_text("[" * 100000 + "]" * 100000)
    assert read_marker(str(tmp_path)) is None


# --- issue 47, item 13: a run refused before it trains leaves no backup, and a backup with nothing trained blocks no run


def _record(backup, report=None, sources=(), **run):
    return RunRecord(str(backup), dict({"source": "checkpoint", "learning_rate": 1e-3}, **run), sources=sources, report=report)


def _trained(backup, phase="head"):
    """A whole (marked) snapshot of epoch 1 in a phase folder made as the backup makes it: what a first epoch leaves."""
    directory_under(str(backup), phase, kind=PHASE_KIND)
    with staged_directory(str(backup / phase / "epoch-0001"), kind=SNAPSHOT_KIND) as staging:
        open(os.path.join(staging, STATE_FILE), "w").close()


def test_a_run_refused_before_it_trains_leaves_no_backup_and_blocks_no_rerun(tmp_path):
    train = LabelledText(["good", "bad"] * 4, np.array([1, 0] * 4), ["neg", "pos"])
    backup = tmp_path / "backup"
    for rate in (1e-3, 2e-3):  # the corrected rerun changes one argument: refused for its own reason, not the backup
        with pytest.raises(CheckpointError, match=r"no-checkpoint: is not a checkpoint directory"):
            finetune_classifier(str(tmp_path / "no-checkpoint"), train, export_dir=str(tmp_path / "clf"),
                                backup_dir=str(backup), learning_rate=rate, verbose=0)
        assert sorted(os.listdir(tmp_path)) == []  # no backup, no run record, no lock


def test_a_record_without_trained_state_is_replaced_saying_so(tmp_path):
    backup = tmp_path / "bk"
    claim_backup(str(backup))
    (backup / RUN_FILE).write_text(json.dumps({"source": "checkpoint", "learning_rate": 5e-5}))  # killed before epoch 1 ended
    lines = []
    record = _record(backup, lines.append)
    assert record.resuming is False
    assert lines == [f"The backup in {backup} holds no trained epoch, only the record of a run stopped before its first "
                     "epoch ended: this run starts over and replaces it."]
    assert json.loads((backup / RUN_FILE).read_text())["learning_rate"] == 5e-5  # replaced only when training starts
    record.write()
    assert json.loads((backup / RUN_FILE).read_text())["learning_rate"] == 1e-3
    _trained(backup)
    assert _record(backup).resuming is True
    with pytest.raises(ValueError, match=r"made by a run with other learning_rate \(recorded: learning_rate=0.001\)"):
        _record(backup, learning_rate=2e-3)


def test_trained_epochs_without_a_record_are_refused(tmp_path):
    backup = tmp_path / "bk"
    claim_backup(str(backup))
    _trained(backup, "full")
    with pytest.raises(ValueError, match=rf"backup in {re.escape(str(backup))} holds trained epochs but no run record "
                                         r"\(run.json\): nothing tells which run"):
        _record(backup)


@pytest.mark.slow
def test_a_run_stopped_in_its_first_epoch_leaves_no_backup(tmp_path):
    backup = tmp_path / "bk"

    class Stop(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            raise _Stop("in the first epoch")

    model, encoder = _classifier()
    with pytest.raises(_Stop):
        finetune(model, _data(), encoder=encoder, head_epochs=1, epochs=1, callbacks=[Stop()], backup_dir=str(backup), verbose=0)
    assert not backup.exists()
    claim_backup(str(backup))
    _trained(backup)  # once an epoch is trained, a failure keeps it
    model, encoder = _classifier()
    with pytest.raises(_Stop):
        finetune(model, _data(), encoder=encoder, head_epochs=0, epochs=1, callbacks=[Stop()], backup_dir=str(backup), verbose=0)
    assert sorted(os.listdir(backup / "head")) == [".bert_keras_output.json", "epoch-0001"]


# --- issue 47, item 14: a backup resumes only from the files it began from


def _checkpoint(folder):
    """A folder of checkpoint files (as bytes: what is fingerprinted, not read), and a module's parts."""
    (folder / "encoder" / "variables").mkdir(parents=True)
    (folder / "config.json").write_text('{"hidden_size": 8}')
    (folder / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (folder / "README.md").write_text("notes")
    (folder / "encoder" / "saved_model.pb").write_bytes(b"graph")
    (folder / "encoder" / "variables" / "variables.data-00000-of-00001").write_bytes(b"weights" * 10)
    (folder / "encoder" / "variables" / "variables.index").write_bytes(b"index")
    return folder


CHANGES = {  # how a checkpoint is rebuilt at its path -> the file named, or None where the weights are the same
    "weights rewritten, same size": (lambda c: (c / "model.safetensors").write_bytes(bytes(range(255, -1, -1)) * 64),
                                     "model.safetensors was 16,384 bytes, SHA-256 [0-9a-f]{12}, now 16,384 bytes, SHA-256"),
    "a module's variables": (lambda c: (c / "encoder" / "variables" / "variables.data-00000-of-00001").write_bytes(b"other" * 14),
                             "encoder/variables/variables.data-00000-of-00001 was 70 bytes"),
    "vocabulary removed": (lambda c: (c / "vocab.txt").unlink(), "vocab.txt was 12 bytes, SHA-256 [0-9a-f]{12}, now absent"),
    "weights added": (lambda c: (c / "pytorch_model.bin").write_bytes(b"\0"), "pytorch_model.bin was absent, now 1 bytes"),
    "README edited": (lambda c: (c / "README.md").write_text("other notes"), None),
    "module graph rewritten": (lambda c: (c / "encoder" / "saved_model.pb").write_bytes(b"same graph, other bytes"), None),
    "a FIFO and a cache": (lambda c: (os.mkfifo(c / "pipe.json"), (c / "__pycache__").mkdir(),
                                      (c / "__pycache__" / "x.json").write_text("{}"), (c / ".lock").write_text("")), None),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_checkpoint_rebuilt_at_its_path_is_refused_naming_the_file(tmp_path, change):
    rebuild, named = CHANGES[change]
    checkpoint, backup = _checkpoint(tmp_path / "checkpoint"), tmp_path / "bk"
    claim_backup(str(backup))
    _record(backup, sources=[str(checkpoint)]).write()  # training starts: the files fingerprinted
    recorded = json.loads((backup / RUN_FILE).read_text())["source_files"]
    assert sorted(recorded) == [str(checkpoint / name) for name in (
        "config.json", "encoder/variables/variables.data-00000-of-00001", "encoder/variables/variables.index",
        "model.safetensors", "vocab.txt")]
    _trained(backup)
    rebuild(checkpoint)
    if named is None:
        assert _record(backup, sources=[str(checkpoint)]).resuming is True
        return
    with pytest.raises(ValueError, match=rf"The backup in {re.escape(str(backup))} began from other files: "
                                         rf"{re.escape(str(checkpoint))}/{named}.* Put those files back to resume it, "
                                         rf"or remove {re.escape(str(backup))} to start over from these\."):
        _record(backup, sources=[str(checkpoint)])
    assert sorted(os.listdir(backup / "head")) == [".bert_keras_output.json", "epoch-0001"]  # refused, nothing removed


def test_the_files_of_a_checkpoint_prefix_and_of_no_local_path(tmp_path):
    for name in ("bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.meta", "other.ckpt.index"):
        (tmp_path / name).write_bytes(b"x")
    assert sorted(source_files([str(tmp_path / "bert_model.ckpt")])) == [
        str(tmp_path / "bert_model.ckpt.data-00000-of-00001"), str(tmp_path / "bert_model.ckpt.index")]  # not the graph
    assert source_files(["https://tfhub.dev/google/bert/1", str(tmp_path / "absent")]) == {}


def test_a_backup_without_fingerprints_resumes_saying_it_cannot_check(tmp_path):
    checkpoint, backup = _checkpoint(tmp_path / "checkpoint"), tmp_path / "bk"
    claim_backup(str(backup))
    (backup / RUN_FILE).write_text(json.dumps({"source": "checkpoint", "learning_rate": 1e-3}))  # an earlier version's
    _trained(backup)
    lines = []
    record = _record(backup, lines.append, sources=[str(checkpoint)])
    assert record.resuming is True
    assert lines == [f"The backup in {backup} records no fingerprint of the files it began from (an earlier version "
                     "made it): resuming without checking them."]
    record.write()
    assert len(json.loads((backup / RUN_FILE).read_text())["source_files"]) == 5


VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "in", "met", "lives", "and", "paris", "london", "rome",
         "ada", "alan", "grace", "##s", "new", "york", "who", "where", "?"]


def _task_data(task):
    from tests.training.test_reading import _examples
    from tests.training.test_tagging import _sentences

    if task == "tagger":
        return finetune_tagger, _sentences(16, 0), {}
    if task == "reader":
        return finetune_reader, _examples(16, 0), dict(doc_stride=4, max_question_length=4)
    texts = ["ada met alan", "paris and rome", "grace met ada", "london and new york"] * 4
    return finetune_classifier, LabelledText(texts, np.array([1, 0] * 8), ["place", "person"]), {}


def _modules(folder, seed):
    from bert_keras import BertEncoder
    from bert_keras.export import export_encoder, export_preprocessor

    folder.mkdir(exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    keras.utils.set_random_seed(seed)
    encoder = BertEncoder(vocab_size=len(VOCAB), num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16,
                          max_sequence_length=32)
    export_encoder(encoder, str(folder / "encoder"), str(folder / "vocab.txt"), do_lower_case=True, overwrite=True)
    if not (folder / "preprocess").exists():
        export_preprocessor(str(folder / "preprocess"), str(folder / "vocab.txt"), do_lower_case=True, seq_length=16)
    return str(folder)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["classifier", "tagger", "reader", "classifier from modules"])
def test_a_pipeline_refuses_to_resume_from_a_rebuilt_checkpoint(tmp_path, monkeypatch, task):
    if task == "classifier from modules":
        build, changed = functools.partial(_modules, tmp_path / "modules"), "encoder/variables/variables.data-00000-of-00001"
    else:
        pytest.importorskip("transformers")
        build = lambda seed: save_tiny_bert(tmp_path / "checkpoint", VOCAB, seed=seed)  # noqa: E731
        changed = "model.safetensors"
    recipe, train, windows = _task_data(task.split()[0])
    source, backup, lines = build(0), tmp_path / "bk", []
    run = functools.partial(recipe, source, train, export_dir=str(tmp_path / "out"), backup_dir=str(backup), seq_length=16,
                            batch_size=8, head_epochs=1, epochs=1, verbose=0, report=lines.append, **windows)

    def stop(point):
        if point == "after-head-phase":
            raise _Stop(point)

    monkeypatch.setattr(finetune_module, "fault_point", stop)
    with pytest.raises(_Stop):
        run()  # interrupted once phase 1 is backed up
    assert resumed_epoch(str(backup / "head")) == 1
    build(1)  # rebuilt at the same path, from other weights
    lines.clear()
    with pytest.raises(ValueError, match=rf"began from other files: {re.escape(source)}/{changed} was .* Put those files "
                                         "back to resume it, or remove"):
        run()
    assert lines == [] and resumed_epoch(str(backup / "head")) == 1  # refused before anything was built; the backup kept
    if task != "classifier":
        return
    build(0)  # the same weights again (the same bytes): resumed, whatever the spelling of the folder's path
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    result = run.func("./checkpoint/", *run.args[1:], **run.keywords)
    assert f"Resuming from the backup in {backup}" in lines and result.export_dir == str(tmp_path / "out")
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "out"]
