"""What loading an export relies on beyond documented API, none of it importing Keras.

A loader (`bert_keras.export.loaded`) needs TensorFlow and tensorflow-text's ops, never Keras. This is that path:
`load_saved_model` (a local SavedModel directory checked, tensorflow-text's ops registered, loaded, its failures
explained; `bert_keras.hub.load` resolves a handle to such a directory), and the pieces of it that depend on more
than public API, kept apart from `keras_private` (which imports Keras, as its Keras subclasses need) so that loading
an export imports no Keras. `keras_private` names the two SavedModel functions too.

Depends on:

| name here | what it relies on | why there is no public way |
| --- | --- | --- |
| `saved_model_without` | `tensorflow.python.saved_model.loader_impl.parse_saved_model_with_debug_info` (replaced in the loading thread while inside), `function_deserialization._list_function_deps` | `tf.saved_model.load` turns every function of the file into a Python graph before anything is called (1.4-1.6 s of a tagger's or reader's 2 s load on 2 cores), the endpoints no loader calls (`serve_ids`, for LiteRT; a reader's string endpoints beside `window_range`, a sentence encoder's `__call__`) and the checkpoint's save/restore functions included; `load_partial`'s filters load everything once they name the root, and no option loads a subset of the functions |
| `functions_unoptimized` | `tensorflow.python.eager.context.context().function_call_options`, `FunctionCallOptions`; the `ConfigProto` they carry reaching the instantiation's passes (`disable_meta_optimizer`, and `experimental.disable_functional_ops_lowering`, read by the pass that lowers `If`/`While`) | Grappler's rewrites of a function are set for the whole process (`tf.config.optimizer.set_experimental_options`), not for one call, and lowering has no API at all; a loaded export's first request waits for them (a tagger's first call: 4.7-5.9 s with the rewrites, 2.1-3.1 s without, alternated fresh processes; a MiniLM tagger's 0.89-0.96 s lowered, 0.44-0.48 s not) while a background warm-up builds the rewritten instance for the requests after |
| `register_text_ops` | tensorflow-text's wheel holding its op libraries as `python/ops/_*.so` in its package folder, each loaded by its modules with `tf.load_op_library` at that path | `import tensorflow_text` registers the ops, and imports Keras with them (its Keras layers subclass `tf.keras.layers.Layer` at import); loading a SavedModel needs the ops only. Where the folder holds none, tensorflow_text is imported |

Pinned by `tests/test_platform.py` (the two SavedModel functions) and `tests/export/test_loader_imports.py`.
"""

import contextlib
import gc
import importlib.util
import os
import re
import sys
import threading

import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.eager import context as tf_context
from tensorflow.python.saved_model import function_deserialization, loader_impl

from bert_keras._checks import check_regular_file

# Where tensorflow-text's modules load their op libraries from, under its package folder.
TEXT_OPS_FOLDER = os.path.join("python", "ops")
_text_ops_lock = threading.Lock()
_text_ops_registered = False


def text_op_libraries():
    """The paths of tensorflow-text's op libraries (sorted), found without importing it; `[]` where there are none."""
    spec = importlib.util.find_spec("tensorflow_text")
    folders = list(getattr(spec, "submodule_search_locations", None) or [])
    if not folders:
        return []
    folder = os.path.join(folders[0], TEXT_OPS_FOLDER)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [os.path.join(folder, name) for name in names if name.startswith("_") and name.endswith(".so")]


def register_text_ops():
    """Registers tensorflow-text's ops (WordPiece, normalisation, ...) in this process, once.

    Each op library is loaded with `tf.load_op_library`, as tensorflow-text's
    own modules load it and at the same path, so that a later
    `import tensorflow_text` finds them loaded. Where tensorflow-text is
    already imported, or its folder holds no library, it is imported instead.
    """
    global _text_ops_registered
    with _text_ops_lock:
        if _text_ops_registered:
            return
        libraries = [] if "tensorflow_text" in sys.modules else text_op_libraries()
        if libraries:
            for path in libraries:
                tf.load_op_library(path)
        else:
            import tensorflow_text  # noqa: F401 - registers the ops at its import

        _text_ops_registered = True


_SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
# The folders of a SavedModel that TensorFlow reads when it loads one.
_READ_FOLDERS = ("variables", "assets")


def _check_saved_model_dir(path):
    if not os.path.isdir(path):
        raise ValueError(f"Expected a SavedModel directory, but {path!r} is a file.")
    if not any(os.path.exists(os.path.join(path, name)) for name in _SAVED_MODEL_FILES):
        contents = sorted(os.listdir(path))[:10]
        raise ValueError(
            f"The directory {path!r} is not a SavedModel: it holds no saved_model.pb. "
            f"Found: {contents}. Point the handle at the folder that contains saved_model.pb."
        )
    # What TensorFlow will read must be regular files: a FIFO among them would make the load wait forever.
    for name in _SAVED_MODEL_FILES:
        check_regular_file(os.path.join(path, name))
    for folder in _READ_FOLDERS:
        folder = os.path.join(path, folder)
        if os.path.isdir(folder):
            for entry in sorted(os.listdir(folder)):
                check_regular_file(os.path.join(folder, entry))


def load_saved_model(path, tags=None, options=None):
    """`tf.saved_model.load(path)` of a local directory, tensorflow-text's ops registered first (`register_text_ops`).

    Its files are checked first (regular files: a FIFO would make TensorFlow
    wait forever); damaged files and ops that no library registered are
    refused with a message saying what to do. `bert_keras.hub.load` resolves
    a handle (a URL, the cache) to the directory this loads.

    Returns:
        The restored object, as `tf.saved_model.load` returns it.
    """
    with _collector_paused():
        register_text_ops()
        path = os.fspath(path)
        _check_saved_model_dir(path)
        return _load(path, tags, options)


def _load(path, tags, options):
    try:
        return tf.saved_model.load(path, tags=tags, options=options)
    except (tf.errors.OpError, RuntimeError, ValueError, KeyError, IndexError) as error:
        missing = re.findall(r"Op type not registered '([^']+)'", str(error))
        if not missing:
            if isinstance(error, (tf.errors.DataLossError, tf.errors.OutOfRangeError, IndexError)) or (
                    isinstance(error, tf.errors.OpError) and "variables" in str(error)):
                first_line = (str(error).strip().splitlines() or [""])[0][:300]
                raise ValueError(f"The SavedModel at {path!r} cannot be read: its files are damaged or incomplete "
                                 f"({type(error).__name__}: {first_line}). Write it again.") from None
            raise
        raise RuntimeError(
            f"The SavedModel at {path!r} needs the op(s) {sorted(set(missing))}, which are not "
            "registered in this TensorFlow. Ops from tensorflow-text are registered by "
            "bert_keras already; for other ops, import the library that defines them "
            "(the same version the module was written with) before loading."
        ) from error


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic collector paused inside (where it was enabled), as for TensorFlow's import.

    A load creates the restored functions' graphs, over a hundred thousand objects that live as long as the export,
    and the collections on the way walked them again and again as they aged: 0.14 s of a classifier's 1.1 s load
    and 0.30 s of a tagger's 1.5 s (MiniLM, fresh processes, 2-core AMD EPYC, 2026-12-07). Paused, they are walked
    once by the first collection after. The collector is process-wide: another thread's collections wait too, for
    the length of the load.
    """
    collecting = gc.isenabled()
    if collecting:
        gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


@contextlib.contextmanager
def functions_unoptimized():
    """TensorFlow functions called in this thread, inside, run without Grappler's graph rewrites, and their
    conditionals and loops as functional ops.

    TensorFlow instantiates a function at its first call under each setting
    of the calling thread's options, so a function first called inside gets
    an instance that is ready sooner, and calls outside (another thread's, or
    this one's after) get the rewritten instance, built at their own first
    call. The values are the same up to float rounding (the rewrites fuse
    and reorder operations); the rewritten instance runs faster.

    By default every `If` and `While` of a function is lowered into the
    caller's graph when it is instantiated, both branches of each `If`
    included: an export's encoder carries one per block (its padded and
    token-packed layouts), and a tagger's windows loop holds the encoder. Left
    functional, a branch or a loop body is instantiated when it first runs,
    so the first call builds only what it runs.
    """
    context = tf_context.context()
    previous = context.function_call_options
    config = config_pb2.ConfigProto()
    config.ParseFromString(previous.config_proto_serialized or b"")
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    config.experimental.disable_functional_ops_lowering = True
    context.function_call_options = tf_context.FunctionCallOptions(executor_type=previous.executor_type,
                                                                   config_proto=config)
    try:
        yield
    finally:
        context.function_call_options = previous


_parse_saved_model = loader_impl.parse_saved_model_with_debug_info
_pruning = threading.local()  # `.endpoints` while this thread is inside `saved_model_without`
_parse_lock = threading.Lock()
_parse_users = 0  # threads inside `saved_model_without`: the module attribute is ours while there are any


def _parse_pruned(export_dir):
    proto, debug_info = _parse_saved_model(export_dir)
    choices = getattr(_pruning, "endpoints", None)
    if choices:
        served = endpoint_names(proto)
        endpoints = set()
        for choice in choices:
            endpoints.update(choice(served) if callable(choice) else [choice])
        if endpoints:
            _prune_saved_model(proto, endpoints)
            _pruning.left_out.update(endpoints & served)
    return proto, debug_info


def endpoint_names(proto):
    """The names a parsed `SavedModel` proto serves: its root's attributes and its signatures (a set; empty for a
    file without a TF 2 object graph)."""
    if len(proto.meta_graphs) != 1 or not proto.meta_graphs[0].HasField("object_graph_def"):
        return frozenset()
    nodes = proto.meta_graphs[0].object_graph_def.nodes
    names = {ref.local_name for ref in nodes[0].children}
    for ref in nodes[0].children:
        if ref.local_name == "signatures":
            names.update(child.local_name for child in nodes[ref.node_id].children)
    return frozenset(names)


@contextlib.contextmanager
def saved_model_without(endpoints):
    """`tf.saved_model.load` in this thread, inside, loads the SavedModel without the named endpoints.

    `endpoints`: names, and callables that are given the names the file
    serves (`endpoint_names`: a frozenset) and return the names to leave
    out of it (a kind whose requests call one endpoint of several, where the
    file has it). The endpoints (attributes of the root and signatures, by
    name) are left out of the object graph, and so is every function that nothing loaded
    calls any more (the left-out endpoints' and the checkpoint's own
    save/restore functions); the rest loads as before, the same functions
    with the same graphs. Other threads load whole files meanwhile.

    Yields:
        A set, filled with the names left out of the files loaded inside
        (those the files serve).
    """
    global _parse_users
    with _parse_lock:
        _parse_users += 1
        loader_impl.parse_saved_model_with_debug_info = _parse_pruned
    previous = getattr(_pruning, "endpoints", None)
    previous_left_out = getattr(_pruning, "left_out", None)
    _pruning.endpoints = frozenset(endpoints) | (previous or frozenset())  # names and callables
    _pruning.left_out = set()
    try:
        yield _pruning.left_out
    finally:
        _pruning.endpoints = previous
        _pruning.left_out = previous_left_out
        with _parse_lock:
            _parse_users -= 1
            if not _parse_users:
                loader_impl.parse_saved_model_with_debug_info = _parse_saved_model


def _prune_saved_model(proto, endpoints):
    """`saved_model_without` on a parsed `SavedModel` proto, in place (an object graph of TF 2 only)."""
    if len(proto.meta_graphs) != 1 or not proto.meta_graphs[0].HasField("object_graph_def"):
        return
    meta_graph = proto.meta_graphs[0]
    graph = meta_graph.object_graph_def
    nodes = graph.nodes
    signature_maps = [ref.node_id for ref in nodes[0].children if ref.local_name == "signatures"]
    for node_id in [0, *signature_maps]:
        kept = [ref for ref in nodes[node_id].children if ref.local_name not in endpoints]
        del nodes[node_id].children[:]
        nodes[node_id].children.extend(kept)
    library = meta_graph.graph_def.library
    by_name = {function.signature.name: function for function in library.function}
    function_names = set(by_name)
    gradient_names = {bytes(gradient.registered_op_type, "utf-8"): gradient.gradient_func
                      for gradient in library.registered_gradients if gradient.registered_op_type}
    # The nodes still reachable from the root, the functions they name and call, and the nodes those capture.
    reachable, needed, to_visit = set(), set(), [("node", 0)]
    while to_visit:
        what, key = to_visit.pop()
        if what == "node" and key not in reachable:
            reachable.add(key)
            node = nodes[key]
            to_visit += [("node", ref.node_id) for ref in [*node.children, *node.dependencies]]
            for saveable in node.saveable_objects.values():
                to_visit += [("node", saveable.save_function), ("node", saveable.restore_function)]
            kind = node.WhichOneof("kind")
            names = (list(node.function.concrete_functions) if kind == "function" else
                     [node.bare_concrete_function.concrete_function_name] if kind == "bare_concrete_function" else
                     [node.captured_tensor.concrete_function] if kind == "captured_tensor" else [])
            to_visit += [("function", name) for name in names]
        elif what == "function" and key not in needed:
            needed.add(key)
            if key in graph.concrete_functions:
                to_visit += [("node", node_id) for node_id in graph.concrete_functions[key].bound_inputs]
            if key in by_name:
                to_visit += [("function", name) for name in function_deserialization._list_function_deps(
                    by_name[key], function_names, gradient_names)]
    for node_id, node in enumerate(nodes):
        if node_id not in reachable:  # loads as an empty object that nothing refers to
            node.Clear()
            node.user_object.identifier = "_generic_user_object"
    for name in [name for name in graph.concrete_functions if name not in needed]:
        del graph.concrete_functions[name]
    kept = [function for function in library.function if function.signature.name in needed]
    del library.function[:]
    library.function.extend(kept)
    gradients = [gradient for gradient in library.registered_gradients if gradient.gradient_func in needed]
    del library.registered_gradients[:]
    library.registered_gradients.extend(gradients)
