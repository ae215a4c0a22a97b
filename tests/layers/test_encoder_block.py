import numpy as np
import pytest

from bert_keras.layers import TransformerEncoderBlock
from tests.helpers import assert_close, run_layer_test


def _inputs():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], "int32")
    return x, mask


def _layer_norm(norm, x):
    x = np.asarray(x, "float64")
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + norm.epsilon) * norm.gamma.numpy() + norm.beta.numpy()


@pytest.mark.parametrize("norm_first", [False, True])
def test_residual_and_layer_norm_placement(norm_first):
    x, mask = _inputs()
    block = TransformerEncoderBlock(num_heads=2, intermediate_size=16, norm_first=norm_first)
    out = np.asarray(block(x, attention_mask=mask))
    rng = np.random.default_rng(3)
    for norm in (block.attention_layer_norm, block.feed_forward_layer_norm):
        norm.gamma.assign(rng.normal(size=8).astype("float32"))
        norm.beta.assign(rng.normal(size=8).astype("float32"))
    out = np.asarray(block(x, attention_mask=mask))

    attend = lambda h: np.asarray(block.attention(h.astype("float32"), attention_mask=mask))  # noqa: E731
    ffn = lambda h: np.asarray(block.feed_forward(h.astype("float32")))  # noqa: E731
    if norm_first:
        h = x + attend(_layer_norm(block.attention_layer_norm, x))
        expected = h + ffn(_layer_norm(block.feed_forward_layer_norm, h))
    else:
        h = _layer_norm(block.attention_layer_norm, x + attend(x))
        expected = _layer_norm(block.feed_forward_layer_norm, h + ffn(h))
    assert_close(out, expected, atol=1e-4)


def test_returns_attention_probabilities():
    x, mask = _inputs()
    block = TransformerEncoderBlock(num_heads=2, intermediate_size=16)
    out, probs = block(x, attention_mask=mask, return_attention_scores=True)
    assert tuple(out.shape) == (2, 5, 8)
    assert tuple(probs.shape) == (2, 2, 5, 5)
    assert float(np.max(np.asarray(probs)[1, :, :, 2:])) == 0.0


def test_layer_contract(tmp_path):
    x, _ = _inputs()
    per_block = 4 * (8 * 8 + 8) + (8 * 16 + 16 + 16 * 8 + 8) + 2 * (2 * 8)
    run_layer_test(
        TransformerEncoderBlock,
        {"num_heads": 2, "intermediate_size": 16, "dropout": 0.1, "attention_dropout": 0.1, "norm_first": True, "activation": "relu"},
        [x],
        expected_output_shape=(2, 5, 8),
        expected_num_trainable_weights=8 + 4 + 4,
        expected_num_params=per_block,
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize("kwargs, pattern", [
    ({"num_heads": 2, "intermediate_size": 0}, "intermediate_size=0"),
    ({"num_heads": 0, "intermediate_size": 4}, "num_heads=0"),
    ({"num_heads": 2, "intermediate_size": 4, "activation": "tanhh"}, "activation='tanhh'"),
    ({"num_heads": 2, "intermediate_size": 4, "dropout": -0.1}, "dropout=-0.1"),
])
def test_bad_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        TransformerEncoderBlock(**kwargs)


@pytest.mark.parametrize("norm_first", [False, True])
def test_first_token_only_is_the_first_row_of_the_whole_block(norm_first):
    x, mask = _inputs()
    block = TransformerEncoderBlock(num_heads=2, intermediate_size=16, norm_first=norm_first)
    whole, probs = block(x, attention_mask=mask, return_attention_scores=True)
    first, first_probs = block(x, attention_mask=mask, return_attention_scores=True, first_token_only=True)
    assert tuple(first.shape) == (2, 1, 8) and tuple(first_probs.shape) == (2, 2, 1, 5)
    assert_close(first, np.asarray(whole)[:, :1], atol=1e-6)
    assert_close(first_probs, np.asarray(probs)[:, :, :1], atol=1e-7)  # over every key, padding masked
    assert float(np.max(np.asarray(first_probs)[1, :, :, 2:])) == 0.0
