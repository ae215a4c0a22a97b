"""The name tables and the small pure functions of the converters."""

import struct

import numpy as np
import pytest

from bert_keras.checkpoints import CheckpointError, ConversionSummary
from bert_keras.formats import tables
from bert_keras.formats._common import (
    apply_transform,
    expand_table,
    expected_source_shape,
    guess_do_lower_case,
    shape_fits,
)
from bert_keras.formats.google import is_ignored as google_ignored
from bert_keras.formats.huggingface import config_to_kwargs
from bert_keras.formats.sources import read_safetensors_header


@pytest.mark.parametrize("table", [tables.HF_WEIGHTS, tables.GOOGLE_WEIGHTS, tables.KERAS_NLP_WEIGHTS])
def test_tables_cover_every_encoder_weight_once(table):
    from bert_keras import BertEncoder

    encoder = BertEncoder(vocab_size=20, num_layers=3, hidden_size=8, num_heads=2, intermediate_size=16)
    entries = expand_table(table, (tables.EMBEDDINGS, tables.LAYER, tables.POOLER), num_layers=3)
    assert len(entries) == 5 + 3 * 16 + 2 == len(encoder.weights)
    assert len({source for _, source, _ in entries}) == len(entries)
    assert len({target for target, _, _ in entries}) == len(entries)


def test_expand_table_fills_layer_index():
    entries = expand_table(tables.GOOGLE_WEIGHTS, (tables.LAYER,), num_layers=2)
    assert entries[16] == (
        "encoder.transformer_layers.1.attention.query_dense.kernel",
        "bert/encoder/layer_1/attention/self/query/kernel",
        tables.IDENTITY,
    )


def test_transforms():
    weight = np.arange(6, dtype="float32").reshape(3, 2)  # torch Linear: (out, in)
    np.testing.assert_array_equal(apply_transform(weight, tables.TRANSPOSE, (2, 3)), weight.T)
    assert expected_source_shape(tables.TRANSPOSE, (2, 3)) == (3, 2)
    assert shape_fits(tables.RESHAPE, (8, 2, 4), (8, 8)) and not shape_fits(tables.RESHAPE, (8, 2, 3), (8, 8))
    assert apply_transform(np.zeros((8, 2, 4)), tables.RESHAPE, (8, 8)).shape == (8, 8)


def test_activation_names_differ_between_projects():
    # transformers' "gelu" is exact; google-research/bert's "gelu" is the tanh approximation.
    assert tables.HF_ACTIVATIONS["gelu"] == "gelu"
    assert tables.HF_ACTIVATIONS["gelu_new"] == tables.HF_ACTIVATIONS["gelu_pytorch_tanh"] == "gelu_approximate"
    assert tables.GOOGLE_ACTIVATIONS["gelu"] == "gelu_approximate"


def test_hf_config_translation():
    config = {
        "model_type": "bert", "vocab_size": 99, "num_hidden_layers": 3, "hidden_size": 24,
        "num_attention_heads": 4, "intermediate_size": 48, "hidden_dropout_prob": 0.2,
        "attention_probs_dropout_prob": 0.3, "max_position_embeddings": 64, "type_vocab_size": 3,
        "initializer_range": 0.01, "layer_norm_eps": 1e-7, "hidden_act": "gelu_pytorch_tanh",
    }
    assert config_to_kwargs(config, "config.json") == {
        "vocab_size": 99, "num_layers": 3, "hidden_size": 24, "num_heads": 4, "intermediate_size": 48,
        "dropout": 0.2, "attention_dropout": 0.3, "max_sequence_length": 64, "type_vocab_size": 3,
        "initializer_range": 0.01, "layer_norm_epsilon": 1e-7, "activation": "gelu_approximate",
    }


def test_google_ignores_optimizer_slots_only():
    assert google_ignored("bert/pooler/dense/kernel/adam_m")
    assert google_ignored("global_step")
    assert not google_ignored("bert/pooler/dense/kernel")


def test_guess_do_lower_case():
    assert guess_do_lower_case(["[PAD]", "[CLS]", "the", "##ing"]) is True
    assert guess_do_lower_case(["[PAD]", "[CLS]", "The", "the"]) is False


def test_safetensors_header_names_the_cut_tensor(tmp_path):
    header = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}'
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(12))
    with pytest.raises(CheckpointError, match=r"x.safetensors, tensor 'b': truncated.*24.*12 bytes"):
        read_safetensors_header(str(path))
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(24))
    assert sorted(read_safetensors_header(str(path))) == ["a", "b"]


def test_summary_text_lists_what_was_left():
    summary = ConversionSummary(
        format="google", files=["ckpt"], loaded=[("x", "encoder.y")], ignored=[f"s{i}" for i in range(20)],
        unused=["cls/extra"], not_in_checkpoint=["pooler"], heads=["mlm"],
    )
    text = str(summary)
    assert "1 tensors loaded, heads: mlm" in text
    assert "Ignored (20): s0" in text and "(8 more)" in text
    assert "Unused (1): cls/extra." in text
    assert "left randomly initialized: pooler" in text


def test_each_family_names_a_registered_tokenizer():
    from bert_keras.text import tokenizer_class

    kinds = {model_type: tokenizer_class(family["tokenizer"]).kind for model_type, family in tables.HF_FAMILIES.items()}
    assert kinds == {"albert": "sentencepiece", "bert": "wordpiece", "distilbert": "wordpiece", "electra": "wordpiece",
                     "roberta": "byte_bpe", "xlm-roberta": "unigram"}
