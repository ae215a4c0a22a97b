"""LoraDense: Keras' LoRA Dense with adapters that train alone, save exactly and merge; and the Keras gap it fills."""

import gc

import keras
import numpy as np
import pytest

from bert_keras.layers.lora_dense import LoraDense
from tests.helpers import assert_close, run_layer_test

X = np.random.default_rng(0).normal(size=(4, 6)).astype("float32")


def _lora_layer(rank=2, alpha=4.0, seed=0):
    """A built LoraDense 6 -> 5 with LoRA and adapters that change its outputs (B is not zero)."""
    layer = LoraDense(5, name="projection")
    layer.build((None, 6))
    layer.enable_lora(rank, lora_alpha=alpha)
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(rng.normal(0, 0.5, size=weight.shape).astype("float32"))
    return layer


def _model(layer):
    inputs = keras.Input((6,))
    return keras.Model(inputs, layer(inputs))


def _values(layer):
    return {weight.name: weight.numpy() for weight in layer.weights}


def test_runs_the_layer_checks_with_lora(tmp_path):
    # Trainable: the two adapters alone; parameters: kernel 6 * 5, bias 5, A 6 * 2, B 2 * 5.
    run_layer_test(LoraDense, {"units": 5, "lora_rank": 2, "lora_alpha": 8.0}, X, (4, 5), 2, 30 + 5 + 12 + 10,
                   tmp_path=tmp_path)


def test_a_config_keeps_alpha():
    """Keras' `Dense.build` re-enables LoRA from a config with the rank alone (alpha would become the rank)."""
    layer = LoraDense.from_config(LoraDense(5, lora_rank=2, lora_alpha=8.0).get_config())
    layer.build((None, 6))
    assert (layer.lora_rank, layer.lora_alpha) == (2, 8.0)
    assert [weight.name for weight in layer.trainable_weights] == ["lora_kernel_a", "lora_kernel_b"]


def test_computes_kernel_plus_scaled_adapters():
    layer = _lora_layer(rank=2, alpha=6.0)
    values = _values(layer)
    kernel = values["kernel"] + 3.0 * values["lora_kernel_a"] @ values["lora_kernel_b"]  # alpha / rank = 3
    assert_close(layer(X), X @ kernel + values["bias"], atol=1e-5)


def test_keras_lora_dense_trains_its_kernel_again_when_set_trainable():
    """The gap `keras_private.freeze_for_good` fills: if Keras keeps its LoRA kernel frozen one day, this fails."""
    keras_layer = keras.layers.Dense(5)
    keras_layer.build((None, 6))
    keras_layer.enable_lora(2)
    assert [weight.name for weight in keras_layer.trainable_weights] == ["bias", "lora_kernel_a", "lora_kernel_b"]
    keras_layer.trainable = False  # fine-tuning's phase 1, then phase 2
    keras_layer.trainable = True
    assert [weight.name for weight in keras_layer.trainable_weights] == ["kernel", "bias", "lora_kernel_a",
                                                                         "lora_kernel_b"]
    layer = _lora_layer()
    for flag in (False, True):
        layer.trainable = flag
    assert [weight.name for weight in layer.trainable_weights] == ["lora_kernel_a", "lora_kernel_b"]
    assert [weight.name for weight in layer.non_trainable_weights] == ["kernel", "bias"]


def test_weights_files_keep_every_variable_and_alpha(tmp_path):
    model = _model(_lora_layer())
    path = str(tmp_path / "lora.weights.h5")
    model.save_weights(path)
    restored = _model(_lora_layer(seed=1))
    restored.load_weights(path)
    for name, value in _values(model.layers[-1]).items():
        np.testing.assert_array_equal(_values(restored.layers[-1])[name], value, err_msg=name)
    np.testing.assert_array_equal(restored(X), model(X))


def test_an_ordinary_file_loads_with_b_zero_and_a_kept(tmp_path):
    plain_model = _model(LoraDense(5, name="projection"))  # without LoRA: a Dense's entries
    path = str(tmp_path / "plain.weights.h5")
    plain_model.save_weights(path)
    model = _model(_lora_layer())
    model.load_weights(path)
    layer = model.layers[-1]
    assert_close(model(X), plain_model(X), atol=1e-6)
    assert float(np.abs(layer.lora_kernel_b.numpy()).max()) == 0.0
    assert float(np.abs(layer.lora_kernel_a.numpy()).max()) > 0.0  # so that B's gradient is not zero


def test_a_lora_file_loads_into_a_layer_without_lora_as_the_merged_kernel(tmp_path):
    model = _model(_lora_layer())
    path = str(tmp_path / "lora.weights.h5")
    model.save_weights(path)
    plain_layer = LoraDense(5, name="projection")
    plain = _model(plain_layer)
    plain.load_weights(path)
    assert plain_layer.lora_enabled is False
    assert [weight.name for weight in plain_layer.weights] == ["kernel", "bias"]
    assert_close(plain(X), model(X), atol=1e-5)


def test_a_file_of_another_rank_or_alpha_is_refused(tmp_path):
    path = str(tmp_path / "lora.weights.h5")
    _model(_lora_layer(rank=2, alpha=4.0)).save_weights(path)
    with pytest.raises(ValueError, match="the weights file's LoRA has rank 2 and lora_alpha 4.0; this layer's has "
                                         "rank 2 and lora_alpha 2.0"):
        _model(_lora_layer(rank=2, alpha=2.0)).load_weights(path)
    with pytest.raises(ValueError, match="rank 2 and lora_alpha 4.0; this layer's has rank 3"):
        _model(_lora_layer(rank=3, alpha=4.0)).load_weights(path)


def test_merge_folds_the_adapters_in_and_leaves_an_ordinary_dense():
    layer = _lora_layer(rank=2, alpha=4.0)
    expected = layer(X)
    layer.merge_lora()
    assert_close(layer(X), expected, atol=1e-5)
    assert [weight.name for weight in layer.weights] == ["kernel", "bias"]
    assert [weight.name for weight in layer.trainable_weights] == ["kernel", "bias"]
    config = layer.get_config()
    assert "lora_rank" not in config and "lora_alpha" not in config
    with pytest.raises(ValueError, match="Cannot merge: layer 'projection' has no LoRA adapters"):
        layer.merge_lora()
    layer.enable_lora(2)  # and again, as on a fresh layer
    assert [weight.name for weight in layer.trainable_weights] == ["lora_kernel_a", "lora_kernel_b"]


def test_merge_runs_no_collection_over_the_objects_that_existed_before(monkeypatch, nothing_frozen):
    """Keras collects garbage after each deleted variable: 0.5-1 s each over a TensorFlow process's objects."""
    seen = []
    collect = gc.collect

    def recording_collect(*args):
        seen.append(gc.get_freeze_count())
        return collect(*args)

    layer = _lora_layer()
    monkeypatch.setattr(gc, "collect", recording_collect)
    layer.merge_lora()
    assert len(seen) == 2  # one per adapter
    assert min(seen) > 1000  # the process's objects were set aside
    assert gc.get_freeze_count() == 0  # and given back


def test_quantizes_as_dense(monkeypatch):
    layer = LoraDense(5)
    model = _model(layer)
    expected = model(X)
    monkeypatch.setattr(gc, "collect", lambda *args: 0)  # Keras collects after deleting the float kernel: seconds
    model.quantize("int8")  # Keras skips a subclass of Dense unless told it computes as Dense
    assert layer.quantization_mode == "int8"
    assert_close(model(X), expected, atol=0.05)
