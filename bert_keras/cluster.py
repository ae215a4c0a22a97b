"""The cluster of a multi-worker run: `TF_CONFIG`, read and checked, and the workers' rendezvous.

- `read_tf_config`: the cluster and this process's task from the standard
  `TF_CONFIG` environment variable, checked before any work (a
  `TFConfigError` naming what is wrong); `local_tf_configs` makes the values
  for worker processes on one machine.
- `rendezvous`: before TensorFlow's cluster forms, the workers meet on their
  `TF_CONFIG` addresses and prove to each other that they are bert_keras
  workers of the same run (a handshake of one line each way); every wait is
  bounded and ends in a `ConnectionError` that says what answered.

Plain sockets and JSON: importing this module loads no TensorFlow. The
strategy made over the cluster (`training.strategy.make_strategy`), the
sharding of batches among its replicas (`training.feeding`) and the resume
of each worker's backup (`training.backup`) live in `training/`.
"""

import json
import logging
import os
import socket
import threading
import time

from bert_keras._checks import check_positive_int

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT = 120.0


class TFConfigError(ValueError):
    """`TF_CONFIG` is missing or does not describe a cluster this process belongs to."""


def read_tf_config(environ=None):
    """The cluster and this task from the `TF_CONFIG` environment variable, checked.

    Returns:
        `(workers, task_type, task_index)`: the `host:port` addresses of all
        workers, chief first when there is one, and this process's task.

    >>> read_tf_config({"TF_CONFIG": '{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}'})
    (['a:1', 'b:2'], 'worker', 1)
    """
    environ = os.environ if environ is None else environ
    raw = environ.get("TF_CONFIG")
    if not raw:
        raise TFConfigError(
            "`--strategy multi-worker` reads the cluster from the TF_CONFIG environment variable, which is not set. "
            'Set it on every worker, e.g. TF_CONFIG=\'{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
            '"task": {"type": "worker", "index": 0}}\' (index 1 on the second host).'
        )
    try:
        config = json.loads(raw)
    except ValueError as error:
        raise TFConfigError(f"TF_CONFIG is not valid JSON ({error}). Received: TF_CONFIG={raw!r}") from None
    cluster = config.get("cluster") if isinstance(config, dict) else None
    task = config.get("task") if isinstance(config, dict) else None
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        raise TFConfigError(f"TF_CONFIG needs a `cluster` dict and a `task` dict. Received: TF_CONFIG={raw!r}")
    unknown = sorted(set(cluster) - {"chief", "worker"})
    if unknown:
        raise TFConfigError(f"TF_CONFIG's cluster may hold `chief` and `worker` tasks only (MultiWorkerMirroredStrategy). Received: {unknown}")
    workers = []
    for kind in ("chief", "worker"):
        addresses = cluster.get(kind, [])
        if not isinstance(addresses, list) or not all(isinstance(a, str) and _port(a) is not None for a in addresses):
            raise TFConfigError(f"TF_CONFIG's cluster `{kind}` must be a list of 'host:port' strings. Received: {addresses!r}")
        workers += addresses
    if len(cluster.get("chief", [])) > 1:
        raise TFConfigError(f"TF_CONFIG may name one chief. Received: {cluster['chief']!r}")
    task_type, task_index = task.get("type"), task.get("index")
    if task_type not in ("chief", "worker") or not isinstance(task_index, int) or isinstance(task_index, bool):
        raise TFConfigError(f"TF_CONFIG's task needs a `type` ('chief' or 'worker') and an integer `index`. Received: {task!r}")
    if not 0 <= task_index < len(cluster.get(task_type, [])):
        raise TFConfigError(
            f"TF_CONFIG's task {task_type} {task_index} is not in the cluster, which has "
            f"{len(cluster.get(task_type, []))} {task_type} task(s)."
        )
    if len(set(workers)) != len(workers):
        raise TFConfigError(f"TF_CONFIG's cluster names an address twice: {workers}")
    return workers, task_type, task_index


def _port(address):
    host, _, port = address.rpartition(":")
    return int(port) if host and port.isdigit() and 0 < int(port) < 65536 else None


def local_tf_configs(count, host="127.0.0.1"):
    """`TF_CONFIG` values for `count` worker processes on this machine, on ports that are free now.

    To try multi-worker training on one machine: start worker `i` with
    `TF_CONFIG=local_tf_configs(n)[i]` (the same list for all).

    >>> configs = local_tf_configs(2)
    >>> [json.loads(config)["task"] for config in configs]
    [{'type': 'worker', 'index': 0}, {'type': 'worker', 'index': 1}]
    """
    check_positive_int("count", count)
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((host, 0))
        workers = [f"{host}:{s.getsockname()[1]}" for s in sockets]
    finally:
        for s in sockets:
            s.close()
    return [json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}) for i in range(count)]



RENDEZVOUS_PROTOCOL = b"bert_keras-rendezvous"
RENDEZVOUS_VERSION = 1
_HELLO_TIMEOUT = 10.0  # a bert_keras worker answers at once: longer silence is another program
_HELLO_LIMIT = 65536
_SHOWN = 60  # bytes of a foreign answer quoted in the message


def rendezvous(own_address, addresses, timeout=CONNECT_TIMEOUT, run_id=""):
    """Returns once every other worker has proved to be a bert_keras worker of this run; a `ConnectionError` otherwise.

    MultiWorkerMirroredStrategy waits for the other workers' TensorFlow
    servers without a bound of its own, so the workers meet first. Each
    listens on its own address and dials every other; both ends of a
    connection send one line at once,
    `bert_keras-rendezvous 1 {"run": ..., "cluster": [...], "task": i}`, and
    check the other's: the same protocol version, cluster and `run_id`, and,
    at the address dialled, the task of that address. A worker returns when
    it has checked every other worker's answer and every other worker has
    checked its own, so no listener closes before the last worker met it
    (and TensorFlow's server then takes over the address).

    Args:
        own_address: str. This worker's `host:port`, one of `addresses`.
        addresses: list of str. Every worker's `host:port`, in the order of
            `read_tf_config`.
        timeout: float. Seconds for the whole rendezvous.
        run_id: str. What the workers of one run share (e.g. a hash of the
            command's arguments). Defaults to `""`.

    Raises:
        ConnectionError: after `timeout` seconds, when a worker could not be
            reached, answered as something other than a bert_keras worker
            (an HTTP server, a listener that says nothing), or did not dial
            back; at once, when a bert_keras worker of another run, cluster
            or protocol version answered.
    """
    meeting = _Meeting(own_address, addresses, timeout, run_id)
    meeting.listen()
    try:
        meeting.dial_others()
        meeting.wait_for_the_others_to_dial()
    finally:
        meeting.close()


def wait_for_workers(addresses, own_address, timeout=CONNECT_TIMEOUT, run_id=""):
    """Dials every other worker until it answers as a bert_keras worker of this run (the dialling half of `rendezvous`).

    Raises:
        ConnectionError: as `rendezvous`.
    """
    _Meeting(own_address, addresses, timeout, run_id).dial_others()


class _NotAWorker(Exception):
    """What answered is no bert_keras worker; `sent` describes what it sent."""

    def __init__(self, sent):
        super().__init__(sent)
        self.sent = sent


class _Meeting:
    """One worker's side of `rendezvous`: a listener that answers the others, a dialler that greets them."""

    def __init__(self, own_address, addresses, timeout, run_id):
        self.own_address, self.addresses, self.timeout, self.run_id = own_address, list(addresses), timeout, run_id
        self.task = self.addresses.index(own_address)
        self.deadline = time.monotonic() + timeout
        hello = {"run": run_id, "cluster": self.addresses, "task": self.task}
        self.hello = b"%s %d %s\n" % (RENDEZVOUS_PROTOCOL, RENDEZVOUS_VERSION, json.dumps(hello).encode())
        self.dialled_by = set()  # the tasks whose greeting this worker's listener accepted
        self.refusal = None  # the message about a bert_keras worker of another run that dialled this one
        self.lock = threading.Lock()
        self.closing = threading.Event()
        self.listener = None
        self.threads = []

    # --- the listener: answers every connection with this worker's greeting, checks the caller's ---------

    def listen(self):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("", _port(self.own_address)))
        except OSError as error:
            listener.close()
            raise ConnectionError(f"This worker's address {self.own_address} (TF_CONFIG) cannot be listened on: {error}.") from None
        listener.listen(len(self.addresses) + 8)
        listener.settimeout(0.2)
        self.listener = listener
        self._start(self._accept)

    def _start(self, target, *args):
        thread = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(thread)
        thread.start()

    def _accept(self):
        while not self.closing.is_set():
            try:
                connection, peer = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._start(self._answer, connection, peer)

    def _answer(self, connection, peer):
        with connection:
            try:
                connection.settimeout(_HELLO_TIMEOUT)
                connection.sendall(self.hello)
            except OSError:
                return
            data, sent = _read_line(connection, _HELLO_TIMEOUT)
            try:
                task = self._check(data, sent, f"The worker that connected from {peer[0]}")
            except _NotAWorker as error:
                logger.warning("%s:%d connected to this worker's address %s but is not a bert_keras worker (it sent %s); "
                               "ignored", peer[0], peer[1], self.own_address, error.sent)
                return
            except ConnectionError as error:
                with self.lock:
                    self.refusal = self.refusal or str(error)
                return
            with self.lock:
                self.dialled_by.add(task)
            try:  # the dialler closes first, so that its port, not this one (TensorFlow's server's next), waits in TIME_WAIT
                connection.settimeout(2.0)
                connection.recv(1)
            except OSError:
                pass

    def wait_for_the_others_to_dial(self):
        others = set(range(len(self.addresses))) - {self.task}
        while True:
            with self.lock:
                missing = sorted(others - self.dialled_by)
            self._raise_refusal()
            if not missing:
                return
            if time.monotonic() >= self.deadline:
                address = self.addresses[missing[0]]
                raise ConnectionError(
                    f"Worker {address} answered but did not connect back to this worker ({self.own_address}) within "
                    f"{self.timeout:g} s. Check that every worker can reach the others at their TF_CONFIG addresses."
                )
            time.sleep(0.05)

    def close(self):
        self.closing.set()
        end = time.monotonic() + 3.0  # a greeted dialler closes at once; a silent foreign caller is left behind
        for thread in self.threads:
            thread.join(max(0.0, end - time.monotonic()))
        if self.listener is not None:
            self.listener.close()

    # --- the dialler: greets every other worker's listener, checks its answer -------------------------------

    def dial_others(self):
        for task, address in enumerate(self.addresses):
            if task != self.task:
                self._greet(task, address)

    def _greet(self, task, address):
        host, _, port = address.rpartition(":")
        failure = None
        while True:
            self._raise_refusal()
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                if isinstance(failure, _NotAWorker):
                    raise ConnectionError(
                        f"Worker {address} answered but is not a bert_keras worker of this run (it sent {failure.sent}). "
                        f"Check TF_CONFIG's cluster: no other program may listen on a worker's address."
                    )
                raise ConnectionError(
                    f"Worker {address} could not be reached within {self.timeout:g} s ({failure}). Start every worker of "
                    f"TF_CONFIG's cluster, with the same cluster, and check that {address} is reachable from this host."
                )
            try:
                connection = socket.create_connection((host.strip("[]"), int(port)), timeout=min(2.0, remaining))
            except OSError as error:
                failure = error
            else:
                with connection:
                    try:
                        connection.sendall(self.hello)
                    except OSError:
                        pass  # what it sent, if anything, says more
                    data, sent = _read_line(connection, max(0.1, min(_HELLO_TIMEOUT, self.deadline - time.monotonic())))
                try:
                    self._check(data, sent, f"Worker {address}", expected=task)
                    return
                except _NotAWorker as error:
                    failure = error
            time.sleep(max(0.0, min(0.5, self.deadline - time.monotonic())))

    # --- both: the greeting ---------------------------------------------------------------------------------

    def _check(self, data, sent, who, expected=None):
        """The task of a greeting; `_NotAWorker` for anything else, a `ConnectionError` for another run's worker."""
        protocol, _, rest = data.partition(b" ")
        version, _, body = rest.partition(b" ")
        if protocol != RENDEZVOUS_PROTOCOL or not version.isdigit() or not data.endswith(b"\n"):
            raise _NotAWorker(sent)
        if int(version) != RENDEZVOUS_VERSION:
            raise ConnectionError(
                f"{who} is a bert_keras worker of rendezvous protocol {int(version)}, this one of protocol "
                f"{RENDEZVOUS_VERSION}. Install the same bert_keras version on every worker."
            )
        try:
            hello = json.loads(body)
            run, cluster, task = hello["run"], hello["cluster"], hello["task"]
        except (ValueError, TypeError, KeyError):
            raise _NotAWorker(sent) from None
        if cluster != self.addresses:
            raise ConnectionError(
                f"{who} is a bert_keras worker of another cluster: its TF_CONFIG names {cluster}, this worker's "
                f"{self.addresses}. Give every worker the same TF_CONFIG cluster (only `task` differs)."
            )
        if run != self.run_id:
            raise ConnectionError(
                f"{who} is a bert_keras worker of another run (run id {run!r}, this worker's {self.run_id!r}). Start "
                "every worker with the same command, arguments and input files, or give them the same run id."
            )
        if not isinstance(task, int) or isinstance(task, bool) or not 0 <= task < len(cluster):
            raise _NotAWorker(sent)
        if expected is not None and task != expected:
            raise ConnectionError(
                f"{who} answered as worker {task} of the cluster ({cluster[task]}), not as worker {expected}. Check that "
                "each worker's TF_CONFIG task is the index of its own address."
            )
        if task == self.task:
            raise ConnectionError(
                f"{who} claims to be worker {task} ({cluster[task]}), this worker's own task. Check that each worker's "
                "TF_CONFIG task is the index of its own address."
            )
        return task

    def _raise_refusal(self):
        with self.lock:
            refusal = self.refusal
        if refusal:
            raise ConnectionError(refusal)


def _read_line(connection, timeout):
    """`(data, sent)`: what `connection` sends up to its first line break within `timeout` s, and that in words."""
    end = time.monotonic() + timeout
    data, ending = b"", "silent"
    while b"\n" not in data and len(data) < _HELLO_LIMIT:
        try:
            connection.settimeout(max(0.01, end - time.monotonic()))
            chunk = connection.recv(4096)
        except TimeoutError:
            break
        except OSError:
            ending = "reset"
            break
        if not chunk:
            ending = "closed"
            break
        data += chunk
    if data:
        shown = repr(data[:_SHOWN])
        return data, shown if len(data) <= _SHOWN else shown[:-1] + "..." + shown[-1]
    return data, {"silent": f"nothing within {timeout:.3g} s", "closed": "nothing: it closed the connection",
                  "reset": "nothing: it reset the connection"}[ending]
