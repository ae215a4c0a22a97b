"""TF Hub / Model Garden encoder modules imported into BertEncoder give the module's own outputs."""

import os
import shutil
import tarfile

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.checkpoints import CheckpointError, detect_format, load_checkpoint
from bert_keras.hub import load
from tests.inspection.conftest import MODEL_GARDEN_MODULE, VOCAB


@pytest.fixture(scope="module")
def model_garden_module(tmp_path_factory):
    """Written by Model Garden's own exporter: fresh where tf-models-official imports, else the committed copy."""
    try:
        from tests.inspection.make_model_garden_module import write_module

        import official.nlp.tools.export_tfhub_lib  # noqa: F401
    except ImportError:
        return MODEL_GARDEN_MODULE
    return os.path.join(write_module(str(tmp_path_factory.mktemp("model_garden"))), "encoder")


def _inputs():
    ids = np.array([[2, 17, 18, 14, 5, 6, 7, 8, 5, 9, 15, 3], [2, 11, 12, 13, 3, 27, 29, 3, 0, 0, 0, 0]], np.int32)
    types = np.zeros_like(ids)
    types[1, 5:8] = 1
    return {"input_word_ids": tf.constant(ids), "input_mask": tf.constant((ids > 0).astype(np.int32)),
            "input_type_ids": tf.constant(types)}


def _max_differences(module_dir, encoder):
    inputs = _inputs()
    expected = load(module_dir)(inputs, training=False)
    ours = encoder(inputs, training=False)
    real = inputs["input_mask"].numpy().astype(bool)
    diffs = {"pooled_output": float(np.abs(np.asarray(ours["pooled_output"]) - np.asarray(expected["pooled_output"])).max())}
    for i, (a, b) in enumerate(zip(ours["encoder_outputs"], expected["encoder_outputs"])):
        diffs[f"encoder_outputs[{i}]"] = float(np.abs(np.asarray(a)[real] - np.asarray(b)[real]).max())
    return diffs


def test_model_garden_module_gives_the_modules_outputs(model_garden_module):
    assert detect_format(model_garden_module) == "hub_module"
    loaded = load_checkpoint(model_garden_module)
    encoder = loaded.encoder
    assert (encoder.num_layers, encoder.hidden_size, encoder.num_heads, encoder.intermediate_size) == (2, 16, 4, 32)
    assert (encoder.vocab_size, encoder.max_sequence_length, encoder.type_vocab_size) == (len(VOCAB), 64, 2)
    assert encoder.activation == "gelu_approximate"  # Model Garden's "gelu" is the tanh approximation (no Erf op)
    assert loaded.summary.format == "hub_module" and len(loaded.summary.loaded) == 5 + 2 * 16 + 2
    assert loaded.summary.unused == [] and loaded.summary.ignored == ["Variable:0"]  # the do_lower_case flag
    assert loaded.do_lower_case is True
    with open(loaded.vocab_file, encoding="utf-8") as f:
        assert f.read().split() == VOCAB
    diffs = _max_differences(model_garden_module, encoder)
    assert len(diffs) == 3 and max(diffs.values()) <= 1e-5, diffs


@pytest.mark.slow
def test_our_module_pair_and_its_archive(module_pair, tmp_path):
    modules, original = module_pair
    assert detect_format(modules) == "hub_module"
    loaded = load_checkpoint(modules)  # the directory that holds encoder/
    assert loaded.encoder.num_heads == 2 and loaded.encoder.activation == "gelu"  # heads found by trying divisors
    assert max(_max_differences(os.path.join(modules, "encoder"), loaded.encoder).values()) <= 1e-5
    for a, b in zip(original.weights, loaded.encoder.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())

    archive = tmp_path / "module.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(os.path.join(modules, "encoder"), arcname="bert_tiny")
    os.environ["TFHUB_CACHE_DIR"] = str(tmp_path / "cache")
    try:
        assert detect_format(str(archive)) == "hub_module"
        from_archive = load_checkpoint(str(archive))
    finally:
        del os.environ["TFHUB_CACHE_DIR"]
    assert from_archive.vocab_file.startswith(str(tmp_path / "cache"))
    for a, b in zip(original.weights, from_archive.encoder.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_our_module_of_small_weights_is_read_with_exact_gelu(tmp_path):
    """At BERT's initializer range the tanh approximation gives this module's outputs within the probe's
    tolerance too: the activation must come from the graph (Keras writes exact GELU with `Erfc`), not be
    the first candidate that passes."""
    from bert_keras.export import export_encoder
    from tests.inspection.conftest import tiny_encoder

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    encoder = tiny_encoder(initializer_range=0.02)
    export_encoder(encoder, str(tmp_path / "encoder"), str(vocab), True)
    loaded = load_checkpoint(str(tmp_path / "encoder"))
    assert (loaded.encoder.num_heads, loaded.encoder.activation) == (2, "gelu")


def test_module_without_vocabulary(tmp_path):
    directory = str(tmp_path / "encoder")
    shutil.copytree(MODEL_GARDEN_MODULE, directory)
    os.remove(os.path.join(directory, "assets", "vocab.txt"))
    with pytest.raises(CheckpointError, match="has no vocabulary: the encoder module has no vocab_file asset"):
        load_checkpoint(directory)


def test_saved_model_that_is_not_bert(tmp_path):
    module = tf.Module()
    module.weight = tf.Variable(tf.ones([3, 3]), name="dense/kernel")
    module.__call__ = tf.function(lambda x: x @ module.weight, input_signature=[tf.TensorSpec([None, 3])])
    tf.saved_model.save(module, str(tmp_path / "other"))
    with pytest.raises(CheckpointError, match=r"is a SavedModel but not a BERT encoder module this package reads"):
        load_checkpoint(str(tmp_path / "other"))
