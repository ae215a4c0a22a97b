"""Training under tf.distribute: the same weights as one replica, every example once, resumption after kill -9, bad input."""

import json
import os
import signal
import sys
import time

import numpy as np
import pytest

from bert_keras.cluster import TFConfigError, local_tf_configs, read_tf_config, wait_for_workers
from bert_keras.training.backup import resumed_epoch, worker_backup_dir
from bert_keras.training.feeding import check_global_batch, distribute_batches
from bert_keras.training.strategy import is_chief, task_name
from tests.distribute.conftest import check, driver, finish, run_cluster, start, wait_for

pytestmark = [pytest.mark.distributed, pytest.mark.slow]
TOLERANCE = 1e-5


def _max_difference(a, b):
    ours, theirs = np.load(a), np.load(b)
    assert len(ours.files) == len(theirs.files) > 0
    return max(float(np.max(np.abs(ours[key] - theirs[key]))) for key in ours.files)


def _assert_each_example_once(paths):
    seen = [json.load(open(path)) for path in paths]
    for epoch in range(2):
        examples = sorted(sum((per_process[epoch] for per_process in seen), []))
        assert examples == sorted(f"ex{i}" for i in range(27)), f"epoch {epoch}: {examples}"
    return seen


@pytest.mark.slow
def test_mirrored_on_two_cpus_gives_the_weights_of_one_replica(inputs, single, tmp_path):
    check(finish(start(driver("mirrored", inputs, tmp_path))))
    assert _max_difference(tmp_path / "finetune.npz", single / "finetune.npz") <= TOLERANCE
    assert _max_difference(tmp_path / "pretrain.npz", single / "pretrain.npz") <= TOLERANCE
    seen = _assert_each_example_once([tmp_path / "seen-chief.json"])
    # the two replicas of an epoch's first global batch: rows 0-3 and 4-7 of the same 8
    assert len(seen[0][0]) == 27


@pytest.mark.slow
def test_two_workers_give_the_weights_of_one_replica(inputs, single, tmp_path):
    results = run_cluster([driver("multi-worker", inputs, tmp_path)] * 2)
    for result in results:
        check(result)
    assert _max_difference(tmp_path / "finetune.npz", single / "finetune.npz") <= TOLERANCE
    assert _max_difference(tmp_path / "pretrain.npz", single / "pretrain.npz") <= TOLERANCE
    chief, worker = _assert_each_example_once([tmp_path / "seen-chief.json", tmp_path / "seen-worker-1.json"])
    for epoch in range(2):
        assert not set(chief[epoch]) & set(worker[epoch])  # the workers' shares are disjoint
        assert len(chief[epoch]) == 15 and len(worker[epoch]) == 12  # 4 of each batch of 8; of the last (3): 3 and 0
    # The chief alone writes results; each worker's own pre-training directory holds no modules.
    assert not os.path.exists(tmp_path / "pretrain-worker-1" / "encoder")


@pytest.mark.slow
def test_a_worker_killed_in_phase_two_resumes_from_the_backups(inputs, single, tmp_path):
    backup = tmp_path / "backup"
    argv = driver("multi-worker", inputs, tmp_path, "--backup", backup, "--only", "finetune")
    configs = local_tf_configs(2)
    chief = start(argv, TF_CONFIG=configs[0])
    # worker 1 is killed (SIGKILL) right after its backup of the first unfrozen epoch
    worker = start(argv, TF_CONFIG=configs[1], BERT_KERAS_FAULT_POINT="epoch-end:full:1")
    returncode, _, stderr = finish(worker)
    if returncode != -signal.SIGKILL:  # the chief's side too: a worker's error is often only the echo of the chief's
        chief.kill()
        raise AssertionError(f"worker: exit {returncode}\n{stderr[-3000:]}\nchief:\n{finish(chief)[2][-3000:]}")
    wait_for(lambda: resumed_epoch(str(backup / "chief" / "full")) >= 1, 120, "the chief's backup")
    chief.send_signal(signal.SIGKILL)  # the cluster is restarted as a whole
    finish(chief)
    assert resumed_epoch(str(backup / "worker-1" / "full")) == 1
    assert not (tmp_path / "finetune.npz").exists()
    # nothing half-written where the classifier goes: no output, no staged leftovers of one; the chief's lock on it,
    # taken when its run started, is stale
    assert [name for name in os.listdir(tmp_path) if "classifier" in name] == [".classifier.lock"]

    for result in run_cluster([argv] * 2):  # the same command on both, on fresh ports
        check(result)
    assert _max_difference(tmp_path / "finetune.npz", single / "finetune.npz") <= TOLERANCE
    assert not backup.exists()  # removed once everything it protected is written
    assert sorted(name for name in os.listdir(tmp_path) if "classifier" in name) == ["classifier"]
    assert (tmp_path / "classifier" / ".bert_keras_output.json").exists()  # written whole: the marker goes last


# --- bad input: clear messages, exit status 2 ---------------------------------------------------------


def _cli(*args, timeout=120, **env):
    """`bert-keras ARGS` in a process forked from one with TensorFlow imported, its devices not started (as the
    drivers': `--cpu-replicas` must configure them first)."""
    started = time.monotonic()
    returncode, _, stderr = finish(start([sys.executable, "-m", "bert_keras.cli", *map(str, args)], **env), timeout)
    return returncode, stderr, time.monotonic() - started


def _finetune_args(inputs, out, *extra):
    paths = json.loads((inputs / "inputs.json").read_text())
    return ("finetune", "--train", paths["train"], "--checkpoint", paths["checkpoint"], "--out", out, "--seq-length", 12,
            "--batch-size", 8, "--head-epochs", 0, "--epochs", 1, *extra)


def _cli_in_process(capsys, monkeypatch, args, tf_config=None):
    """`bert-keras ARGS` in this process (what these refusals need starts no TensorFlow devices)."""
    from bert_keras import cli

    monkeypatch.delenv("TF_CONFIG", raising=False)
    if tf_config is not None:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    started = time.monotonic()
    returncode = cli.main([str(arg) for arg in args])
    return returncode, capsys.readouterr().err, time.monotonic() - started


def test_multi_worker_without_tf_config_is_a_clear_error(inputs, tmp_path, capsys, monkeypatch):
    returncode, stderr, _ = _cli_in_process(capsys, monkeypatch, _finetune_args(inputs, tmp_path / "out", "--strategy", "multi-worker"))
    assert returncode == 2
    assert "TF_CONFIG environment variable, which is not set" in stderr
    assert not (tmp_path / "out").exists()


def test_malformed_tf_config_is_a_clear_error(inputs, tmp_path, capsys, monkeypatch):
    returncode, stderr, _ = _cli_in_process(capsys, monkeypatch, _finetune_args(inputs, tmp_path / "out", "--strategy", "multi-worker"),
                                            tf_config="{cluster: 1")
    assert returncode == 2
    assert "TF_CONFIG is not valid JSON" in stderr


@pytest.mark.slow
def test_an_unreachable_worker_is_a_clear_error_in_bounded_time(inputs, tmp_path, capsys, monkeypatch):
    config = local_tf_configs(2)[0]  # nobody listens on the second
    args = _finetune_args(inputs, tmp_path / "out", "--strategy", "multi-worker", "--connect-timeout", 3)
    returncode, stderr, seconds = _cli_in_process(capsys, monkeypatch, args, tf_config=config)
    assert returncode == 2, stderr[-2000:]
    assert f"Worker {json.loads(config)['cluster']['worker'][1]} could not be reached within 3 s" in stderr
    assert seconds < 30
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_global_batch_that_does_not_divide_among_replicas_is_refused(inputs, tmp_path):
    returncode, stderr, _ = _cli(*_finetune_args(inputs, tmp_path / "out", "--strategy", "mirrored", "--cpu-replicas", 2,
                                                 "--batch-size", 7))
    assert returncode == 2, stderr[-2000:]
    assert "The global batch size 7 does not divide among the 2 replicas" in stderr


# --- units --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, message",
    [
        ("[1, 2]", "needs a `cluster` dict and a `task` dict"),
        ('{"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0}}', "`chief` and `worker` tasks only"),
        ('{"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}}', "list of 'host:port' strings"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}', "task worker 1 is not in the cluster"),
        ('{"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}}', "names an address twice"),
    ],
)
def test_tf_config_is_checked(raw, message):
    with pytest.raises(TFConfigError, match=message):
        read_tf_config({"TF_CONFIG": raw})


def test_chief_comes_first_in_the_cluster():
    raw = '{"cluster": {"worker": ["b:2"], "chief": ["a:1"]}, "task": {"type": "chief", "index": 0}}'
    assert read_tf_config({"TF_CONFIG": raw}) == (["a:1", "b:2"], "chief", 0)


def test_global_batch_divisibility():
    assert check_global_batch(32, 4) == 8
    with pytest.raises(ValueError, match="does not divide among the 3 replicas: pass a multiple of 3"):
        check_global_batch(32, 3)


def test_waiting_for_a_worker_ends_with_a_clear_error():
    address = json.loads(local_tf_configs(1)[0])["cluster"]["worker"][0]  # free: nobody listens
    started = time.monotonic()
    with pytest.raises(ConnectionError, match=f"Worker {address} could not be reached within 1 s"):
        wait_for_workers(["127.0.0.1:1", address], "127.0.0.1:1", timeout=1)
    assert time.monotonic() - started < 10


def test_one_replica_keeps_the_dataset_as_it_is():
    import tensorflow as tf

    dataset = tf.data.Dataset.range(5).batch(2)
    assert distribute_batches(tf.distribute.get_strategy(), dataset, 2) is dataset
    assert worker_backup_dir("/x", tf.distribute.get_strategy()) == "/x"
    assert is_chief() and task_name() == "chief"
