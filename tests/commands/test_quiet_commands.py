"""TensorFlow's C++ log lines never reach the command line's stderr at the default verbosity (-vv shows them)."""

import json
import os
import re
import subprocess
import sys

import pytest

from bert_keras._platform.native_log import is_native_log_line
from tests import sentence_models

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# What TensorFlow 2.21 printed on this project's machines before any option could stop it (one line of each kind).
NATIVE = [
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    b"I0000 00:00:1796114202.754264   23708 port.cc:153] oneDNN custom operations are on.",
    b"E0000 00:00:1796114206.188850   23708 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error",
    b"W1201 08:00:01.123456    1234 some_file.cc:7] a warning of another day",
]


def _environment():
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # as a user's shell has it
    return env


def test_the_lines_recognised_are_those_of_tensorflow_and_no_others():
    assert all(is_native_log_line(line) for line in NATIVE)
    for line in [b"Indexed 3 texts", b"I0000 is not a date", b"Error: bad input", b"WARNING: something else", b"",
                 b"bert-keras search: 'x' is not an index"]:
        assert not is_native_log_line(line)


CHILD = """
import os, sys
os.write(2, NATIVE[2] + b"\\nfrom a child\\n")
"""
PARENT = """
import os, subprocess, sys
from bert_keras._platform.native_log import NativeLogFilter
with NativeLogFilter():
    os.write(2, NATIVE[0] + b"\\n" + NATIVE[1] + b"\\n")
    print("kept 1", file=sys.stderr, flush=True)
    os.write(2, b"\\rprogress 10%")
    subprocess.run([sys.executable, "-c", "NATIVE = " + repr(NATIVE) + CHILD])
    os.write(2, b"\\rprogress 100%\\n")
    os.write(2, NATIVE[1][:20])  # a log line in two writes
    os.write(2, NATIVE[1][20:] + b"\\n")
print("after", file=sys.stderr)
"""


def test_the_filter_drops_native_lines_and_passes_the_rest_in_order():
    script = f"NATIVE = {NATIVE!r}\nCHILD = {CHILD!r}\n" + PARENT
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, env=_environment(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == b"kept 1\n\rprogress 10%from a child\n\rprogress 100%\nafter\n"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("quiet")
    bert = sentence_models.write_tiny_bert(str(root / "bert"))
    sentence_models.sentence_transformer(bert).save(str(root / "st"))
    return root


def _cli(*argv, cwd):
    return subprocess.run([sys.executable, "-m", "bert_keras.cli", *map(str, argv)], capture_output=True, text=True,
                          cwd=cwd, env=_environment(), timeout=300)


# Runs commands one after the other in one fresh interpreter, as `bert-keras` runs one: each through
# `cli.main`, with descriptors 1 and 2 (what a terminal would show, TensorFlow's C++ lines included) going to
# files of its own. TensorFlow is imported by the first, under its log filter; its start-up lines land there.
SESSION = """
import json, os, sys, tempfile
from bert_keras import cli
results = []
for argv in json.load(sys.stdin):
    sys.stdout.flush(); sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    files = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    os.dup2(files[0].fileno(), 1); os.dup2(files[1].fileno(), 2)
    try:
        status = cli.main(argv)
    except SystemExit as exit:
        status = exit.code
    sys.stdout.flush(); sys.stderr.flush()
    os.dup2(saved[0], 1); os.dup2(saved[1], 2)
    for file in files:
        file.seek(0)
    results.append([status or 0] + [file.read().decode() for file in files])
print(json.dumps(results))
"""


# A command's own line while a step runs past 10 s (`commands._common.working`): a slow machine's, not a leak.
_STILL_WORKING = re.compile(r"bert-keras \w+: .* \.\.\. \d+ s")


def _without_working_lines(stderr):
    return "".join(line for line in stderr.splitlines(keepends=True) if not _STILL_WORKING.fullmatch(line.strip()))


def _cli_session(commands, cwd):
    """{name: CompletedProcess} of the commands `{name: argv}`, run in order in one fresh interpreter."""
    argvs = [[str(argument) for argument in argv] for argv in commands.values()]
    done = subprocess.run([sys.executable, "-c", SESSION], input=json.dumps(argvs), capture_output=True, text=True,
                          cwd=cwd, env=_environment(), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == "", done.stderr[-3000:]  # nothing outside the commands' own windows either
    results = json.loads(done.stdout.splitlines()[-1])
    return {name: subprocess.CompletedProcess(argv, result[0], result[1], _without_working_lines(result[2]))
            for (name, argv), result in zip(commands.items(), results)}


@pytest.mark.slow
def test_commands_print_their_own_lines_only(folder):
    (folder / "texts.txt").write_text("the good day\nbad day\n")
    runs = _cli_session({
        "embed": ["embed", "--checkpoint", folder / "st", "the good day", "bad", "--out", folder / "x.npy"],
        "index": ["index", "--checkpoint", folder / "st", "--input", "texts.txt", "--out", "index", "-q"],
        "search": ["search", "index", "good", "--top-k", "1"],
        "refused": ["search", folder / "nothing", "good"],
    }, cwd=folder)
    embedded = runs["embed"]
    assert embedded.returncode == 0, embedded.stderr
    assert embedded.stderr == ""
    assert embedded.stdout == f"Wrote 2 embeddings of dimension 16 to {folder / 'x.npy'}\n"
    indexed = runs["index"]
    assert (indexed.returncode, indexed.stderr) == (0, "")
    found = runs["search"]
    assert found.returncode == 0 and found.stderr == "", found.stderr
    assert found.stdout.splitlines()[0] == "query: good"
    refused = runs["refused"]
    assert refused.returncode == 2
    assert refused.stderr == f"bert-keras search: INDEX {folder / 'nothing'}: no such file or directory.\n"
    # -vv shows TensorFlow's lines: its start-up lines need an interpreter of its own
    loud = _cli("search", "index", "good", "-vv", cwd=folder)
    assert loud.returncode == 0 and any(is_native_log_line(line.encode()) for line in loud.stderr.splitlines())


@pytest.mark.slow
def test_convert_finetune_predict_and_evaluate_print_no_tensorflow_log_line(folder):
    (folder / "train.csv").write_text("text,label\n" + "the good day,pos\nbad bad,neg\n" * 6)
    runs = _cli_session({
        "convert": ["convert", folder / "bert", "--out", "modules", "--seq-length", 8],
        "finetune": ["finetune", "--train", "train.csv", "--checkpoint", folder / "bert", "--out", "clf", "--seq-length", 8,
                     "--batch-size", 4, "--head-epochs", 1, "--epochs", 1],
        "predict": ["predict", "--model", "clf", "the good day"],
        "evaluate": ["evaluate", "--model", "clf", "--data", "train.csv"],
    }, cwd=folder)
    for command, done in runs.items():
        assert done.returncode == 0, (command, done.stderr[-3000:])
        printed = (done.stdout + done.stderr).splitlines()
        assert [line for line in printed if is_native_log_line(line.encode()) or "tensorflow" in line.lower()] == [], command
    assert runs["convert"].stderr == runs["predict"].stderr == ""
    assert runs["predict"].stdout.split("\t")[0] in ("pos", "neg")


@pytest.mark.slow
def test_pretrain_explain_probe_and_presets_print_no_tensorflow_log_line(folder):
    words = [word for word in sentence_models.VOCAB if word.isalpha() and word.islower()]
    sentences = [" ".join(words[(i + j) % len(words)] for j in range(5)) + "." for i in range(12)]
    (folder / "corpus.txt").write_text("\n\n".join("\n".join(sentences[i:i + 3]) for i in range(0, 12, 3)) + "\n")
    (folder / "labelled.csv").write_text("text,label\n" + "the good day,pos\nbad bad,neg\n" * 10)
    runs = _cli_session({
        "pretrain": ["pretrain", "--corpus", "corpus.txt", "--vocab", folder / "bert" / "vocab.txt", "--out", "pretrained",
                     "--num-layers", 1, "--hidden-size", 16, "--num-heads", 2, "--intermediate-size", 32,
                     "--seq-length", 16, "--batch-size", 2, "--epochs", 1, "--steps-per-epoch", 1],
        "explain": ["explain", "--checkpoint", folder / "bert", "--out", "attention", "the good day"],
        "probe": ["probe", "--checkpoint", folder / "bert", "--data", "labelled.csv", "--out", "probe"],
        "presets": ["presets"],
    }, cwd=folder)
    for command, done in runs.items():
        assert done.returncode == 0, (command, done.stderr[-3000:])
        printed = (done.stdout + done.stderr).splitlines()
        assert [line for line in printed if is_native_log_line(line.encode()) or "tensorflow" in line.lower()] == [], command
    assert runs["explain"].stderr == runs["presets"].stderr == ""
