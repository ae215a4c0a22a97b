"""Shared test helpers: the layer and model checks, the Hub-input builder, the fuzz settings."""

import os

import numpy as np
import keras
import tensorflow as tf


def fuzz_settings():
    """hypothesis settings of every fuzz test: `BERT_KERAS_FUZZ_EXAMPLES` examples (200 in CI), no deadline."""
    from hypothesis import HealthCheck, settings  # hypothesis is a test dependency; only fuzz tests need it

    return settings(
        max_examples=int(os.environ.get("BERT_KERAS_FUZZ_EXAMPLES", "200")),
        deadline=None,
        database=None,  # nothing written into the working tree
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
    )


def ids_per_row(ragged):
    """Each row's values of a ragged tensor of any depth, flattened, as Python lists: `[sum(row, []) for row in
    ragged.to_list()]` for `(texts, words, pieces)`, read from the row splits with numpy. `to_list()` builds every
    row's nested lists one by one: 20,000 tweets took it 40 s, this a fraction of a second."""
    values = ragged.flat_values.numpy().tolist()
    splits = ragged.row_splits.numpy()
    for inner in ragged.nested_row_splits[1:]:
        splits = inner.numpy()[splits]
    return [values[start:end] for start, end in zip(splits[:-1].tolist(), splits[1:].tolist())]


def hub_inputs(lengths, seq, vocab_size, seed=0, rng=None, min_id=1, first_id=None, segment_b_from=None):
    """The Hub input dict for rows of `lengths` real tokens (padding after), the one builder the tests share.

    Args:
        lengths: real tokens per row.
        seq: padded length.
        vocab_size: ids are drawn from [min_id, vocab_size).
        seed, rng: the random source (`rng` continues a caller's generator).
        min_id: smallest id drawn (1 skips [PAD]; 5 skips the special tokens).
        first_id: optional id put at position 0 of every row (e.g. [CLS] = 2).
        segment_b_from: None (one segment), an int (segment B from that position) or `"half"`
            (from each row's middle).
    """
    rng = np.random.default_rng(seed) if rng is None else rng
    lengths = np.asarray(lengths)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype("int32")  # (batch, seq)
    ids = rng.integers(min_id, vocab_size, size=mask.shape).astype("int32") * mask
    if first_id is not None:
        ids[:, 0] = first_id
    if segment_b_from is None:
        types = np.zeros_like(ids)
    else:
        start = lengths[:, None] // 2 if segment_b_from == "half" else segment_b_from
        types = ((np.arange(seq)[None, :] >= start) * mask).astype("int32")
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


def assert_close(actual, expected, atol=1e-6):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    diff = float(np.max(np.abs(actual - expected))) if actual.size else 0.0
    assert diff <= atol, f"max abs diff {diff} > {atol}"


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def run_layer_test(
    layer_cls,
    init_kwargs,
    input_data,
    expected_output_shape,
    expected_num_trainable_weights,
    expected_num_params,
    call_kwargs=None,
    tmp_path=None,
):
    """Config round trip, eager and symbolic calls, weight counts, a fit step, `.keras` save/load.

    `input_data` is one array or a list of arrays passed positionally.
    """
    call_kwargs = call_kwargs or {}
    inputs = _as_list(input_data)

    # Config round trip.
    layer = layer_cls(**init_kwargs)
    config = layer.get_config()
    for key, value in init_kwargs.items():
        assert key in config, f"`{key}` missing from get_config()"
    revived = layer_cls.from_config(config)
    assert revived.get_config() == config

    # Eager call, shape and weights.
    output = layer(*inputs, **call_kwargs)
    assert tuple(output.shape) == tuple(expected_output_shape)
    assert len(layer.trainable_weights) == expected_num_trainable_weights
    assert layer.count_params() == expected_num_params

    # Symbolic call.
    symbolic_inputs = [keras.Input(batch_shape=x.shape, dtype=str(x.dtype)) for x in inputs]
    symbolic_output = layer_cls(**init_kwargs)(*symbolic_inputs, **call_kwargs)
    assert tuple(symbolic_output.shape) == tuple(expected_output_shape)

    # A model around the layer: one fit step changes the weights and lowers the loss.
    model_layer = layer_cls(**init_kwargs)
    model_inputs = [keras.Input(batch_shape=x.shape, dtype=str(x.dtype)) for x in inputs]
    model_output = model_layer(*model_inputs, **call_kwargs)
    model = keras.Model(model_inputs, model_output)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    target = np.random.default_rng(0).normal(size=expected_output_shape).astype("float32")
    before = model.evaluate(inputs, target, verbose=0)
    model.fit(inputs, target, epochs=3, batch_size=len(inputs[0]), verbose=0)
    after = model.evaluate(inputs, target, verbose=0)
    assert after < before, f"loss did not decrease: {before} -> {after}"

    # .keras save/load reproduces outputs exactly.
    if tmp_path is not None:
        path = str(tmp_path / f"{layer_cls.__name__}.keras")
        model.save(path)
        restored = keras.saving.load_model(path)
        np.testing.assert_array_equal(
            np.asarray(restored.predict(inputs, verbose=0)), np.asarray(model.predict(inputs, verbose=0))
        )
    return layer, output


def _flat_outputs(outputs):
    if isinstance(outputs, dict):
        return {key: _flat_outputs(value) for key, value in outputs.items()}
    if isinstance(outputs, (list, tuple)):
        return [_flat_outputs(value) for value in outputs]
    return np.asarray(outputs)


def _assert_same_outputs(actual, expected):
    actual, expected = _flat_outputs(actual), _flat_outputs(expected)
    if isinstance(expected, dict):
        assert sorted(actual) == sorted(expected)
        for key in expected:
            _assert_same_outputs(actual[key], expected[key])
    elif isinstance(expected, list):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _assert_same_outputs(a, e)
    else:
        np.testing.assert_array_equal(actual, expected)


def run_model_test(model, inputs, tmp_path, safe_mode=True):
    """The shared checks of a model (an encoder or a task): config and `.keras` round trips, exact outputs.

    `from_config(get_config())` with the same weights gives the same config and
    outputs; `.keras` save/load gives the same class, config and outputs.
    Returns `(outputs, restored)`: the model's outputs on `inputs` and the model loaded back.
    """
    expected = model(inputs, training=False)
    config = model.get_config()
    revived = type(model).from_config(config)
    revived.set_weights(model.get_weights())
    assert revived.get_config() == config
    _assert_same_outputs(revived(inputs, training=False), expected)

    path = str(tmp_path / f"{type(model).__name__}.keras")
    model.save(path)
    restored = keras.saving.load_model(path, safe_mode=safe_mode)
    assert type(restored) is type(model)
    assert restored.get_config() == config
    _assert_same_outputs(restored(inputs, training=False), expected)
    return expected, restored


def run_under_tf_function(fn, *args, jit_compile=False):
    return tf.function(fn, jit_compile=jit_compile)(*args)


class PlantedResource(tf.saved_model.experimental.TrackableResource):
    """A resource whose initializer, run by `tf.saved_model.load`, writes `path`: proof that a graph was loaded."""

    def __init__(self, path):
        super().__init__()
        self._path = path

    def _create_resource(self):
        return tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[], shared_name=f"planted_{id(self)}")

    def _initialize(self):
        tf.io.write_file(self._path, "planted code ran")
        return tf.raw_ops.AssignVariableOp(resource=self.resource_handle, value=tf.constant(1.0))


def planted_module(directory, flag):
    """Saves a SavedModel into `directory` that writes the file `flag` (a pathlib.Path) whenever it is loaded."""
    module = tf.Module()
    module.planted = PlantedResource(str(flag))
    tf.saved_model.save(module, str(directory))
    if flag.exists():
        flag.unlink()  # saving ran it once; only a load may run it again
    return str(directory)


def save_tiny_bert(directory, vocabulary, num_layers=1, seed=0):
    """A tiny random transformers `BertModel` without dropout and its vocab.txt in `directory`; returns the path.

    Needs torch and transformers (the test extra): callers skip without them.
    """
    import torch
    import transformers

    config = transformers.BertConfig(vocab_size=len(vocabulary), hidden_size=32, num_hidden_layers=num_layers,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(seed)
    transformers.BertModel(config).save_pretrained(directory)
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocabulary) + "\n")
    return str(directory)


def as_written_before_the_manifest(export_dir):
    """Rewrites an export as versions before the manifest wrote it: its settings in its kind's own file.

    A classifier's in `assets.extra/labels.json`, a tagger's there with `"task": "tagger"`, a reader's in
    `reader.json`, a sentence encoder's in `sentence_encoder.json`; `export.json` removed. Returns the old file's path.
    """
    import json

    from bert_keras.export.manifest import manifest_path, read_manifest

    settings = read_manifest(export_dir)
    kind = settings.pop("kind")
    for key in ("format", "version"):
        settings.pop(key)
    name = {"classifier": "labels.json", "tagger": "labels.json", "reader": "reader.json",
            "sentence_encoder": "sentence_encoder.json"}[kind]
    settings.pop("aggregation", None)  # a setting of this version's taggers
    tokenizer = settings.pop("tokenizer", None)  # versions before recorded only a tagger's, as these three fields
    if kind == "tagger":
        settings["task"] = "tagger"
        settings.update(tokenizer=tokenizer["kind"], unknown_token=tokenizer["unknown_token"],
                        suffix_indicator=tokenizer.get("suffix_indicator"))
        if settings.get("tokenizer") != "wordpiece":
            settings.pop("suffix_indicator", None)  # versions before wrote it for WordPiece only
    path = os.path.join(export_dir, "assets.extra", name)
    with open(path, "w") as f:
        json.dump(settings, f)
    os.remove(manifest_path(export_dir))
    return path
