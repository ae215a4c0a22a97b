import math

import numpy as np
import keras
import pytest

from bert_keras.layers import FeedForward
from tests.helpers import assert_close, run_layer_test


def _erf_gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _tanh_gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _relu(x):
    return np.maximum(x, 0.0)


@pytest.mark.parametrize(
    "activation, reference",
    [("gelu", _erf_gelu), ("gelu_approximate", _tanh_gelu), ("relu", _relu)],
)
def test_matches_closed_form(activation, reference):
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    layer = FeedForward(intermediate_size=12, activation=activation)
    out = layer(x)
    w1, b1 = layer.intermediate_dense.kernel.numpy(), layer.intermediate_dense.bias.numpy()
    w2, b2 = layer.output_dense.kernel.numpy(), layer.output_dense.bias.numpy()
    expected = reference((x @ w1 + b1).astype("float64")) @ w2 + b2
    assert_close(out, expected, atol=1e-5)


def test_exact_and_tanh_gelu_differ():
    x = np.linspace(-4, 4, 64, dtype="float32").reshape(1, 8, 8)
    exact = FeedForward(intermediate_size=8, activation="gelu")
    approx = FeedForward.from_config({**exact.get_config(), "activation": "gelu_approximate"})
    exact(x), approx(x)
    approx.set_weights(exact.get_weights())
    assert np.max(np.abs(np.asarray(exact(x)) - np.asarray(approx(x)))) > 1e-5


def test_layer_contract(tmp_path):
    x = np.random.default_rng(0).normal(size=(4, 3, 8)).astype("float32")
    run_layer_test(
        FeedForward,
        {"intermediate_size": 16, "activation": "gelu_approximate"},
        [x],
        expected_output_shape=(4, 3, 8),
        expected_num_trainable_weights=4,
        expected_num_params=8 * 16 + 16 + 16 * 8 + 8,
        tmp_path=tmp_path,
    )


def test_callable_activation_round_trips():
    layer = FeedForward(intermediate_size=4, activation=keras.activations.silu)
    revived = FeedForward.from_config(layer.get_config())
    x = np.ones((1, 2, 3), "float32")
    layer(x), revived(x)
    revived.set_weights(layer.get_weights())
    assert_close(revived(x), layer(x), atol=0)


def test_unknown_activation():
    with pytest.raises(ValueError, match=r"expected one of \['gelu', 'gelu_approximate', 'relu'\].*activation='swishy'"):
        FeedForward(intermediate_size=4, activation="swishy")


def test_bad_intermediate_size():
    with pytest.raises(ValueError, match="intermediate_size=0"):
        FeedForward(intermediate_size=0)
