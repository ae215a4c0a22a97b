"""Tiny inputs and the processes of the distributed runs (one per worker, on 127.0.0.1, free ports)."""

import json
import os
import random
import socket
import subprocess
import sys
import time

import pytest

from tests.checkpoints._models import TINY_HF, perturb_torch, save_hf_directory

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT_S = 600


@pytest.fixture(scope="session")
def inputs(tmp_path_factory):
    """A tiny Hugging Face BERT checkpoint without dropout, 30 labelled texts and a 12-document corpus."""
    transformers = pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("distribute-inputs")
    config = transformers.BertConfig(**TINY_HF, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    checkpoint = save_hf_directory(perturb_torch(transformers.BertForPreTraining(config)), root / "checkpoint")
    rng = random.Random(0)
    rows = []
    for i in range(30):
        label = i % 2
        words = [f"tok{rng.randrange(17) + 17 * label}" for _ in range(rng.randrange(2, 7))]
        rows.append(f"{' '.join(words)},{'pos' if label else 'neg'}")
    train = root / "train.csv"
    train.write_text("text,label\n" + "\n".join(rows) + "\n")
    documents = []
    for _ in range(12):
        first = rng.randrange(35)
        documents.append("\n".join(" ".join(f"tok{(first + s * 3 + j) % 35}" for j in range(4)) for s in range(5)))
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(documents) + "\n")
    paths = {"checkpoint": str(checkpoint), "vocab": os.path.join(checkpoint, "vocab.txt"), "train": str(train),
             "corpus": str(corpus)}
    (root / "inputs.json").write_text(json.dumps(paths))
    return root


def free_ports(count):
    """`count` ports free on 127.0.0.1 now (bound, read, released)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_config(ports, index):
    return json.dumps({"cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]}, "task": {"type": "worker", "index": index}})


def environment(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    for key in ("TF_CONFIG", "BERT_KERAS_FAULT_POINT"):
        env.pop(key, None)
    env.update({key: str(value) for key, value in extra.items()})
    return env


def start(argv, **env):
    return subprocess.Popen(argv, cwd=ROOT, env=environment(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process, timeout=TIMEOUT_S):
    """`(returncode, stdout, stderr)` of `process`, killed after `timeout` seconds."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
    return process.returncode, stdout, stderr


def driver(mode, inputs, out, *extra):
    return [sys.executable, "-m", "tests.distribute._driver", mode, str(inputs), str(out), *map(str, extra)]


def run_cluster(argvs, environments=None, timeout=TIMEOUT_S):
    """Runs one process per argv, worker i with TF_CONFIG index i on fresh ports; returns their results."""
    ports = free_ports(len(argvs))
    environments = environments or [{} for _ in argvs]
    processes = [start(argv, TF_CONFIG=tf_config(ports, i), **env) for i, (argv, env) in enumerate(zip(argvs, environments))]
    return [finish(process, timeout) for process in processes]


def check(result):
    returncode, stdout, stderr = result
    assert returncode == 0, f"exit {returncode}\n{stdout[-3000:]}\n{stderr[-5000:]}"


@pytest.fixture(scope="session")
def single_run(inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("single")
    process = start(driver("single", inputs, out))
    return process, out


@pytest.fixture(scope="session")
def single(single_run):
    """The output directory of the one-replica run (finetune.npz, pretrain.npz)."""
    process, out = single_run
    check(finish(process))
    return out


def wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
