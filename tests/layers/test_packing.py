import numpy as np
import pytest
import tensorflow as tf

from bert_keras.layers import (
    MultiHeadSelfAttention,
    PackedTokenIndex,
    PackTokens,
    TransformerEncoderBlock,
    UnpackTokens,
    attention_bias_from_mask,
)
from bert_keras.layers.packing import packed_token_index, unpack_tokens
from tests.helpers import assert_close

MASK = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], dtype="int32")


def test_index_of_a_padded_batch():
    token_index, position_index = PackedTokenIndex()(MASK)
    # Real tokens plus the first position of every row (row 2 is all padding).
    np.testing.assert_array_equal(token_index, [0, 1, 2, 4, 8, 12, 13, 14, 15])
    np.testing.assert_array_equal(
        position_index, [[0, 1, 2, -1], [3, -1, -1, -1], [4, -1, -1, -1], [5, 6, 7, 8]]
    )


def test_xla_computes_every_position_but_marks_the_padding():
    fn = tf.function(packed_token_index, jit_compile=True)
    token_index, position_index = fn(tf.constant(MASK))
    np.testing.assert_array_equal(token_index, np.arange(16))
    expected = np.where((MASK > 0) | (np.arange(4) == 0), np.arange(16).reshape(4, 4), -1)
    np.testing.assert_array_equal(position_index, expected)


def test_pack_then_unpack_restores_real_positions_and_zeros_padding():
    x = np.random.default_rng(0).normal(size=(4, 4, 3)).astype("float32")
    packing = PackedTokenIndex()(MASK)
    packed = PackTokens()(x, packing)
    assert tuple(packed.shape) == (9, 3)
    restored = np.asarray(UnpackTokens()(packed, packing))
    keep = (MASK > 0) | (np.arange(4) == 0)
    np.testing.assert_array_equal(restored[keep], x[keep])
    np.testing.assert_array_equal(restored[~keep], 0.0)
    # Without zero fill every position holds some packed row (no out-of-range gather).
    copies = np.asarray(unpack_tokens(packed, packing, fill_zeros=False))
    np.testing.assert_array_equal(copies[keep], x[keep])


def test_empty_batch():
    mask = np.zeros((0, 5), "int32")
    token_index, position_index = PackedTokenIndex()(mask)
    assert tuple(token_index.shape) == (0,) and tuple(position_index.shape) == (0, 5)
    out = UnpackTokens()(tf.zeros((0, 3)), (token_index, position_index))
    assert tuple(out.shape) == (0, 5, 3)


def _packed_and_padded(layer, x, mask, **kwargs):
    bias = attention_bias_from_mask(mask)
    token_index, position_index = packed_token_index(tf.constant(mask))
    padded = layer(x, attention_bias=bias, **kwargs)
    packed = layer(tf.gather(tf.reshape(x, (-1, x.shape[-1])), token_index), attention_bias=bias,
                   packing=(token_index, position_index), **kwargs)
    return padded, packed, token_index


@pytest.mark.parametrize("layer", [
    MultiHeadSelfAttention(num_heads=2),
    TransformerEncoderBlock(num_heads=2, intermediate_size=16),
    TransformerEncoderBlock(num_heads=2, intermediate_size=16, norm_first=True),
])
def test_packed_call_equals_padded_call_at_real_positions(layer):
    x = tf.constant(np.random.default_rng(1).normal(size=(4, 4, 8)).astype("float32"))
    padded, packed, token_index = _packed_and_padded(layer, x, MASK)
    assert tuple(packed.shape) == (9, 8)
    expected = tf.gather(tf.reshape(padded, (-1, 8)), token_index).numpy()
    real = MASK.reshape(-1)[token_index.numpy()] > 0
    assert_close(packed.numpy()[real], expected[real], atol=1e-6)


def test_packed_gradients_equal_padded_gradients():
    layer = TransformerEncoderBlock(num_heads=2, intermediate_size=16)
    x = tf.constant(np.random.default_rng(2).normal(size=(4, 4, 8)).astype("float32"))
    layer(x, attention_mask=MASK)
    bias = attention_bias_from_mask(MASK)
    token_index, position_index = packed_token_index(tf.constant(MASK))
    real = tf.constant(MASK.reshape(-1)[token_index.numpy()] > 0)
    weights = tf.constant(np.random.default_rng(3).normal(size=(9, 8)).astype("float32"))

    with tf.GradientTape() as tape:
        packed = layer(tf.gather(tf.reshape(x, (-1, 8)), token_index), attention_bias=bias,
                       packing=(token_index, position_index))
        loss_packed = tf.reduce_sum(tf.boolean_mask(packed * weights, real))
    grads_packed = tape.gradient(loss_packed, layer.trainable_variables)
    with tf.GradientTape() as tape:
        padded = tf.gather(tf.reshape(layer(x, attention_bias=bias), (-1, 8)), token_index)
        loss_padded = tf.reduce_sum(tf.boolean_mask(padded * weights, real))
    grads_padded = tape.gradient(loss_padded, layer.trainable_variables)
    assert_close(loss_packed, loss_padded, atol=1e-5)
    assert len(grads_packed) == 16
    for a, b in zip(grads_packed, grads_padded):
        assert_close(tf.convert_to_tensor(a), tf.convert_to_tensor(b), atol=1e-5)


def test_pack_and_unpack_gradients_equal_plain_autodiff():
    from bert_keras.layers.packing import pack_tokens

    rng = np.random.default_rng(4)
    token_index, position_index = packed_token_index(tf.constant(MASK))
    packing = (token_index, position_index)
    x = tf.constant(rng.normal(size=(4, 4, 3)).astype("float32"))
    w = tf.constant(rng.normal(size=(9, 3)).astype("float32"))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours = tf.reduce_sum(pack_tokens(x, packing) * w)
        plain = tf.reduce_sum(tf.gather(tf.reshape(x, (16, 3)), token_index) * w)
    assert_close(tf.convert_to_tensor(tape.gradient(ours, x)), tf.convert_to_tensor(tape.gradient(plain, x)), atol=0)

    packed = tf.constant(rng.normal(size=(9, 3)).astype("float32"))
    v = tf.constant(rng.normal(size=(4, 4, 3)).astype("float32"))
    keep = ((MASK > 0) | (np.arange(4) == 0))[..., None]
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(packed)
        ours = tf.reduce_sum(unpack_tokens(packed, packing) * v)
        plain = tf.reduce_sum(tf.where(keep, tf.gather(packed, tf.maximum(position_index, 0)), 0.0) * v)
    grad = tf.convert_to_tensor(tape.gradient(ours, packed))
    assert_close(grad, tf.convert_to_tensor(tape.gradient(plain, packed)), atol=1e-6)
    assert np.abs(grad.numpy()).min() > 0


@pytest.mark.parametrize("graph", [False, True])
def test_batch_without_padding_packs_by_reshape_with_the_same_values_and_gradients(graph):
    # Every position real: packing skips its gathers (a tf.cond); values and gradients are unchanged.
    from bert_keras.layers.packing import pack_tokens

    full = np.ones((3, 4), "int32")
    rng = np.random.default_rng(5)
    x = tf.constant(rng.normal(size=(3, 4, 2)).astype("float32"))
    w = tf.constant(rng.normal(size=(3, 4, 2)).astype("float32"))

    def run(x):
        packing = packed_token_index(tf.constant(full))
        with tf.GradientTape() as tape:
            tape.watch(x)
            packed = pack_tokens(x, packing)  # (12, 2)
            loss = tf.reduce_sum(unpack_tokens(packed * 2.0, packing) * w)
        return packed, tape.gradient(loss, x)

    packed, grad = (tf.function(run) if graph else run)(x)
    np.testing.assert_array_equal(packed, np.reshape(x, (12, 2)))
    np.testing.assert_array_equal(grad, 2.0 * np.asarray(w))


@pytest.mark.parametrize("mask", ["padded", "full"])
@pytest.mark.parametrize("mode", ["eager", "graph", "xla"])
def test_heads_unpacked_and_packed_in_one_gather_equal_split_and_merge_with_their_gradients(mask, mode):
    # unpack_heads / pack_heads: what unpack_tokens (copies at padding) + the split into heads, and the merge of
    # the heads + pack_tokens give, values and gradients; the gradient of pack_heads is zero at padding.
    from bert_keras.layers.packing import pack_heads, pack_tokens, unpack_heads

    mask = MASK if mask == "padded" else np.ones((4, 4), "int32")
    heads, head_size = 3, 2
    rng = np.random.default_rng(6)
    x = tf.constant(rng.normal(size=(4, 4, heads * head_size)).astype("float32"))
    v = tf.constant(rng.normal(size=(4, heads, 4, head_size)).astype("float32"))

    def run(x, v):
        packing = packed_token_index(tf.constant(mask))
        packed = pack_tokens(x, packing)  # (n_packed, hidden)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([packed, v])
            ours, doubled = unpack_heads([packed, packed * 2.0], packing, heads)  # two share a tf.cond
            split = tf.transpose(tf.reshape(unpack_tokens(packed, packing, fill_zeros=False), (4, 4, heads, head_size)), (0, 2, 1, 3))
            merged_ours = pack_heads(v, packing)
            merged = pack_tokens(tf.reshape(tf.transpose(v, (0, 2, 1, 3)), (4, 4, heads * head_size)), packing)
            losses = [tf.reduce_sum(t * w) for t, w in ((ours, v), (split, v), (merged_ours, packed), (merged, packed))]
            losses[0] += tf.reduce_sum(doubled * v * 3.0)  # d/d packed: 7x the first's
        grads = [tape.gradient(losses[0], packed), 7.0 * tape.gradient(losses[1], packed),
                 tape.gradient(losses[2], v), tape.gradient(losses[3], v)]
        return [ours, split, merged_ours, merged] + [tf.convert_to_tensor(g) for g in grads] + [doubled]

    if mode != "eager":
        run = tf.function(run, jit_compile=mode == "xla")
    ours, split, merged_ours, merged, g_ours, g_split, gv_ours, gv_merged, doubled = run(x, v)
    np.testing.assert_array_equal(doubled, 2.0 * np.asarray(split))
    assert tuple(ours.shape) == (4, heads, 4, head_size)
    np.testing.assert_array_equal(ours, split)
    np.testing.assert_array_equal(merged_ours, merged)
    assert_close(g_ours, g_split, atol=1e-6)
    assert_close(gv_ours, gv_merged, atol=0)
    padding = ~((mask > 0) | (np.arange(4) == 0))  # (batch, seq): positions not packed
    assert np.all(np.asarray(gv_ours).transpose(0, 2, 1, 3)[padding] == 0)
    assert np.abs(np.asarray(gv_ours).transpose(0, 2, 1, 3)[~padding]).min() > 0
