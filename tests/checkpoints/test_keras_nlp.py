import os

import keras
import numpy as np
import pytest

from bert_keras import BertEncoder
from bert_keras.checkpoints import CheckpointError, ConfigError, detect_format, load_checkpoint, to_keras_nlp
from tests.checkpoints._models import max_diff, random_inputs, write_vocab

keras_hub = pytest.importorskip("keras_hub")

TINY = dict(vocabulary_size=60, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32, max_sequence_length=24)


def _random_backbone(seed=0):
    backbone = keras_hub.models.BertBackbone(**TINY)
    rng = np.random.default_rng(seed)
    for variable in backbone.weights:  # non-trivial biases and LayerNorms
        variable.assign(variable.numpy() + rng.normal(0, 0.05, variable.shape).astype("float32"))
    return backbone


def _backbone_inputs(inputs):
    return {
        "token_ids": inputs["input_word_ids"],
        "segment_ids": inputs["input_type_ids"],
        "padding_mask": inputs["input_mask"],
    }


def _assert_same_outputs(encoder, backbone, atol=1e-5):
    inputs, _ = random_inputs(vocab=TINY["vocabulary_size"])
    ours = encoder(inputs, training=False)
    theirs = backbone(_backbone_inputs(inputs), training=False)
    real = inputs["input_mask"].astype(bool)
    assert max_diff(np.asarray(ours["sequence_output"])[real], np.asarray(theirs["sequence_output"])[real]) <= atol
    assert max_diff(ours["pooled_output"], theirs["pooled_output"]) <= atol


def test_backbone_to_ours_and_back():
    backbone = _random_backbone()
    assert detect_format(backbone) == "keras_nlp"
    loaded = load_checkpoint(backbone)
    encoder = loaded.encoder
    assert encoder.activation == "gelu_approximate"
    assert (encoder.vocab_size, encoder.hidden_size, encoder.max_sequence_length) == (60, 16, 24)
    assert len(loaded.summary.loaded) == len(backbone.weights) == 39
    assert loaded.summary.unused == [] and loaded.summary.ignored == []
    assert encoder.count_params() == backbone.count_params()
    _assert_same_outputs(encoder, backbone)

    exported = to_keras_nlp(encoder)
    assert exported.get_config()["vocabulary_size"] == 60
    for a, b in zip(backbone.weights, exported.weights):
        assert a.path == b.path
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    _assert_same_outputs(encoder, exported)


def test_preset_directory_saved_by_keras_nlp(tmp_path):
    backbone = _random_backbone(seed=1)
    preset = str(tmp_path / "preset")
    backbone.save_to_preset(preset)
    tokens = write_vocab(str(tmp_path / "vocab.txt"), TINY["vocabulary_size"])
    keras_hub.models.BertTokenizer(vocabulary=tokens, lowercase=True).save_to_preset(preset)
    assert os.path.exists(os.path.join(preset, "assets", "tokenizer", "vocabulary.txt"))
    assert detect_format(preset) == "keras_nlp"

    loaded = load_checkpoint(preset)
    assert loaded.summary.format == "keras_nlp"
    assert loaded.vocab_file == os.path.join(preset, "assets", "tokenizer", "vocabulary.txt")
    assert loaded.do_lower_case is True
    _assert_same_outputs(loaded.encoder, backbone)

    # Ours -> a preset again, which keras-nlp itself loads.
    exported_dir = str(tmp_path / "exported")
    to_keras_nlp(loaded.encoder, preset_dir=exported_dir, vocab_file=loaded.vocab_file, do_lower_case=True)
    reloaded = keras_hub.models.BertBackbone.from_preset(exported_dir)
    _assert_same_outputs(loaded.encoder, reloaded)
    tokenizer = keras_hub.models.BertTokenizer.from_preset(exported_dir)
    assert tokenizer.vocabulary_size() == 60


def test_export_requires_backbone_activation():
    encoder = BertEncoder(vocab_size=30, num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16)
    with pytest.raises(ValueError, match="activation='gelu_approximate'.*activation='gelu'"):
        to_keras_nlp(encoder)
    backbone = to_keras_nlp(encoder, allow_activation_change=True)
    assert backbone.count_params() == encoder.count_params()


def test_preset_of_another_class_and_vocabulary_mismatch(tmp_path):
    backbone = _random_backbone()
    preset = str(tmp_path / "preset")
    backbone.save_to_preset(preset)
    keras_hub.models.BertTokenizer(vocabulary=write_vocab(str(tmp_path / "v.txt"), 50)).save_to_preset(preset)
    with pytest.raises(CheckpointError, match="vocabulary.txt.*token_embedding/embeddings.*50 tokens"):
        load_checkpoint(preset)

    config_file = os.path.join(preset, "config.json")
    text = open(config_file).read().replace('"BertBackbone"', '"GPT2Backbone"').replace(">BertBackbone", ">GPT2Backbone")
    with open(config_file, "w") as f:
        f.write(text)
    with pytest.raises(ConfigError, match="config.json.*class_name.*GPT2Backbone"):
        load_checkpoint(preset)


def test_keras_nlp_reader_rejects_other_objects():
    with pytest.raises(ValueError, match="argument `path`.*BertBackbone. Received: path=Dense"):
        load_checkpoint(keras.layers.Dense(3), format="keras_nlp")
