"""Tiny inputs and the processes of the distributed runs (one per worker, on 127.0.0.1, free ports)."""

import json
import os
import subprocess
import sys
import time

import pytest

from bert_keras.cluster import local_tf_configs
from tests import forked
from tests.checkpoints._models import write_training_inputs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT_S = 600


@pytest.fixture(scope="session")
def inputs(tmp_path_factory):
    """A folder with inputs.json: a tiny checkpoint without dropout, 30 labelled texts and a corpus."""
    transformers = pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("distribute-inputs")
    paths = write_training_inputs(transformers, str(root), num_texts=30)
    (root / "inputs.json").write_text(json.dumps(paths))
    return root


def environment(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    for key in ("TF_CONFIG", "BERT_KERAS_FAULT_POINT"):
        env.pop(key, None)
    env.update({key: str(value) for key, value in extra.items()})
    return env


def start(argv, **env):
    """`argv` forked from a process with TensorFlow imported (`tests.forked`), used as a `subprocess.Popen`."""
    return forked.start(argv, cwd=ROOT, env=environment(**env))


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
    configs = local_tf_configs(len(argvs))
    environments = environments or [{} for _ in argvs]
    processes = [start(argv, TF_CONFIG=config, **env) for config, argv, env in zip(configs, argvs, environments)]
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
