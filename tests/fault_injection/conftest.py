"""Tiny inputs, the commands under test, and their runs, started together so that they share the cores.

Each run fixture returns a `Future` (see `_harness.start`); the session fixture `_start_runs` starts,
at the beginning of the session, the runs that the selected tests need, and a test waits on the ones it
reads. Runs of one command killed at several points form a chain (`_harness.run_chain`): the run after
a kill is the rerun of that kill, killed in its turn at the next point, and the last rerun finishes.
"""

import json
import os
import random
import shutil

import pytest

from bert_keras._files import MARKER
from tests.checkpoints._models import write_training_inputs
from tests.fault_injection._harness import (
    Watcher,
    classifier_outputs,
    cli,
    driver,
    entries,
    run,
    run_chain,
    run_two_at_once,
    start,
    whole_pair,
)

TABLE_VARIABLE = "BERT_KERAS_FAULT_TABLE"

CONVERT_POINTS = ("between-modules", "before-replace:modules")
# Kills inside a backup's write (after the weights, after the state: before the snapshot is put in place) too.
# Not "epoch-end:head:2": a kill after phase 1's last snapshot leaves what "after-head-phase" leaves.
FINETUNE_POINTS = ("epoch-end:head:1", "after-head-phase", "epoch-end:full:1",
                   "backup-weights-written:full:2", "backup-state-written:full:2", "before-replace:clf")
# `--early-stopping 1` over 4 unfrozen epochs, validated on the training texts with their labels swapped: what
# the model learns makes the validation loss rise, so phase 2 stops after epoch 2 (measured: 0.69320 then 0.69344)
# and restores epoch 1's weights. Killed after epoch 1 (the best), then, resumed, after epoch 2 (the stop); the
# reruns must carry early stopping's best loss, patience and best weights.
EARLY_STOPPING_POINTS = ("epoch-end:full:1", "epoch-end:full:2")
EARLY_STOPPING_OPTIONS = ("--early-stopping", 1, "--epochs", 4)
PRETRAIN_BACKUP_POINTS = ("backup-weights-written:train:1", "backup-state-written:train:2")
PRETRAIN_POINTS = ("before-export", "between-modules", "before-replace:pretrained")
EXPORT_POINTS = ("before-replace:clf",)
# Random kills of the fine-tune: delays as fractions of the uninterrupted run's wall time (measured in
# the same session), drawn from the part after the imports. Where a kill lands depends on the machine;
# what is asserted does not.
RANDOM_SEED = 15
_random = random.Random(RANDOM_SEED)
# Two kills (three until the suite neared its 25-minute budget): each is a fine-tune and its rerun.
RANDOM_FRACTIONS = tuple(_random.uniform(0.4, 0.9) for _ in range(2))

EXPORT_DRIVER = """
import sys

import keras

from bert_keras import BertEncoder
from bert_keras.export import export_classifier
from bert_keras.tasks import BertClassifier
from bert_keras.text import BertPreprocessor

vocab, out = sys.argv[1:]
keras.utils.set_random_seed(5)
encoder = BertEncoder(vocab_size=40, num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32, max_sequence_length=16)
classifier = BertClassifier(encoder, 2, preprocessor=BertPreprocessor(vocab, seq_length=16))
export_classifier(classifier, out, ["neg", "pos"], overwrite=True)
"""


@pytest.fixture(scope="session")
def inputs(tmp_path_factory):
    """A tiny Hugging Face BERT checkpoint (no dropout) with its vocabulary, labelled texts and a corpus.

    Returns a dict: `checkpoint` (folder), `vocab` (its vocab.txt: [PAD] [UNK] [CLS] [SEP] [MASK]
    tok0..tok34), `train` (24 labelled texts: label 1 when the words come from tok17..tok33),
    `corpus` (12 documents of 5 sentences).
    """
    transformers = pytest.importorskip("transformers")
    # No dropout, so that a fine-tune of the converted Hub modules draws no random numbers inside the
    # modules (their dropout seed state is not among the Keras model's variables: see the report).
    return write_training_inputs(transformers, str(tmp_path_factory.mktemp("inputs")), num_texts=24)


def convert_command(inputs, out, *extra):
    return cli("convert", inputs["checkpoint"], "--out", out, "--seq-length", 12, *extra)


def finetune_command(inputs, modules, out, *extra):
    """`bert-keras finetune` of a module pair: 2 epochs with the encoder frozen, 2 unfrozen (head dropout 0.1).

    `extra` options come last, so that they override these.
    """
    return cli("finetune", "--train", inputs["train"], "--modules", modules, "--out", out, "--seq-length", 12,
               "--batch-size", 8, "--head-epochs", 2, "--epochs", 2, "--learning-rate", "1e-2", "--seed", 0, *extra)


def pretrain_command(inputs, out):
    """2 epochs of 2 steps of a 1-layer BERT (dropout 0.1, the CLI's), backed up after each epoch."""
    return cli("pretrain", "--corpus", inputs["corpus"], "--vocab", inputs["vocab"], "--out", out, "--num-layers", 1,
               "--hidden-size", 16, "--num-heads", 2, "--intermediate-size", 32, "--seq-length", 16, "--batch-size", 4,
               "--epochs", 2, "--steps-per-epoch", 2, "--seed", 7)


def tag_as_earlier(path):
    """Adds `earlier_output: true` to an output's marker, to tell it from a replacement."""
    with open(os.path.join(path, MARKER)) as f:
        tagged = dict(json.load(f), earlier_output=True)
    with open(os.path.join(path, MARKER), "w") as f:
        json.dump(tagged, f)


@pytest.fixture(scope="session")
def runs_root(tmp_path_factory):
    return tmp_path_factory.mktemp("runs")


def _workdir(root, name):
    path = root / name
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def concurrent_convert(inputs, runs_root):
    """Two converts started at once into one --out: `(finished runs, Watcher, out)`."""

    def job():
        out = str(_workdir(runs_root, "concurrent") / "modules")
        with Watcher(out, whole_pair) as watcher:
            finished = run_two_at_once(convert_command(inputs, out), priority=0)
        return finished, watcher, out

    return start(job)


@pytest.fixture(scope="session")
def reference_pair(concurrent_convert):
    """The pair of the convert that won (an uninterrupted run); the source of the fine-tunes."""

    def job():
        finished, _, out = concurrent_convert.result()
        if not any(run.returncode == 0 for run in finished):
            raise RuntimeError(f"Neither convert finished: {[run.stderr[-2000:] for run in finished]}")
        return out

    return start(job)


@pytest.fixture(scope="session")
def convert_chain(inputs, runs_root):
    """`convert` into a new --out, killed at each point of `CONVERT_POINTS`, then finished."""

    def job():
        workdir = _workdir(runs_root, "convert")
        return run_chain(convert_command(inputs, workdir / "modules"), CONVERT_POINTS, workdir, runs_root, priority=6)

    return start(job)


@pytest.fixture(scope="session")
def finetune_reference(inputs, runs_root, reference_pair):
    """An uninterrupted fine-tune: `(workdir, finished run)`."""

    def job():
        workdir = _workdir(runs_root, "finetune-reference")
        return workdir, run(finetune_command(inputs, reference_pair.result(), workdir / "clf"), priority=1)

    return start(job)


@pytest.fixture(scope="session")
def finetune_reference_outputs(finetune_reference):
    """Probabilities and variables of the uninterrupted fine-tune's export."""
    workdir, finished = finetune_reference.result()
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert entries(workdir) == ["clf"]  # the backup goes once the export is in place
    return classifier_outputs(str(workdir / "clf"))


@pytest.fixture(scope="session")
def finetune_chain(inputs, runs_root, reference_pair):
    def job():
        workdir = _workdir(runs_root, "finetune")
        command = finetune_command(inputs, reference_pair.result(), workdir / "clf")
        return run_chain(command, FINETUNE_POINTS, workdir, runs_root, priority=2)

    return start(job)


@pytest.fixture(scope="session")
def early_stopping_runs(inputs, runs_root, reference_pair):
    """`finetune --early-stopping 1`: `(workdir, finished run)` uninterrupted, and the chain killed at `EARLY_STOPPING_POINTS`."""

    def job():
        swapped = runs_root / "swapped-labels.csv"
        with open(inputs["train"]) as f:
            header, *rows = f.read().splitlines()
        flip = {"neg": "pos", "pos": "neg"}
        swapped.write_text("\n".join([header] + [row.rsplit(",", 1)[0] + "," + flip[row.rsplit(",", 1)[1]] for row in rows]) + "\n")
        options = (*EARLY_STOPPING_OPTIONS, "--validation", swapped)
        reference = _workdir(runs_root, "early-stopping-reference")
        finished = run(finetune_command(inputs, reference_pair.result(), reference / "clf", *options), priority=2)
        workdir = _workdir(runs_root, "early-stopping")
        command = finetune_command(inputs, reference_pair.result(), workdir / "clf", *options)
        return (reference, finished), run_chain(command, EARLY_STOPPING_POINTS, workdir, runs_root, priority=2)

    return start(job)


@pytest.fixture(scope="session")
def planted_link_runs(inputs, runs_root, reference_pair):
    """A fine-tune killed after its head epoch, rerun with `.clf.backup/full` a link to a user's directory, then
    rerun with the link removed: `(workdir, user directory, killed, refused, finished)`."""

    def job():
        workdir = _workdir(runs_root, "planted-link")
        user = _workdir(runs_root, "planted-link-user")
        (user / "notes.txt").write_text("keep me")
        command = finetune_command(inputs, reference_pair.result(), workdir / "clf")
        killed = run(command, "epoch-end:head:1", priority=2)
        os.symlink(user, workdir / ".clf.backup" / "full")
        refused = run(command, priority=2)
        os.unlink(workdir / ".clf.backup" / "full")
        return workdir, user, killed, refused, run(command, priority=2)

    return start(job)


@pytest.fixture(scope="session")
def random_kills(inputs, runs_root, reference_pair, finetune_reference):
    """One fine-tune per fraction of `RANDOM_FRACTIONS`, killed after that share of the reference's wall time."""

    def trial(index, fraction):
        seconds = finetune_reference.result()[1].seconds
        workdir = _workdir(runs_root, f"random{index}")
        command = finetune_command(inputs, reference_pair.result(), workdir / "clf")
        return run_chain(command, [fraction * seconds], workdir, runs_root, priority=3)

    return [start(trial, index, fraction) for index, fraction in enumerate(RANDOM_FRACTIONS)]


@pytest.fixture(scope="session")
def pretrain_reference(inputs, runs_root):
    def job():
        workdir = _workdir(runs_root, "pretrain-reference")
        return workdir, run(pretrain_command(inputs, workdir / "pretrained"), priority=5)

    return start(job)


@pytest.fixture(scope="session")
def pretrain_chain(inputs, runs_root):
    def job():
        workdir = _workdir(runs_root, "pretrain")
        return run_chain(pretrain_command(inputs, workdir / "pretrained"), PRETRAIN_POINTS, workdir, runs_root, priority=4)

    return start(job)


@pytest.fixture(scope="session")
def pretrain_backup_chain(inputs, runs_root):
    """`bert-keras pretrain` killed inside the writes of its backups (epoch 1, then epoch 2), then finished."""

    def job():
        workdir = _workdir(runs_root, "pretrain-backup")
        return run_chain(pretrain_command(inputs, workdir / "pretrained"), PRETRAIN_BACKUP_POINTS, workdir, runs_root, priority=4)

    return start(job)


@pytest.fixture(scope="session")
def export_runs(inputs, runs_root):
    """An uninterrupted `export_classifier` (`(finished, path)`), then one over a copy of it, killed before the swap."""

    def job():
        reference = _workdir(runs_root, "export-reference") / "clf"
        finished = run(driver(EXPORT_DRIVER, inputs["vocab"], reference), priority=7)
        workdir = _workdir(runs_root, "export")
        shutil.copytree(reference, workdir / "clf")
        tag_as_earlier(workdir / "clf")
        chain = run_chain(driver(EXPORT_DRIVER, inputs["vocab"], workdir / "clf"), EXPORT_POINTS, workdir, runs_root, priority=7)
        return (finished, str(reference)), chain

    return start(job)


# The longest chains first: the fine-tune's waits on the convert, the random kills on the fine-tune's reference.
_RUNS = ("concurrent_convert", "finetune_chain", "finetune_reference", "pretrain_chain", "early_stopping_runs",
         "planted_link_runs", "random_kills", "pretrain_reference", "convert_chain", "export_runs")


@pytest.fixture(scope="session", autouse=True)
def _start_runs(request):
    """Starts, at once, every run the selected tests read, so that they share the cores."""
    wanted = set().union(*(getattr(item, "fixturenames", ()) for item in request.session.items))
    for name in _RUNS:
        if name in wanted:
            request.getfixturevalue(name)


@pytest.fixture(scope="session")
def fault_table():
    """Rows of the fault-injection table; written as Markdown to `$BERT_KERAS_FAULT_TABLE` at the end."""
    rows = []
    yield rows
    path = os.environ.get(TABLE_VARIABLE)
    if path and rows:
        header = ["command", "kill point", "on disk after the kill", "the run after it", "result vs. uninterrupted run"]
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |" for row in rows]
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
