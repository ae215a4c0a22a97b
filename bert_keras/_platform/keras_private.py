"""Every use of private Keras and TensorFlow API in the package, each with what it works around.

The rest of the package uses public API only (`tests/test_platform.py`
audits the sources and pins each dependency below to the Keras / TensorFlow
that it was written against, so an upgrade that changes one fails there,
with its name, rather than somewhere else).

| name here | private API | why there is no public way |
| --- | --- | --- |
| `in_safe_mode` | `keras.src.saving.serialization_lib.in_safe_mode` | Keras 3 has no public getter of the safe-mode switch that `load_model(safe_mode=)` / `enable_unsafe_deserialization` set; our Hub layers must honour it as `TFSMLayer` does |
| `in_xla_context` | `tensorflow.python.ops.control_flow_util.GraphOrParentsInXlaContext` | no public way for traced code to know it is compiled by XLA (`jit_compile=True`); token packing needs static shapes there |
| `onednn_enabled` | `tensorflow.python.util._pywrap_util_port.IsMklEnabled` | TensorFlow reads `TF_ENABLE_ONEDNN_OPTS` (and its CPU-dependent default) in C++ and exposes no public getter |
| `ExistingVariable` | `keras.Variable._initialize_with_initializer`, `_initialize` | a Keras variable always creates its own storage; a Hub module's functions read their own `tf.Variable`s, which a Keras layer must train in place (tensorflow/hub#903 is the tf_keras side of the same gap) |
| `track_variable` | `keras.layers.Layer._track_variable` | `add_weight` always makes a new variable; a layer that owns an existing one (an `ExistingVariable`) has no public way to list it among its weights |
| `freeze_for_good`, `thaw` | `Layer._tracker`, `_trainable_variables`, `_non_trainable_variables`, `_flatten_layers` | no freeze outlasts `layer.trainable = True`: that setter makes every variable in the layer's trainable list trainable again (the kernel Keras' own `Dense.enable_lora` froze included), and there is no public way to move an existing variable to the non-trainable list it leaves alone; LoRA needs the encoder frozen but for its adapters through fine-tuning's `encoder.trainable = True` |
| `strategy_fit` | `Model._maybe_symbolic_build`, `_symbolic_build`, `_distribute_strategy` (on the instance, for one run of the training harness: no model class carries it) | Keras 3's `fit` fails under `MultiWorkerMirroredStrategy` (keras#20585): before training it averages a whole data batch across workers to learn its shapes (a collective on a `PerReplica` of data; also a mean of strings under `MirroredStrategy`), and each step it reduces scalar logs with `reduce(..., axis=0)`; and without a strategy Keras builds nothing before `fit`/`evaluate` trace their step, so the optimizer's slots and the metrics' variables are made inside the first trace, and TensorFlow traces every train and test function twice (a function that creates variables is traced again); the model is built from the dataset's element spec here (no batch read) |
| `is_functional` | `Model._is_graph_network`, `_nodes_by_depth` | Keras 3 has no public test for a functional model (its class is private) |
| `configure_coordination_service` | `tensorflow.python.eager.context.context().configure_coordination_service` and its config | `MultiWorkerMirroredStrategy()` waits for every worker's server without end (tensorflow/tensorflow#46931); only the coordination service's registration barrier bounds it, and it has no public setter |
| `all_layers` | `Layer._flatten_layers` | Keras 3 lists a model's direct layers (`model.layers`) but has no public walk over every nested layer, sublayers of custom layers included |
| `traced_as_saved`, `write_archive` | `tensorflow.python.saved_model.save_context`; `ExportArchive._get_concrete_fn`, `_endpoint_names`, `_tracked`, `_tf_trackable` (its `_all_variables`, `_misc_assets`) | a `tf.function`'s cache key holds the save options' variable policy while `tf.saved_model.save` runs, so every function traced before the save (the ones a SavedModel needs traced: `ExportArchive.write_out` traces its endpoints to list their variables, a Hub module's `__call__` must be traced for `training=False`/`True`) is traced a second time inside it: exports took twice the tracing they need; there is no public way to trace as the save will. Keras finds the resources to carry (lookup tables) by reading every attribute of every model it walks (`dir()`, properties included: ~1.5 s an export); `_track_resources` follows checkpoint dependencies and records what Keras records |
| `variables_once` | `ExportArchive._tf_trackable` | `ExportArchive.track(model)` lists the model's Keras variables under `variables` and, at `write_out`, the `tf.Variable`s its endpoints read under `_all_variables`: the SavedModel's checkpoint holds every weight twice (an export of twice the checkpoint's size); there is no public way to list the tracked variables as the `tf.Variable`s themselves |
| `GlobalClipAdamW` | `AdamW._use_weight_decay`, `_clip_gradients`, `_all_reduce_sum_gradients` | weight decay by rank (nanoGPT's rule) has no public hook (`exclude_from_weight_decay` takes names); Keras clips each replica's gradient before its all-reduce, so `global_clipnorm` under several replicas clips a part of the batch's gradient, not the batch's |

`saved_model_without` and `functions_unoptimized` (private TensorFlow API that loading an export uses) live in
`loading`, which imports no Keras, so that a loader imports none; they are named here too.

One warning filter lives here too (`SHUFFLE_WARNING`): Keras 3.15's `fit` warns "`shuffle=True` was passed, but
will be ignored" for every `tf.data.Dataset`, because `shuffle=True` is `fit`'s default; the user passed nothing.
A dataset brings its own order, so the warning names nothing to fix; only that message is silenced, once any
module of the package that trains or loads models is imported.
"""

import contextlib
import threading
import warnings
import weakref

import keras
import tensorflow as tf
from keras.src.saving import serialization_lib
from tensorflow.python.eager import context as tf_context
from tensorflow.python.framework import ops as tf_ops
from tensorflow.python.ops import control_flow_util
from tensorflow.python.saved_model import save_context as tf_save_context

from bert_keras._platform.loading import functions_unoptimized, saved_model_without  # noqa: F401 (named here too)

try:  # TensorFlow's own oneDNN switch; absent from some builds.
    from tensorflow.python.util._pywrap_util_port import IsMklEnabled as _is_mkl_enabled
except ImportError:  # pragma: no cover - other TensorFlow builds
    _is_mkl_enabled = None

SHUFFLE_WARNING = r"`shuffle=True` was passed, but will be ignored since the data `x` was provided as a tf\.data\.Dataset"
warnings.filterwarnings("ignore", message=SHUFFLE_WARNING, category=UserWarning)


def in_safe_mode():
    """Whether Keras' safe mode is on (the default; `safe_mode=False` or `enable_unsafe_deserialization` turn it off)."""
    return bool(serialization_lib.in_safe_mode())


def in_xla_context():
    """Whether the graph being traced is compiled with XLA (`jit_compile=True`); False when executing eagerly."""
    if tf.executing_eagerly():
        return False
    return bool(control_flow_util.GraphOrParentsInXlaContext(tf_ops.get_default_graph()))


def onednn_enabled():
    """Whether TensorFlow runs its oneDNN kernels in this process (`TF_ENABLE_ONEDNN_OPTS` and its default)."""
    return bool(_is_mkl_enabled()) if _is_mkl_enabled is not None else False


class ExistingVariable(keras.Variable):
    """A Keras variable backed by an existing `tf.Variable` (a loaded module's), not by a copy of it.

    `keras.Variable(initializer=tf_variable)` would copy the value into a new
    variable, and training would then update the copy while the module's
    functions keep reading the original. This class wraps the original.
    """

    def __init__(self, variable, trainable, name):
        self._existing_variable = variable
        super().__init__(
            initializer=lambda shape, dtype: variable,
            shape=variable.shape,
            dtype=variable.dtype,
            trainable=trainable,
            name=name,
        )

    def _initialize_with_initializer(self, initializer):
        self._initialize(self._existing_variable)


def all_layers(layer):
    """`layer` and every layer nested in it, at any depth (sublayers of custom layers included)."""
    return list(layer._flatten_layers(include_self=True, recursive=True))


def track_variable(layer, variable):
    """Lists `variable` among `layer`'s weights (trainable or not, as the variable says)."""
    layer._track_variable(variable)


def freeze_for_good(root, keep=()):
    """Freezes every variable of `root` and of the layers inside it but `keep`, out of reach of `trainable = True`.

    Each layer lists the frozen variables among its non-trainable ones (first,
    so that its weights keep their order in weights files), which Keras'
    `Layer.trainable` setter leaves alone. `thaw(root)` undoes it.
    """
    keep = {id(variable) for variable in keep}
    for layer in root._flatten_layers(include_self=True):
        trainable = list(layer._trainable_variables)
        frozen = [variable for variable in trainable if id(variable) not in keep]
        if not frozen:
            continue
        _FROZEN.setdefault(layer, trainable)
        for variable in frozen:
            variable.trainable = False
        kept = [variable for variable in trainable if id(variable) in keep]
        _relist(layer, kept, frozen + list(layer._non_trainable_variables))


def thaw(root):
    """Undoes `freeze_for_good` on `root` and the layers inside it: each lists its variables as before (those
    removed since left out), trainable as the layer is."""
    for layer in root._flatten_layers(include_self=True):
        before = _FROZEN.pop(layer, None)
        if before is None:
            continue
        trainable, non_trainable = list(layer._trainable_variables), list(layer._non_trainable_variables)
        present = {id(variable) for variable in trainable + non_trainable}
        back = [variable for variable in before if id(variable) in present]
        moved = {id(variable) for variable in back}
        _relist(layer, back + [v for v in trainable if id(v) not in moved], [v for v in non_trainable if id(v) not in moved])
        for variable in back:
            variable.trainable = layer.trainable


def _relist(layer, trainable, non_trainable):
    """Lists `layer`'s own variables as `trainable` and `non_trainable` say, in that order."""
    tracker = layer._tracker
    locked = tracker.locked
    tracker.unlock()
    for variable in list(layer._trainable_variables) + list(layer._non_trainable_variables):
        tracker.untrack(variable)
    for variable in trainable:
        tracker.add_to_store("trainable_variables", variable)
    for variable in non_trainable:
        tracker.add_to_store("non_trainable_variables", variable)
    if locked:
        tracker.lock()


_FROZEN = weakref.WeakKeyDictionary()  # layer -> its trainable variables before `freeze_for_good`, in order


class GlobalClipAdamW(keras.optimizers.AdamW):
    """AdamW that decays only variables of rank >= 2 and, under several replicas, clips the batch's summed gradient.

    Under a strategy of several replicas, Keras clips each replica's gradients
    and sums them afterwards (`_backend_update_step` all-reduces after
    `_clip_gradients`), so the clip sees a part of the batch. BERT's recipe
    clips the global norm of the whole batch's gradient: sum first (the one
    all-reduce, moved here), clip the sum, and leave nothing for Keras' own
    all-reduce to do.
    """

    def _use_weight_decay(self, variable):
        return len(variable.shape) >= 2 and super()._use_weight_decay(variable)

    def _clip_gradients(self, grads):
        context = tf.distribute.get_replica_context()
        if self.global_clipnorm and context is not None and context.num_replicas_in_sync > 1:
            present = [g for g in grads if g is not None]
            summed = iter(context.all_reduce(tf.distribute.ReduceOp.SUM, present) if present else [])
            grads = [None if g is None else next(summed) for g in grads]
            # Read by `_all_reduce_sum_gradients` in the same trace. Per thread: MirroredStrategy runs each
            # local replica's step in a thread of its own.
            setattr(_SUMMED, str(id(self)), True)
        return super()._clip_gradients(grads)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        if getattr(_SUMMED, str(id(self)), False):
            setattr(_SUMMED, str(id(self)), False)
            return list(grads_and_vars)
        return super()._all_reduce_sum_gradients(grads_and_vars)


_SUMMED = threading.local()  # per replica thread: which optimizers' gradients `_clip_gradients` has summed


def _is_multi_worker(strategy):
    return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            and len(strategy.extended.worker_devices) < strategy.num_replicas_in_sync)


_FIT_METHODS = ("_maybe_symbolic_build", "train_step", "test_step")


@contextlib.contextmanager
def strategy_fit(model):
    """For the duration, Keras 3's `fit`/`evaluate` of `model` work under `MultiWorkerMirroredStrategy` (keras#20585).

    The training harness runs every `fit` in here; models themselves carry
    nothing (a Keras upgrade that changes the methods below breaks one
    harness, not every model class). On the instance only, for the duration:
    under a strategy, the model's shapes are learnt from this replica's first
    batch (no collective), and each scalar log gets a length-1 axis so that
    Keras' `reduce("MEAN", value, axis=0)` averages the replicas, as on one
    machine. Without one, the model, its optimizer, loss and metrics are built
    from the data's element spec before the step is traced (Keras defers that
    to the trace, which then creates variables and is done twice). Re-entrant:
    inside an outer `strategy_fit` of the same model it changes nothing.
    """
    if any(name in vars(model) for name in _FIT_METHODS):  # an outer `strategy_fit` holds it
        yield model
        return
    cls = type(model)
    model._maybe_symbolic_build = lambda iterator=None, data_batch=None: _build_first(model, iterator, data_batch)
    model.train_step = lambda data: _with_replica_axis(model, cls.train_step(model, data))
    model.test_step = lambda data: _with_replica_axis(model, cls.test_step(model, data))
    try:
        yield model
    finally:
        for name in _FIT_METHODS:
            delattr(model, name)  # the class's methods show through again


def _build_first(model, iterator, data_batch):
    """`Model._maybe_symbolic_build`, building from shapes alone: the element spec, or this replica's own batch."""
    if model._distribute_strategy is None:
        if data_batch is None and iterator is not None:
            data_batch = iterator.data_adapter.get_tf_dataset().element_spec  # shapes and dtypes, no batch read
        if data_batch is not None:
            model._symbolic_build(data_batch=data_batch)
        return
    if iterator is not None:
        for _, _, batches in iterator:
            batch = next(batches)
            # Only the shapes are needed: this replica's own batch has them (no collective).
            data_batch = tf.nest.map_structure(lambda value: _first_local(model.distribute_strategy, value), batch)
            break
    with model.distribute_strategy.scope():
        model._symbolic_build(data_batch=data_batch)


def _first_local(strategy, value):
    if isinstance(value, tf.distribute.DistributedValues):
        return strategy.experimental_local_results(value)[0]
    return value


def _with_replica_axis(model, logs):
    if not _is_multi_worker(model.distribute_strategy):
        return logs
    return tf.nest.map_structure(lambda value: tf.reshape(value, [1]) if value.shape.rank == 0 else value, logs)


def is_functional(model):
    """Whether `model` is a functional Keras model (inputs -> outputs)."""
    return bool(getattr(model, "_is_graph_network", False) or hasattr(model, "_nodes_by_depth"))


def configure_coordination_service(cluster, timeout):
    """Configures TensorFlow's coordination service as `MultiWorkerMirroredStrategy` would, plus a registration
    barrier bounded by `timeout` seconds (the strategy's constructor then fails instead of waiting without end).

    Args:
        cluster: dict of job name (`"chief"`, `"worker"`) -> list of addresses, TF_CONFIG's `cluster`.
        timeout: float, seconds.
    """
    context = tf_context.context()
    leader = "/job:chief/replica:0/task:0" if cluster.get("chief") else "/job:worker/replica:0/task:0"
    context.configure_coordination_service(service_type="standalone", service_leader=leader,
                                           cluster_register_timeout_in_ms=max(1, int(timeout * 1000)))
    config = context.coordination_service  # the CoordinationServiceConfig just made
    config.cluster_register_with_barrier = True  # registering waits for every task, at most the timeout above
    for job in ("chief", "worker"):
        if cluster.get(job):
            config.coordinated_job_list.add(name=job, num_tasks=len(cluster[job]))


def variables_once(archive):
    """Makes a `keras.export.ExportArchive` (after `track`) save each weight once, not twice.

    The archive's `variables` lists hold Keras variables; the endpoints read
    their `tf.Variable`s, which `write_out` lists again: two checkpoint
    entries per weight. Listing the `tf.Variable`s themselves makes them one.
    """
    trackable = archive._tf_trackable
    for name in ("variables", "trainable_variables", "non_trainable_variables"):
        setattr(trackable, name, [getattr(v, "value", v) for v in getattr(trackable, name)])
    return archive


@contextlib.contextmanager
def traced_as_saved():
    """Functions traced inside are the ones `tf.saved_model.save` (default options) reuses, not traces again.

    TensorFlow keys a function's traces by, among others, the variable policy
    of the save running (none outside a save). A function traced before the
    save is traced again inside it; traced in here, it is traced once.
    Do not save inside (`tf.saved_model.save` refuses a nested save context).
    """
    with tf_save_context.save_context(tf.saved_model.SaveOptions()):
        yield


def write_archive(archive, directory):
    """`archive.write_out(directory, verbose=False)` with each endpoint traced once, not twice.

    `write_out` traces every endpoint to list the variables it reads, then
    `tf.saved_model.save` traces each again (see `traced_as_saved`). Here the
    first tracing happens as the save's, which then reuses it. The SavedModel
    written is the same: its endpoints, the `serving_default` signature (the
    first endpoint unless one is named so), variables and assets.
    """
    with traced_as_saved():
        signatures = {name: archive._get_concrete_fn(name) for name in archive._endpoint_names}
        concrete = [function.get_concrete_function() if hasattr(function, "get_concrete_function") else function
                    for function in signatures.values()]
    _track_resources(archive, concrete)
    signatures.setdefault("serving_default", signatures[archive._endpoint_names[0]])
    tf.saved_model.save(archive._tf_trackable, directory, signatures=signatures)


def _track_resources(archive, concrete_functions):
    """What `ExportArchive._filter_and_track_resources` records, found by a walk of checkpoint dependencies.

    The archive saves the variables its endpoints read (`_all_variables`) and
    the resources, such as lookup tables, of the objects it tracks
    (`_misc_assets`). Keras finds those resources by the walk a SavedModel
    makes, which reads every attribute of every Keras model on the way
    (`dir()`, properties included: ~1.5 s of a tiny classifier's export,
    2026-12-03, Intel Xeon); a resource an object owns is one of its
    checkpoint dependencies, which this walk follows instead.
    """
    seen, read = set(), []
    for function in concrete_functions:
        for variable in list(function.trainable_variables) + list(function.variables):
            if id(variable) not in seen:
                seen.add(id(variable))
                read.append(variable)
    trackable = archive._tf_trackable
    trackable._all_variables = read
    trackable._misc_assets = [resource for root in getattr(archive, "_tracked", ())
                              for resource in tf.train.TrackableView(root).descendants()
                              if isinstance(resource, tf.saved_model.experimental.TrackableResource)]
