import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras.layers import Dropout, MultiHeadSelfAttention
from bert_keras.layers.dropout import dropout_keep_mask
from tests.helpers import assert_close


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_keep_mask_has_the_rate(rate):
    size = 1_000_001  # odd: the last 32-bit draw is used for one element only
    keep = dropout_keep_mask(tf.constant([size]), rate, tf.constant([3, 4], tf.int32)).numpy()
    assert keep.shape == (size,) and keep.dtype == bool
    expected = 1 - round(rate * 65536) / 65536
    # 5 standard deviations of a binomial proportion.
    assert abs(keep.mean() - expected) < 5 * np.sqrt(expected * (1 - expected) / size)
    # Neighbouring elements (the two halves of one draw) are independent.
    pairs = keep[: size - 1].reshape(-1, 2)
    both = np.mean(pairs[:, 0] & pairs[:, 1])
    assert abs(both - expected**2) < 5 * np.sqrt(expected**2 * (1 - expected**2) / len(pairs))


def test_layer_values_seeds_and_config():
    x = np.random.default_rng(0).normal(size=(64, 33)).astype("float32")
    layer = Dropout(0.25, seed=7)
    assert_close(layer(x, training=False), x, atol=0)
    y = np.asarray(layer(x, training=True))
    kept = y != 0
    assert_close(y[kept], x[kept] / 0.75, atol=1e-6)
    assert 0.6 < kept.mean() < 0.9
    assert not np.array_equal(np.asarray(layer(x, training=True)), y)  # a new seed per call
    again = np.asarray(Dropout(0.25, seed=7)(x, training=True))
    np.testing.assert_array_equal(again, y)
    revived = Dropout.from_config(layer.get_config())
    assert revived.get_config() == layer.get_config() and isinstance(revived, Dropout)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is Dropout


def test_gradient_is_the_mask_times_the_scale():
    x = tf.constant(np.random.default_rng(1).normal(size=(50, 40)).astype("float32"))
    layer = Dropout(0.5, seed=3)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
    grad = tape.gradient(y, x).numpy()
    np.testing.assert_array_equal(grad, np.where(y.numpy() != 0, 2.0, 0.0))


@pytest.mark.slow
def test_attention_dropout_is_unbiased():
    layer = MultiHeadSelfAttention(num_heads=2, dropout=0.5)
    x = np.random.default_rng(2).normal(size=(2, 6, 8)).astype("float32")
    mask = np.array([[1] * 6, [1] * 4 + [0] * 2])
    inference = np.asarray(layer(x, attention_mask=mask))
    one = np.asarray(layer(x, attention_mask=mask, training=True))
    assert np.abs(one - inference).max() > 1e-3
    mean = np.mean([np.asarray(layer(x, attention_mask=mask, training=True)) for _ in range(400)], axis=0)
    assert np.abs(mean - inference).max() < 0.1 * np.abs(inference).max()
