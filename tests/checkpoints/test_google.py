import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.checkpoints import CheckpointError, detect_format, load_checkpoint
from bert_keras.formats._common import resolve_target
from bert_keras.tasks import checkpoint_pretrainer
from tests.checkpoints._models import TINY_HF, hf_pretraining_model, max_diff, random_inputs, torch_outputs, write_vocab

pytest.importorskip("torch")
pytest.importorskip("transformers")


def _google_arrays(model):
    """The state dict of a transformers BertForPreTraining under google-research/bert names.

    Written out longhand, independently of the converter's tables.
    """
    state = {name: value.numpy() for name, value in model.state_dict().items()}
    arrays = {
        "bert/embeddings/word_embeddings": state["bert.embeddings.word_embeddings.weight"],
        "bert/embeddings/position_embeddings": state["bert.embeddings.position_embeddings.weight"],
        "bert/embeddings/token_type_embeddings": state["bert.embeddings.token_type_embeddings.weight"],
        "bert/embeddings/LayerNorm/gamma": state["bert.embeddings.LayerNorm.weight"],
        "bert/embeddings/LayerNorm/beta": state["bert.embeddings.LayerNorm.bias"],
        "bert/pooler/dense/kernel": state["bert.pooler.dense.weight"].T,
        "bert/pooler/dense/bias": state["bert.pooler.dense.bias"],
        "cls/predictions/transform/dense/kernel": state["cls.predictions.transform.dense.weight"].T,
        "cls/predictions/transform/dense/bias": state["cls.predictions.transform.dense.bias"],
        "cls/predictions/transform/LayerNorm/gamma": state["cls.predictions.transform.LayerNorm.weight"],
        "cls/predictions/transform/LayerNorm/beta": state["cls.predictions.transform.LayerNorm.bias"],
        "cls/predictions/output_bias": state["cls.predictions.bias"],
        "cls/seq_relationship/output_weights": state["cls.seq_relationship.weight"],  # (2, hidden)
        "cls/seq_relationship/output_bias": state["cls.seq_relationship.bias"],
    }
    for i in range(TINY_HF["num_hidden_layers"]):
        hf, g = f"bert.encoder.layer.{i}.", f"bert/encoder/layer_{i}/"
        for hf_part, g_part in [
            ("attention.self.query", "attention/self/query"),
            ("attention.self.key", "attention/self/key"),
            ("attention.self.value", "attention/self/value"),
            ("attention.output.dense", "attention/output/dense"),
            ("intermediate.dense", "intermediate/dense"),
            ("output.dense", "output/dense"),
        ]:
            arrays[g + g_part + "/kernel"] = state[hf + hf_part + ".weight"].T
            arrays[g + g_part + "/bias"] = state[hf + hf_part + ".bias"]
        for hf_part, g_part in [("attention.output.LayerNorm", "attention/output/LayerNorm"), ("output.LayerNorm", "output/LayerNorm")]:
            arrays[g + g_part + "/gamma"] = state[hf + hf_part + ".weight"]
            arrays[g + g_part + "/beta"] = state[hf + hf_part + ".bias"]
    return {name: np.ascontiguousarray(value, dtype="float32") for name, value in arrays.items()}


def write_tf1_checkpoint(prefix, arrays, with_optimizer_slots=True):
    """Writes variables with TF1's Saver, as google-research/bert's run_pretraining.py did."""
    with tf.Graph().as_default():
        variables = [tf.compat.v1.Variable(value, name=name) for name, value in arrays.items()]
        if with_optimizer_slots:
            for name, value in arrays.items():
                variables.append(tf.compat.v1.Variable(np.zeros_like(value), name=name + "/adam_m"))
                variables.append(tf.compat.v1.Variable(np.ones_like(value), name=name + "/adam_v"))
            variables.append(tf.compat.v1.Variable(np.int64(1000), name="global_step"))
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, prefix, write_meta_graph=False)


def write_google_directory(directory, model, arrays=None, vocab_size=TINY_HF["vocab_size"]):
    os.makedirs(directory, exist_ok=True)
    write_tf1_checkpoint(os.path.join(directory, "bert_model.ckpt"), arrays or _google_arrays(model))
    config = {
        "vocab_size": TINY_HF["vocab_size"],
        "hidden_size": TINY_HF["hidden_size"],
        "num_hidden_layers": TINY_HF["num_hidden_layers"],
        "num_attention_heads": TINY_HF["num_attention_heads"],
        "intermediate_size": TINY_HF["intermediate_size"],
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": TINY_HF["max_position_embeddings"],
        "type_vocab_size": TINY_HF["type_vocab_size"],
        "initializer_range": 0.02,
    }
    with open(os.path.join(directory, "bert_config.json"), "w") as f:
        json.dump(config, f)
    write_vocab(os.path.join(directory, "vocab.txt"), vocab_size)
    return str(directory)


@pytest.fixture(scope="module")
def google_model():
    # Google's "gelu" is the tanh approximation, transformers' "gelu_new".
    return hf_pretraining_model(hidden_act="gelu_new", seed=5)


def test_tf1_checkpoint_converts_exactly(tmp_path, google_model):
    directory = write_google_directory(tmp_path / "uncased_L-2_H-16_A-2", google_model)
    arrays = _google_arrays(google_model)
    reader = tf.train.load_checkpoint(os.path.join(directory, "bert_model.ckpt"))
    assert "bert/encoder/layer_0/attention/self/query/kernel/adam_m" in reader.get_variable_to_shape_map()
    assert detect_format(directory) == "google"

    loaded = load_checkpoint(directory)
    assert loaded.summary.format == "google"
    assert loaded.encoder.activation == "gelu_approximate"
    assert loaded.do_lower_case is True
    assert loaded.summary.heads == ["mlm", "nsp"]
    assert len(loaded.summary.loaded) == len(arrays) == 46
    assert loaded.summary.unused == []
    assert len(loaded.summary.ignored) == 2 * 46 + 1  # adam_m, adam_v, global_step
    assert "bert/encoder/layer_1/output/dense/kernel/adam_v" in loaded.summary.ignored

    # Every weight is bit-exact.
    encoder, heads = loaded.encoder, loaded.heads
    exact = {
        "bert/encoder/layer_0/attention/self/query/kernel": encoder.transformer_layers[0].attention.query_dense.kernel,
        "bert/encoder/layer_1/output/LayerNorm/beta": encoder.transformer_layers[1].feed_forward_layer_norm.beta,
        "bert/embeddings/position_embeddings": encoder.embeddings.position_embeddings,
        "cls/predictions/output_bias": heads["mlm"].output_bias,
    }
    for name, variable in exact.items():
        np.testing.assert_array_equal(variable.numpy(), arrays[name])
    np.testing.assert_array_equal(heads["nsp"].dense.kernel.numpy(), arrays["cls/seq_relationship/output_weights"].T)
    for source, target in loaded.summary.loaded:
        value = resolve_target({"encoder": encoder, **heads}, target).numpy()
        expected = arrays[source].T if source.endswith("output_weights") else arrays[source]
        np.testing.assert_array_equal(value, expected, err_msg=source)

    # And the outputs are those of the same network in transformers.
    inputs, positions = random_inputs()
    outputs = checkpoint_pretrainer(loaded)({**inputs, "masked_lm_positions": positions})
    expected = torch_outputs(google_model, inputs)
    expected_mlm = np.take_along_axis(expected.prediction_logits.numpy(), positions[:, :, None], axis=1)
    assert max_diff(outputs["mlm_logits"], expected_mlm) <= 1e-4
    assert max_diff(outputs["nsp_logits"], expected.seq_relationship_logits.numpy()) <= 1e-4


def test_checkpoint_prefix_and_cased_directory(tmp_path, google_model):
    directory = write_google_directory(tmp_path / "cased_L-2_H-16_A-2", google_model)
    loaded = load_checkpoint(os.path.join(directory, "bert_model.ckpt"), format="google", with_heads=False)
    assert loaded.do_lower_case is False
    assert loaded.heads == {} and len(loaded.summary.unused) == 7


def test_missing_tensor_in_tf1_checkpoint(tmp_path, google_model):
    arrays = _google_arrays(google_model)
    del arrays["bert/encoder/layer_1/intermediate/dense/bias"]
    directory = write_google_directory(tmp_path / "model", google_model, arrays=arrays)
    with pytest.raises(CheckpointError, match="bert_model.ckpt.*bert/encoder/layer_1/intermediate/dense/bias.*missing"):
        load_checkpoint(directory)


def test_wrong_shape_in_tf1_checkpoint(tmp_path, google_model):
    arrays = _google_arrays(google_model)
    arrays["bert/encoder/layer_0/attention/self/value/kernel"] = np.zeros((16, 8), "float32")
    directory = write_google_directory(tmp_path / "model", google_model, arrays=arrays)
    with pytest.raises(CheckpointError, match=r"bert/encoder/layer_0/attention/self/value/kernel.*\(16, 8\).*\(16, 16\)"):
        load_checkpoint(directory)
