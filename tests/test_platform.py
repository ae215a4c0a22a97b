"""Platform-specific code only in `bert_keras/_platform/`, and each of its dependencies pinned to what it relies on.

Two audits read every module of the package. Private Keras / TensorFlow API (an import of `keras.src` or
`tensorflow.python`, an attribute `obj._name` that the package does not define itself, or a method `_name` overriding
a private method of a Keras base class) is allowed only in `_platform/keras_private.py`. Native and format-level code
(an import of `ctypes`, of the import system's machinery, of a flatbuffer library or schema, a use of
`sys.meta_path`) is allowed only in `_platform/`. The other tests here fail, by name, when the Keras, TensorFlow,
tensorflow-text or C library installed stops providing what a `_platform` module uses.
"""

import ast
import collections
import contextlib
import inspect
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import tasks
from bert_keras._platform import keras_private, native, text_models, tflite_file
from bert_keras.tasks._task import Task
from bert_keras.tasks import pretrainer, sentence_encoder

ROOT = pathlib.Path(__file__).resolve().parent.parent / "bert_keras"
COMPAT = ROOT / "_platform" / "keras_private.py"
# Its Keras-free part: the private TensorFlow API that loading an export uses (a loader imports no Keras).
COMPAT_MODULES = (COMPAT, ROOT / "_platform" / "loading.py")
KERAS_BASES = (keras.Model, keras.layers.Layer, keras.optimizers.Optimizer, keras.callbacks.Callback, keras.Variable,
               keras.losses.Loss, keras.metrics.Metric)
# Private API outside the compat module, each with its reason; the list only shrinks.
ALLOWED = {}
# Underscored names that the standard library documents as public (`os._exit`: end without interpreter teardown).
PUBLIC_STANDARD_LIBRARY = {("os", "_exit")}


def _modules():
    return sorted(path for path in ROOT.rglob("*.py") if path not in COMPAT_MODULES)


def _own_private_names():
    """Every `_name` the package itself defines (functions, classes, attributes it assigns, arguments)."""
    names = set()
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[-1])
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def _keras_private_members():
    return {name for base in KERAS_BASES for name in dir(base) if name.startswith("_") and not name.startswith("__")}


def private_uses(path, own, keras_private):
    """`(line, what)` of every private Keras/TensorFlow API use in the module at `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(("keras.src", "tensorflow.python")):
            found.append((node.lineno, f"from {node.module} import"))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if a.name.startswith(("keras.src", "tensorflow.python"))]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if isinstance(node.value, ast.Name) and (node.value.id, node.attr) in PUBLIC_STANDARD_LIBRARY:
                continue
            if node.attr not in own:
                found.append((node.lineno, f"attribute .{node.attr}"))
            elif node.attr in keras_private and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append((node.lineno, f"attribute .{node.attr} (a private member of a Keras class)"))
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in keras_private:
                    found.append((item.lineno, f"override of Keras' private {item.name}"))
    return found


def test_private_api_only_in_the_compat_module():
    own, keras_private = _own_private_names(), _keras_private_members()
    offenders = {}
    for path in _modules():
        relative = str(path.relative_to(ROOT))
        uses = [use for use in private_uses(path, own, keras_private) if use[1] not in ALLOWED.get(relative, {})]
        if uses:
            offenders[relative] = uses
    assert offenders == {}, f"private Keras/TensorFlow API outside bert_keras/_platform/keras_private.py: {offenders}"


def test_the_audit_finds_what_it_looks_for(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from keras.src.saving import serialization_lib\n"
        "import tensorflow.python.ops\n"
        "class A(keras.Model):\n"
        "    def _maybe_symbolic_build(self): pass\n"
        "x = layer._tracker\n"
    )
    found = [what for _, what in private_uses(sample, set(), _keras_private_members())]
    assert found == ["from keras.src.saving import", "import tensorflow.python.ops", "override of Keras' private _maybe_symbolic_build",
                     "attribute ._tracker"], found


# --- what each compat entry relies on -----------------------------------------------------------------------


@keras.saving.register_keras_serializable(package="bert_keras_tests")
class _SafeModeProbe(keras.layers.Layer):
    seen = []

    def call(self, inputs):
        return inputs

    @classmethod
    def from_config(cls, config):
        cls.seen.append(keras_private.in_safe_mode())
        return cls(**config)


def test_in_safe_mode_follows_load_models_safe_mode(tmp_path):
    inputs = keras.Input((2,))
    path = str(tmp_path / "probe.keras")
    keras.Model(inputs, _SafeModeProbe()(inputs)).save(path)
    _SafeModeProbe.seen.clear()
    keras.saving.load_model(path)
    keras.saving.load_model(path, safe_mode=False)
    assert _SafeModeProbe.seen == [True, False]
    assert keras_private.in_safe_mode() is False  # no load in progress


def test_in_xla_context_is_true_only_when_traced_for_xla():
    seen = {}

    def probe(name):
        def function(x):
            seen[name] = keras_private.in_xla_context()
            return x + 1

        return function

    tf.function(probe("xla"), jit_compile=True)(tf.constant(1.0))
    tf.function(probe("graph"))(tf.constant(1.0))
    probe("eager")(tf.constant(1.0))
    assert seen == {"xla": True, "graph": False, "eager": False}


@pytest.mark.slow
def test_onednn_enabled_reads_tensorflows_switch():
    assert keras_private._is_mkl_enabled is not None  # this TensorFlow build has the switch
    script = "import os; from bert_keras._platform.keras_private import onednn_enabled; print(onednn_enabled())"
    outputs = []
    for value in ("0", "1"):
        env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=value, TF_CPP_MIN_LOG_LEVEL="3")
        outputs.append(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120).stdout.strip())
    assert outputs == ["False", "True"]


def test_existing_variable_trains_the_original_in_place():
    original = tf.Variable([1.0, 2.0], name="module_weight")
    wrapped = keras_private.ExistingVariable(original, trainable=True, name="module_weight")
    wrapped.assign([3.0, 4.0])
    np.testing.assert_array_equal(original.numpy(), [3.0, 4.0])  # one storage, not a copy
    assert wrapped.trainable and tuple(wrapped.shape) == (2,)


def test_adamw_has_the_private_steps_the_global_clip_relies_on():
    for name, parameters in (("_use_weight_decay", ["variable"]), ("_clip_gradients", ["grads"]),
                             ("_all_reduce_sum_gradients", ["grads_and_vars"])):
        assert list(inspect.signature(getattr(keras.optimizers.AdamW, name)).parameters)[1:] == parameters, name
    # Keras all-reduces the (already clipped) gradients in `_backend_update_step`, through the method we empty.
    from keras.src.backend.tensorflow.optimizer import TFOptimizer

    assert "_all_reduce_sum_gradients" in inspect.getsource(TFOptimizer._backend_update_step)
    from keras.src.optimizers import base_optimizer

    base = inspect.getsource(base_optimizer)
    assert base.index("grads = self._clip_gradients(grads)") < base.index("self._backend_update_step(")


def test_weight_decay_by_rank():
    matrix, vector = keras.Variable(np.ones((2, 2), "float32")), keras.Variable(np.ones(2, "float32"))
    optimizer = keras_private.GlobalClipAdamW(learning_rate=0.1, weight_decay=0.5)
    optimizer.apply([tf.zeros((2, 2)), tf.zeros(2)], [matrix, vector])
    assert float(matrix.numpy()[0, 0]) < 1.0  # decayed
    assert float(vector.numpy()[0]) == 1.0  # never decayed: rank 1


def test_the_trainer_methods_multi_worker_fit_overrides():
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    assert list(inspect.signature(TensorFlowTrainer._maybe_symbolic_build).parameters) == ["self", "iterator", "data_batch"]
    assert list(inspect.signature(keras.Model._symbolic_build).parameters)[1:] == ["iterator", "data_batch"]
    model = keras.Sequential([keras.layers.Dense(1)])
    assert model._distribute_strategy is None  # set only when a model is made under a strategy's scope
    # Keras reduces each step's logs with axis=0, which a scalar does not have (what the replica axis is for).
    assert "axis=0" in inspect.getsource(sys.modules[TensorFlowTrainer.__module__].reduce_per_replica)


def test_is_functional():
    inputs = keras.Input((2,))
    assert keras_private.is_functional(keras.Model(inputs, keras.layers.Dense(1)(inputs)))

    class Subclassed(keras.Model):
        def call(self, x):
            return x

    assert not keras_private.is_functional(Subclassed())


def test_the_coordination_service_settings_exist():
    from tensorflow.python.eager import context

    assert "cluster_register_timeout_in_ms" in inspect.signature(context.Context.configure_coordination_service).parameters
    assert isinstance(context.Context.coordination_service, property)


def test_all_layers_walks_every_nested_layer():
    inner = keras.Sequential([keras.layers.Dense(2, name="inner_dense")], name="inner")
    inputs = keras.Input((2,))
    model = keras.Model(inputs, inner(inputs), name="outer")
    assert [layer.name for layer in keras_private.all_layers(model)][:1] == ["outer"]
    assert {"inner", "inner_dense"} <= {layer.name for layer in keras_private.all_layers(model)}


@pytest.mark.slow  # 6 s in the full run of 450d6b9
def test_the_shuffle_warning_keras_gives_every_dataset_fit_is_the_one_silenced():
    import re
    import warnings

    from bert_keras._platform import keras_private, native, text_models, tflite_file

    model = keras.Sequential([keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    data = tf.data.Dataset.from_tensor_slices((np.ones((4, 2), "float32"), np.ones((4, 1), "float32"))).batch(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # the filters as they were before the package's
        model.fit(data, epochs=1, verbose=0)
    assert any(re.match(keras_private.SHUFFLE_WARNING, str(w.message)) for w in caught), [str(w.message) for w in caught]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message=keras_private.SHUFFLE_WARNING, category=UserWarning)
        model.fit(data, epochs=1, verbose=0)
        model.fit(np.ones((4, 2)), np.ones((4, 1)), epochs=1, verbose=0)  # arrays: shuffled, nothing said
    assert not [str(w.message) for w in caught if "shuffle" in str(w.message)]
    # Installed at import (pytest restores the warning filters around each test: a fresh process shows it).
    script = ("import warnings, bert_keras.hub; from bert_keras._platform import keras_private as c; "
              "print(any(f[1] is not None and f[1].pattern == c.SHUFFLE_WARNING for f in warnings.filters))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert done.stdout.strip() == "True", done.stderr[-2000:]


def test_a_function_traced_as_saved_is_traced_once_by_the_save(tmp_path):
    traces = []
    variable = tf.Variable(2.0)

    def double(x):
        traces.append(1)
        return x * variable

    for traced_first_as_saved, expected in ((False, 2), (True, 1)):
        traces.clear()
        function = tf.function(double, input_signature=[tf.TensorSpec([None], tf.float32)])
        if traced_first_as_saved:
            with keras_private.traced_as_saved():
                function.get_concrete_function()
        else:
            function.get_concrete_function()  # the save traces it again: TensorFlow's behaviour worked around
        module = tf.Module()
        module.variable, module.double = variable, function
        tf.saved_model.save(module, str(tmp_path / str(traced_first_as_saved)))
        assert len(traces) == expected, traced_first_as_saved
    loaded = tf.saved_model.load(str(tmp_path / "True"))
    np.testing.assert_allclose(loaded.double(tf.constant([1.0, 3.0])).numpy(), [2.0, 6.0])


def test_write_archive_writes_what_write_out_writes_tracing_each_endpoint_once(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    traces = collections.Counter()

    def archive_of(model):
        archive = keras.export.ExportArchive()
        archive.track(model)

        def serve(x):
            traces["serve"] += 1
            return {"y": model(x)}

        def call(x):
            traces["call"] += 1
            return model(x)

        archive.add_endpoint("serve", serve, input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        archive.add_endpoint("__call__", call, input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        return archive

    archive_of(model).write_out(str(tmp_path / "keras"), verbose=False)
    assert traces == {"serve": 2, "call": 2}  # Keras' own: traced before the save and again inside it
    traces.clear()
    keras_private.write_archive(archive_of(model), str(tmp_path / "ours"))
    assert traces == {"serve": 1, "call": 1}
    x = tf.constant(np.arange(6, dtype="float32").reshape(2, 3))
    theirs, ours = (tf.saved_model.load(str(tmp_path / name)) for name in ("keras", "ours"))
    assert sorted(ours.signatures) == sorted(theirs.signatures) == ["__call__", "serve", "serving_default"]
    np.testing.assert_array_equal(ours.signatures["serving_default"](x=x)["y"], theirs.signatures["serving_default"](x=x)["y"])
    np.testing.assert_array_equal(ours(x), model(x))
    assert len(ours.variables) == len(theirs.variables)



class _Lookup(keras.layers.Layer):
    """Strings to ids through a lookup table the layer owns (a resource the export must carry)."""

    def __init__(self):
        super().__init__()
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(["a", "b"]), tf.constant([1.0, 2.0])), default_value=0.0)

    def call(self, inputs):
        return self.table.lookup(inputs)[:, None]


def test_write_archive_records_the_variables_and_resources_keras_records(tmp_path):
    inputs = keras.Input((), dtype="string")
    model = keras.Model(inputs, keras.layers.Dense(2)(_Lookup()(inputs)))

    def archive_of(model):
        archive = keras.export.ExportArchive()
        archive.track(model)
        archive.add_endpoint("serve", model, input_signature=[tf.TensorSpec([None], tf.string)])
        return archive

    theirs = archive_of(model)
    theirs._filter_and_track_resources()  # what Keras' write_out records
    ours = archive_of(model)
    keras_private.write_archive(ours, str(tmp_path / "ours"))
    for name in ("_all_variables", "_misc_assets"):
        recorded = [getattr(archive._tf_trackable, name) for archive in (theirs, ours)]
        assert [id(x) for x in recorded[0]] == [id(x) for x in recorded[1]], name
    assert len(ours._tf_trackable._misc_assets) == 1  # the table
    loaded = tf.saved_model.load(str(tmp_path / "ours"))
    np.testing.assert_allclose(loaded.serve(tf.constant(["b", "z"])), model(tf.constant(["b", "z"])))

def test_fit_without_a_strategy_builds_first_and_traces_each_step_once():
    traces = {}

    def counted():
        class Counted(keras.Model):
            def __init__(self):
                super().__init__()
                self.dense = keras.layers.Dense(2)

            def call(self, x):
                return self.dense(x)

            def train_step(self, data):
                traces[name]["train"] += 1
                return super().train_step(data)

            def test_step(self, data):
                traces[name]["test"] += 1
                return super().test_step(data)

        return Counted()

    x, y = np.arange(24, dtype="float32").reshape(8, 3) / 10, np.arange(8) % 2
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    trained = {}
    for name in ("keras", "ours"):
        keras.utils.set_random_seed(3)
        traces[name] = collections.Counter()
        model = counted()
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
        with keras_private.strategy_fit(model) if name == "ours" else contextlib.nullcontext():
            history = model.fit(data, validation_data=data, epochs=2, verbose=0)
        trained[name] = (model, history.history)
    assert not set(keras_private._FIT_METHODS) & set(vars(trained["ours"][0]))  # patched for that fit only
    # Keras builds the optimizer and metrics inside the first trace, and TensorFlow traces a function that made
    # variables a second time; built from the element spec first, each step is traced once.
    assert traces == {"keras": {"train": 2, "test": 1}, "ours": {"train": 1, "test": 1}}
    for ours, theirs in zip(trained["ours"][0].weights, trained["keras"][0].weights):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert trained["ours"][1] == trained["keras"][1]


def _all_subclasses(cls):
    return {cls} | {sub for direct in cls.__subclasses__() for sub in _all_subclasses(direct)}


def test_models_inherit_no_training_workaround():
    """A task model is a plain Keras model: the strategy workaround is the harness's, for one run."""
    compat_classes = {value for value in vars(keras_private).values()
                      if isinstance(value, type) and value.__module__ == keras_private.__name__}
    models = _all_subclasses(Task)
    assert {tasks.BertClassifier, tasks.BertTokenClassifier, tasks.BertSpanLabeler, pretrainer.BertPretrainer,
            sentence_encoder.SentenceEncoder} <= models
    keras_fit = [cls for cls in keras.Model.__mro__ if "fit" in vars(cls)]
    for model in models:
        assert not compat_classes & set(model.__mro__), model
        for name in ("_maybe_symbolic_build", "_symbolic_build", "train_step", "test_step"):
            assert getattr(model, name) is getattr(keras.Model, name), (model, name)
        # `Task.fit` only turns lists of texts into tensors, then calls Keras' own.
        assert [cls for cls in model.__mro__ if "fit" in vars(cls)] == [Task] + keras_fit, model


def test_functions_unoptimized_sets_this_threads_call_options_and_gives_them_back():
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.eager import context

    before = context.context().function_call_options.config_proto_serialized

    @tf.function
    def function(x):  # a conditional and a loop, as an export's encoder and a tagger's windows hold them
        y = tf.cond(tf.reduce_sum(x) > 0, lambda: tf.nn.gelu(tf.matmul(x, x) + 1.0), lambda: -x)
        return tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, tf.tanh(y) * 2.0), (0, y))[1]

    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    with keras_private.functions_unoptimized():
        config = config_pb2.ConfigProto.FromString(context.context().function_call_options.config_proto_serialized)
        assert config.graph_options.rewrite_options.disable_meta_optimizer
        assert config.experimental.disable_functional_ops_lowering
        inside = [function(x).numpy(), function(-x).numpy()]
    assert context.context().function_call_options.config_proto_serialized == before
    config = config_pb2.ConfigProto.FromString(before)
    assert not config.graph_options.rewrite_options.disable_meta_optimizer
    assert not config.experimental.disable_functional_ops_lowering
    # The rewritten, lowered instance: the same values, each branch.
    np.testing.assert_allclose(inside, [function(x).numpy(), function(-x).numpy()], rtol=1e-6)


def _module_with_two_endpoints(directory):
    """A SavedModel with a variable, `kept` (reads it) and `dropped` (reads it and a captured constant); signatures of
    both."""
    module = tf.Module()
    module.weight = tf.Variable([[1.5, -2.0], [0.25, 3.0]])
    table = tf.constant([7.0, 8.0])
    module.kept = tf.function(lambda x: {"y": tf.matmul(x, module.weight)},
                              input_signature=[tf.TensorSpec([None, 2], tf.float32)])
    module.dropped = tf.function(lambda x: {"z": tf.nn.gelu(tf.matmul(x, module.weight)) * table},
                                 input_signature=[tf.TensorSpec([None, 2], tf.float32)])
    tf.saved_model.save(module, directory, signatures={"serving_default": module.kept, "dropped": module.dropped})
    return module


def test_saved_model_without_loads_the_rest_as_it_was(tmp_path):
    from tensorflow.python.saved_model import function_deserialization

    directory = str(tmp_path / "module")
    module = _module_with_two_endpoints(directory)
    x = tf.constant([[1.0, 2.0], [3.0, -4.0]])
    loaded_functions = []
    original = function_deserialization.load_function_def_library

    def counting(library, *args, **kwargs):
        loaded_functions.append(len(library.function))
        return original(library, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(function_deserialization, "load_function_def_library", counting)
        whole = tf.saved_model.load(directory)
        with keras_private.saved_model_without({"dropped"}):
            pruned = tf.saved_model.load(directory)
        after = tf.saved_model.load(directory)  # outside: the whole file again
    assert sorted(whole.signatures) == ["dropped", "serving_default"]
    assert sorted(pruned.signatures) == ["serving_default"] and not hasattr(pruned, "dropped")
    assert sorted(after.signatures) == ["dropped", "serving_default"] and hasattr(after, "dropped")
    # Fewer functions made into graphs: the dropped endpoint's, its signature's and the checkpoint's save/restore.
    assert loaded_functions[1] < loaded_functions[0] == loaded_functions[2], loaded_functions
    expected = module.kept(x)["y"].numpy()
    np.testing.assert_array_equal(pruned.kept(x)["y"].numpy(), expected)
    np.testing.assert_array_equal(pruned.signatures["serving_default"](x=x)["y"].numpy(), expected)
    np.testing.assert_array_equal(pruned.weight.numpy(), module.weight.numpy())  # the checkpoint restored


def test_saved_model_without_takes_a_choice_made_on_the_names_the_file_serves(tmp_path):
    directory = str(tmp_path / "module")
    _module_with_two_endpoints(directory)
    seen = []

    def unless_absent(served):  # leave `dropped` out where the file serves `kept`, which does its work
        seen.append(served)
        return ["dropped"] if "kept" in served else []

    with keras_private.saved_model_without({unless_absent}):
        pruned = tf.saved_model.load(directory)
    assert {"kept", "dropped", "serving_default"} <= seen[0] and "signatures" in seen[0]
    assert sorted(pruned.signatures) == ["serving_default"] and not hasattr(pruned, "dropped")
    with keras_private.saved_model_without({lambda served: ["dropped"] if "absent" in served else []}):
        whole = tf.saved_model.load(directory)
    assert sorted(whole.signatures) == ["dropped", "serving_default"] and hasattr(whole, "dropped")


def test_saved_model_without_leaves_other_threads_loading_the_whole_file(tmp_path):
    import threading

    directory = str(tmp_path / "module")
    _module_with_two_endpoints(directory)
    other = {}
    with keras_private.saved_model_without({"dropped"}):
        thread = threading.Thread(target=lambda: other.setdefault("loaded", tf.saved_model.load(directory)))
        thread.start()
        thread.join(timeout=60)
        mine = tf.saved_model.load(directory)
    assert not thread.is_alive(), "the other thread's load did not end in 60 s"
    assert hasattr(other["loaded"], "dropped") and not hasattr(mine, "dropped")


def test_saved_model_without_nested_gives_the_outer_endpoints_back(tmp_path):
    directory = str(tmp_path / "module")
    _module_with_two_endpoints(directory)
    with keras_private.saved_model_without({"dropped"}):
        with keras_private.saved_model_without({"other"}):
            inner = tf.saved_model.load(directory)
        outer = tf.saved_model.load(directory)
    assert not hasattr(inner, "dropped") and not hasattr(outer, "dropped")
    assert hasattr(tf.saved_model.load(directory), "dropped")


# --- native code, import hooks and file formats: only in _platform/ ---------------------------------------------


PLATFORM = ROOT / "_platform"
PLATFORM_MODULES = ("ctypes", "importlib.abc", "importlib.machinery", "flatbuffers")
PLATFORM_SUFFIXES = ("schema_py_generated",)
# Platform-specific code outside the folder, each with its reason; the list only shrinks.
PLATFORM_ALLOWED = {}


def _is_platform_module(name):
    return name.startswith(PLATFORM_MODULES) or name.split(".")[-1] in PLATFORM_SUFFIXES


def platform_uses(source):
    """`(line, what)` of every platform-specific import or use in the module's `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if _is_platform_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            if any(_is_platform_module(name) for name in names):
                found.append((node.lineno, f"from {node.module} import"))
        elif isinstance(node, ast.Attribute) and node.attr == "meta_path":
            found.append((node.lineno, "sys.meta_path"))
    return found


def test_platform_code_only_in_the_platform_folder():
    offenders = {}
    for path in sorted(ROOT.rglob("*.py")):
        if PLATFORM in path.parents:
            continue
        relative = str(path.relative_to(ROOT))
        uses = [use for use in platform_uses(path.read_text()) if use[1] not in PLATFORM_ALLOWED.get(relative, {})]
        if uses:
            offenders[relative] = uses
    assert offenders == {}, f"platform-specific code outside bert_keras/_platform/: {offenders}"


def test_the_audit_finds_what_it_looks_for():
    source = ("import ctypes\nimport importlib.abc\nfrom ai_edge_litert import schema_py_generated\n"
              "import flatbuffers\nsys.meta_path.insert(0, finder)\nimport os\n")
    assert [what for _, what in platform_uses(source)] == [
        "import ctypes", "import importlib.abc", "from ai_edge_litert import", "import flatbuffers", "sys.meta_path"]


def test_every_platform_module_names_what_it_depends_on():
    index = (PLATFORM / "__init__.py").read_text()
    for path in sorted(PLATFORM.glob("*.py")):
        if path.name == "__init__.py":
            continue
        assert f"`{path.stem}`" in index, f"{path.name} is missing from bert_keras/_platform/__init__.py's table"
        assert "Depends on" in ast.get_docstring(ast.parse(path.read_text())) or "|" in path.read_text()[:4000], path.name


# --- native: glibc's renameat2, tensorflow-text's kernel library ------------------------------------------------


def test_rename_exchange_swaps_two_directories_in_one_step(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "mark").write_text("a")
    (b / "mark").write_text("b")
    assert native._renameat2 is not None  # glibc >= 2.28: the swap this package's writers rely on
    assert native.rename_exchange(str(a), str(b)) is True
    assert (a / "mark").read_text() == "b" and (b / "mark").read_text() == "a"
    with pytest.raises(OSError, match="Could not swap"):
        native.rename_exchange(str(a), str(tmp_path / "missing"))


def test_tensorflow_text_holds_its_kernel_registerers_where_the_loader_looks():
    import ctypes

    framework, kernels = native.text_kernel_libraries()
    assert os.path.isfile(framework) and os.path.isfile(kernels)
    library = ctypes.CDLL(kernels, mode=ctypes.RTLD_GLOBAL)  # TensorFlow is imported: its framework library is loaded
    for name in native.TEXT_KERNEL_REGISTERERS:
        assert getattr(library, name), name


# --- tflite_file: the schema's IfOptions, and the names of a converted tf.cond's branches ------------------------


def test_a_converted_packing_condition_takes_its_gather_branch_after_the_rewrite():
    from bert_keras.layers import PackedTokenIndex, PackTokens, UnpackTokens

    index, pack, unpack = PackedTokenIndex(), PackTokens(), UnpackTokens()

    @tf.function(input_signature=[tf.TensorSpec([None, None, 4], tf.float32), tf.TensorSpec([None, None], tf.int32)])
    def packed_twice(x, mask):
        with tf.name_scope("encoder"):  # inside a model, as an export converts them
            packing = index(mask)
            return unpack(pack(x, packing) * 2.0, packing)

    module = tf.Module()
    module.packed_twice = packed_twice
    converter = tf.lite.TFLiteConverter.from_concrete_functions([packed_twice.get_concrete_function()], module)
    data = converter.convert()
    schema = tflite_file._schema()

    def branches(data):
        model = schema.Model.GetRootAs(data, 0)
        names = [model.Subgraphs(i).Name().decode() for i in range(model.SubgraphsLength())]
        codes = [max(model.OperatorCodes(i).BuiltinCode(), model.OperatorCodes(i).DeprecatedBuiltinCode())
                 for i in range(model.OperatorCodesLength())]
        found = []
        for graph in range(model.SubgraphsLength()):
            subgraph = model.Subgraphs(graph)
            for i in range(subgraph.OperatorsLength()):
                operator = subgraph.Operators(i)
                if codes[operator.OpcodeIndex()] == schema.BuiltinOperator.IF:
                    options = schema.IfOptions()
                    table = operator.BuiltinOptions()
                    options.Init(table.Bytes, table.Pos)
                    found.append((names[options.ThenSubgraphIndex()], names[options.ElseSubgraphIndex()]))
        return found

    before = branches(data)
    assert before and all(tflite_file._PACKING_BRANCH.search(then) and tflite_file._PACKING_BRANCH.search(other)
                          for then, other in before), before  # the converter's names the rewrite matches
    rewritten = tflite_file.gathered_branches(data)
    assert len(rewritten) == len(data)
    assert all(then == other and "_cond_false_" in then for then, other in branches(rewritten))
    interpreter = tf.lite.Interpreter(model_content=rewritten)
    runner = interpreter.get_signature_runner()
    x = np.arange(24, dtype="float32").reshape(2, 3, 4)
    mask = np.array([[1, 1, 0], [1, 0, 0]], "int32")
    out = next(iter(runner(x=x, mask=mask).values()))
    np.testing.assert_array_equal(out, x * 2.0 * mask[..., None])


# --- text_models: tensorflow-text's normalizer model and darts-clone's trie -------------------------------------


def test_the_double_array_finds_every_key_and_no_other():
    keys = sorted({chr(point).encode("utf-8") for point in (65, 66, 233, 0x2019, 0x1F600, 0x4E00, 0x4E01)})
    array = text_models.double_array(keys, list(range(10, 10 + len(keys))))
    assert [text_models.lookup(array, key) for key in keys] == list(range(10, 10 + len(keys)))
    assert text_models.lookup(array, b"C") is None and text_models.lookup(array, "\u4e02".encode()) is None


def test_a_normalizer_model_built_here_normalizes_in_tensorflow_texts_kernel():
    import tensorflow_text as tf_text

    table = {ord("A"): b"a", 0xE9: b"e", 0x2019: b"'", 0xAD: b"", 0: b""}  # upper case, accent, quote, soft hyphen
    normalizer = tf_text.FastBertNormalizer(model_buffer=text_models.normalizer_model_buffer(table, False))
    text = "A caf\u00e9\u2019s co\u00adop\u0000"
    assert normalizer.normalize(tf.constant([text])).numpy().tolist() == [b"a cafe's coop"]


@pytest.mark.parametrize("enabled", [True, False])
def test_a_saved_model_loads_without_collections_and_the_collector_is_left_as_it_was(tmp_path, monkeypatch, enabled):
    """`_platform.loading.load_saved_model` pauses Python's cyclic collector while TensorFlow restores the functions
    (their objects are walked once after, not at every collection on the way), and leaves it as the caller had it."""
    import gc

    from bert_keras._platform.loading import load_saved_model

    module = tf.Module()
    module.scale = tf.Variable(2.0)
    module.double = tf.function(lambda x: x * module.scale, input_signature=[tf.TensorSpec([None], tf.float32)])
    tf.saved_model.save(module, str(tmp_path / "module"))
    inside, collections_inside = [False], []
    restore = tf.saved_model.load

    def load(*args, **kwargs):
        inside[0] = True
        try:
            return restore(*args, **kwargs)
        finally:
            inside[0] = False

    def count(phase, info):
        if phase == "start" and inside[0]:
            collections_inside.append(info["generation"])

    monkeypatch.setattr(tf.saved_model, "load", load)
    thresholds, was_enabled = gc.get_threshold(), gc.isenabled()
    gc.set_threshold(1)  # a collection at nearly every allocation, where the collector runs
    (gc.enable if enabled else gc.disable)()
    gc.callbacks.append(count)
    try:
        loaded = load_saved_model(str(tmp_path / "module"))
        assert gc.isenabled() == enabled
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*thresholds)
        (gc.enable if was_enabled else gc.disable)()
    assert collections_inside == []
    np.testing.assert_array_equal(loaded.double(tf.constant([1.0, 2.0])).numpy(), [2.0, 4.0])
