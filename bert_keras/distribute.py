"""Training on `tf.distribute` strategies, across processes and machines included.

Three pieces, used by fine-tuning and pre-training alike:

- `make_strategy(name)`: `"default"`, `"mirrored"` (the local devices, or
  `cpu_replicas` logical CPUs) or `"multi-worker"` (the cluster of the
  standard `TF_CONFIG` environment variable, checked before any work, peers
  waited for a bounded time).
- `DistributedTrainer`: the part of a `keras.Model` that makes Keras 3's own
  `fit`/`evaluate` work under `MultiWorkerMirroredStrategy`. Keras 3.15 fails
  there on the first step (keras-team/keras#20585) in two places: before
  training it averages a whole data batch across the workers to learn its
  shapes (a collective on a `PerReplica` of data, which fails; only the shapes
  are needed, any worker's own batch has them), and every step it reduces
  the scalar logs across workers with `reduce(..., axis=0)`, which a scalar
  does not have (each replica's log is given a length-1 axis here, so that
  the same reduction averages the replicas). The first also breaks
  `MirroredStrategy` on string inputs (a mean of strings), i.e. on every
  model that takes raw text. Every bert_keras model has it;
  `trainable_model` gives it to any functional model.
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


def wait_for_workers(addresses, own_address, timeout=CONNECT_TIMEOUT):
    """Waits until every other worker accepts connections; a clear error after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    pending = [address for address in addresses if address != own_address]
    while pending:
        address = pending[0]
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=2.0):
                pending.pop(0)
                continue
        except OSError as error:
            if time.monotonic() >= deadline:
                raise ConnectionError(
                    f"Worker {address} could not be reached within {timeout:g} s ({error}). Start every worker of "
                    f"TF_CONFIG's cluster, with the same cluster, and check that {address} is reachable from this host."
                ) from None
        time.sleep(0.5)


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


def make_strategy(name="default", cpu_replicas=None, connect_timeout=CONNECT_TIMEOUT):
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
            the other workers before giving up with a `ConnectionError`.

    Raises:
        TFConfigError: `"multi-worker"` without a usable `TF_CONFIG`.
        ConnectionError: a worker could not be reached in time.
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
    own = json.loads(os.environ["TF_CONFIG"])["cluster"][task_type][task_index]
    logger.info("Worker %s %d of %d: waiting for the others (at most %g s)", task_type, task_index, len(workers), connect_timeout)
    rendezvous(own, workers, connect_timeout)
    options = tf.distribute.experimental.CommunicationOptions(implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    # Starts this worker's server; returns once every worker has registered (which the rendezvous made likely).
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def rendezvous(own_address, addresses, timeout=CONNECT_TIMEOUT):
    """Returns once every worker of the cluster is reachable; a `ConnectionError` after `timeout` seconds.

    MultiWorkerMirroredStrategy's constructor waits for all workers without
    end, so the workers meet before it: each listens on its own address
    while it connects to the others' (to that listener, or to the server of
    a worker that got through already).
    """
    port = _port(own_address)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("", port))
    except OSError as error:
        listener.close()
        raise ConnectionError(f"This worker's address {own_address} (TF_CONFIG) cannot be listened on: {error}.") from None
    listener.listen(len(addresses))
    listener.settimeout(0.2)
    accepted, done = [], threading.Event()

    def accept():
        while not done.is_set():
            try:
                accepted.append(listener.accept()[0])
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        wait_for_workers(addresses, own_address, timeout)
    finally:
        done.set()
        thread.join()
        listener.close()
        for connection in accepted:  # the connecting side closes first (its port, not ours, waits in TIME_WAIT)
            connection.settimeout(2.0)
            try:
                connection.recv(1)
            except OSError:
                pass
            connection.close()


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
    """Mixed into a `keras.Model` (before it): Keras 3's `fit`/`evaluate` under `MultiWorkerMirroredStrategy`.

    See the module docstring for what fails without it. Without a strategy
    nothing changes; under one, the model's shapes are learnt from this
    replica's first batch.
    """

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if self._distribute_strategy is None:
            return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)
        if iterator is not None:
            for _, _, batches in iterator:
                batch = next(batches)
                # Only the shapes are needed: this replica's own batch has them (no collective).
                data_batch = tf.nest.map_structure(self._first_local, batch)
                break
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    def _first_local(self, value):
        if isinstance(value, tf.distribute.DistributedValues):
            return self.distribute_strategy.experimental_local_results(value)[0]
        return value

    def train_step(self, data):
        return self._with_replica_axis(super().train_step(data))

    def test_step(self, data):
        return self._with_replica_axis(super().test_step(data))

    def _with_replica_axis(self, logs):
        if not is_multi_worker(self.distribute_strategy):
            return logs
        # Keras reduces each log across workers with `reduce("MEAN", value, axis=0)`: a length-1 axis makes
        # that the mean over the replicas, as on one machine.
        return tf.nest.map_structure(lambda value: tf.reshape(value, [1]) if value.shape.rank == 0 else value, logs)


@keras.saving.register_keras_serializable(package="bert_keras")
class DistributedFunctional(DistributedTrainer, keras.Model):
    """A functional `keras.Model` with `DistributedTrainer`; `trainable_model` makes one."""


def trainable_model(model, strategy=None):
    """`model`, or a functional model on the same layers that `fit`s under a strategy of several replicas.

    bert_keras models need nothing. For another functional model under such
    a strategy, the returned model shares `model`'s layers (and so its
    weights): training it trains `model`.
    """
    strategy = strategy or tf.distribute.get_strategy()
    if isinstance(model, DistributedTrainer) or strategy.num_replicas_in_sync == 1:
        return model
    if not getattr(model, "_is_graph_network", False) and not hasattr(model, "_nodes_by_depth"):
        raise ValueError(
            "Under a strategy of several replicas, `model` must be a bert_keras model or a functional keras.Model "
            f"(inputs -> outputs); Keras 3's fit fails there otherwise (keras#20585). Received: {type(model).__name__}"
        )
    with strategy.scope():
        return DistributedFunctional(model.inputs, model.outputs, name=model.name)


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
