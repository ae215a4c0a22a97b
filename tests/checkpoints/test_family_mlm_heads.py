"""The masked-LM heads of BERT's family, read as `"mlm"`: ALBERT, RoBERTa, DistilBERT and ELECTRA's generator.

Each family's tiny random `*ForMaskedLM` (the sizes of tests/test_family_workflows.py) is saved as a folder, every
parameter moved away from its initial value, and read with `load_checkpoint(folder, with_heads=["mlm"])`; the
reference is transformers' `logits` on the same ids. Each family's head is chosen so that a wrong activation would
show: ALBERT's follows `hidden_act` (`gelu_new`, the tanh approximation), DistilBERT's its `activation` (`relu`
here), RoBERTa's and ELECTRA's generator's are the exact GELU whatever `hidden_act` says (`gelu_new` here). ALBERT's
and the generator's transforms end at `embedding_size` (16), narrower than the hidden size (32). Then an original
ALBERT TF1 checkpoint, its `cls/predictions/` head written under google-research/albert's names.
"""

import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras.checkpoints import CheckpointError, load_checkpoint
from bert_keras.checkpoints import _build
from bert_keras.formats import read_checkpoint, tables
from bert_keras.formats._common import expand_table, resolve_target
from bert_keras.formats._read import expected_shape
from bert_keras.heads import MaskedLMHead
from tests.checkpoints._models import max_diff, perturb_torch
from tests.checkpoints.test_tf1_family import write_albert_directory
from tests.test_family_workflows import FAMILIES as WORKFLOW_FAMILIES

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

VOCAB, SEQ = 120, 12
# name: (the *ForMaskedLM class, config changes that make a wrong head activation show, padding id)
MLM_FAMILIES = {
    "albert": ("AlbertForMaskedLM", dict(hidden_act="gelu_new"), 0),
    "roberta": ("RobertaForMaskedLM", dict(hidden_act="gelu_new", layer_norm_eps=1e-5), 1),
    "distilbert": ("DistilBertForMaskedLM", dict(activation="relu"), 0),
    "electra": ("ElectraForMaskedLM", dict(hidden_act="gelu_new"), 0),
}
# What our head must be: (activation, LayerNorm epsilon, transform kernel shape (hidden, tables' width)).
EXPECTED_HEADS = {
    "albert": ("gelu_approximate", 1e-12, (32, 16)),
    "roberta": ("gelu", 1e-5, (32, 32)),
    "distilbert": ("relu", 1e-12, (32, 32)),
    "electra": ("gelu", 1e-12, (32, 16)),
}
# The head's tensors in each folder (transformers 5 writes a tied decoder matrix once, as the word embeddings).
HEAD_TENSORS = {
    "albert": {"predictions.dense.weight", "predictions.dense.bias", "predictions.LayerNorm.weight",
               "predictions.LayerNorm.bias", "predictions.bias"},
    "roberta": {"lm_head.dense.weight", "lm_head.dense.bias", "lm_head.layer_norm.weight", "lm_head.layer_norm.bias",
                "lm_head.bias"},
    "distilbert": {"vocab_transform.weight", "vocab_transform.bias", "vocab_layer_norm.weight",
                   "vocab_layer_norm.bias", "vocab_projector.bias"},
    "electra": {"generator_predictions.dense.weight", "generator_predictions.dense.bias",
                "generator_predictions.LayerNorm.weight", "generator_predictions.LayerNorm.bias",
                "generator_lm_head.bias"},
}


def make_mlm_model(name, seed=0, **changes):
    """A tiny transformers `*ForMaskedLM` of family `name`, every parameter perturbed (biases, LayerNorms too)."""
    config_class, _, sizes, _, _ = WORKFLOW_FAMILIES[name]
    model_class, family_changes, _ = MLM_FAMILIES[name]
    torch.manual_seed(seed)
    config = getattr(transformers, config_class)(**{**sizes, **family_changes, **changes}, vocab_size=VOCAB)
    return perturb_torch(getattr(transformers, model_class)(config), seed=seed, scale=0.2)


def mlm_inputs(name, seed=0, vocab=VOCAB):
    """Three rows of 12, 8 and 3 real tokens (never a special id), padded with the family's padding id."""
    pad = MLM_FAMILIES[name][2]
    rng = np.random.default_rng(seed)
    mask = (np.arange(SEQ)[None, :] < np.array([[SEQ], [8], [3]])).astype("int32")
    ids = np.where(mask == 1, rng.integers(5, vocab, size=mask.shape), pad).astype("int32")
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids)}


def reference_logits(model, inputs):
    with torch.no_grad():
        return model(input_ids=torch.tensor(inputs["input_word_ids"], dtype=torch.long),
                     attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long)).logits.numpy()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """name -> (transformers model, folder)."""
    built = {}
    for name in MLM_FAMILIES:
        model = make_mlm_model(name)
        folder = tmp_path_factory.mktemp(name)
        model.save_pretrained(str(folder))
        built[name] = (model, str(folder))
    return built


@pytest.mark.parametrize("name", sorted(MLM_FAMILIES))
def test_family_mlm_head_gives_transformers_logits(folders, name):
    model, folder = folders[name]
    loaded = load_checkpoint(folder, with_heads=["mlm"])
    head = loaded.heads["mlm"]
    assert loaded.summary.heads == ["mlm"] and set(loaded.heads) == {"mlm"}
    activation, epsilon, kernel = EXPECTED_HEADS[name]
    assert (head.activation, head.layer_norm_epsilon, tuple(head.transform_dense.kernel.shape)) == (
        activation, epsilon, kernel)
    assert head.embedding is loaded.encoder.embeddings.word_embeddings  # tied: no table of its own
    assert {source for source, _ in loaded.summary.loaded} >= HEAD_TENSORS[name]
    assert loaded.summary.unused == []

    inputs = mlm_inputs(name)
    expected = reference_logits(model, inputs)
    sequence = loaded.encoder(inputs)["sequence_output"]
    logits = np.asarray(head(sequence))  # (batch, seq, vocab): every position
    real = inputs["input_mask"].astype(bool)
    assert logits.shape == (3, SEQ, VOCAB)
    assert max_diff(logits[real], expected[real]) <= 1e-5
    # At chosen positions, as the pre-training head is called.
    positions = np.array([[0, 5, 11], [7, 1, 2], [2, 0, 1]], dtype="int32")
    picked = np.asarray(head(sequence, positions))
    assert max_diff(picked, np.take_along_axis(expected, positions[:, :, None], axis=1)) <= 1e-5
    # The logits depend on the head's biases and LayerNorm, not only on the encoder: the mapping is checked.
    assert float(np.abs(expected[real]).max()) > 0.1


def test_with_heads_true_reads_the_masked_lm_of_every_family(folders):
    for name in MLM_FAMILIES:
        weights = read_checkpoint(folders[name][1])  # with_heads=True: the pre-training heads present
        assert weights.heads == ["mlm"] and weights.summary.unused == [], name
        without = read_checkpoint(folders[name][1], with_heads=False)
        assert without.heads == [] and sorted(without.summary.unused) == sorted(HEAD_TENSORS[name]), name


def test_electra_generator_and_discriminator_each_give_their_head(folders, tmp_path):
    generator = read_checkpoint(folders["electra"][1], with_heads=True)
    assert generator.architectures == ["ElectraForMaskedLM"] and generator.heads == ["mlm"]
    assert generator.mlm_activation == "gelu" and generator.encoder_config["activation"] == "gelu_approximate"
    config_class, _, sizes, _, _ = WORKFLOW_FAMILIES["electra"]
    torch.manual_seed(0)
    discriminator = perturb_torch(transformers.ElectraForPreTraining(
        getattr(transformers, config_class)(**sizes, vocab_size=VOCAB)))
    discriminator.save_pretrained(str(tmp_path / "discriminator"))
    loaded = load_checkpoint(str(tmp_path / "discriminator"), with_heads=True)
    assert set(loaded.heads) == {"discriminator"} and loaded.summary.unused == []
    assert load_checkpoint(str(tmp_path / "discriminator"), with_heads=["mlm"]).heads == {}


def test_albert_for_pretraining_reads_the_masked_lm_not_the_sentence_order_head(tmp_path):
    config_class, _, sizes, _, _ = WORKFLOW_FAMILIES["albert"]
    torch.manual_seed(1)
    model = perturb_torch(transformers.AlbertForPreTraining(
        getattr(transformers, config_class)(**sizes, vocab_size=VOCAB)), seed=1, scale=0.2)
    model.save_pretrained(str(tmp_path))
    loaded = load_checkpoint(str(tmp_path), with_heads=True)
    assert set(loaded.heads) == {"mlm"}
    assert sorted(loaded.summary.unused) == ["sop_classifier.classifier.bias", "sop_classifier.classifier.weight"]
    inputs = mlm_inputs("albert")
    with torch.no_grad():
        expected = model(input_ids=torch.tensor(inputs["input_word_ids"], dtype=torch.long),
                         attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long)).prediction_logits.numpy()
    logits = np.asarray(loaded.heads["mlm"](loaded.encoder(inputs)["sequence_output"]))
    real = inputs["input_mask"].astype(bool)
    assert max_diff(logits[real], expected[real]) <= 1e-5


@pytest.mark.parametrize("name", sorted(MLM_FAMILIES))
def test_an_untied_decoder_is_refused_naming_it(tmp_path, name):
    model = make_mlm_model(name, tie_word_embeddings=False)
    model.save_pretrained(str(tmp_path))
    decoder = {"albert": "predictions.decoder.weight", "roberta": "lm_head.decoder.weight",
               "distilbert": "vocab_projector.weight", "electra": "generator_lm_head.weight"}[name]
    with pytest.raises(CheckpointError, match=re.escape(f"tensor {decoder!r}: differs from the word embeddings") +
                       r".*An untied decoder is not supported"):
        load_checkpoint(str(tmp_path), with_heads=["mlm"])
    # The encoder alone still loads.
    assert load_checkpoint(str(tmp_path), with_heads=False).heads == {}


def test_a_head_of_the_hidden_width_over_narrower_embeddings_is_refused_before_building(folders, tmp_path):
    """An ALBERT head whose transform ends at the hidden size (as BERT's), not the embeddings' 16: named, with sizes."""
    _, folder = folders["albert"]
    arrays = safetensors_numpy.load_file(os.path.join(folder, "model.safetensors"))
    arrays["predictions.dense.weight"] = np.zeros((32, 32), "float32")
    arrays["predictions.dense.bias"] = np.zeros((32,), "float32")
    safetensors_numpy.save_file(arrays, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "config.json").write_text(open(os.path.join(folder, "config.json")).read())
    with pytest.raises(CheckpointError, match=re.escape("tensor 'predictions.dense.weight': has shape (32, 32), which "
                                                        "means embedding_size=32, hidden_size=32; the config says "
                                                        "embedding_size=16.")):
        read_checkpoint(str(tmp_path), with_heads=["mlm"])
    assert read_checkpoint(str(tmp_path), with_heads=False).heads == []  # the encoder alone is sound


# ---------------------------------------------------------------------------
# MaskedLMHead: the width of the tied table
# ---------------------------------------------------------------------------


def test_masked_lm_head_ends_at_the_tied_embedding_width():
    embedding = keras.layers.Embedding(30, 6)
    embedding.build((None,))
    head = MaskedLMHead(vocab_size=30, embedding=embedding, activation="relu", layer_norm_epsilon=1e-6)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 10)).astype("float32")
    logits = np.asarray(head(x))
    assert [tuple(w.shape) for w in (head.transform_dense.kernel, head.transform_dense.bias, head.layer_norm.gamma,
                                     head.layer_norm.beta, head.output_bias)] == [(10, 6), (6,), (6,), (6,), (30,)]
    assert not hasattr(head, "decoder_embeddings")  # tied: the embedding's table is the output projection
    for variable in head.weights:
        variable.assign(rng.normal(size=variable.shape).astype("float32"))
    # numpy: dense -> relu -> LayerNorm (of width 6) -> x @ table.T + bias
    h = np.maximum(x @ head.transform_dense.kernel.numpy() + head.transform_dense.bias.numpy(), 0)
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-6)
    h = h * head.layer_norm.gamma.numpy() + head.layer_norm.beta.numpy()
    expected = h @ embedding.embeddings.numpy().T + head.output_bias.numpy()
    assert logits.shape == (2, 5, 30)
    assert max_diff(head(x), expected) <= 1e-4
    # The config round trip gives the same head over the same embedding.
    restored = MaskedLMHead.from_config(head.get_config() | {"embedding": embedding})
    restored.build((None, None, 10))
    restored.set_weights(head.get_weights())
    assert max_diff(restored(x), head(x)) == 0.0


def test_masked_lm_head_refuses_an_embedding_without_a_width():
    class NoWidth:
        input_dim = 30
        output_dim = None

    with pytest.raises(ValueError, match="`embedding`.*positive `output_dim`"):
        MaskedLMHead(vocab_size=30, embedding=NoWidth())


def test_expected_shapes_of_a_narrow_head_are_the_built_shapes():
    """`expected_shape` of the masked LM, where the embeddings are narrower than the hidden size (ALBERT)."""
    config = dict(vocab_size=40, num_layers=2, hidden_size=16, num_heads=4, intermediate_size=24,
                  max_sequence_length=20, type_vocab_size=2, embedding_size=8, shared_layers=True)
    roots = _build.build_models(config, [tables.MLM], "gelu")
    for target, _, _ in expand_table(tables.HF_ALBERT_WEIGHTS, [tables.MLM], config["num_layers"]):
        assert expected_shape(target, config) == tuple(resolve_target(roots, target).shape), target
    assert tuple(roots["mlm"].transform_dense.kernel.shape) == (16, 8)


# ---------------------------------------------------------------------------
# ALBERT's original TF1 checkpoint: `cls/predictions/`
# ---------------------------------------------------------------------------


def _albert_mlm_reference(model, folder):
    """transformers' AlbertForMaskedLM holding `model`'s encoder and the head the TF1 checkpoint stores."""
    reader = tf.train.load_checkpoint(os.path.join(folder, "model.ckpt-best"))
    reference = transformers.AlbertForMaskedLM(model.config).eval()
    missing, unexpected = reference.albert.load_state_dict(model.state_dict(), strict=False)
    assert missing == [] and sorted(unexpected) == ["pooler.bias", "pooler.weight"]  # no pooler in the masked LM
    head = reference.predictions
    with torch.no_grad():
        head.dense.weight.copy_(torch.tensor(reader.get_tensor("cls/predictions/transform/dense/kernel").T))
        head.dense.bias.copy_(torch.tensor(reader.get_tensor("cls/predictions/transform/dense/bias")))
        head.LayerNorm.weight.copy_(torch.tensor(reader.get_tensor("cls/predictions/transform/LayerNorm/gamma")))
        head.LayerNorm.bias.copy_(torch.tensor(reader.get_tensor("cls/predictions/transform/LayerNorm/beta")))
        for bias in (head.bias, head.decoder.bias):
            bias.copy_(torch.tensor(reader.get_tensor("cls/predictions/output_bias")))
        head.decoder.weight.copy_(torch.tensor(reader.get_tensor("bert/embeddings/word_embeddings")))
    return reference


def test_albert_tf1_masked_lm_gives_transformers_logits(tmp_path):
    model, folder = write_albert_directory(tmp_path / "albert_base")
    loaded = load_checkpoint(folder, with_heads=["mlm"])
    head = loaded.heads["mlm"]
    assert loaded.summary.format == "google" and loaded.summary.heads == ["mlm"]
    # google-research/albert's gelu is the tanh approximation, its LayerNorm's epsilon 1e-12.
    assert (head.activation, head.layer_norm_epsilon, tuple(head.transform_dense.kernel.shape)) == (
        "gelu_approximate", 1e-12, (32, 16))
    assert {source for source, _ in loaded.summary.loaded} >= {
        "cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/bias",
        "cls/predictions/transform/LayerNorm/gamma", "cls/predictions/transform/LayerNorm/beta",
        "cls/predictions/output_bias"}
    # The sentence-order head is not next-sentence prediction: left unused.
    assert sorted(loaded.summary.unused) == ["cls/seq_relationship/output_bias", "cls/seq_relationship/output_weights"]

    reference = _albert_mlm_reference(model, folder)
    inputs = mlm_inputs("albert", vocab=model.config.vocab_size)
    expected = reference_logits(reference, inputs)
    logits = np.asarray(head(loaded.encoder(inputs)["sequence_output"]))
    real = inputs["input_mask"].astype(bool)
    assert max_diff(logits[real], expected[real]) <= 1e-5
    assert float(np.abs(expected[real]).max()) > 0.1
