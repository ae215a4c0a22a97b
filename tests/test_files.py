"""Staged writes: atomic replacement, refusals, locks, permissions, leftovers of killed runs."""

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest

from bert_keras import _files
from bert_keras._files import MARKER, OutputLockedError, check_target, read_marker, staged_directory


def _write(target, text, overwrite=False):
    with staged_directory(target, overwrite, kind="test") as staging:
        with open(os.path.join(staging, "data.txt"), "w") as f:
            f.write(text)


def test_output_is_marked_whole_and_replaced(tmp_path):
    target = str(tmp_path / "out")
    _write(target, "one")
    assert sorted(os.listdir(target)) == [MARKER, "data.txt"]
    assert read_marker(target) == {"writer": "bert_keras", "kind": "test", "complete": True, "entries": ["data.txt"]}
    with pytest.raises(FileExistsError, match=r"already exists; pass overwrite=True \(--force\)"):
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
    monkeypatch.setattr(_files, "_renameat2", None)
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
