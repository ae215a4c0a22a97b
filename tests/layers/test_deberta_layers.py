"""DeBERTa's layers through the shared layer checks (config, eager and symbolic calls, weight counts, a fit step,
`.keras` round trip), and `DebertaV3Encoder` through the shared model checks. Their values against transformers:
tests/checkpoints/test_deberta.py."""

import numpy as np
import pytest

from bert_keras.layers import (
    DebertaBlock,
    DebertaEmbeddings,
    DisentangledSelfAttention,
    RelativeEmbeddings,
    RelativePositionBuckets,
)
from bert_keras.layers.relative_positions import relative_position_buckets
from bert_keras.models import DebertaV3Encoder
from tests.helpers import hub_inputs, run_layer_test, run_model_test


def _relative(seq=5, span=4, hidden=8):
    table = np.random.default_rng(2).normal(size=(2 * span, hidden)).astype("float32")
    return {"relative_embeddings": table, "relative_positions": np.asarray(relative_position_buckets(seq, span, 16))}


def _x():
    return np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")


def test_block_contract(tmp_path):
    per_block = 4 * (8 * 8 + 8) + (8 * 16 + 16 + 16 * 8 + 8) + 2 * (2 * 8)
    run_layer_test(DebertaBlock, {"num_heads": 2, "intermediate_size": 16, "dropout": 0.1, "attention_dropout": 0.1},
                   [_x()], expected_output_shape=(2, 5, 8), expected_num_trainable_weights=8 + 4 + 4,
                   expected_num_params=per_block, call_kwargs=_relative(), tmp_path=tmp_path)


def test_attention_contract_with_separate_position_projections(tmp_path):
    run_layer_test(DisentangledSelfAttention, {"num_heads": 2, "share_attention_key": False,
                                               "position_attention": ["p2c", "c2p"]},
                   [_x()], expected_output_shape=(2, 5, 8), expected_num_trainable_weights=12,
                   expected_num_params=6 * (8 * 8 + 8), call_kwargs=_relative(), tmp_path=tmp_path)


def test_embeddings_contract_with_every_option(tmp_path):
    ids = np.array([[1, 4, 7, 2, 0], [1, 9, 2, 0, 0]], "int32")
    # words 20 x 8, positions 16 x 8, segments 2 x 8, LayerNorm 2 x 8
    run_layer_test(DebertaEmbeddings, {"vocab_size": 20, "hidden_size": 8, "max_sequence_length": 16,
                                       "type_vocab_size": 2},
                   [ids], expected_output_shape=(2, 5, 8), expected_num_trainable_weights=5,
                   expected_num_params=160 + 128 + 16 + 16, tmp_path=tmp_path)
    # Narrower tables: a projection without bias, 4 -> 8, before the LayerNorm.
    narrow = DebertaEmbeddings(vocab_size=20, hidden_size=8, embedding_size=4)
    assert tuple(narrow(ids).shape) == (2, 5, 8) and narrow.count_params() == 80 + 32 + 16


def test_embeddings_zero_the_padding_rows():
    layer = DebertaEmbeddings(vocab_size=20, hidden_size=8)
    out = np.asarray(layer(np.array([[3, 4, 0]]), input_mask=np.array([[1, 1, 0]])))
    assert np.all(out[0, 2] == 0) and np.all(np.abs(out[0, :2]).sum(-1) > 0)


def test_relative_layers_round_trip_their_configs():
    for layer in (RelativeEmbeddings(span=4, hidden_size=8, norm="none", layer_norm_epsilon=1e-5),
                  RelativePositionBuckets(position_buckets=32, max_relative_positions=128)):
        assert type(layer).from_config(layer.get_config()).get_config() == layer.get_config()


@pytest.mark.parametrize("kwargs,pattern", [
    ({"span": 0, "hidden_size": 8}, "span=0"),
    ({"span": 4, "hidden_size": 8, "norm": "batch_norm"}, "norm='batch_norm'"),
])
def test_relative_embeddings_refuse_bad_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        RelativeEmbeddings(**kwargs)


def test_encoder_contract(tmp_path):
    encoder = DebertaV3Encoder(vocab_size=30, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32,
                               position_buckets=4, max_relative_positions=16, pooler_activation="gelu",
                               return_attention_probs=True)
    inputs = hub_inputs([7, 3], 7, 30)
    outputs, _ = run_model_test(encoder, inputs, tmp_path)
    assert [tuple(p.shape) for p in outputs["attention_probs"]] == [(2, 2, 7, 7)] * 2
    # words 30 x 16 + LayerNorm, the relative table 8 x 16 + LayerNorm, two blocks of 4 dense 16 x 16 and the FFN,
    # the pooler 16 x 16
    block = 4 * (16 * 16 + 16) + (16 * 32 + 32 + 32 * 16 + 16) + 2 * 32
    assert encoder.count_params() == 30 * 16 + 32 + 8 * 16 + 32 + 2 * block + 16 * 16 + 16


def test_encoder_refuses_heads_that_do_not_divide_the_width():
    with pytest.raises(ValueError, match="num_heads"):
        DebertaV3Encoder(vocab_size=30, num_layers=1, hidden_size=10, num_heads=3, intermediate_size=8)
