
import os

import numpy as np
import keras
import pytest
import tensorflow as tf

from bert_keras import hub
from tests.helpers import assert_close
from tests.hub.conftest import encoder_inputs

KEYS = ("input_word_ids", "input_mask", "input_type_ids")


def _classifier(encoder_layer):
    inputs = {k: keras.Input(shape=(None,), dtype="int32", name=k) for k in KEYS}
    pooled = encoder_layer(inputs)["pooled_output"]
    logits = keras.layers.Dense(2, name="head")(pooled)
    return keras.Model(inputs, logits)


def _compile(model, learning_rate):
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )


def _data(n=16):
    inputs = encoder_inputs(batch=n, seq=10, seed=1)
    labels = (inputs["input_word_ids"][:, 1] % 2).astype("int32")
    return inputs, labels


def _snapshot(variables):
    return [np.array(v.numpy()) for v in variables]


def _changed(before, variables):
    return sum(not np.array_equal(a, v.numpy()) for a, v in zip(before, variables))


@pytest.mark.slow
def test_frozen_then_unfrozen_training_updates_the_modules_own_variables(encoder_dir):
    layer = hub.KerasLayer(encoder_dir, trainable=False)
    module_variables = list(layer.resolved_object.variables)
    assert len(layer.weights) == len(module_variables) == 39
    assert layer.trainable_weights == []
    model = _classifier(layer)
    head = model.get_layer("head")
    inputs, labels = _data()

    _compile(model, 1e-2)
    encoder_before, head_before = _snapshot(module_variables), _snapshot(head.weights)
    model.fit(inputs, labels, epochs=1, batch_size=8, verbose=0)
    assert _changed(encoder_before, module_variables) == 0
    assert _changed(head_before, head.weights) == 2

    layer.trainable = True
    assert len(layer.trainable_weights) == 39
    _compile(model, 2e-5)
    model.fit(inputs, labels, epochs=1, batch_size=8, verbose=0)
    assert _changed(encoder_before, module_variables) == 39
    # The module's own function reads the trained values.
    eager = layer.resolved_object({k: tf.constant(v) for k, v in inputs.items()})["pooled_output"]
    assert_close(layer(inputs)["pooled_output"], eager, atol=1e-6)


@pytest.mark.slow
def test_training_reaches_the_module_only_when_trainable(encoder_dir):
    inputs = {k: tf.constant(v) for k, v in encoder_inputs().items()}
    frozen = hub.KerasLayer(encoder_dir, trainable=False)
    reference = frozen(inputs, training=False)["pooled_output"]
    assert_close(frozen(inputs, training=True)["pooled_output"], reference, atol=0)
    trainable = hub.KerasLayer(encoder_dir, trainable=True)
    assert_close(trainable(inputs, training=False)["pooled_output"], reference, atol=0)
    assert float(tf.reduce_max(tf.abs(trainable(inputs, training=True)["pooled_output"] - reference))) > 1e-4


@pytest.mark.slow
def test_output_key_and_signature(encoder_dir):
    inputs = {k: tf.constant(v) for k, v in encoder_inputs().items()}
    full = hub.KerasLayer(encoder_dir)(inputs)
    pooled = hub.KerasLayer(encoder_dir, output_key="pooled_output")(inputs)
    assert_close(pooled, full["pooled_output"], atol=0)
    by_signature = hub.KerasLayer(encoder_dir, signature="serving_default", output_key="sequence_output")(inputs)
    assert_close(by_signature, full["sequence_output"], atol=1e-6)
    with pytest.raises(ValueError, match=r"no key 'logits'.*pooled_output"):
        hub.KerasLayer(encoder_dir, output_key="logits")(inputs)
    with pytest.raises(ValueError, match="exactly one of `output_key` or `signature_outputs_as_dict=True`"):
        hub.KerasLayer(encoder_dir, signature="serving_default")
    with pytest.raises(ValueError, match=r"Unknown signature 'serve'.*\['serving_default'\]"):
        hub.KerasLayer(encoder_dir, signature="serve", output_key="x")


@pytest.mark.slow
def test_keras_file_round_trip_restores_trained_weights(encoder_dir, tmp_path):
    layer = hub.KerasLayer(encoder_dir, trainable=True)
    model = _classifier(layer)
    _compile(model, 1e-3)
    inputs, labels = _data()
    model.fit(inputs, labels, epochs=1, batch_size=8, verbose=0)
    expected = model.predict(inputs, verbose=0)
    path = str(tmp_path / "classifier.keras")
    model.save(path)
    restored = keras.saving.load_model(path, safe_mode=False)
    restored_layer = next(l for l in restored.layers if isinstance(l, hub.KerasLayer))
    assert restored_layer.trainable is True
    np.testing.assert_array_equal(restored.predict(inputs, verbose=0), expected)
    on_disk = hub.KerasLayer(encoder_dir)
    assert not np.array_equal(on_disk.weights[0].numpy(), restored_layer.weights[0].numpy()) or not np.array_equal(
        on_disk.weights[-1].numpy(), restored_layer.weights[-1].numpy()
    )


@pytest.mark.slow
def test_model_export_serves_the_trained_encoder(encoder_dir, tmp_path):
    layer = hub.KerasLayer(encoder_dir, trainable=True)
    model = _classifier(layer)
    _compile(model, 1e-3)
    inputs, labels = _data()
    model.fit(inputs, labels, epochs=1, batch_size=8, verbose=0)
    export_dir = str(tmp_path / "exported")
    model.export(export_dir, verbose=False)
    reloaded = tf.saved_model.load(export_dir)
    served = reloaded.serve({k: tf.constant(v) for k, v in inputs.items()})
    assert_close(served, model.predict(inputs, verbose=0), atol=1e-5)


def test_regularization_losses_are_added_while_trainable(tmp_path):
    class Scaled(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(3.0)
            self.variables_ = [self.w]

        @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32)])
        def __call__(self, x):
            return x * self.w

    module = Scaled()
    root = tf.train.Checkpoint(scaled=module)
    root.__call__ = module.__call__
    root.variables = [module.w]
    root.trainable_variables = [module.w]
    root.regularization_losses = [tf.function(lambda: 0.5 * module.w**2, input_signature=[])]
    path = str(tmp_path / "regularized")
    tf.saved_model.save(root, path)

    x = keras.Input(shape=(1,))
    layer = hub.KerasLayer(path, trainable=True)
    model = keras.Model(x, layer(x))
    model.compile(optimizer="sgd", loss="mse")
    data, target = np.ones((4, 1), "float32"), np.full((4, 1), 3.0, "float32")
    assert model.evaluate(data, target, verbose=0) == pytest.approx(4.5)
    layer.trainable = False
    model.compile(optimizer="sgd", loss="mse")
    assert model.evaluate(data, target, verbose=0) == pytest.approx(0.0)


@pytest.mark.slow
def test_callable_handle_with_arguments(preprocess_dir):
    preprocessor = hub.load(preprocess_dir)
    tokenize = hub.KerasLayer(preprocessor.tokenize)
    pack = hub.KerasLayer(preprocessor.bert_pack_inputs, arguments=dict(seq_length=12))
    first = tokenize(tf.constant(["the movie was great", "i hated it"]))
    second = tokenize(tf.constant(["fun", "boring boring"]))
    packed = pack([first, second])
    assert packed["input_word_ids"].shape == (2, 12)
    assert packed["input_word_ids"].dtype == tf.int32
    assert packed["input_type_ids"].numpy()[0].tolist() == [0] * 6 + [1] * 2 + [0] * 4
    with pytest.raises(NotImplementedError, match="callable cannot be serialised"):
        tokenize.get_config()


def _module_that_writes_a_file(directory, written):
    """A callable SavedModel whose function writes `written` when it runs."""

    class Module(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def __call__(self, text):
            tf.io.write_file(written, "ran")
            return text

    tf.saved_model.save(Module(), directory)


def test_safe_mode_refuses_to_load_the_module_a_keras_file_names(tmp_path):
    module_dir, written = str(tmp_path / "module"), str(tmp_path / "written.txt")
    _module_that_writes_a_file(module_dir, written)
    text = keras.Input(shape=(), dtype="string")
    model = keras.Model(text, hub.KerasLayer(module_dir, output_shape=())(text))
    path = str(tmp_path / "innocent.keras")
    model.save(path)
    assert not os.path.exists(written)  # building the model traced the function but did not run it

    with pytest.raises(ValueError, match=r"safe mode.*safe_mode=False") as error:
        keras.saving.load_model(path)
    assert repr(module_dir) in str(error.value)
    assert not os.path.exists(written)

    restored = keras.saving.load_model(path, safe_mode=False)  # the user trusts it
    assert restored(tf.constant(["x"])).numpy().tolist() == [b"x"]
    assert open(written).read() == "ran"


@pytest.mark.slow
def test_safe_mode_refuses_a_preprocess_layer(tmp_path, preprocess_dir):
    text = keras.Input(shape=(), dtype="string")
    model = keras.Model(text, hub.PreprocessLayer(preprocess_dir, seq_length=8)(text))
    path = str(tmp_path / "preprocess.keras")
    model.save(path)
    with pytest.raises(ValueError, match=r"Refusing to deserialize `PreprocessLayer`.*safe_mode=False"):
        keras.saving.load_model(path)
    restored = keras.saving.load_model(path, safe_mode=False)
    assert restored(tf.constant(["a"]))["input_word_ids"].shape == (1, 8)
