"""Bad input: each error names the file and the tensor (or config field); nothing is returned."""

import json
import os
import re

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from bert_keras.checkpoints import CheckpointError, ConfigError, detect_format, load_checkpoint
from bert_keras.formats.sources import read_safetensors_header
from tests.checkpoints._models import TINY_HF, save_hf_directory, write_vocab

transformers = pytest.importorskip("transformers")


@pytest.fixture
def hf_dir(tmp_path):
    model = transformers.BertModel(transformers.BertConfig(**TINY_HF))
    return save_hf_directory(model, tmp_path / "bert")


def _weights(directory):
    return os.path.join(directory, "model.safetensors")


def _rewrite(directory, edit):
    tensors = load_file(_weights(directory))
    edit(tensors)
    save_file(tensors, _weights(directory))


def test_missing_tensor(hf_dir):
    name = "encoder.layer.1.output.dense.weight"
    _rewrite(hf_dir, lambda t: t.pop(name))
    with pytest.raises(CheckpointError, match=re.escape(_weights(hf_dir)) + f".*'{re.escape(name)}'.*missing") as info:
        load_checkpoint(hf_dir)
    assert info.value.file == _weights(hf_dir) and info.value.tensor == name
    assert "transformer_layers.1.feed_forward.output_dense.kernel" in str(info.value)


def test_tensor_of_wrong_shape(hf_dir):
    name = "encoder.layer.0.attention.self.query.weight"

    def edit(tensors):
        tensors[name] = np.zeros((16, 8), "float32")

    _rewrite(hf_dir, edit)
    with pytest.raises(CheckpointError, match=re.escape(name) + r".*shape \(16, 8\), expected \(16, 16\)") as info:
        load_checkpoint(hf_dir)
    assert info.value.file == _weights(hf_dir)
    assert "config.json" in str(info.value)


def test_config_disagreeing_with_weights(hf_dir):
    config_file = os.path.join(hf_dir, "config.json")
    config = json.load(open(config_file))
    config["intermediate_size"] = 64
    json.dump(config, open(config_file, "w"))
    with pytest.raises(CheckpointError, match=r"encoder.layer.0.intermediate.dense.weight.*has shape \(32, 16\), which "
                       r"means intermediate_size=32, hidden_size=16; the config says intermediate_size=64\."):
        load_checkpoint(hf_dir)


@pytest.mark.parametrize(
    "config_class, model_type",
    [("XLNetConfig", "xlnet"), ("GPT2Config", "gpt2")],  # RoBERTa is read now: BERT's family (test_families.py)
)
def test_config_that_is_not_bert(hf_dir, config_class, model_type):
    config_file = os.path.join(hf_dir, "config.json")
    getattr(transformers, config_class)().to_json_file(config_file)
    with pytest.raises(ConfigError, match=re.escape(config_file) + f".*'model_type'.*'{model_type}' config, not BERT") as info:
        load_checkpoint(hf_dir)
    assert info.value.tensor == "model_type"


def test_config_missing_a_field(hf_dir):
    config_file = os.path.join(hf_dir, "config.json")
    config = json.load(open(config_file))
    del config["num_attention_heads"]
    json.dump(config, open(config_file, "w"))
    with pytest.raises(ConfigError, match="config.json.*'num_attention_heads'.*missing"):
        load_checkpoint(hf_dir)


def test_unsupported_activation(hf_dir):
    config_file = os.path.join(hf_dir, "config.json")
    config = json.load(open(config_file))
    config["hidden_act"] = "silu"
    json.dump(config, open(config_file, "w"))
    with pytest.raises(ConfigError, match="config.json.*'hidden_act'.*'silu'"):
        load_checkpoint(hf_dir)


def test_vocabulary_disagreeing_with_embeddings(hf_dir):
    write_vocab(os.path.join(hf_dir, "vocab.txt"), 30)
    with pytest.raises(CheckpointError, match=r"vocab.txt.*'embeddings.word_embeddings.weight'.*30 tokens.*40 rows"):
        load_checkpoint(hf_dir)


def test_truncated_safetensors(hf_dir):
    path = _weights(hf_dir)
    header = read_safetensors_header(path)
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) - 1000])
    with pytest.raises(CheckpointError, match=re.escape(path) + ".*truncated") as info:
        load_checkpoint(hf_dir)
    # The tensor named is the first whose bytes are cut off.
    header_size = int.from_bytes(data[:8], "little")
    data_size = len(data) - 1000 - 8 - header_size
    cut = [name for name, info in header.items() if info["data_offsets"][1] > data_size]
    first_cut = min(cut, key=lambda name: header[name]["data_offsets"][1])
    assert info.value.tensor == first_cut
    assert f"'{first_cut}'" in str(info.value)


def test_safetensors_truncated_inside_the_header(hf_dir):
    path = _weights(hf_dir)
    with open(path, "r+b") as f:
        f.truncate(40)
    with pytest.raises(CheckpointError, match=re.escape(path) + ".*truncated inside the safetensors header"):
        load_checkpoint(hf_dir)


def test_directory_without_weights_or_config(tmp_path, hf_dir):
    os.remove(_weights(hf_dir))
    with pytest.raises(CheckpointError, match="holds no weights.*model.safetensors"):
        load_checkpoint(hf_dir)
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        detect_format(str(tmp_path))
    with pytest.raises(ValueError, match="format"):
        load_checkpoint(hf_dir, format="onnx")


def test_names_a_user_tries_say_what_to_do_instead(tmp_path, monkeypatch):
    from bert_keras.tasks import BertClassifier

    monkeypatch.chdir(tmp_path)  # relative names that are no folder here
    with pytest.raises(CheckpointError, match=r"'minilm_l6_h384_uncased' is a bert_keras preset: an architecture.*"
                                              r"BertEncoder\.from_architecture\('minilm_l6_h384_uncased'\)"):
        detect_format("minilm_l6_h384_uncased")
    for name in ("bert-base-uncased", "google-bert/bert-base-uncased"):
        with pytest.raises(CheckpointError, match=r"read from local folders; nothing is downloaded.*--local-dir DIR"):
            load_checkpoint(name)
    with pytest.raises(CheckpointError, match=r"does not exist or is a file\)\.$"):  # a path: no guess about names
        detect_format(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=r"BertClassifier\.from_preset\('bert_base_en_uncased'\): .*from_checkpoint\(path"):
        BertClassifier.from_preset("bert_base_en_uncased", num_classes=2)
