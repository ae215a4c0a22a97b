"""Staged writes: atomic replacement, refusals, locks, permissions, leftovers of killed runs."""

import errno
import json
import os
import subprocess
import sys
import textwrap

import keras
import pytest

from bert_keras import _files
from bert_keras._platform import native
from bert_keras._files import MARKER, OutputLockedError, check_target, read_marker, staged_directory
from bert_keras.export import hub_modules
from bert_keras.training.backup import EpochBackup, held_backup, resumed_epoch


def _write(target, text, overwrite=False):
    with staged_directory(target, overwrite, kind="test") as staging:
        with open(os.path.join(staging, "data.txt"), "w") as f:
            f.write(text)


def test_output_is_marked_whole_and_replaced(tmp_path):
    target = str(tmp_path / "out")
    _write(target, "one")
    assert sorted(os.listdir(target)) == [MARKER, "data.txt"]
    assert read_marker(target) == {"writer": "bert_keras", "kind": "test", "complete": True, "entries": ["data.txt"]}
    with pytest.raises(FileExistsError, match=r"already exists; pass overwrite=True to replace it\.$"):
        _write(target, "two")
    _write(target, "two", overwrite=True)
    assert open(os.path.join(target, "data.txt")).read() == "two"
    assert os.listdir(tmp_path) == ["out"]  # no staging or replaced directory left


def test_force_never_empties_a_directory_it_did_not_write(tmp_path, monkeypatch):
    precious = tmp_path / "project"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match=r"was not written by bert_keras \(it holds \['notes.txt'\]\)"):
        _write(str(precious), "x", overwrite=True)
    assert (precious / "notes.txt").read_text() == "keep me"

    monkeypatch.chdir(precious)
    with pytest.raises(ValueError, match="current directory or one of its parents"):
        check_target(".", overwrite=True, argument="--out")
    with pytest.raises(ValueError, match="current directory or one of its parents"):
        check_target(str(tmp_path), overwrite=True)
    assert os.listdir(precious) == ["notes.txt"]


def test_a_file_is_not_a_target(tmp_path):
    path = tmp_path / "model.txt"
    path.write_text("x")
    with pytest.raises(FileExistsError, match=r"\(--out\) exists and is not a directory"):
        check_target(str(path), overwrite=True, argument="--out")


def test_saved_models_without_a_marker_are_never_replaced(tmp_path):
    old = tmp_path / "modules"
    for name in ("encoder", "preprocess"):
        (old / name / "variables").mkdir(parents=True)
        (old / name / "saved_model.pb").write_bytes(b"pb")
    assert not _files.is_package_output(str(old))
    with pytest.raises(FileExistsError, match="was not written by bert_keras"):
        _write(str(old), "new", overwrite=True)
    assert sorted(os.listdir(old)) == ["encoder", "preprocess"]


def test_permissions_follow_the_umask(tmp_path):
    previous = os.umask(0o022)
    try:
        _write(str(tmp_path / "out"), "x")
    finally:
        os.umask(previous)
    assert os.stat(tmp_path / "out").st_mode & 0o777 == 0o755


def test_a_second_writer_is_refused_while_the_first_writes(tmp_path):
    target = str(tmp_path / "out")
    with staged_directory(target):
        with pytest.raises(OutputLockedError, match=rf"pid {os.getpid()}\) is writing"):
            _write(target, "second")
    assert os.listdir(target) == [MARKER]


def test_failure_and_full_disk_leave_the_old_output(tmp_path):
    target = str(tmp_path / "out")
    _write(target, "old")
    with pytest.raises(RuntimeError, match="boom"):
        with staged_directory(target, overwrite=True, kind="test"):
            raise RuntimeError("boom")
    with pytest.raises(OSError, match="No space left on the device while writing") as error:
        with staged_directory(target, overwrite=True, kind="test"):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert error.value.errno == errno.ENOSPC
    assert open(os.path.join(target, "data.txt")).read() == "old"
    assert os.listdir(tmp_path) == ["out"]


def test_leftovers_of_a_killed_write_are_cleaned_or_restored(tmp_path):
    target = tmp_path / "out"
    (tmp_path / ".partial-out-abc_1234").mkdir()
    (tmp_path / ".partial-out-abc_1234" / MARKER).write_text('{"writer": "bert_keras", "kind": "staging", "complete": false}')
    # The fallback replacement was killed between its two renames: the old output is aside.
    aside = tmp_path / ".replaced-out-def_5678"
    aside.mkdir()
    (aside / "data.txt").write_text("old")
    (aside / MARKER).write_text('{"writer": "bert_keras", "kind": "test", "complete": true}')
    with pytest.raises(FileExistsError, match="already exists"):
        _write(str(target), "new")  # the old output is back in place, so this is an overwrite
    assert (target / "data.txt").read_text() == "old"
    assert os.listdir(tmp_path) == ["out"]


def test_replacement_without_the_atomic_exchange(tmp_path, monkeypatch):
    monkeypatch.setattr(native, "_renameat2", None)
    target = str(tmp_path / "out")
    _write(target, "old")
    _write(target, "new", overwrite=True)
    assert open(os.path.join(target, "data.txt")).read() == "new"
    assert os.listdir(tmp_path) == ["out"]


@pytest.mark.slow
@pytest.mark.fault_injection
def test_kill_before_the_replacement_keeps_the_old_output(tmp_path):
    target = str(tmp_path / "out")
    _write(target, "old")
    script = textwrap.dedent(
        f"""
        from tests.test_files import _write
        _write({target!r}, "new", overwrite=True)
        """
    )
    env = dict(os.environ, BERT_KERAS_FAULT_POINT="before-replace", TF_CPP_MIN_LOG_LEVEL="2")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", script], env=env, cwd=root, capture_output=True)
    assert result.returncode == -9
    assert open(os.path.join(target, "data.txt")).read() == "old"
    assert any(name.startswith(".partial-out-") for name in os.listdir(tmp_path))  # the kill left it
    _write(target, "new", overwrite=True)  # the rerun cleans up and finishes
    assert open(os.path.join(target, "data.txt")).read() == "new"
    assert os.listdir(tmp_path) == ["out"]
    assert json.load(open(os.path.join(target, MARKER)))["complete"] is True


# === The directory rule: no write through a path component the package did not create in this run or mark earlier ===
# (issue 38, finding 2: a link planted as a backup's phase folder was followed on resume). A link at each level of
# a backup and of an output, pointing to a user's directory whose listing must not change.


def _user_directory(tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("keep me")
    return user


def _tiny_model():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model


def _epoch_backup(phase_dir, phase):
    backup = EpochBackup(str(phase_dir), phase=phase)
    backup.set_model(_tiny_model())
    return backup


def test_directory_under_creates_marked_levels_and_refuses_anything_else(tmp_path):
    user = _user_directory(tmp_path)
    root = tmp_path / "backup"
    _files.claim_directory(str(root), kind="training_backup")
    made = _files.directory_under(str(root), "full", kind="training_phase")
    assert made == str(root / "full")
    assert json.load(open(root / "full" / MARKER))["kind"] == "training_phase"
    assert _files.directory_under(str(root), "full", kind="training_phase") == made  # marked earlier: opened
    with pytest.raises(FileExistsError, match=r"backup/full' \(in the directory\) is not a directory bert_keras made "
                                              r"there \(it carries no marker of a 'other'\)"):
        _files.directory_under(str(root), "full", kind="other")
    os.symlink(user, root / "head")
    with pytest.raises(FileExistsError, match=r"backup/head' \(in the backup\) is a symbolic link; bert_keras writes "
                                              r"through no link it did not create"):
        _files.directory_under(str(root), "head", "sub", kind="training_phase", argument="backup")
    (root / "mine").mkdir()  # a directory the package did not make, put there
    with pytest.raises(FileExistsError, match=r"backup/mine' \(in the directory\) is not a directory bert_keras made"):
        _files.directory_under(str(root), "mine", kind="training_phase")
    (root / "file").write_text("x")
    with pytest.raises(FileExistsError, match=r"backup/file' \(in the directory\) is not a directory"):
        _files.directory_under(str(root), "file")
    os.symlink(root, tmp_path / "link-to-backup")  # the root itself: a link, even to a marked directory
    with pytest.raises(FileExistsError, match=r"link-to-backup' \(in the directory\) is a symbolic link"):
        _files.directory_under(str(tmp_path / "link-to-backup"), "full", kind="training_phase")
    with pytest.raises(FileExistsError, match=r"user' \(in the directory\) is not a directory bert_keras made there"):
        _files.directory_under(str(user), "x")
    assert os.listdir(user) == ["notes.txt"]


def test_a_link_as_the_backup_directory_is_refused(tmp_path):
    user = _user_directory(tmp_path)
    os.symlink(user, tmp_path / ".clf.backup")
    with pytest.raises(FileExistsError, match=r"\.clf\.backup' \(backup_dir\) is a symbolic link"):
        with held_backup(str(tmp_path / ".clf.backup")):
            pass
    assert os.listdir(user) == ["notes.txt"]


def test_a_link_as_a_phase_folder_is_refused_before_any_work(tmp_path):
    user = _user_directory(tmp_path)
    backup = tmp_path / ".clf.backup"
    with held_backup(str(backup)):
        _epoch_backup(backup / "head", "head")._write(1)
    os.symlink(user, backup / "full")  # between the runs: the rerun's phase 2 wrote its snapshots through it
    for refused in (lambda: held_backup(str(backup)).__enter__(), lambda: resumed_epoch(str(backup / "full")),
                    lambda: _epoch_backup(backup / "full", "full")._write(1)):
        with pytest.raises(FileExistsError, match=r"\.clf\.backup/full' \(in the backup\) is a symbolic link"):
            refused()
    os.unlink(backup / "full")
    (backup / "full").mkdir()  # a real directory the package did not make (a user's, moved there)
    (backup / "full" / "mine.txt").write_text("x")
    for refused in (lambda: held_backup(str(backup)).__enter__(), lambda: resumed_epoch(str(backup / "full")),
                    lambda: _epoch_backup(backup / "full", "full")._write(1)):
        with pytest.raises(FileExistsError, match=r"\.clf\.backup/full' \(in the backup\) is not a directory bert_keras"):
            refused()
    assert os.listdir(backup / "full") == ["mine.txt"]
    assert os.listdir(user) == ["notes.txt"]
    assert json.load(open(backup / "head" / MARKER))["kind"] == "training_phase"  # made marked, in one step
    assert resumed_epoch(str(backup / "head")) == 1


def test_a_link_as_a_snapshot_is_refused_before_any_work(tmp_path):
    user = _user_directory(tmp_path)
    backup = tmp_path / "backup"
    with held_backup(str(backup)):
        _epoch_backup(backup, "train")._write(1)  # pre-training: the backup itself holds the snapshots
    os.symlink(user, backup / "epoch-0002")
    for refused in (lambda: held_backup(str(backup)).__enter__(), lambda: resumed_epoch(str(backup))):
        with pytest.raises(FileExistsError, match=r"backup/epoch-0002' \(in the backup\) is a symbolic link"):
            refused()
    with pytest.raises(FileExistsError, match=r"epoch-0002' \(backup\) is a symbolic link"):
        _epoch_backup(backup, "train")._write(2)
    assert os.listdir(user) == ["notes.txt"]


def test_a_staged_directory_swapped_for_a_link_is_never_put_in_place(tmp_path):
    user = _user_directory(tmp_path)
    target = tmp_path / "out"
    with pytest.raises(FileExistsError, match=r"\.partial-out-[a-z0-9_]{8}' was replaced while bert_keras wrote"):
        with staged_directory(str(target), kind="test") as staging:
            (tmp_path / "aside").mkdir()
            os.rename(staging, tmp_path / "aside" / "staged")
            os.symlink(user, staging)  # after the writes: nothing more goes there, the marker included
    assert not os.path.lexists(target)
    assert os.listdir(user) == ["notes.txt"]
    with pytest.raises(FileExistsError, match=r"out-[a-z0-9_]{8}/sub/data' is a symbolic link that appeared while"):
        with staged_directory(str(target), kind="test") as staging:
            os.mkdir(os.path.join(staging, "sub"))
            os.symlink(user, os.path.join(staging, "sub", "data"))
    assert not os.path.lexists(target)
    assert os.listdir(user) == ["notes.txt"]


def test_a_link_as_a_folder_of_a_staged_output_is_refused(tmp_path, monkeypatch):
    user = _user_directory(tmp_path)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    written = []

    def save(directory, *args):  # what tf.saved_model.save does: writes where it is told
        written.append(directory)
        with open(os.path.join(directory, "saved_model.pb"), "w") as f:
            f.write("pb")

    def plant(text):  # called before the encoder is written: a link where its folder goes
        if text.startswith("write the encoder"):
            (staging,) = [name for name in os.listdir(tmp_path) if name.startswith(".partial-pair-")]
            os.symlink(user, tmp_path / staging / "encoder")

    monkeypatch.setattr(hub_modules, "_save_encoder", save)
    with pytest.raises(FileExistsError, match=r"\.partial-pair-[a-z0-9_]{8}/encoder' \(in the out_dir\) is a symbolic "
                                              "link"):
        hub_modules.export_module_pair(str(tmp_path / "pair"), object(), str(vocab), True, seq_length=8, progress=plant)
    assert written == []
    assert os.listdir(user) == ["notes.txt"]
    assert not os.path.lexists(tmp_path / "pair")


def test_a_json_write_never_follows_a_planted_link(tmp_path):
    user_file = tmp_path / "user.txt"
    user_file.write_text("keep me")
    path = tmp_path / "run.json"
    os.symlink(user_file, f"{path}.partial-{os.getpid()}")  # the name the write used to stage under
    _files.write_json_atomically(str(path), {"a": 1})
    assert json.load(open(path)) == {"a": 1}
    assert user_file.read_text() == "keep me"
