"""Hostile checkpoints: malformed headers, non-finite weights, indexes that point outside the
folder, configs that disagree with the tensors. Each is refused with a CheckpointError that names
the file (and the tensor), before any model is built."""

import json
import os
import re
import struct

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from bert_keras.checkpoints import CheckpointError, load_checkpoint
from bert_keras.checkpoints import _build
from bert_keras.tasks import checkpoint_pretrainer
from tests.checkpoints._models import hf_pretraining_model, save_hf_directory

transformers = pytest.importorskip("transformers")


@pytest.fixture
def hf_dir(tmp_path):
    return save_hf_directory(hf_pretraining_model(), tmp_path / "bert")


@pytest.fixture
def no_build(monkeypatch):
    """Fails the test if a conversion gets as far as building a model."""

    def build_models(*args, **kwargs):
        raise AssertionError("a model was built before the checkpoint was checked")

    monkeypatch.setattr(_build, "build_models", build_models)


def _weights(directory):
    return os.path.join(directory, "model.safetensors")


def _write_raw_safetensors(path, header, data=b"\0" * 16):
    encoded = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)) + encoded + data)


# --- safetensors headers that are JSON but not a table of tensors ---


@pytest.mark.parametrize(
    "header, tensor, message",
    [
        ([1, 2], None, "the safetensors header is a JSON list; expected an object of tensor entries "
                       '{"dtype", "shape", "data_offsets"}.'),
        ({"w": 3}, "w", 'its safetensors header entry is a JSON int; expected an object with '
                        '"dtype", "shape" and "data_offsets".'),
        ({"w": {"shape": [2], "data_offsets": [0, 8]}}, "w",
         "its safetensors header entry lacks \"dtype\" (keys found: ['data_offsets', 'shape'])."),
        ({"w": {"dtype": 4, "shape": [2], "data_offsets": [0, 8]}}, "w",
         'its "dtype" is 4; expected a string such as "F32".'),
        ({"w": {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}}, "w",
         "its \"shape\" is '2'; expected a list of non-negative integers."),
        ({"w": {"dtype": "F32", "shape": [2, -1], "data_offsets": [0, 8]}}, "w",
         'its "shape" is [2, -1]; expected a list of non-negative integers.'),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, "w",
         'its "data_offsets" are [8, 0]; expected [begin, end] with 0 <= begin <= end.'),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": ["0", 8]}}, "w",
         "its \"data_offsets\" are ['0', 8]; expected [begin, end] with 0 <= begin <= end."),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}}, "w",
         'its "data_offsets" are [0]; expected [begin, end] with 0 <= begin <= end.'),
    ],
)
def test_safetensors_header_that_is_not_a_table_of_tensors(hf_dir, header, tensor, message):
    path = _weights(hf_dir)
    _write_raw_safetensors(path, header)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(hf_dir)
    assert info.value.file == path and info.value.tensor == tensor
    where = path if tensor is None else f"{path}, tensor {tensor!r}"
    assert str(info.value) == f"{where}: {message}"


def test_safetensors_offsets_past_the_data(hf_dir):
    path = _weights(hf_dir)
    _write_raw_safetensors(path, {"w": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})
    expected = f"{path}, tensor 'w': truncated: the tensor's bytes end at offset 24"
    with pytest.raises(CheckpointError, match=re.escape(expected)):
        load_checkpoint(hf_dir)


# --- non-finite weights ---


@pytest.mark.parametrize("values, count", [([np.nan], 1), ([np.inf, -np.inf, np.nan], 3)])
def test_non_finite_weights_are_refused_before_building(hf_dir, no_build, values, count):
    name = "encoder.layer.1.attention.self.key.weight"
    tensors = load_file(_weights(hf_dir))
    stored = "bert." + name
    tensors[stored].flat[: len(values)] = values
    save_file(tensors, _weights(hf_dir))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(hf_dir)
    assert info.value.file == _weights(hf_dir) and info.value.tensor == stored
    plural = "value" if count == 1 else "values"
    assert str(info.value) == (
        f"{_weights(hf_dir)}, tensor {stored!r}: holds {count} non-finite {plural} (NaN or infinity) "
        "among its 256; a converted model would output NaN. The file is corrupt, or the training it "
        "comes from diverged."
    )


# --- sharded indexes that name files outside the checkpoint folder ---


def _shard(directory, tmp_path, outside_name, kind):
    """Splits `directory`'s weights: the word embeddings in a file outside it, the rest inside."""
    tensors = load_file(_weights(directory))
    os.remove(_weights(directory))
    outside_key = "bert.embeddings.word_embeddings.weight"
    inside = {k: v for k, v in tensors.items() if k != outside_key}
    if kind == "safetensors":
        save_file({outside_key: tensors[outside_key]}, str(tmp_path / "outside.safetensors"))
        save_file(inside, os.path.join(directory, "model-00001.safetensors"))
        index, shard = "model.safetensors.index.json", "model-00001.safetensors"
    else:
        import torch

        torch.save({outside_key: torch.tensor(tensors[outside_key])}, str(tmp_path / "outside.bin"))
        torch.save({k: torch.tensor(v) for k, v in inside.items()}, os.path.join(directory, "pytorch_model-00001.bin"))
        index, shard = "pytorch_model.bin.index.json", "pytorch_model-00001.bin"
    weight_map = {k: shard for k in inside}
    weight_map[outside_key] = outside_name
    with open(os.path.join(directory, index), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return os.path.join(directory, index), outside_key


@pytest.mark.parametrize("kind", ["safetensors", "pytorch"])
@pytest.mark.parametrize("outside", ["../outside", "absolute"])
def test_index_naming_a_file_outside_the_folder_is_refused(hf_dir, tmp_path, kind, outside):
    if kind == "pytorch":
        pytest.importorskip("torch")
    suffix = ".safetensors" if kind == "safetensors" else ".bin"
    name = str(tmp_path / f"outside{suffix}") if outside == "absolute" else f"../outside{suffix}"
    index, tensor = _shard(hf_dir, tmp_path, name, kind)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(hf_dir)
    assert info.value.file == index and info.value.tensor == tensor
    assert str(info.value) == (
        f"{index}, tensor {tensor!r}: the index maps this tensor to {name!r}, which is not a plain "
        f"file name in {hf_dir}; an index may only name files in its own folder."
    )


def test_sharded_pytorch_checkpoint_inside_its_folder(hf_dir, tmp_path):
    pytest.importorskip("torch")
    whole = load_checkpoint(hf_dir)
    index, _ = _shard(hf_dir, tmp_path, "pytorch_model-00002.bin", "pytorch")
    os.rename(tmp_path / "outside.bin", os.path.join(hf_dir, "pytorch_model-00002.bin"))
    loaded = load_checkpoint(hf_dir)
    assert loaded.summary.files == [os.path.join(hf_dir, f"pytorch_model-0000{i}.bin") for i in (1, 2)]
    for a, b in zip(checkpoint_pretrainer(whole).weights, checkpoint_pretrainer(loaded).weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_index_whose_weight_map_is_not_an_object(hf_dir, tmp_path):
    index, _ = _shard(hf_dir, tmp_path, "model-00001.safetensors", "safetensors")
    with open(index, "w") as f:
        json.dump({"weight_map": ["model-00001.safetensors"]}, f)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(hf_dir)
    assert str(info.value) == (
        f"{index}: expected \"weight_map\" to be an object of tensor name -> shard file name, found a JSON list."
    )


# --- configs that disagree with the tensors, found before building ---


@pytest.mark.parametrize(
    "field, value, tensor, message",
    [
        ("num_hidden_layers", 60, None,
         "holds 2 Transformer blocks, but the config says num_hidden_layers=60."),
        ("num_hidden_layers", 1, None,
         "holds 2 Transformer blocks, but the config says num_hidden_layers=1."),
        ("vocab_size", 50, "bert.embeddings.word_embeddings.weight",
         "has shape (40, 16), which means vocab_size=40, hidden_size=16; the config says vocab_size=50."),
        ("hidden_size", 32, "bert.embeddings.word_embeddings.weight",
         "has shape (40, 16), which means vocab_size=40, hidden_size=16; the config says hidden_size=32."),
        ("max_position_embeddings", 512, "bert.embeddings.position_embeddings.weight",
         "has shape (24, 16), which means max_position_embeddings=24, hidden_size=16; "
         "the config says max_position_embeddings=512."),
    ],
)
def test_config_disagreeing_with_the_tensors_is_found_before_building(hf_dir, no_build, field, value, tensor, message):
    config_file = os.path.join(hf_dir, "config.json")
    with open(config_file) as f:
        config = json.load(f)
    config[field] = value
    if field == "hidden_size":
        config["intermediate_size"] = 64
    with open(config_file, "w") as f:
        json.dump(config, f)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(hf_dir)
    assert info.value.file == _weights(hf_dir) and info.value.tensor == tensor
    where = _weights(hf_dir) if tensor is None else f"{_weights(hf_dir)}, tensor {tensor!r}"
    assert str(info.value) == f"{where}: {message} Check {config_file}."


@pytest.mark.parametrize("content, reason", [
    (b"[" * 100_000 + b"]" * 100_000, "maximum recursion depth exceeded"),
    (b'{"hidden_size": \xff}', "'utf-8' codec can't decode byte 0xff in position 16"),
])
def test_a_config_nested_too_deep_or_not_utf8_is_refused_naming_it(tmp_path, content, reason):
    (tmp_path / "config.json").write_bytes(content)
    (tmp_path / "model.safetensors").write_bytes(b"")  # never read: the config comes first
    with pytest.raises(CheckpointError, match=re.escape(f"{tmp_path / 'config.json'}") + ".*is not valid JSON.*"
                       + re.escape(reason)):
        load_checkpoint(str(tmp_path))


def test_a_recorded_architecture_nested_too_deep_is_only_no_candidate(tmp_path):
    from bert_keras._contract import ARCHITECTURE_FILE
    from bert_keras.formats.hub_module import _recorded_architecture

    path = tmp_path / ARCHITECTURE_FILE
    path.parent.mkdir()
    path.write_text(json.dumps({"num_heads": 2, "activation": "gelu", "layer_norm_epsilon": 1e-12}))
    assert _recorded_architecture(str(tmp_path), {"hidden_size": 16})["num_heads"] == 2
    path.write_text("[" * 100_000 + "]" * 100_000)  # the probe then tries the usual candidates, as without the file
    assert _recorded_architecture(str(tmp_path), {"hidden_size": 16}) is None
