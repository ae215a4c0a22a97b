"""LoRA on the native encoder: targets, freezing, merging, exports, adapter files, errors."""

import ast
import gc
import inspect
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import BertEncoder, hub, lora
from bert_keras.export import export_encoder
from bert_keras.layers import lora_dense
from bert_keras.export import export_classifier, load_classifier
from bert_keras.tasks import BertClassifier
from bert_keras.text import BertPreprocessor
from tests.helpers import assert_close, hub_inputs

WORDS = ["good", "bad", "movie", "fun", "boring", "the", "was", "great", "awful", "ok"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + [f"w{i}" for i in range(35)]
TINY = dict(vocab_size=len(VOCAB), num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32, max_sequence_length=32)
HIDDEN, INTERMEDIATE = TINY["hidden_size"], TINY["intermediate_size"]
# Embeddings (50 + 32 + 2) * 16 + LayerNorm 32; per block attention 4 * (16 * 16 + 16), feed-forward
# 16 * 32 + 32 + 32 * 16 + 16, two LayerNorms 64; the pooler 16 * 16 + 16.
ENCODER_PARAMETERS = (50 + 32 + 2) * 16 + 32 + 2 * (4 * (16 * 16 + 16) + (16 * 32 + 32 + 32 * 16 + 16) + 64) + 16 * 16 + 16


def _inputs(batch=4, seq=8, seed=0):
    rng = np.random.default_rng(seed)
    return hub_inputs(rng.integers(3, seq + 1, size=batch), seq, len(VOCAB), rng=rng, min_id=5, first_id=2)


def _classifier(encoder=None, **kwargs):
    return BertClassifier(encoder or BertEncoder(**TINY), num_classes=3, **kwargs)


def _randomize_adapters(model, seed=0):
    """Non-zero B (and new A) matrices, so that the adapters change the outputs."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        if "lora_kernel" in weight.path:
            weight.assign(rng.normal(0, 0.3, size=weight.shape).astype("float32"))


def _scale_head(model, seed=1):
    """A head of large weights: the pooled outputs are small (~0.05), and so would the logits be."""
    kernel = model.classifier_head.dense.kernel
    kernel.assign(np.random.default_rng(seed).normal(0, 10, size=kernel.shape).astype("float32"))


def _snapshot(model):
    return {weight.path: np.array(weight.numpy()) for weight in model.weights}


def _adapter_paths(model):
    return sorted(weight.path for weight in model.weights if "lora_kernel" in weight.path)


def test_targets_name_the_dense_layers_of_every_block():
    encoder = BertEncoder(**TINY)
    block = encoder.transformer_layers[0]
    found = {name: lora._target_layer(block, name) for name in lora.LORA_TARGETS}
    assert {name: (layer.name, layer.units) for name, layer in found.items()} == {
        "query": ("query", HIDDEN),
        "key": ("key", HIDDEN),
        "value": ("value", HIDDEN),
        "attention_output": ("output", HIDDEN),
        "intermediate": ("intermediate", INTERMEDIATE),
        "output": ("output", HIDDEN),
    }
    assert all(isinstance(layer, keras.layers.Dense) for layer in found.values())
    assert found["attention_output"] is block.attention.output_dense
    assert found["output"] is block.feed_forward.output_dense


@pytest.mark.parametrize(
    "targets, rank, expected",
    [
        # Per block and target: A (in, rank) + B (rank, out).
        (("query", "value"), 4, 2 * 2 * (16 * 4 + 4 * 16)),
        (tuple(lora.LORA_TARGETS), 2, 2 * (4 * (16 * 2 + 2 * 16) + (16 * 2 + 2 * 32) + (32 * 2 + 2 * 16))),
        ("intermediate", 8, 2 * (16 * 8 + 8 * 32)),
    ],
)
def test_trainable_parameters_are_the_adapters_and_the_head(targets, rank, expected):
    classifier = _classifier()
    encoder_parameters = classifier.encoder.count_params()
    head_parameters = HIDDEN * 3 + 3
    summary = lora.enable_lora(classifier, rank=rank, targets=targets)
    assert summary.adapter_parameters == expected
    assert summary.encoder_parameters == encoder_parameters == ENCODER_PARAMETERS
    assert summary.share == pytest.approx(expected / 6096)
    classifier.encoder.trainable = False  # phase 1, then phase 2 of fine-tuning
    assert sum(int(np.prod(w.shape)) for w in classifier.trainable_weights) == head_parameters
    classifier.encoder.trainable = True
    assert sum(int(np.prod(w.shape)) for w in classifier.trainable_weights) == expected + head_parameters
    assert classifier.encoder.count_params() == encoder_parameters + expected
    assert lora.lora_summary(classifier) == summary


def test_unfreezing_the_encoder_leaves_the_base_weights_frozen():
    encoder = BertEncoder(**TINY)
    lora.enable_lora(encoder, rank=2)
    for flag in (False, True, True):
        encoder.trainable = flag
        for layer in encoder._flatten_layers():
            layer.trainable = flag  # also layer by layer, as a user might
    assert sorted(w.path for w in encoder.trainable_weights) == _adapter_paths(encoder)
    assert len(_adapter_paths(encoder)) == 2 * 2 * 2
    query = encoder.transformer_layers[0].attention.query_dense
    assert query._kernel.trainable is False
    assert query.bias.trainable is False


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["head", "full"])
def test_a_fit_step_changes_only_the_adapters_and_the_head(phase):
    classifier = _classifier()
    lora.enable_lora(classifier, rank=4, seed=3)
    classifier.encoder.trainable = False
    if phase == "full":
        classifier.encoder.trainable = True  # what fine-tuning's phase 2 does
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    classifier.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss)
    inputs, labels = _inputs(batch=8), np.array([0, 1, 2, 0, 1, 2, 0, 1])
    before = _snapshot(classifier)
    # Three steps: B starts at zero, so A's gradient is zero in the first one.
    classifier.fit(inputs, labels, epochs=3, batch_size=8, verbose=0)
    after = _snapshot(classifier)
    changed = sorted(path for path in before if not np.array_equal(before[path], after[path]))
    head = ["classifier/dense/bias", "classifier/dense/kernel"]
    assert changed == sorted(head + (_adapter_paths(classifier) if phase == "full" else []))
    assert len(before) == 49  # 39 encoder weights, 8 adapters, 2 of the head: every one compared


def test_merged_model_equals_the_unmerged_and_has_no_lora():
    classifier = _classifier()
    _scale_head(classifier)
    plain_weights = [w.path for w in classifier.weights]
    inputs = _inputs()
    plain = classifier(inputs, training=False)
    plain_sequence = classifier.encoder(inputs)["sequence_output"]
    lora.enable_lora(classifier, rank=4, targets=("query", "value", "intermediate"), alpha=8)  # a scale of 2
    np.testing.assert_array_equal(classifier(inputs, training=False), plain)  # B = 0: nothing changes yet
    _randomize_adapters(classifier)
    unmerged = classifier(inputs, training=False)
    unmerged_sequence = classifier.encoder(inputs)["sequence_output"]
    assert float(np.max(np.abs(unmerged - plain))) > 0.1  # the adapters matter
    assert float(np.max(np.abs(unmerged_sequence - plain_sequence))) > 0.1
    assert lora.merge_lora(classifier) is classifier
    assert_close(classifier(inputs, training=False), unmerged, atol=1e-5)
    assert_close(classifier.encoder(inputs)["sequence_output"], unmerged_sequence, atol=1e-5)
    assert [w.path for w in classifier.weights] == plain_weights  # same variables, same order
    dense_configs = [layer.get_config() for layer in classifier._flatten_layers() if isinstance(layer, keras.layers.Dense)]
    assert len(dense_configs) == 2 * 6 + 2  # six per block, the pooler, the head
    assert [c for c in dense_configs if "lora_rank" in c or "lora_alpha" in c] == []
    assert lora.lora_summary(classifier) is None
    classifier.encoder.trainable = True  # everything trains again
    assert sum(int(np.prod(w.shape)) for w in classifier.trainable_weights) == ENCODER_PARAMETERS + HIDDEN * 3 + 3


def test_merged_weights_file_loads_into_a_model_that_never_had_lora(tmp_path):
    classifier = _classifier()
    lora.enable_lora(classifier, rank=4)
    _randomize_adapters(classifier)
    inputs = _inputs()
    expected = classifier(inputs, training=False)
    lora.merge_lora(classifier)
    path = str(tmp_path / "merged.weights.h5")
    classifier.save_weights(path)
    plain = _classifier()
    plain.load_weights(path)
    assert_close(plain(inputs, training=False), expected, atol=1e-5)


@pytest.mark.slow
def test_merged_classifier_exports_an_ordinary_savedmodel(tmp_path):
    preprocessor = BertPreprocessor(VOCAB, seq_length=12)
    classifier = _classifier(preprocessor=preprocessor)
    _scale_head(classifier)
    lora.enable_lora(classifier, rank=4, alpha=2)  # a scale of 0.5
    _randomize_adapters(classifier)
    texts = ["good movie", "the movie was boring", "awful", "great fun ok"]
    expected = tf.nn.softmax(classifier(tf.constant(texts), training=False)).numpy()
    assert float(np.max(expected)) > 0.5  # the probabilities are not all about 1/3
    lora.merge_lora(classifier)
    export_dir = export_classifier(classifier, str(tmp_path / "classifier"), ["neg", "neu", "pos"])
    loaded = tf.saved_model.load(export_dir)
    names = [v.name for v in loaded.variables if "seed_generator" not in v.name]
    assert len(names) == 39 + 2  # the encoder's and the head's, as without LoRA
    assert [name for name in names if "lora" in name] == []
    assert_close(load_classifier(export_dir, warm_up=False).predict_proba(texts), expected, atol=1e-5)


def test_adapters_round_trip_through_their_file(tmp_path):
    keras.utils.set_random_seed(5)
    source = _classifier()
    target = _classifier()
    target.set_weights(source.get_weights())  # the same pretrained weights
    lora.enable_lora(source, rank=4, targets="query,value", alpha=8)
    _randomize_adapters(source)
    path = lora.save_adapters(source, str(tmp_path / "adapters"))
    assert sorted(os.listdir(path)) == [".bert_keras_output.json", lora.CONFIG_FILE, lora.ADAPTERS_FILE]
    with open(os.path.join(path, lora.CONFIG_FILE)) as f:
        config = json.load(f)
    assert (config["rank"], config["alpha"], config["targets"], config["adapter_parameters"]) == (4, 8.0, ["query", "value"], 512)
    # 512 float32 numbers and a header: the adapters alone.
    assert 512 * 4 < os.path.getsize(os.path.join(path, lora.ADAPTERS_FILE)) < 512 * 4 + 2048
    summary = lora.load_adapters(target, path)  # enables LoRA as recorded
    assert (summary.rank, summary.alpha, summary.targets) == (4, 8.0, ("query", "value"))
    for a, b in zip(source.weights, target.weights):
        assert a.path == b.path
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    inputs = _inputs()
    np.testing.assert_array_equal(target(inputs, training=False), source(inputs, training=False))
    with pytest.raises(FileExistsError, match="already exists"):
        lora.save_adapters(source, path)
    lora.save_adapters(source, path, overwrite=True)


def test_adapter_files_refuse_a_model_they_do_not_fit(tmp_path):
    source = _classifier()
    lora.enable_lora(source, rank=4)
    path = lora.save_adapters(source, str(tmp_path / "adapters"))
    other_rank = _classifier()
    lora.enable_lora(other_rank, rank=2)
    with pytest.raises(ValueError, match=r"have \{'rank': 4, .*'rank': 2"):
        lora.load_adapters(other_rank, path)
    other_targets = _classifier()
    lora.enable_lora(other_targets, rank=4, targets=("query", "key"))
    with pytest.raises(ValueError, match=r"'targets': \['query', 'value'\]\}; the model's LoRA has .*\['query', 'key'\]"):
        lora.load_adapters(other_targets, path)
    smaller = BertEncoder(**dict(TINY, num_layers=1))
    with pytest.raises(ValueError, match="'num_layers': 2.*this one has .*'num_layers': 1"):
        lora.load_adapters(smaller, path)
    assert lora.lora_summary(smaller) is None  # refused before LoRA was enabled
    os.makedirs(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="not an adapters directory written by bert_keras.lora.save_adapters"):
        lora.load_adapters(_classifier(), str(tmp_path / "elsewhere"))


def test_weights_files_keep_the_adapters_exactly(tmp_path):
    """Keras saves a LoRA Dense merged and zeroes A and B on load; a training backup here resumes exactly."""
    model = _classifier()
    lora.enable_lora(model, rank=4)
    _randomize_adapters(model)
    path = str(tmp_path / "backup.weights.h5")
    model.save_weights(path)
    resumed = _classifier()
    lora.enable_lora(resumed, rank=4)
    resumed.load_weights(path)
    for a, b in zip(model.weights, resumed.weights):
        assert a.path == b.path
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert sorted(w.path for w in resumed.encoder.trainable_weights) == _adapter_paths(resumed)


def test_an_ordinary_weights_file_loads_into_a_lora_model_with_live_adapters(tmp_path):
    plain = _classifier()
    _scale_head(plain)
    path = str(tmp_path / "plain.weights.h5")
    plain.save_weights(path)
    model = _classifier()
    lora.enable_lora(model, rank=4)
    _randomize_adapters(model)
    model.load_weights(path)
    inputs = _inputs()
    assert_close(model(inputs, training=False), plain(inputs, training=False), atol=1e-6)
    query = model.encoder.transformer_layers[0].attention.query_dense
    assert float(np.max(np.abs(query.lora_kernel_b.numpy()))) == 0.0
    assert float(np.max(np.abs(query.lora_kernel_a.numpy()))) > 0.0  # so B's gradient is not zero


@pytest.mark.parametrize("rank", [0, -1, 2.5, True, "8"])
def test_bad_rank_names_lora_rank(rank):
    with pytest.raises(ValueError, match=f"argument `lora_rank`, expected a positive integer. Received: lora_rank={rank!r}"):
        lora.enable_lora(BertEncoder(**TINY), rank=rank)


def test_bad_targets_list_the_valid_names():
    valid = r"\['query', 'key', 'value', 'attention_output', 'intermediate', 'output'\]"
    with pytest.raises(ValueError, match=f"`lora_targets`, expected one of {valid}. Received: lora_targets='values'"):
        lora.enable_lora(BertEncoder(**TINY), targets=("query", "values"))
    with pytest.raises(ValueError, match=f"expected at least one of {valid}"):
        lora.enable_lora(BertEncoder(**TINY), targets=())
    assert lora.check_lora_targets(" value, query,value") == ("value", "query")


def test_other_refusals():
    encoder = BertEncoder(**TINY)
    with pytest.raises(ValueError, match="`lora_alpha`, expected a positive float. Received: lora_alpha=0"):
        lora.enable_lora(encoder, alpha=0)
    with pytest.raises(ValueError, match="Cannot merge the adapters: LoRA is not enabled on encoder"):
        lora.merge_lora(encoder)
    with pytest.raises(ValueError, match="Cannot save adapters: LoRA is not enabled"):
        lora.save_adapters(encoder, "unused")
    lora.enable_lora(encoder, rank=2)
    with pytest.raises(ValueError, match=r"already enabled on encoder .* \(rank 2 on query, value\)\. Call merge_lora"):
        lora.enable_lora(encoder, rank=4)
    with pytest.raises(ValueError, match="holds 0"):
        lora.enable_lora(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]))


@pytest.mark.filterwarnings("ignore:Layer .* does not have a `quantize` method")
def test_quantized_encoder_is_refused(monkeypatch):
    encoder = BertEncoder(**TINY)
    # Keras' quantize deletes each kernel and runs a full garbage collection per deletion: seconds
    # each late in the suite, and nothing this test checks.
    monkeypatch.setattr(gc, "collect", lambda *args: 0)
    encoder.quantize("int8")
    with pytest.raises(ValueError, match="quantized encoder .*int8.* merge_lora\\(model\\), then quantize"):
        lora.enable_lora(encoder)


@pytest.mark.slow
def test_hub_module_is_refused_with_the_way_to_a_native_encoder(tmp_path):
    keras.utils.set_random_seed(11)
    native = BertEncoder(**TINY)
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(VOCAB) + "\n")
    module_dir = export_encoder(native, str(tmp_path / "encoder"), str(vocab_file), do_lower_case=True)
    layer = hub.KerasLayer(module_dir, trainable=True, name="encoder")
    expected = f"Import the module into a BertEncoder first: `encoder = BertEncoder.from_checkpoint({module_dir!r})`"
    with pytest.raises(ValueError, match="LoRA needs the native bert_keras.BertEncoder") as error:
        lora.enable_lora(_classifier(layer))
    assert expected in str(error.value)
    with pytest.raises(ValueError, match="not a Hub module layer"):
        lora.enable_lora(layer)
    # What the message says works: the module imported, LoRA on it.
    imported = BertEncoder.from_checkpoint(module_dir)
    summary = lora.enable_lora(_classifier(imported), rank=4)
    assert summary.adapter_parameters == 512
    inputs = _inputs()
    assert_close(imported(inputs)["pooled_output"], layer(inputs)["pooled_output"], atol=1e-5)


@pytest.mark.slow
def test_finetune_trains_only_adapters_and_head_and_resumes_them_exactly(tmp_path):
    """Through `bert_keras.training.finetune` (freeze -> adapt -> unfreeze, backups): the LoRA contract holds."""
    from bert_keras.training import finetune  # a later layer than lora; only this test needs it

    def build():
        keras.utils.set_random_seed(3)
        model = _classifier()
        lora.enable_lora(model, rank=4, seed=1)
        return model

    inputs = _inputs(batch=16, seed=2)
    data = tf.data.Dataset.from_tensor_slices((inputs, np.arange(16) % 3)).batch(8)
    model = build()
    before = _snapshot(model)
    backup = str(tmp_path / "backup")
    finetune(model, data, head_epochs=1, epochs=2, learning_rate=1e-2, verbose=0, backup_dir=backup)
    after = _snapshot(model)
    changed = sorted(path for path in before if not np.array_equal(before[path], after[path]))
    assert changed == sorted(["classifier/dense/bias", "classifier/dense/kernel"] + _adapter_paths(model))
    # A rerun restores both phases from the backups: the adapters and the base kernels as they were.
    resumed = build()
    finetune(resumed, data, head_epochs=1, epochs=2, learning_rate=1e-2, verbose=0, backup_dir=backup)
    for path, value in _snapshot(resumed).items():
        np.testing.assert_array_equal(value, after[path], err_msg=path)


# Ways around an object's own attribute handling (Keras' tracking among them).
BYPASSES = ("__delattr__", "__setattr__", "__dict__")


def _private_uses(source):
    """`(line, what)` of each private-API use in the code of `source`: `obj._name` on anything but `self`/`cls`, a
    bypass (`x.__delattr__`, `object.__setattr__`), `getattr`-style access to a `_name`, `keras.src` /
    `tensorflow.python`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            dunder = node.attr.startswith("__") and node.attr.endswith("__")
            own = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if node.attr in BYPASSES or not (dunder or own):  # `type(x).__name__` is public Python
                found.append((node.lineno, f".{node.attr}"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "delattr", "hasattr") and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and str(node.args[1].value).startswith("_")):
            found.append((node.lineno, f"{node.func.id}(..., {node.args[1].value!r})"))
        elif isinstance(node, ast.Attribute) and node.attr in ("src", "python") and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in (("keras", "src"), ("tf", "python"), ("tensorflow", "python")):
                found.append((node.lineno, f"{node.value.id}.{node.attr}"))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            found += [(node.lineno, f"import {m}") for m in modules if m.startswith(("keras.src", "tensorflow.python"))]
    return sorted(found)


@pytest.mark.parametrize("module", [lora, lora_dense])
def test_lora_uses_public_keras_api_only(module):
    """The private API LoRA needs (a freeze `trainable = True` cannot undo) lives in `_platform.keras_private`, nowhere else."""
    assert _private_uses(inspect.getsource(module)) == []


def test_the_private_api_check_finds_what_it_looks_for():
    sample = (
        "import keras.src.saving\n"
        "x = layer._tracker\n"
        "y = getattr(layer, '_kernel')\n"
        "super(keras.layers.Layer, layer).__delattr__(name)\n"
        "object.__setattr__(encoder, 'state', 1)\n"
        "z = self._own  # the layer's own; a comment naming __delattr__ or keras.src is no use\n"
        "keras.src.utils.python_utils.remove_by_id(a, b)\n"
    )
    assert _private_uses(sample) == [(1, "import keras.src.saving"), (2, "._tracker"), (3, "getattr(..., '_kernel')"),
                                     (4, ".__delattr__"), (5, ".__setattr__"), (7, "keras.src")]


@pytest.mark.slow
def test_a_lora_model_round_trips_through_weights_and_keras_files(tmp_path):
    model = _classifier()
    _scale_head(model)
    lora.enable_lora(model, rank=4, targets=("query", "value", "output"), alpha=8)
    _randomize_adapters(model)
    inputs = _inputs()
    expected = model(inputs, training=False)
    # Weights files (and the training backups, which are weights files) into a model with the same LoRA: exact.
    weights_path = str(tmp_path / "lora.weights.h5")
    model.save_weights(weights_path)
    resumed = _classifier()
    lora.enable_lora(resumed, rank=4, targets=("query", "value", "output"), alpha=8)
    resumed.load_weights(weights_path)
    np.testing.assert_array_equal(resumed(inputs, training=False), expected)
    assert lora.lora_summary(resumed) == lora.lora_summary(model)
    # A .keras file: load_model rebuilds the encoder from its config, which does not record LoRA, so the
    # adapters load merged into the kernels; into a model with the same LoRA, load_weights restores them exactly.
    keras_path = str(tmp_path / "lora.keras")
    model.save(keras_path)
    loaded = keras.saving.load_model(keras_path)
    assert_close(loaded(inputs, training=False), expected, atol=1e-5)
    assert lora.lora_summary(loaded) is None
    assert [w.path for w in loaded.weights if "lora" in w.path] == []
    exact = _classifier()
    lora.enable_lora(exact, rank=4, targets=("query", "value", "output"), alpha=8)
    exact.load_weights(keras_path)
    for a, b in zip(model.weights, exact.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    np.testing.assert_array_equal(exact(inputs, training=False), expected)


@pytest.mark.slow
def test_merging_every_target_of_twelve_blocks_runs_no_full_collection(monkeypatch, nothing_frozen):
    """144 adapter variables are deleted; Keras collects garbage after each (0.5-1 s over a TensorFlow process)."""
    encoder = BertEncoder(**dict(TINY, num_layers=12))
    lora.enable_lora(encoder, rank=2, targets=tuple(lora.LORA_TARGETS))
    frozen_counts = []
    collect = gc.collect

    def recording_collect(*args):
        frozen_counts.append(gc.get_freeze_count())
        return collect(*args)

    monkeypatch.setattr(gc, "collect", recording_collect)
    lora.merge_lora(encoder)
    assert len(frozen_counts) == 12 * 6 * 2
    assert min(frozen_counts) > 1000  # every collection left the process's existing objects aside
    assert gc.get_freeze_count() == 0
    assert len(encoder.trainable_weights) == len(encoder.weights) == 12 * 16 + 7
