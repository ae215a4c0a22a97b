"""The `tf.distribute` strategy of a run, who is who in it, and a `fit` of one's own under it.

- `make_strategy(name)`: `"default"`, `"mirrored"` (the local devices, or
  `cpu_replicas` logical CPUs) or `"multi-worker"` (the cluster of the
  standard `TF_CONFIG` environment variable, checked before any work; the
  workers meet and prove to be workers of the same run first,
  `cluster.rendezvous`, and every wait for them is bounded).
- Who is who: `is_multi_worker`, `is_chief` (only the chief writes results),
  `task_name`; `all_gather_ints`, the one collective the backups need.
- What makes Keras 3's own `fit`/`evaluate` work under
  `MultiWorkerMirroredStrategy` (`keras_private.strategy_fit`, which the
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

How each replica gets its slice of every global batch is `training.feeding`;
every worker's own backup and the epoch the workers resume from,
`training.backup`.
"""

import json
import logging
import os

import keras
import tensorflow as tf

from bert_keras._checks import check_choice, check_positive_int
from bert_keras._platform.keras_private import configure_coordination_service, is_functional, strategy_fit
from bert_keras.cluster import CONNECT_TIMEOUT, read_tf_config, rendezvous

logger = logging.getLogger(__name__)

STRATEGIES = ("default", "mirrored", "multi-worker")


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


def all_gather_ints(strategy, value):
    """The int `value` of every replica, gathered across workers (called in the cross-replica context)."""
    gathered = strategy.run(lambda: tf.distribute.get_replica_context().all_gather(tf.constant([value], tf.int64), axis=0))
    return [int(v) for v in strategy.experimental_local_results(gathered)[0].numpy()]


class DistributedTrainer:
    """Mixed into a `keras.Model` class (before it): its own `fit`/`evaluate` work under a strategy of several replicas.

    For a `fit` outside `training.Harness` (which applies the same workaround,
    `keras_private.strategy_fit`, to whatever model it fits); bert_keras
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
