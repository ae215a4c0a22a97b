"""The workers' rendezvous: only bert_keras workers of the same run meet; whatever else answers is refused in bounded time."""

import json
import logging
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from bert_keras import cli, cluster
from bert_keras.commands import _common as commands_common
from tests.distribute.conftest import finish, start


def _cluster(count):
    return json.loads(cluster.local_tf_configs(count)[0])["cluster"]["worker"]


def _port(address):
    return int(address.rpartition(":")[2])


def _meet(workers, run_ids, timeout=10.0, clusters=None):
    """Runs worker i's `rendezvous` in thread i; returns each one's error message (None: it met the others) and the time."""
    errors = [None] * len(workers)

    def run(i):
        try:
            cluster.rendezvous(workers[i], clusters[i] if clusters else workers, timeout, run_id=run_ids[i])
        except ConnectionError as error:
            errors[i] = str(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(workers))]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 20)
    return errors, time.monotonic() - started


class _Listener:
    """A TCP listener on `port` that is no bert_keras worker: each caller gets `reply` (after its first line if `read_first`)."""

    def __init__(self, port, reply=None, read_first=True):
        self.reply, self.read_first = reply, read_first
        self.socket = socket.socket()
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(("127.0.0.1", port))
        self.socket.listen(8)
        if reply is not None:  # without a reply nobody accepts: the kernel completes the connections, nothing is said
            threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            with connection:
                try:
                    if self.read_first:
                        connection.makefile("rb").readline()
                    connection.sendall(self.reply)
                    connection.settimeout(5)
                    connection.recv(1)
                except OSError:
                    pass

    def close(self):
        self.socket.close()


# --- units: rendezvous in threads -----------------------------------------------------------------------


def test_the_cluster_module_loads_no_tensorflow():
    """TF_CONFIG and the rendezvous are sockets and JSON: a worker can check its cluster before TensorFlow starts."""
    loaded = json.loads(subprocess.run(
        [sys.executable, "-c", "import json, sys, bert_keras.cluster; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout)
    assert "bert_keras.cluster" in loaded
    assert [name for name in ("tensorflow", "keras", "numpy") if name in loaded] == []


def test_two_workers_of_one_run_meet():
    workers = _cluster(2)
    errors, seconds = _meet(workers, ["run-a", "run-a"])
    assert errors == [None, None]
    assert seconds < 5


def test_three_workers_meet_whatever_order_they_dial_in():
    workers = _cluster(3)
    errors, _ = _meet(workers, ["", "", ""])
    assert errors == [None, None, None]


def test_an_http_server_at_a_worker_address_is_refused_after_the_timeout():
    workers = _cluster(2)
    server = _Listener(_port(workers[1]), b"HTTP/1.0 400 Bad request\r\nContent-Type: text/html\r\n\r\n<html></html>")
    started = time.monotonic()
    try:
        with pytest.raises(ConnectionError) as raised:
            cluster.rendezvous(workers[0], workers, 2, run_id="run-a")
    finally:
        server.close()
    assert 2 <= time.monotonic() - started < 5
    assert str(raised.value).startswith(
        f"Worker {workers[1]} answered but is not a bert_keras worker of this run (it sent b'HTTP/1.0 400 Bad request\\r\\n"
    )


def test_a_listener_that_says_nothing_is_refused_after_the_timeout():
    workers = _cluster(2)
    silent = _Listener(_port(workers[1]))
    started = time.monotonic()
    try:
        with pytest.raises(ConnectionError, match=rf"Worker {workers[1]} answered but is not a bert_keras worker of this run "
                           r"\(it sent nothing within (2|1\.\d+) s\)"):  # what was left of the 2 s when it called
            cluster.rendezvous(workers[0], workers, 2, run_id="run-a")
    finally:
        silent.close()
    assert 2 <= time.monotonic() - started < 5


def test_a_listener_that_hangs_up_is_refused():
    workers = _cluster(2)
    closer = _Listener(_port(workers[1]), b"", read_first=False)
    try:
        with pytest.raises(ConnectionError, match=r"not a bert_keras worker of this run \(it sent nothing: it (closed|reset) the connection\)"):
            cluster.rendezvous(workers[0], workers, 1, run_id="run-a")
    finally:
        closer.close()


def test_a_worker_of_another_run_is_refused_at_once():
    workers = _cluster(2)
    errors, seconds = _meet(workers, ["run-a", "run-b"], timeout=30)
    assert re.match(rf"(Worker {re.escape(workers[1])}|The worker that connected from 127\.0\.0\.1) is a bert_keras worker "
                    r"of another run \(run id 'run-b', this worker's 'run-a'\)", errors[0]), errors[0]
    assert "is a bert_keras worker of another run (run id 'run-a', this worker's 'run-b')" in errors[1]
    assert seconds < 10  # not the 30 s timeout


def test_a_worker_of_another_cluster_is_refused():
    workers = _cluster(3)
    errors, _ = _meet(workers[:2], ["run-a", "run-a"], timeout=30, clusters=[workers[:2], workers])
    # Worker 0 learns it either from its own dial (naming the address) or from worker 1's dial (naming the host it came
    # from), whichever greeting arrives first; both name the other cluster.
    assert re.match(rf"(Worker {re.escape(workers[1])}|The worker that connected from 127\.0\.0\.1) is a bert_keras worker "
                    rf"of another cluster: its TF_CONFIG names {re.escape(str(workers))}, this worker's "
                    rf"{re.escape(str(workers[:2]))}\.", errors[0]), errors[0]
    assert errors[1] is not None


def test_another_protocol_version_is_refused_at_once():
    workers = _cluster(2)
    hello = {"run": "run-a", "cluster": workers, "task": 1}
    newer = _Listener(_port(workers[1]), b"bert_keras-rendezvous 2 " + json.dumps(hello).encode() + b"\n")
    started = time.monotonic()
    try:
        with pytest.raises(ConnectionError, match=f"Worker {workers[1]} is a bert_keras worker of rendezvous protocol 2, "
                           "this one of protocol 1. Install the same bert_keras version"):
            cluster.rendezvous(workers[0], workers, 30, run_id="run-a")
    finally:
        newer.close()
    assert time.monotonic() - started < 10


def test_a_worker_at_the_wrong_address_is_refused():
    workers = _cluster(2)
    hello = {"run": "run-a", "cluster": workers, "task": 0}  # says it is task 0, at task 1's address
    impostor = _Listener(_port(workers[1]), b"bert_keras-rendezvous 1 " + json.dumps(hello).encode() + b"\n")
    try:
        with pytest.raises(ConnectionError, match=rf"Worker {workers[1]} answered as worker 0 of the cluster \({workers[0]}\), "
                           "not as worker 1"):
            cluster.rendezvous(workers[0], workers, 30, run_id="run-a")
    finally:
        impostor.close()


def test_a_stranger_calling_a_worker_is_ignored(caplog):
    workers = _cluster(2)
    errors = [None, None]

    def run(i):
        try:
            cluster.rendezvous(workers[i], workers, 20, run_id="r")
        except ConnectionError as error:
            errors[i] = str(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    with caplog.at_level(logging.WARNING, logger="bert_keras.cluster"):
        threads[0].start()  # worker 0 listens alone: a stranger calls it before worker 1 starts
        deadline = time.monotonic() + 10
        while True:
            try:
                stranger = socket.create_connection(("127.0.0.1", _port(workers[0])), timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        with stranger:
            stranger.sendall(b"GET / HTTP/1.0\r\n\r\n")
            assert stranger.makefile("rb").readline().startswith(b"bert_keras-rendezvous 1 {")
        threads[1].start()
        for thread in threads:
            thread.join(30)
    assert errors == [None, None]
    assert "is not a bert_keras worker (it sent b'GET / HTTP/1.0\\r\\n\\r\\n'); ignored" in caplog.text


def test_a_worker_that_never_dials_back_is_a_clear_error():
    workers = _cluster(2)
    answering = cluster._Meeting(workers[1], workers, 10, "r")  # answers worker 0, never dials it
    answering.listen()
    try:
        with pytest.raises(ConnectionError, match=rf"Worker {workers[1]} answered but did not connect back to this worker "
                           rf"\({workers[0]}\) within 1 s"):
            cluster.rendezvous(workers[0], workers, 1, run_id="r")
    finally:
        answering.close()


# --- the command line's run id ----------------------------------------------------------------------------


def _finetune_namespace(train, **changes):
    args = cli._build_parser().parse_args(["finetune", "--train", str(train), "--out", "out", "--strategy", "multi-worker"])
    for name, value in changes.items():
        setattr(args, name.replace("-", "_"), value)
    return args


def test_the_run_id_is_the_same_on_hosts_with_other_paths_and_differs_with_the_run(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for host in "ab":
        (tmp_path / host / "train.csv").write_text("text,label\nhello,1\nbye,0\n")
    run_id = commands_common.run_id(_finetune_namespace(tmp_path / "a" / "train.csv", out="/host-a/out"))
    assert run_id == commands_common.run_id(_finetune_namespace(tmp_path / "b" / "train.csv", out="/host-b/out", connect_timeout=5.0))
    assert run_id != commands_common.run_id(_finetune_namespace(tmp_path / "a" / "train.csv", batch_size=16))
    assert run_id != commands_common.run_id(_finetune_namespace(tmp_path / "a" / "train.csv", command="pretrain"))
    (tmp_path / "b" / "train.csv").write_text("text,label\nhello,1\nbye,0\nagain,1\n")
    assert run_id != commands_common.run_id(_finetune_namespace(tmp_path / "b" / "train.csv"))
    assert commands_common.run_id(_finetune_namespace(tmp_path / "b" / "train.csv", run_id="mine")) == "mine"
    assert cli._build_parser().parse_args(["pretrain", "--corpus", "c", "--out", "o", "--run-id", "x"]).run_id == "x"


# --- the command line: exit status 2 and a message, in bounded time ----------------------------------------


def _bert_keras(args, tf_config, timeout=120):
    process = start([sys.executable, "-m", "bert_keras.cli", *map(str, args)], TF_CONFIG=tf_config)
    started = time.monotonic()
    returncode, _, stderr = finish(process, timeout)
    return returncode, stderr, time.monotonic() - started


def _wait_until_listening(port):
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.distributed
def test_an_http_server_as_the_other_worker_ends_the_command_with_status_2(tmp_path):
    configs = cluster.local_tf_configs(2)
    other = json.loads(configs[0])["cluster"]["worker"][1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(_port(other))], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_until_listening(_port(other))
        (tmp_path / "train.csv").write_text("text,label\nhello,1\nbye,0\n")
        returncode, stderr, seconds = _bert_keras(["finetune", "--train", tmp_path / "train.csv", "--out", tmp_path / "out",
                                                   "--strategy", "multi-worker", "--connect-timeout", 10], configs[0])
    finally:
        server.kill()
        server.wait()
    assert returncode == 2, stderr[-3000:]
    assert (f"bert-keras finetune: Worker {other} answered but is not a bert_keras worker of this run (it sent "
            "b'<!DOCTYPE HTML>") in stderr
    assert seconds < 10 + 45  # the timeout, TensorFlow's import and start on a busy 2-core machine
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("task", [0, 1], ids=["leader", "follower"])
def test_a_worker_that_stops_after_the_rendezvous_ends_the_command_with_status_2(tmp_path, task):
    """The other worker meets this one, then never starts TensorFlow: the cluster does not form, in bounded time."""
    configs = cluster.local_tf_configs(2)
    workers = json.loads(configs[0])["cluster"]["worker"]
    met = []
    peer = threading.Thread(target=lambda: met.append(cluster.rendezvous(workers[1 - task], workers, 60, run_id="shared")),
                            daemon=True)
    peer.start()
    (tmp_path / "train.csv").write_text("text,label\nhello,1\nbye,0\n")
    returncode, stderr, seconds = _bert_keras(["finetune", "--train", tmp_path / "train.csv", "--out", tmp_path / "out",
                                               "--strategy", "multi-worker", "--connect-timeout", 5, "--run-id", "shared"],
                                              configs[task])
    peer.join(5)
    assert met == [None]  # the peer met this worker
    assert returncode == 2, stderr[-3000:]
    assert "bert-keras finetune: The workers met, but TensorFlow's cluster did not form within 5 s" in stderr
    assert seconds < 5 + 60
    assert not (tmp_path / "out").exists()
