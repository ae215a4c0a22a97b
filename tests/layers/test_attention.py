import numpy as np
import keras
import pytest

from bert_keras.layers import MultiHeadSelfAttention, attention_bias_from_mask
from tests.helpers import assert_close, run_layer_test

BATCH, SEQ, HIDDEN, HEADS = 3, 7, 16, 4


def _inputs():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH, SEQ, HIDDEN)).astype("float32")
    lengths = np.array([7, 4, 1])
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype("int32")  # (batch, seq)
    return x, mask


def _keras_mha_with_our_weights(ours):
    head_size = HIDDEN // HEADS
    mha = keras.layers.MultiHeadAttention(num_heads=HEADS, key_dim=head_size)
    x, _ = _inputs()
    mha(x, x)
    for ours_dense, theirs in (
        (ours.query_dense, mha._query_dense),
        (ours.key_dense, mha._key_dense),
        (ours.value_dense, mha._value_dense),
    ):
        theirs.kernel.assign(np.reshape(ours_dense.kernel.numpy(), (HIDDEN, HEADS, head_size)))
        theirs.bias.assign(np.reshape(ours_dense.bias.numpy(), (HEADS, head_size)))
    mha._output_dense.kernel.assign(np.reshape(ours.output_dense.kernel.numpy(), (HEADS, head_size, HIDDEN)))
    mha._output_dense.bias.assign(ours.output_dense.bias.numpy())
    return mha


def _random_weights(layer):
    rng = np.random.default_rng(1)
    for weight in layer.weights:
        weight.assign(rng.normal(scale=0.3, size=weight.shape).astype("float32"))


@pytest.mark.parametrize("masked", [False, True])
def test_equals_keras_multi_head_attention(masked):
    x, mask = _inputs()
    ours = MultiHeadSelfAttention(num_heads=HEADS)
    ours(x)
    _random_weights(ours)
    mha = _keras_mha_with_our_weights(ours)

    if masked:
        ours_out, ours_probs = ours(x, attention_mask=mask, return_attention_scores=True)
        full_mask = np.repeat(mask[:, None, :], SEQ, axis=1).astype(bool)  # (batch, seq_q, seq_k)
        ref_out, ref_probs = mha(x, x, attention_mask=full_mask, return_attention_scores=True)
    else:
        ours_out, ours_probs = ours(x, return_attention_scores=True)
        ref_out, ref_probs = mha(x, x, return_attention_scores=True)
    assert_close(ours_out, ref_out, atol=1e-5)
    assert_close(ours_probs, ref_probs, atol=1e-5)


def test_masked_keys_get_zero_probability():
    x, mask = _inputs()
    layer = MultiHeadSelfAttention(num_heads=HEADS)
    _, probs = layer(x, attention_mask=mask, return_attention_scores=True)
    probs = np.asarray(probs)  # (batch, heads, seq, seq)
    assert probs.shape == (BATCH, HEADS, SEQ, SEQ)
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, atol=1e-6)
    assert probs[1, :, :, 4:].max() == 0.0
    np.testing.assert_allclose(probs[2, :, :, 0], 1.0, atol=1e-6)


def test_full_mask_of_rank_three_matches_padding_mask():
    x, mask = _inputs()
    layer = MultiHeadSelfAttention(num_heads=HEADS)
    full = np.repeat(mask[:, None, :], SEQ, axis=1)
    assert_close(layer(x, attention_mask=full), layer(x, attention_mask=mask), atol=0)


def test_layer_contract(tmp_path):
    x, mask = _inputs()
    run_layer_test(
        MultiHeadSelfAttention,
        {"num_heads": HEADS, "dropout": 0.1},
        [x],
        expected_output_shape=(BATCH, SEQ, HIDDEN),
        expected_num_trainable_weights=8,
        expected_num_params=4 * (HIDDEN * HIDDEN + HIDDEN),
        tmp_path=tmp_path,
    )


def test_dropout_only_in_training():
    x, mask = _inputs()
    layer = MultiHeadSelfAttention(num_heads=HEADS, dropout=0.5)
    inference = layer(x, attention_mask=mask, training=False)
    assert_close(layer(x, attention_mask=mask), inference, atol=0)
    assert np.max(np.abs(np.asarray(layer(x, attention_mask=mask, training=True)) - np.asarray(inference))) > 1e-3


def test_heads_must_divide_hidden_size():
    layer = MultiHeadSelfAttention(num_heads=3)
    with pytest.raises(ValueError, match=r"hidden size \(16\) must be divisible by `num_heads`.*num_heads=3"):
        layer(np.zeros((1, 2, 16), "float32"))


@pytest.mark.parametrize("kwargs, pattern", [
    ({"num_heads": 0}, "num_heads=0"),
    ({"num_heads": 2.5}, "num_heads=2.5"),
    ({"num_heads": 2, "dropout": 1.0}, "dropout=1.0"),
])
def test_bad_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        MultiHeadSelfAttention(**kwargs)


def test_bad_mask_rank():
    layer = MultiHeadSelfAttention(num_heads=2)
    with pytest.raises(ValueError, match="attention_mask"):
        layer(np.zeros((1, 2, 4), "float32"), attention_mask=np.ones((1, 1, 2, 2)))


def _reference_attention(layer, x, mask):
    """Textbook attention from the layer's own sublayers, in numpy."""
    batch, seq, hidden = x.shape
    heads, head_size = layer.num_heads, hidden // layer.num_heads

    def project(dense, h):  # (batch, seq, hidden) -> (batch, heads, seq, head_size)
        y = h @ dense.kernel.numpy() + dense.bias.numpy()
        return y.reshape(batch, seq, heads, head_size).transpose(0, 2, 1, 3)

    q, k, v = (project(d, x) for d in (layer.query_dense, layer.key_dense, layer.value_dense))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head_size) + (1.0 - mask[:, None, None, :]) * -1e9
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
    return context @ layer.output_dense.kernel.numpy() + layer.output_dense.bias.numpy(), probs


@pytest.mark.parametrize("hidden, heads", [(16, 4), (12, 2), (24, 8)])
def test_two_d_projections_match_reference(hidden, heads):
    # head sizes 4, 6 and 3: 1/sqrt(head_size) is a power of two only for the first.
    rng = np.random.default_rng(2)
    x = rng.normal(size=(BATCH, SEQ, hidden)).astype("float32")
    _, mask = _inputs()
    layer = MultiHeadSelfAttention(num_heads=heads)
    layer(x)
    _random_weights(layer)
    out, probs = layer(x, attention_mask=mask, return_attention_scores=True)
    ref_out, ref_probs = _reference_attention(layer, x.astype("float64"), mask.astype("float64"))
    assert_close(out, ref_out, atol=1e-5)
    assert_close(probs, ref_probs, atol=1e-6)


def test_attention_bias_equals_the_mask_it_was_built_from():
    x, mask = _inputs()
    layer = MultiHeadSelfAttention(num_heads=HEADS)
    bias = attention_bias_from_mask(mask)
    assert tuple(bias.shape) == (BATCH, 1, 1, SEQ)
    np.testing.assert_array_equal(np.asarray(bias)[:, 0, 0], (1.0 - mask) * -1e9)
    assert_close(layer(x, attention_bias=bias), layer(x, attention_mask=mask), atol=0)
    full = attention_bias_from_mask(np.repeat(mask[:, None, :], SEQ, axis=1))
    assert tuple(full.shape) == (BATCH, 1, SEQ, SEQ)
    assert_close(layer(x, attention_bias=full), layer(x, attention_mask=mask), atol=0)


def test_attention_bias_rejects_bad_mask_rank():
    with pytest.raises(ValueError, match=r"attention_mask.*rank 2.*Received: attention_mask.shape"):
        attention_bias_from_mask(np.ones((1, 1, 2, 2)))


def test_weights_and_sublayers_keep_their_names_and_shapes():
    layer = MultiHeadSelfAttention(num_heads=HEADS, name="attention")
    layer(np.zeros((1, 2, HIDDEN), "float32"))
    assert [w.path for w in layer.weights] == [
        f"attention/{d}/{w}" for d in ("query", "key", "value", "output") for w in ("kernel", "bias")
    ]
    for name in ("query_dense", "key_dense", "value_dense", "output_dense"):
        assert tuple(getattr(layer, name).kernel.shape) == (HIDDEN, HIDDEN)


def test_bfloat16_softmax_runs_in_bfloat16_only_where_as_exact_as_float32():
    import tensorflow as tf
    from bert_keras._platform.keras_private import onednn_enabled
    from bert_keras.layers.attention import _softmax_dtype

    assert _softmax_dtype("float32") == "float32"
    assert _softmax_dtype("bfloat16") == "float32"  # eager ops: Eigen's bfloat16 softmax sums in bfloat16
    assert _softmax_dtype("float16") == "float32"
    traced = tf.function(lambda: tf.constant(_softmax_dtype("bfloat16")))().numpy().decode()
    assert traced == ("bfloat16" if onednn_enabled() else "float32")


def test_mixed_bfloat16_graph_call_is_close_to_float32_and_masks_padding():
    import tensorflow as tf

    x, mask = _inputs()
    reference = MultiHeadSelfAttention(num_heads=HEADS)
    reference(x)
    _random_weights(reference)
    mixed = MultiHeadSelfAttention(num_heads=HEADS, dtype="mixed_bfloat16")
    mixed(x)
    mixed.set_weights(reference.get_weights())
    expected_out, expected_probs = reference(x, attention_mask=mask, return_attention_scores=True)
    out, probs = tf.function(lambda x: mixed(x, attention_mask=mask, return_attention_scores=True))(x)
    _, eager_probs = mixed(x, attention_mask=mask, return_attention_scores=True)  # float32 softmax
    assert probs.dtype == tf.bfloat16
    probs = np.asarray(tf.cast(probs, "float32"))
    assert probs[1, :, :, 4:].max() == 0.0  # padded keys get exactly zero weight
    # As close to float32 as the float32-softmax path (the bfloat16 inputs, not the softmax, set the error).
    error = np.abs(probs - expected_probs).max()
    eager_error = np.abs(np.asarray(tf.cast(eager_probs, "float32")) - expected_probs).max()
    assert 0 < error <= 1.5 * eager_error
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=0.02)
    assert_close(np.asarray(tf.cast(out, "float32")), expected_out, atol=0.1)



def test_first_token_only_refuses_packed_tokens():
    from bert_keras.layers import PackedTokenIndex, PackTokens

    mask = np.array([[1, 1, 0]], "int32")
    packing = PackedTokenIndex()(mask)
    tokens = PackTokens()(np.ones((1, 3, 8), "float32"), packing)
    with pytest.raises(ValueError, match="`first_token_only=True` needs the padded layout"):
        MultiHeadSelfAttention(num_heads=2)(tokens, packing=packing, first_token_only=True)
