"""Training on `tf.distribute` strategies, across processes and machines included.

Three pieces, used by fine-tuning and pre-training alike:

- `make_strategy(name)`: `"default"`, `"mirrored"` (the local devices, or
  `cpu_replicas` logical CPUs) or `"multi-worker"` (the cluster of the
  standard `TF_CONFIG` environment variable, checked before any work; the
  workers meet and prove to be workers of the same run first, `rendezvous`,
  and every wait for them is bounded).
- What makes Keras 3's own `fit`/`evaluate` work under
  `MultiWorkerMirroredStrategy` (`_keras_compat.strategy_fit`, which the
  training harness applies to every model it fits). Keras 3.15 fails
  there on the first step (keras-team/keras#20585) in two places: before
  training it averages a whole data batch across the workers to learn its
  shapes (a collective on a `PerReplica` of data, which fails; only the shapes
  are needed, any worker's own batch has them), and every step it reduces
  the scalar logs across workers with `reduce(..., axis=0)`, which a scalar
  does not have (each replica's log is given a length-1 axis here, so that
  the same reduction averages the replicas). The first also breaks
  `MirroredStrategy` on string inputs (a mean of strings), i.e. on every
  model that takes raw text. Models are plain Keras models: for a `fit` of
  one's own (outside `training.Harness`), `trainable_model` wraps any
  functional model, `DistributedTrainer` is mixed into a model class.
- `distribute_batches`: a dataset of global batches becomes a distributed
  dataset in which every replica gets its own slice of each global batch, so
  that N replicas see exactly the examples, in the order, that one replica
  with the same global batch would (the shards are by data: each worker
  reads the whole stream and keeps its slices). A partial last batch is
  padded to full size with weight-0 rows and its real rows weighted so that
  the summed gradient equals the mean over the real rows, as on one replica.

Every worker keeps its own backup directory (`worker_backup_dir`); on a
restart the workers agree on the epoch to resume from (`agree_on_backup`).
Only the chief writes results (`is_chief`).
"""

import json
import logging
import os
import socket
import threading
import time

import keras
import tensorflow as tf

from bert_keras._checks import check_choice, check_positive_int
from bert_keras._keras_compat import configure_coordination_service, is_functional, strategy_fit

logger = logging.getLogger(__name__)

STRATEGIES = ("default", "mirrored", "multi-worker")
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


def split_cpu(replicas):
    """Splits the CPU into `replicas` logical devices (for mirrored training on one CPU); before TensorFlow starts."""
    check_positive_int("cpu_replicas", replicas)
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * replicas)
    except RuntimeError:
        if len(tf.config.list_logical_devices("CPU")) == replicas:
            return
        raise RuntimeError(
            "`cpu_replicas` must be set before TensorFlow has started its devices (set it first thing in the process)."
        ) from None


def make_strategy(name="default", cpu_replicas=None, connect_timeout=CONNECT_TIMEOUT, run_id=""):
    """A `tf.distribute` strategy by name.

    Args:
        name: `"default"` (TensorFlow's default strategy: one device),
            `"mirrored"` (`MirroredStrategy` over the local GPUs, or over
            `cpu_replicas` logical CPU devices) or `"multi-worker"`
            (`MultiWorkerMirroredStrategy` over `TF_CONFIG`'s cluster).
        cpu_replicas: optional int. For `"mirrored"`: split the CPU into
            this many logical devices, one replica each (to try data
            parallelism without GPUs). Must be given before TensorFlow starts.
        connect_timeout: float. For `"multi-worker"`: seconds to wait for
            the other workers at the rendezvous (`rendezvous`), and again
            for TensorFlow's cluster to form after it, before giving up with
            a `ConnectionError`.
        run_id: str. For `"multi-worker"`: what every worker of this run
            shares (the command line passes a hash of its arguments); a
            worker of another run is refused. Defaults to `""` (the
            workers' clusters alone are compared).

    Raises:
        TFConfigError: `"multi-worker"` without a usable `TF_CONFIG`.
        ConnectionError: a worker could not be reached, is not a bert_keras
            worker of this run, or stopped before the cluster formed.
    """
    check_choice("strategy", name, STRATEGIES)
    if cpu_replicas is not None and name != "mirrored":
        raise ValueError(f"`cpu_replicas` applies to the mirrored strategy only. Received: strategy={name!r}")
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        if cpu_replicas is not None:
            split_cpu(cpu_replicas)
            return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(cpu_replicas)])
        return tf.distribute.MirroredStrategy()
    workers, task_type, task_index = read_tf_config()
    cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
    own = cluster[task_type][task_index]
    logger.info("Worker %s %d of %d: waiting for the others (at most %g s)", task_type, task_index, len(workers), connect_timeout)
    rendezvous(own, workers, connect_timeout, run_id=run_id)
    return _multi_worker_strategy(cluster, connect_timeout)


def _multi_worker_strategy(cluster, timeout):
    """`MultiWorkerMirroredStrategy` over `cluster`; a `ConnectionError` when the cluster does not form in `timeout` s.

    The strategy's constructor waits for every worker's TensorFlow server to
    register with the coordination service, and TensorFlow's own settings
    bound that wait by nothing we could measure (tensorflow/tensorflow#46931:
    still waiting after 200 s for a worker that met the others and then
    stopped). So the coordination service is configured here as the strategy
    would configure it, plus a registration barrier bounded by `timeout`: the
    worker whose peer stopped gets a `DeadlineExceededError` (11 s for
    `timeout=10` on the coordination leader, 15 s on the other workers). Once
    the cluster has formed, a worker that stops is found by the service's
    heartbeats (10 s by default): the collectives of the others fail with an
    `UnavailableError` instead of waiting (measured: 6-11 s). A worker that
    is alive but slow is waited for without a bound, as a slow step must be.
    """
    configure_coordination_service(cluster, timeout)
    options = tf.distribute.experimental.CommunicationOptions(implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    try:
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    except tf.errors.OpError as error:
        reason = (str(error).strip().splitlines() or [""])[0]
        reason = reason if len(reason) <= 120 else reason[:117] + "..."
        raise ConnectionError(
            f"The workers met, but TensorFlow's cluster did not form within {timeout:g} s ({type(error).__name__}: "
            f"{reason}). A worker stopped after meeting the others, or cannot reach their TensorFlow servers; "
            "start every worker again."
        ) from None


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


def is_multi_worker(strategy=None):
    """Whether `strategy` (default: the current one) has replicas in other processes."""
    strategy = strategy or tf.distribute.get_strategy()
    return (
        isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        and len(strategy.extended.worker_devices) < strategy.num_replicas_in_sync
    )


def is_chief(strategy=None):
    """Whether this process writes the results: always, except on the non-chief workers of a cluster."""
    strategy = strategy or tf.distribute.get_strategy()
    if not is_multi_worker(strategy):
        return True
    resolver = strategy.cluster_resolver
    return resolver.task_type == "chief" or (
        resolver.task_type == "worker" and resolver.task_id == 0 and "chief" not in resolver.cluster_spec().as_dict()
    )


def task_name(strategy=None):
    """`"chief"`, `"worker-1"`, ...: this process in its cluster (`"chief"` without one)."""
    strategy = strategy or tf.distribute.get_strategy()
    if not is_multi_worker(strategy):
        return "chief"
    resolver = strategy.cluster_resolver
    return "chief" if is_chief(strategy) else f"{resolver.task_type}-{resolver.task_id}"


def worker_backup_dir(backup_dir, strategy=None):
    """The backup directory of this worker: `backup_dir` itself, or a subdirectory per task in a cluster."""
    if backup_dir is None or not is_multi_worker(strategy):
        return backup_dir
    return os.path.join(backup_dir, task_name(strategy))


def all_gather_ints(strategy, value):
    """The int `value` of every replica, gathered across workers (called in the cross-replica context)."""
    return _all_gather_int(strategy, value)


def _all_gather_int(strategy, value):
    """The ints `value` of every replica, gathered across workers (in the cross-replica context)."""
    gathered = strategy.run(lambda: tf.distribute.get_replica_context().all_gather(tf.constant([value], tf.int64), axis=0))
    return [int(v) for v in strategy.experimental_local_results(gathered)[0].numpy()]


def agree_on_backup(strategy, backup_dir, read_epoch):
    """Makes every worker resume a phase from the same epoch; returns it.

    A kill between the workers' end-of-epoch backups can leave one worker's
    backup an epoch ahead. The workers agree on the smallest epoch; one that
    is ahead goes back to its previous copy (Keras keeps one,
    `double_checkpoint`). Without a multi-worker strategy this is
    `read_epoch(backup_dir)`.
    """
    epoch = read_epoch(backup_dir)
    if not is_multi_worker(strategy):
        return epoch
    epochs = _all_gather_int(strategy, epoch)
    agreed = min(epochs)
    if epoch > agreed:
        metadata = os.path.join(backup_dir, "training_metadata.json")
        previous = metadata + ".bkp"
        previous_epoch = None
        if os.path.exists(previous):
            with open(previous) as f:
                previous_epoch = json.load(f).get("epoch")
        if previous_epoch != agreed:
            raise ValueError(
                f"The workers' backups disagree (epochs {epochs}) and this worker's previous backup cannot go back to "
                f"epoch {agreed}. Remove every worker's backup directory ({backup_dir} here) to start over."
            )
        weights = [name for name in os.listdir(backup_dir) if os.path.exists(os.path.join(backup_dir, name + ".bkp"))
                   and name.endswith(".weights.h5")]
        for name in weights:
            os.replace(os.path.join(backup_dir, name + ".bkp"), os.path.join(backup_dir, name))
        os.replace(previous, metadata)
        logger.info("Backup in %s goes back from epoch %d to %d, where the other workers are", backup_dir, epoch, agreed)
    return agreed


def all_workers(strategy, flag):
    """`flag` is true on every worker (an AND across the cluster); `flag` itself without one."""
    if not is_multi_worker(strategy):
        return bool(flag)
    return min(_all_gather_int(strategy, int(bool(flag)))) == 1


class DistributedTrainer:
    """Mixed into a `keras.Model` class (before it): its own `fit`/`evaluate` work under a strategy of several replicas.

    For a `fit` outside `training.Harness` (which applies the same workaround,
    `_keras_compat.strategy_fit`, to whatever model it fits); bert_keras
    models are plain Keras models and carry no such mixin.
    """

    def fit(self, *args, **kwargs):
        with strategy_fit(self):
            return super().fit(*args, **kwargs)

    def evaluate(self, *args, **kwargs):
        with strategy_fit(self):
            return super().evaluate(*args, **kwargs)


@keras.saving.register_keras_serializable(package="bert_keras")
class DistributedFunctional(DistributedTrainer, keras.Model):
    """A functional `keras.Model` with `DistributedTrainer`; `trainable_model` makes one."""


def trainable_model(model, strategy=None):
    """`model`, or a functional model on the same layers whose own `fit` works under a strategy of several replicas.

    For a `fit` of one's own; `training.Harness` needs no such model. Under a
    strategy of one replica, `model` itself. The returned model shares
    `model`'s layers (and so its weights): training it trains `model`.
    """
    strategy = strategy or tf.distribute.get_strategy()
    if isinstance(model, DistributedTrainer) or strategy.num_replicas_in_sync == 1:
        return model
    if not is_functional(model):
        raise ValueError(
            "Under a strategy of several replicas, `model` must be a functional keras.Model (inputs -> outputs); "
            f"Keras 3's fit fails there otherwise (keras#20585). Received: {type(model).__name__}"
        )
    with strategy.scope():
        # `input` / `output`: the structures the model was made with (a dict of outputs keeps its names)
        return DistributedFunctional(model.input, model.output, name=model.name)


def distribute_batches(strategy, dataset, global_batch_size, scale_partial=True):
    """A dataset of global batches as a distributed dataset: each replica gets its slice of every batch.

    Args:
        strategy: the `tf.distribute.Strategy`.
        dataset: a `tf.data.Dataset` of `(x, y)` or `(x, y, sample_weight)`
            (nested structures allowed), each a batch of at most
            `global_batch_size` rows.
        global_batch_size: int. Divisible by the number of replicas.
        scale_partial: bool. Weight the real rows of a partial batch
            `global_batch_size / rows` (for training: the gradient of one
            replica's mean). With `False` they weigh 1 (for evaluation: the
            metrics count each example once). Defaults to `True`.

    Returns:
        `dataset` itself without a strategy of more than one replica;
        otherwise a `tf.distribute.DistributedDataset` whose elements on
        replica `r` are rows `[r * b, (r + 1) * b)` of each global batch
        (`b = global_batch_size / replicas`), a partial batch padded with
        weight-0 rows and (with `scale_partial`) its real rows weighted
        `global_batch_size / rows`, so that the replicas' mean losses summed
        over replicas (Keras scales each by 1/replicas) equal one replica's
        mean over the rows. Keras' `fit` keeps one iterator over a
        distributed dataset: give it an endless stream and `steps_per_epoch`
        (`validation_steps` for validation data).
    """
    replicas = strategy.num_replicas_in_sync
    if replicas == 1:
        return dataset
    per_replica = check_global_batch(global_batch_size, replicas)

    def pieces(context):
        local = replicas // context.num_input_pipelines
        first = context.input_pipeline_id * local

        def split(*batch):
            x, y, weights = batch if len(batch) == 3 else (*batch, None)
            rows = tf.shape(tf.nest.flatten(y)[0])[0]
            real = tf.range(global_batch_size) < rows
            scale = tf.cast(global_batch_size, tf.float32) / tf.cast(rows, tf.float32) if scale_partial else 1.0
            weight = tf.where(real, scale, 0.0)  # (global_batch_size,)
            if weights is not None:
                weight = tf.nest.map_structure(lambda w: _scaled(w, weight, rows, global_batch_size), weights)
            # each tensor: (global_batch_size, ...) -> (local replicas, per_replica, ...), this pipeline's rows
            x, y = tf.nest.map_structure(lambda t: _padded(t, rows, global_batch_size), (x, y))
            # this pipeline's rows: those of its replicas, first to last
            x, y, weight = tf.nest.map_structure(lambda t: t[first * per_replica : (first + local) * per_replica], (x, y, weight))
            shaped = tf.nest.map_structure(lambda t: tf.reshape(t, tf.concat([[local, per_replica], tf.shape(t)[1:]], 0)), (x, y, weight))
            return tf.data.Dataset.from_tensor_slices(shaped)

        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        return dataset.flat_map(split).with_options(options)

    return strategy.distribute_datasets_from_function(pieces)


def _scaled(weights, row_weight, rows, size):
    """Sample weights `(rows, ...)` padded to `size` rows and multiplied by each row's weight."""
    weights = _padded(tf.cast(weights, tf.float32), rows, size)
    # row_weight: (size,) -> (size, 1, ...) to broadcast over the weights' other axes
    return weights * tf.reshape(row_weight, tf.concat([[size], tf.ones([tf.rank(weights) - 1], tf.int32)], 0))


def _padded(tensor, rows, size):
    """`tensor` (rows first) with its first row repeated up to `size` rows."""
    # indices: (size,) the real rows, then row 0 again
    indices = tf.where(tf.range(size) < rows, tf.range(size), 0)
    return tf.gather(tensor, indices)


def check_global_batch(global_batch_size, replicas):
    """The per-replica batch size; a clear error when the global batch does not divide among the replicas."""
    check_positive_int("batch_size", global_batch_size)
    if global_batch_size % replicas:
        raise ValueError(
            f"The global batch size {global_batch_size} does not divide among the {replicas} replicas: pass a "
            f"multiple of {replicas} (e.g. {replicas * max(1, global_batch_size // replicas)}), as each replica takes "
            "batch_size / replicas examples per step."
        )
    return global_batch_size // replicas
