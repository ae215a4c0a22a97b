"""Every size of a config is checked against the stored tensors' shapes before a model is built.

A config that says `intermediate_size` 2,000,000,000 next to a tiny checkpoint is refused with a
CheckpointError naming the config key, its value and the stored shape, read from the safetensors
header / the TF checkpoint's variable map / the HDF5 datasets, without loading an array: for Hugging
Face, Google and keras-nlp alike, and `bert-keras convert` says so with exit status 2.
"""

import json
import os
import re

import numpy as np
import pytest

from bert_keras import cli
from bert_keras.checkpoints import CheckpointError, load_checkpoint
from bert_keras.checkpoints import _build
from bert_keras.formats import tables
from bert_keras.formats._common import expand_table, resolve_target
from bert_keras.formats._read import expected_shape, expected_stored_shape
from tests.checkpoints._models import TINY_HF, hf_pretraining_model, save_hf_directory

transformers = pytest.importorskip("transformers")

HUGE = 2_000_000_000


@pytest.fixture
def hf_dir(tmp_path):
    return save_hf_directory(hf_pretraining_model(), tmp_path / "bert")


@pytest.fixture
def no_build(monkeypatch):
    """Fails the test if a conversion gets as far as building a model."""

    def build_models(*args, **kwargs):
        raise AssertionError("a model was built before the config was checked against the tensors")

    monkeypatch.setattr(_build, "build_models", build_models)


def _edit_json(path, **changes):
    with open(path) as f:
        config = json.load(f)
    for key, value in changes.items():
        target = config["config"] if "config" in config and key not in config else config
        target[key] = value
    with open(path, "w") as f:
        json.dump(config, f)
    return path


# --- Hugging Face ---


@pytest.mark.parametrize(
    "field, value, tensor, message",
    [
        ("intermediate_size", HUGE, "bert.encoder.layer.0.intermediate.dense.weight",
         f"has shape (32, 16), which means intermediate_size=32, hidden_size=16; the config says "
         f"intermediate_size={HUGE}."),
        ("type_vocab_size", HUGE, "bert.embeddings.token_type_embeddings.weight",
         f"has shape (2, 16), which means type_vocab_size=2, hidden_size=16; the config says type_vocab_size={HUGE}."),
        ("num_attention_heads", 3, "bert.encoder.layer.0.attention.self.query.weight",
         "has shape (16, 16): the hidden size is 16, and the config's num_attention_heads=3 does not divide it "
         "(every attention head gets hidden_size / num_heads dimensions)."),
        ("num_attention_heads", HUGE, "bert.encoder.layer.0.attention.self.query.weight",
         f"has shape (16, 16): the hidden size is 16, and the config's num_attention_heads={HUGE} does not divide "
         "it (every attention head gets hidden_size / num_heads dimensions)."),
    ],
)
def test_hf_config_sizes_are_checked_against_the_header_before_building(hf_dir, no_build, field, value, tensor,
                                                                         message):
    config_file = _edit_json(os.path.join(hf_dir, "config.json"), **{field: value})
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(hf_dir)
    weights = os.path.join(hf_dir, "model.safetensors")
    assert info.value.file == weights and info.value.tensor == tensor
    assert str(info.value) == f"{weights}, tensor {tensor!r}: {message} Check {config_file}."


def test_hf_missing_weight_does_not_hide_a_huge_size(hf_dir, no_build):
    """Without the kernel, its bias still tells the size; a missing tensor is reported before building too."""
    from safetensors.numpy import load_file, save_file

    weights = os.path.join(hf_dir, "model.safetensors")
    tensors = load_file(weights)
    del tensors["bert.encoder.layer.0.intermediate.dense.weight"]
    save_file(tensors, weights)
    _edit_json(os.path.join(hf_dir, "config.json"), intermediate_size=HUGE)
    with pytest.raises(CheckpointError, match=re.escape(
            f"tensor 'bert.encoder.layer.0.intermediate.dense.bias': has shape (32,), which means "
            f"intermediate_size=32; the config says intermediate_size={HUGE}.")):
        load_checkpoint(hf_dir)
    _edit_json(os.path.join(hf_dir, "config.json"), intermediate_size=TINY_HF["intermediate_size"])
    with pytest.raises(CheckpointError, match=re.escape(
            "tensor 'encoder.layer.0.intermediate.dense.weight': missing from the checkpoint; it is needed for "
            "encoder.transformer_layers.0.feed_forward.intermediate_dense.kernel (shape (16, 32)).")):
        load_checkpoint(hf_dir)


def test_convert_command_reports_a_huge_size_with_exit_status_2(hf_dir, tmp_path, capsys):
    config_file = _edit_json(os.path.join(hf_dir, "config.json"), intermediate_size=HUGE)
    assert cli.main(["convert", hf_dir, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bert-keras convert: cannot convert {hf_dir}: ")
    assert (f"tensor 'bert.encoder.layer.0.intermediate.dense.weight': has shape (32, 16), which means "
            f"intermediate_size=32, hidden_size=16; the config says intermediate_size={HUGE}. "
            f"Check {config_file}.") in err
    assert not os.path.exists(tmp_path / "out")


# --- Google BERT (TF1 checkpoints: shapes from the variable map) ---


def test_google_config_sizes_are_checked_against_the_variable_map(tmp_path, no_build):
    from tests.checkpoints.test_google import write_google_directory

    directory = write_google_directory(tmp_path / "uncased_L-2_H-16_A-2", hf_pretraining_model(hidden_act="gelu_new"))
    config_file = _edit_json(os.path.join(directory, "bert_config.json"), intermediate_size=HUGE)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(directory)
    tensor = "bert/encoder/layer_0/intermediate/dense/kernel"
    assert info.value.tensor == tensor
    assert str(info.value).endswith(
        f"tensor {tensor!r}: has shape (16, 32), which means hidden_size=16, intermediate_size=32; "
        f"the config says intermediate_size={HUGE}. Check {config_file}."
    )
    _edit_json(config_file, intermediate_size=TINY_HF["intermediate_size"], max_position_embeddings=HUGE)
    with pytest.raises(CheckpointError, match=re.escape(
            "tensor 'bert/embeddings/position_embeddings': has shape (24, 16), which means "
            f"max_position_embeddings=24, hidden_size=16; the config says max_position_embeddings={HUGE}.")):
        load_checkpoint(directory)


# --- keras-nlp presets (HDF5 dataset shapes, read before keras-hub builds a BertBackbone) ---

TINY_KERAS_NLP = dict(vocabulary_size=60, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32,
                      max_sequence_length=24)


@pytest.fixture
def preset(tmp_path):
    keras_hub = pytest.importorskip("keras_hub")
    path = str(tmp_path / "preset")
    keras_hub.models.BertBackbone(**TINY_KERAS_NLP).save_to_preset(path)
    return path


@pytest.fixture
def no_backbone(monkeypatch):
    keras_hub = pytest.importorskip("keras_hub")

    def from_preset(*args, **kwargs):
        raise AssertionError("keras-hub built a BertBackbone before the config was checked against the tensors")

    monkeypatch.setattr(keras_hub.models.BertBackbone, "from_preset", from_preset)


@pytest.mark.parametrize(
    "field, value, tensor, message",
    [
        ("intermediate_dim", HUGE, "layers/transformer_encoder/_feedforward_intermediate_dense/vars/0",
         f"has shape (16, 32), which means hidden_dim=16, intermediate_dim=32; the config says "
         f"intermediate_dim={HUGE}."),
        ("vocabulary_size", HUGE, "layers/reversible_embedding/vars/0",
         f"has shape (60, 16), which means vocabulary_size=60, hidden_dim=16; the config says vocabulary_size={HUGE}."),
        ("num_segments", HUGE, "layers/embedding/vars/0",
         f"has shape (2, 16), which means num_segments=2, hidden_dim=16; the config says num_segments={HUGE}."),
        ("num_heads", 4, "layers/transformer_encoder/_self_attention_layer/query_dense/vars/0",
         "has shape (16, 2, 8), which means hidden_dim=16, num_heads=2, head_size=8; the config says num_heads=4."),
        ("num_layers", HUGE, None, f"holds 2 Transformer blocks, but the config says num_layers={HUGE}."),
    ],
)
def test_keras_nlp_preset_sizes_are_checked_against_the_h5_file(preset, no_backbone, no_build, field, value, tensor,
                                                                message):
    _edit_json(os.path.join(preset, "config.json"), **{field: value})
    weights = os.path.join(preset, "model.weights.h5")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(preset)
    assert info.value.file == weights and info.value.tensor == tensor
    where = weights if tensor is None else f"{weights}, tensor {tensor!r}"
    assert str(info.value) == f"{where}: {message} Check {os.path.join(preset, 'config.json')}."


def test_keras_nlp_h5_names_are_the_backbone_variables(preset):
    """The HDF5 reader maps every dataset of a saved preset to its BertBackbone variable, shapes included."""
    keras_hub = pytest.importorskip("keras_hub")
    from bert_keras.formats.keras_nlp import H5Source

    source = H5Source(os.path.join(preset, "model.weights.h5"))
    backbone = keras_hub.models.BertBackbone.from_preset(preset)
    assert source.names() == sorted(v.path for v in backbone.weights)
    for variable in backbone.weights:
        assert source.shape(variable.path) == tuple(variable.shape), variable.path
        np.testing.assert_array_equal(source.get(variable.path), variable.numpy())


# --- the table of sizes agrees with the models it describes ---


def test_expected_shapes_are_the_built_shapes():
    """`expected_shape` (what the config implies, before building) equals every built variable's shape."""
    config = dict(vocab_size=40, num_layers=2, hidden_size=16, num_heads=4, intermediate_size=24,
                  max_sequence_length=20, type_vocab_size=3)
    roots = _build.build_models(config, [tables.MLM, tables.NSP], "gelu")
    parts = (tables.EMBEDDINGS, tables.LAYER, tables.POOLER, tables.MLM, tables.NSP)
    for weights in (tables.HF_WEIGHTS, tables.GOOGLE_WEIGHTS, tables.KERAS_NLP_WEIGHTS):
        for target, _, _ in expand_table(weights, [p for p in parts if p in weights], config["num_layers"]):
            built = tuple(resolve_target(roots, target).shape)
            assert expected_shape(target, config) == built, target


def test_reshaped_layout_is_keras_multi_head_attention():
    """keras-nlp (and Model Garden) store attention kernels as (hidden, heads, head_size): so says the table."""
    keras_hub = pytest.importorskip("keras_hub")
    backbone = keras_hub.models.BertBackbone(**dict(TINY_KERAS_NLP, num_heads=4))
    config = dict(hidden_size=16, num_heads=4, intermediate_size=32, vocab_size=60, max_sequence_length=24,
                  type_vocab_size=2, num_layers=2)
    variables = {v.path: tuple(v.shape) for v in backbone.weights}
    checked = 0
    for target, name, transform in expand_table(tables.KERAS_NLP_WEIGHTS, (tables.LAYER,), 2):
        if transform == tables.RESHAPE:
            assert expected_stored_shape(target, transform, config) == variables[name], name
            checked += 1
    assert checked == 2 * 7
