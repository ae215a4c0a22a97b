"""The package deletes or replaces only what it wrote and marked, and follows no link it did not create.

Each test is a finding of the second adversarial review (issue "Reliability, second campaign", items 1-3, 10
and 15): the case as an attacker or a careless user sets it up, and what must be left standing afterwards.
"""

import errno
import os
import resource
import socket
import sys
import textwrap

import pytest
import tensorflow as tf

from bert_keras import _files, cli
from bert_keras._files import MARKER, OutputLockedError, claim_directory, remove_output, staged_directory
from bert_keras.data.texts import LabelledText
from bert_keras.training import claim_backup, finetune_classifier
from bert_keras.training.backup import BACKUP_KIND
from tests import forked

ROWS = [("good movie", "pos"), ("bad movie", "neg")] * 4


def _user_directory(path):
    path.mkdir()
    (path / "thesis.tex").write_text("\\chapter{Years of work}")
    (path / "data").mkdir()
    (path / "data" / "results.csv").write_text("a,b\n1,2\n")
    return path


def _tree(path):
    return sorted(os.path.relpath(os.path.join(root, name), path) for root, dirs, files in os.walk(path) for name in dirs + files)


def _train():
    return LabelledText([text for text, _ in ROWS], [0 if label == "neg" else 1 for _, label in ROWS], ["neg", "pos"])


# --- 1. --backup-dir deleted whatever it named --------------------------------------------------------------


def test_a_users_directory_is_refused_as_a_backup_before_any_work(tmp_path):
    mywork = _user_directory(tmp_path / "mywork")
    before = _tree(mywork)
    with pytest.raises(FileExistsError, match=r"\(backup_dir\) exists and was not written by bert_keras"):
        # The source does not exist: the refusal comes before anything is read or built.
        finetune_classifier(str(tmp_path / "no-checkpoint"), _train(), export_dir=str(tmp_path / "clf"), backup_dir=str(mywork))
    assert _tree(mywork) == before
    assert not os.path.exists(tmp_path / "clf")


def test_the_current_directory_is_refused_as_a_backup(tmp_path, monkeypatch):
    project = _user_directory(tmp_path / "proj")
    monkeypatch.chdir(project)
    with pytest.raises(ValueError, match=r"\(backup_dir\): it is the current directory or one of its parents"):
        finetune_classifier(str(tmp_path / "no-checkpoint"), _train(), export_dir="clf", backup_dir=".")
    with pytest.raises(ValueError, match="current directory or one of its parents"):
        claim_backup(str(tmp_path))
    assert sorted(os.listdir(project)) == ["data", "thesis.tex"]


def test_a_backup_inside_the_export_or_holding_it_is_refused(tmp_path):
    for export, backup in (("clf", "clf"), ("clf", "clf/backup"), ("runs/clf", "runs")):
        with pytest.raises(ValueError, match="overlap: the backup is removed once the export is written"):
            finetune_classifier(str(tmp_path / "x"), _train(), export_dir=str(tmp_path / export), backup_dir=str(tmp_path / backup))
    assert os.listdir(tmp_path) == []


def test_the_cli_refuses_a_users_backup_dir_and_the_project_survives(tmp_path, monkeypatch, capsys):
    project = _user_directory(tmp_path / "proj")
    monkeypatch.chdir(project)
    (project / "train.csv").write_text("text,label\n" + "\n".join(f"{t},{l}" for t, l in ROWS) + "\n")
    before = _tree(project)
    (tmp_path / "empty").mkdir()  # no checkpoint in it: the refusals come before anything is read
    for backup, expected in (("data", "was not written by bert_keras"), (".", "current directory or one of its parents")):
        status = cli.main(["finetune", "--train", "train.csv", "--checkpoint", str(tmp_path / "empty"), "--out", "clf",
                           "--backup-dir", backup])
        assert status == 2
        assert expected in capsys.readouterr().err
    assert _tree(project) == before


def test_other_bert_keras_outputs_are_not_taken_as_backups(tmp_path):
    export = tmp_path / "old_export"
    with staged_directory(str(export), kind="classifier") as staging:
        open(os.path.join(staging, "saved_model.pb"), "w").close()
    with pytest.raises(FileExistsError, match=r"holds a bert_keras 'classifier' output, not a 'training_backup'"):
        claim_backup(str(export))
    assert sorted(os.listdir(export)) == [MARKER, "saved_model.pb"]


def test_remove_output_removes_only_marked_directories_of_its_kind(tmp_path):
    backup = tmp_path / "backup"
    claim_backup(str(backup))
    (backup / "full").mkdir()
    assert remove_output(str(backup), BACKUP_KIND) is True and not backup.exists()

    user = _user_directory(tmp_path / "user")
    assert remove_output(str(user), BACKUP_KIND) is False  # no marker
    claim_directory(str(tmp_path / "other"), kind="pretraining_run")
    assert remove_output(str(tmp_path / "other"), BACKUP_KIND) is False  # another kind
    marked = tmp_path / "marked"
    claim_backup(str(marked))
    link = tmp_path / "link"
    link.symlink_to(marked)
    assert remove_output(str(link), BACKUP_KIND) is False  # a link is neither followed nor removed
    assert (marked / MARKER).exists() and link.is_symlink() and (user / "thesis.tex").exists()


# --- 2. a planted .OUT.lock link was truncated through ----------------------------------------------------


def test_a_lock_file_planted_as_a_link_is_never_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("x" * 180)
    (tmp_path / ".out.lock").symlink_to(victim)
    with pytest.raises(OutputLockedError, match=r"\.out\.lock' is a symbolic link, which bert_keras never follows"):
        with staged_directory(str(tmp_path / "out")):
            pass
    assert victim.read_text() == "x" * 180


def test_a_lock_file_planted_as_a_hard_link_is_never_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.link(victim, tmp_path / ".out.lock")
    with pytest.raises(OutputLockedError, match=r"is a file with 2 names \(a hard link\)"):
        with staged_directory(str(tmp_path / "out")):
            pass
    assert victim.read_text() == "precious"


def test_a_target_that_is_a_link_is_refused(tmp_path):
    real = tmp_path / "real"
    with staged_directory(str(real), kind="test"):
        pass
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(FileExistsError, match="is a symbolic link; bert_keras follows no link it did not create"):
        _files.check_target(str(tmp_path / "link"), overwrite=True)


# --- 3. --force replaced SavedModels the package never wrote ------------------------------------------------


@pytest.mark.parametrize("layout", ["saved_model", "module_pair"])
def test_force_never_replaces_an_unmarked_saved_model(tmp_path, layout):
    class Module(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def __call__(self, x):
            return 2 * x

    target = tmp_path / "models"
    paths = [target] if layout == "saved_model" else [target / "encoder", target / "preprocess"]
    for path in paths:
        tf.saved_model.save(Module(), str(path))
    before = _tree(target)
    with pytest.raises(FileExistsError, match="was not written by bert_keras"):
        with staged_directory(str(target), overwrite=True):
            pass
    assert _tree(target) == before
    assert not _files.is_package_output(str(target))


# --- 10. writing OUT removed the staging directory of a concurrent write to OUT-x --------------------------


def test_recovery_of_out_leaves_the_staging_of_out_x_alone(tmp_path):
    with staged_directory(str(tmp_path / "out-x"), kind="test") as staging_of_out_x:
        with open(os.path.join(staging_of_out_x, "data.txt"), "w") as f:
            f.write("being written")
        with staged_directory(str(tmp_path / "out"), kind="test"):
            pass  # recovers the leftovers of `out` under its lock
        assert os.path.exists(os.path.join(staging_of_out_x, "data.txt"))
    assert (tmp_path / "out-x" / "data.txt").read_text() == "being written"


def test_recovery_removes_only_marked_leftovers_of_its_own_name(tmp_path):
    killed = tmp_path / ".partial-out-abcd1234"  # a killed write of `out`: marked as staging
    killed.mkdir()
    (killed / MARKER).write_text('{"writer": "bert_keras", "kind": "staging", "complete": false}')
    planted = tmp_path / ".partial-out-zzzz9999"  # the right name, but not ours
    planted.mkdir()
    (planted / "keep.txt").write_text("not bert_keras's")
    with staged_directory(str(tmp_path / "out"), kind="test"):
        pass
    assert not killed.exists()
    assert (planted / "keep.txt").read_text() == "not bert_keras's"


# --- 15. EFBIG during an export was an internal error ------------------------------------------------------


def test_a_file_size_limit_is_reported_and_the_old_output_kept(tmp_path):
    target = str(tmp_path / "out")
    with staged_directory(target, kind="test") as staging:
        with open(os.path.join(staging, "data.txt"), "w") as f:
            f.write("old")
    with pytest.raises(OSError, match=r"file-size limit \(`ulimit -f`\)") as error:
        with staged_directory(target, overwrite=True, kind="test"):
            raise OSError(errno.EFBIG, "File too large")
    assert error.value.errno == errno.EFBIG
    with pytest.raises(OSError, match="file-size limit"):
        with staged_directory(target, overwrite=True, kind="test"):
            raise tf.errors.OutOfRangeError(None, None, "foo; File too large")
    assert (tmp_path / "out" / "data.txt").read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["out"]


@pytest.mark.slow
def test_export_under_ulimit_f_exits_2_and_keeps_the_old_output(tmp_path):
    """A real export (TensorFlow writes the variables) in a process whose file-size limit is 64 KiB."""
    out = tmp_path / "modules"
    script = textwrap.dedent(f"""
        import os, resource, sys
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
        from bert_keras import BertEncoder
        from bert_keras.export import export_encoder
        vocab = {str(tmp_path / "vocab.txt")!r}
        encoder = BertEncoder(vocab_size=40, num_layers=1, hidden_size=128, num_heads=2, intermediate_size=256,
                              max_sequence_length=64)
        overwrite = len(sys.argv) > 1
        if overwrite:
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
        try:
            export_encoder(encoder, {str(out)!r}, vocab, True, overwrite=overwrite)
        except OSError as error:
            print("OSError", error.errno, error, file=sys.stderr)
            sys.exit(2)
    """)
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]))
    # Processes forked from one with TensorFlow imported (tests/forked.py): the limit stays in the child all the same.
    first = forked.run([sys.executable, "-c", script], timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    before = _tree(out)
    second = forked.run([sys.executable, "-c", script, "overwrite"], timeout=300)
    assert second.returncode == 2, second.stderr[-2000:]
    assert f"OSError {errno.EFBIG}" in second.stderr and "file-size limit" in second.stderr
    assert _tree(out) == before
    assert sorted(os.listdir(tmp_path)) == ["modules", "vocab.txt"]
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] == resource.RLIM_INFINITY  # the limit stayed in the child


# --- the second review: files a user added inside a marked directory, a directory planted as a lock ----------


def test_force_never_replaces_an_output_holding_entries_it_did_not_write(tmp_path):
    target = tmp_path / "clf"
    with staged_directory(str(target), kind="classifier") as staging:
        open(os.path.join(staging, "saved_model.pb"), "w").close()
    (target / "notes.md").write_text("my notes")
    with pytest.raises(FileExistsError, match=r"holds entries it did not write \(\['notes.md'\]\)"):
        with staged_directory(str(target), overwrite=True, kind="classifier"):
            pass
    copy = tmp_path / "userfolder"  # a copied export: its marker says what was written, not what is there now
    import shutil

    shutil.copytree(target, copy)
    (copy / "thesis.tex").write_text("years of work")
    with pytest.raises(FileExistsError, match="thesis.tex"):
        with staged_directory(str(copy), overwrite=True, kind="classifier"):
            pass
    assert (target / "notes.md").read_text() == "my notes" and (copy / "thesis.tex").read_text() == "years of work"


def test_a_backup_keeps_what_a_user_put_in_it(tmp_path):
    from bert_keras.training.backup import remove_backup

    backup = tmp_path / "results"
    backup.mkdir()  # an empty directory of the user's, given as the backup
    claim_backup(str(backup))
    (backup / "full").mkdir()
    (backup / "run.json").write_text("{}")
    (backup / "my_notes.txt").write_text("saved here during the run")
    (backup / "run.json.partial-k3x_9a0q").write_text("{")  # a record whose write was killed: the backup's own
    (backup / "run.json.partial-notes.txt").write_text("mine")  # not a name the writer makes: the user's
    remove_backup(str(backup))
    # the backup's own entries went, the user's stayed
    assert sorted(os.listdir(backup)) == ["my_notes.txt", "run.json.partial-notes.txt"]


def test_a_directory_planted_as_a_lock_is_refused(tmp_path):
    (tmp_path / ".out.lock").mkdir()
    with pytest.raises(OutputLockedError, match="is a directory"):
        with staged_directory(str(tmp_path / "out")):
            pass


# --- the third round of the review ---------------------------------------------------------------------------


def test_force_never_replaces_another_kind_of_output(tmp_path, monkeypatch, capsys):
    pair = tmp_path / "modules"
    with staged_directory(str(pair), kind="module_pair") as staging:
        open(os.path.join(staging, "saved_model.pb"), "w").close()
    with pytest.raises(FileExistsError, match=r"holds a bert_keras 'module_pair' output, not a 'classifier' one"):
        with staged_directory(str(pair), overwrite=True, kind="classifier"):
            pass
    live = tmp_path / "live"  # another run's backup
    claim_backup(str(live))
    (live / "run.json").write_text("{}")
    with pytest.raises(FileExistsError, match=r"holds a bert_keras 'training_backup' output, not a 'classifier' one"):
        _files.check_target(str(live), overwrite=True, kind="classifier")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.csv").write_text("text,label\n" + "good,pos\nbad,neg\n" * 4)
    (tmp_path / "checkpoint").mkdir()  # exists; never read: the refusal comes first
    argv = ["finetune", "--train", "train.csv", "--checkpoint", "checkpoint", "--out", "live", "--force", "--backup-dir", "bk"]
    assert cli.main(argv) == 2
    assert "holds a bert_keras 'training_backup' output, not a 'classifier' one" in capsys.readouterr().err
    assert sorted(os.listdir(live)) == [MARKER, "run.json"] and sorted(os.listdir(pair)) == [MARKER, "saved_model.pb"]
    assert not (tmp_path / "bk").exists()


@pytest.mark.parametrize("suffix", ["/", "//", "/.", "/./"])
def test_a_trailing_slash_does_not_hide_a_link(tmp_path, suffix):
    user = tmp_path / "user_empty"
    user.mkdir()
    (tmp_path / "E").symlink_to(user)
    with pytest.raises(FileExistsError, match="is a symbolic link; bert_keras follows no link it did not create"):
        claim_backup(str(tmp_path / "E") + suffix)
    with pytest.raises(FileExistsError, match="is a symbolic link"):
        with staged_directory(str(tmp_path / "E") + suffix, overwrite=True, kind="classifier"):
            pass
    marked = tmp_path / "marked"
    claim_backup(str(marked))
    (tmp_path / "L").symlink_to(marked)
    assert remove_output(str(tmp_path / "L") + suffix, BACKUP_KIND) is False  # neither followed nor removed
    assert os.listdir(user) == [] and (marked / MARKER).exists()


def test_a_users_files_inside_the_backups_folders_stay(tmp_path):
    from bert_keras.training.backup import remove_backup

    backup = tmp_path / "bk"
    claim_backup(str(backup))
    (backup / "run.json").write_text("{}")
    for phase in ("head", "full"):
        (backup / phase / "epoch-0001").mkdir(parents=True)
        (backup / phase / "epoch-0001" / "state.json").write_text("{}")
    (backup / "head" / "my_notes.txt").write_text("written during the run")
    remove_backup(str(backup))
    assert _tree(backup) == ["head", os.path.join("head", "my_notes.txt")]  # the backup's own entries went
    (backup / "head" / "my_notes.txt").unlink()
    claim_backup(str(tmp_path / "bk2"))
    (tmp_path / "bk2" / "full" / "epoch-0003").mkdir(parents=True)
    remove_backup(str(tmp_path / "bk2"))
    assert not (tmp_path / "bk2").exists()  # nothing of a user's: all of it goes


def test_a_backup_inside_another_runs_backup_or_an_output_is_refused(tmp_path):
    other = tmp_path / "other_backup"
    claim_backup(str(other))
    (other / "full").mkdir()
    for nested in (other / "mine", other / "full" / "mine"):
        with pytest.raises(FileExistsError, match="inside .*a bert_keras 'training_backup' output"):
            claim_backup(str(nested))
        assert not nested.exists()
    export = tmp_path / "export"
    with staged_directory(str(export), kind="classifier") as staging:
        open(os.path.join(staging, "saved_model.pb"), "w").close()
    with pytest.raises(FileExistsError, match="inside .*a bert_keras 'classifier' output"):
        claim_backup(str(export / "variables" / "backup"))
    assert sorted(os.listdir(export)) == [MARKER, "saved_model.pb"]
    # What the package lays out itself is taken: a pre-training run's backup, a worker's part of a cluster's backup.
    run = tmp_path / "run"
    claim_directory(str(run), kind="pretraining_run")
    claim_backup(str(run / "backup"))
    claim_backup(str(other / "chief"), within=str(other))


def test_a_socket_planted_as_a_lock_is_refused_with_a_message(tmp_path):
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / ".out.lock"))
    try:
        with pytest.raises(OutputLockedError, match="is not a plain file"):
            with staged_directory(str(tmp_path / "out")):
                pass
    finally:
        server.close()
    assert not (tmp_path / "out").exists()


def test_an_empty_directory_the_user_made_is_emptied_not_removed(tmp_path):
    from bert_keras.training.backup import remove_backup

    mine = tmp_path / "mine"
    mine.mkdir()
    claim_backup(str(mine))
    (mine / "full" / "epoch-0001").mkdir(parents=True)
    claim_backup(str(mine))  # a resumed run's claim keeps what the first one recorded
    remove_backup(str(mine))
    assert mine.is_dir() and os.listdir(mine) == []
    claim_backup(str(tmp_path / "made"))
    remove_backup(str(tmp_path / "made"))
    assert not (tmp_path / "made").exists()


def _claim_cluster_backups(roots, task, barrier, errors):
    for root in roots:
        barrier.wait()  # the workers of a cluster leave the rendezvous together and claim the backup at once
        try:
            claim_backup(root)
            claim_backup(os.path.join(root, task), within=root)
        except Exception as error:  # noqa: BLE001 - reported to the test
            errors.put(f"{task}: {type(error).__name__}: {error}")


def test_two_workers_claiming_one_backup_at_once_both_succeed(tmp_path):
    """The chief and a worker claim the cluster's backup in the same instant: neither may see it half-made."""
    import multiprocessing

    context = multiprocessing.get_context("fork")  # the workers only touch files
    roots = [str(tmp_path / f"backup-{i}") for i in range(150)]
    barrier, errors = context.Barrier(2), context.Queue()
    workers = [context.Process(target=_claim_cluster_backups, args=(roots, task, barrier, errors)) for task in ("chief", "worker-1")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert found == []
    assert [worker.exitcode for worker in workers] == [0, 0]
    for root in roots:  # made by the package, so removed (not only emptied) once the run is over
        assert _files._marker_of(root)["made"] is True
        assert sorted(os.listdir(root)) == [MARKER, "chief", "worker-1"]
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(root) for root in roots)  # no staging left
