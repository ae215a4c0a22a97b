import math

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.layers import BertEmbeddings, SinusoidalPositionEncoding
from tests.helpers import assert_close, run_layer_test


def _closed_form(seq, hidden, wavelength=10000.0):
    pe = np.zeros((seq, hidden))
    for pos in range(seq):
        for i in range(0, hidden, 2):
            angle = pos / wavelength ** (i / hidden)
            pe[pos, i] = math.sin(angle)
            if i + 1 < hidden:
                pe[pos, i + 1] = math.cos(angle)
    return pe


@pytest.mark.parametrize("seq, hidden", [(50, 16), (7, 9)])
def test_sinusoidal_equals_closed_form(seq, hidden):
    out = np.asarray(SinusoidalPositionEncoding()(np.zeros((2, seq, hidden), "float32")))
    assert out.shape == (2, seq, hidden)
    assert_close(out[0], _closed_form(seq, hidden), atol=2e-5)
    assert_close(out[1], out[0], atol=0)


def test_sinusoidal_bad_wavelength():
    with pytest.raises(ValueError, match="max_wavelength=0"):
        SinusoidalPositionEncoding(max_wavelength=0)


def _ids(batch=2, seq=6, vocab=20):
    rng = np.random.default_rng(0)
    return rng.integers(0, vocab, size=(batch, seq)).astype("int32"), rng.integers(0, 2, size=(batch, seq)).astype("int32")


def test_learned_embeddings_sum_then_normalize():
    ids, types = _ids()
    layer = BertEmbeddings(vocab_size=20, hidden_size=8, max_sequence_length=10, layer_norm_epsilon=1e-12)
    out = np.asarray(layer(ids, types))
    summed = (
        layer.word_embeddings.embeddings.numpy()[ids]
        + layer.type_embeddings.embeddings.numpy()[types]
        + layer.position_embeddings.numpy()[None, : ids.shape[1]]
    )
    mean = summed.mean(-1, keepdims=True)
    var = summed.var(-1, keepdims=True)
    assert_close(out, (summed - mean) / np.sqrt(var + 1e-12), atol=1e-5)


def test_learned_positions_used_up_to_max_length():
    max_len = 6
    ids, types = _ids(seq=max_len)
    layer = BertEmbeddings(vocab_size=20, hidden_size=8, max_sequence_length=max_len)
    before = np.asarray(layer(ids, types))
    table = layer.position_embeddings.numpy()
    table[max_len - 1] += np.linspace(-1.0, 1.0, 8)  # not a constant: LayerNorm would remove that
    layer.position_embeddings.assign(table)
    after = np.asarray(layer(ids, types))
    assert_close(after[:, : max_len - 1], before[:, : max_len - 1], atol=0)
    assert np.max(np.abs(after[:, max_len - 1] - before[:, max_len - 1])) > 0.1


def test_sequence_longer_than_learned_positions_is_rejected():
    layer = BertEmbeddings(vocab_size=20, hidden_size=8, max_sequence_length=6)
    ids, types = _ids(seq=9)
    with pytest.raises(ValueError, match=r"sequence length \(9\) exceeds max_sequence_length \(6\)"):
        layer(ids, types)


def test_longer_sequence_rejected_in_graph_with_unknown_length():
    layer = BertEmbeddings(vocab_size=20, hidden_size=8, max_sequence_length=6)
    fn = tf.function(lambda x: layer(x), input_signature=[tf.TensorSpec([None, None], tf.int32)])
    assert fn(tf.zeros((1, 6), tf.int32)).shape == (1, 6, 8)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"exceeds max_sequence_length \(6\)"):
        fn(tf.zeros((1, 9), tf.int32))


def test_sinusoidal_positions_have_no_weights_and_no_length_limit():
    layer = BertEmbeddings(vocab_size=20, hidden_size=8, max_sequence_length=4, position_embedding="sinusoidal")
    ids, types = _ids(seq=9)
    out = np.asarray(layer(ids, types))
    assert out.shape == (2, 9, 8)
    assert layer.count_params() == 20 * 8 + 2 * 8 + 2 * 8
    summed = layer.word_embeddings.embeddings.numpy()[ids] + layer.type_embeddings.embeddings.numpy()[types]
    summed = summed + _closed_form(9, 8)[None]
    normed = (summed - summed.mean(-1, keepdims=True)) / np.sqrt(summed.var(-1, keepdims=True) + 1e-12)
    assert_close(out, normed, atol=1e-5)


@pytest.mark.parametrize("position_embedding, params", [("learned", 20 * 8 + 2 * 8 + 6 * 8 + 16), ("sinusoidal", 20 * 8 + 2 * 8 + 16)])
def test_layer_contract(tmp_path, position_embedding, params):
    ids, types = _ids(batch=4, seq=6)
    run_layer_test(
        BertEmbeddings,
        {"vocab_size": 20, "hidden_size": 8, "max_sequence_length": 6, "position_embedding": position_embedding, "dropout": 0.1},
        [ids, types],
        expected_output_shape=(4, 6, 8),
        expected_num_trainable_weights=5 if position_embedding == "learned" else 4,
        expected_num_params=params,
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize("kwargs, pattern", [
    ({"vocab_size": 0, "hidden_size": 8}, "vocab_size=0"),
    ({"vocab_size": 10, "hidden_size": -1}, "hidden_size=-1"),
    ({"vocab_size": 10, "hidden_size": 8, "position_embedding": "rotary"}, r"\['learned', 'sinusoidal'\].*position_embedding='rotary'"),
    ({"vocab_size": 10, "hidden_size": 8, "max_sequence_length": 0}, "max_sequence_length=0"),
])
def test_bad_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        BertEmbeddings(**kwargs)
