"""`bert-keras finetune` and its default backup (`.OUT.backup`): a run refused before it trains leaves none behind.

Issue 47, item 13: a run refused for a checkpoint folder without its vocabulary left `.clf.backup/run.json`, and
the corrected rerun, with one flag changed, was refused for the backup ("made by a run with other learning_rate").
"""

import os
import sys

import pytest

from bert_keras import cli
from tests import forked
from tests.helpers import save_tiny_bert

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "movie", "the", "was"]
pytestmark = pytest.mark.slow  # a tiny transformers checkpoint: importing torch takes seconds

ROWS = [("the movie was good", "pos"), ("good good", "pos"), ("the movie was bad", "neg"), ("bad bad movie", "neg")] * 4


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    save_tiny_bert(tmp_path / "checkpoint", VOCAB)
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f"{text},{label}\n" for text, label in ROWS))
    return tmp_path


ARGV = ["finetune", "--train", "train.csv", "--checkpoint", "checkpoint", "--out", "clf", "--seq-length", "16",
        "--batch-size", "8", "--head-epochs", "1", "--epochs", "1"]


def test_a_finetune_refused_before_training_leaves_no_backup_to_block_its_rerun(workdir, capsys):
    (workdir / "checkpoint" / "vocab.txt").rename(workdir / "vocab.txt")  # a checkpoint folder without its vocabulary
    for rate in ("1e-3", "2e-3"):  # the rerun changes one flag: refused for the vocabulary again, not for a backup
        assert cli.main(ARGV + ["--learning-rate", rate]) == 2
        err = capsys.readouterr().err
        assert err.startswith("bert-keras finetune: The checkpoint at 'checkpoint' has no vocab.txt") and err.count("\n") == 1
        assert sorted(os.listdir(workdir)) == ["checkpoint", "train.csv", "vocab.txt"]  # no .clf.backup, no lock


def test_the_corrected_rerun_of_a_refused_finetune_trains_and_exports(workdir, capsys):
    (workdir / "checkpoint" / "vocab.txt").rename(workdir / "vocab.txt")
    assert cli.main(ARGV + ["--learning-rate", "1e-3"]) == 2
    capsys.readouterr()
    (workdir / "vocab.txt").rename(workdir / "checkpoint" / "vocab.txt")
    assert cli.main(ARGV + ["--learning-rate", "2e-3"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "Resuming" not in out and "Exported the classifier" in out
    assert sorted(os.listdir(workdir)) == ["checkpoint", "clf", "train.csv"]


def test_a_run_killed_before_its_first_epoch_was_backed_up_blocks_no_rerun(workdir):
    env = dict(os.environ, BERT_KERAS_FAULT_POINT="backup-weights-written:head:1")  # killed inside the first snapshot
    command = [sys.executable, "-m", "bert_keras.cli", *ARGV]
    # Processes forked from one with TensorFlow imported (tests/forked.py): the command's own work, not the imports.
    killed = forked.run(command + ["--learning-rate", "1e-3"], env=env, timeout=600)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert os.path.exists(workdir / ".clf.backup" / "run.json")  # training had started: the record, and no epoch
    env.pop("BERT_KERAS_FAULT_POINT")
    rerun = forked.run(command + ["--learning-rate", "2e-3"], env=env, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert (f"The backup in {workdir / '.clf.backup'} holds no trained epoch, only the record of a run stopped before "
            "its first epoch ended: this run starts over and replaces it.") in rerun.stdout
    assert "Resuming" not in rerun.stdout and sorted(os.listdir(workdir)) == ["checkpoint", "clf", "train.csv"]
