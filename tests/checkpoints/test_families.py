"""BERT's family (ELECTRA, DistilBERT, ALBERT, RoBERTa): one encoder with options, read from Hugging Face folders.

Each family's tiny random transformers model is saved as a folder (safetensors, and a `pytorch_model.bin`) and read
back; the reference is transformers' own model on the same weights.
"""

import json
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import BertEncoder
from bert_keras.checkpoints import CheckpointError, ConfigError, load_checkpoint
from bert_keras.formats import read_checkpoint, tables
from bert_keras.presets import PRESETS
from tests.checkpoints._models import max_diff, perturb_torch

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

VOCAB, SEQ = 120, 10
_SIZES = dict(num_hidden_layers=3, num_attention_heads=4, intermediate_size=64, max_position_embeddings=40)
# name: (config class, config, transformers class, pad id, whether it takes token types)
FAMILIES = {
    "electra": ("ElectraConfig", dict(_SIZES, vocab_size=VOCAB, embedding_size=16, hidden_size=32),
                "ElectraForPreTraining", 0, True),
    "electra_no_projection": ("ElectraConfig", dict(_SIZES, vocab_size=VOCAB, embedding_size=32, hidden_size=32),
                              "ElectraModel", 0, True),
    "distilbert": ("DistilBertConfig", dict(vocab_size=VOCAB, dim=32, n_layers=3, n_heads=4, hidden_dim=64,
                                            max_position_embeddings=40), "DistilBertModel", 0, False),
    "distilbert_sinusoidal": ("DistilBertConfig", dict(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                                       max_position_embeddings=40, sinusoidal_pos_embds=True),
                              "DistilBertModel", 0, False),
    "albert": ("AlbertConfig", dict(_SIZES, vocab_size=VOCAB, embedding_size=16, hidden_size=32, hidden_act="gelu_new"),
               "AlbertModel", 0, True),
    "roberta": ("RobertaConfig", dict(_SIZES, vocab_size=VOCAB, hidden_size=32, max_position_embeddings=42,
                                      type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1), "RobertaModel", 1, False),
}


def make_model(name, seed=0):
    config_class, config, model_class, _, _ = FAMILIES[name]
    torch.manual_seed(seed)
    config = getattr(transformers, config_class)(**config)
    return perturb_torch(getattr(transformers, model_class)(config), seed=seed)


def save_folder(model, directory, safetensors=True):
    """A Hugging Face folder: transformers 5 writes only safetensors, so `pytorch_model.bin` is torch.save'd."""
    os.makedirs(directory, exist_ok=True)
    if safetensors:
        model.save_pretrained(directory)
    else:
        model.config.save_pretrained(directory)
        torch.save(model.state_dict(), os.path.join(directory, "pytorch_model.bin"))
    return str(directory)


def family_inputs(name, seed=0):
    """Three rows of 10, 7 and 4 real tokens (ids never the padding id), padded with the family's padding id."""
    pad, with_types = FAMILIES[name][3], FAMILIES[name][4]
    rng = np.random.default_rng(seed)
    mask = (np.arange(SEQ)[None, :] < np.array([[SEQ], [7], [4]])).astype("int32")
    ids = np.where(mask == 1, rng.integers(3, VOCAB, size=mask.shape), pad).astype("int32")
    types = ((np.arange(SEQ)[None, :] >= 3) * mask).astype("int32") if with_types else np.zeros_like(ids)
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


def reference(model, inputs, name):
    """transformers' `(last_hidden_state, pooler_output or None)` for the Hub inputs."""
    base = getattr(model, model.base_model_prefix, model)
    kwargs = dict(input_ids=torch.tensor(inputs["input_word_ids"], dtype=torch.long),
                  attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long))
    if FAMILIES[name][4]:
        kwargs["token_type_ids"] = torch.tensor(inputs["input_type_ids"], dtype=torch.long)
    with torch.no_grad():
        out = base(**kwargs)
    pooled = getattr(out, "pooler_output", None)
    return out.last_hidden_state.numpy(), None if pooled is None else pooled.numpy()


def mean_pool(sequence, mask):
    mask = np.asarray(mask, "float64")[..., None]
    return (np.asarray(sequence, "float64") * mask).sum(1) / mask.sum(1)


def torch_count(model):
    base = getattr(model, model.base_model_prefix, model)
    return sum(parameter.numel() for parameter in base.parameters())


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """name -> (transformers model, safetensors folder, pytorch_model.bin folder)."""
    built = {}
    for name in FAMILIES:
        model = make_model(name)
        root = tmp_path_factory.mktemp(name)
        built[name] = (model, save_folder(model, root / "st"), save_folder(model, root / "bin", safetensors=False))
    return built


PARITY = {}


@pytest.mark.parametrize("safetensors", [True, False], ids=["safetensors", "pytorch_model.bin"])
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_matches_transformers(folders, name, safetensors):
    model, st_folder, bin_folder = folders[name]
    encoder = BertEncoder.from_checkpoint(st_folder if safetensors else bin_folder)
    inputs = family_inputs(name)
    expected, expected_pooled = reference(model, inputs, name)
    outputs = encoder(inputs)
    mask = inputs["input_mask"].astype(bool)
    sequence = np.asarray(outputs["sequence_output"])
    # Padding positions differ on purpose (packed tokens give zeros there); compare the real tokens.
    diff = max_diff(sequence[mask], expected[mask])
    pooled_diff = max_diff(mean_pool(sequence, mask), mean_pool(expected, mask))
    PARITY[(name, safetensors)] = (diff, pooled_diff)
    assert diff < 1e-5 and pooled_diff < 1e-5, (diff, pooled_diff)
    assert encoder.count_params() == torch_count(model)
    if expected_pooled is not None:  # ALBERT and RoBERTa have BERT's pooler
        assert max_diff(outputs["pooled_output"], expected_pooled) < 1e-5
    else:  # no pooler: the first token's sequence output
        np.testing.assert_array_equal(outputs["pooled_output"], sequence[:, 0])
    np.testing.assert_array_equal(outputs["default"], outputs["pooled_output"])
    assert len(outputs["encoder_outputs"]) == model.config.num_hidden_layers


@pytest.mark.parametrize("name", ["albert", "distilbert", "electra", "electra_no_projection", "roberta"])
def test_family_tables_cover_every_encoder_weight_once(folders, name):
    from bert_keras.formats._common import expand_table, resolve_target
    from bert_keras.formats.huggingface import family_table

    weights = read_checkpoint(folders[name][1], with_heads=False)
    config = weights.encoder_config
    encoder = BertEncoder(**config)
    table = family_table(read_json_type(folders[name][1]), config)
    parts = [part for part in (tables.EMBEDDINGS, tables.LAYER, tables.POOLER) if part in table]
    entries = expand_table(table, parts, config["num_layers"])
    targets = [resolve_target({"encoder": encoder}, target).path for target, _, _ in entries]
    assert sorted(targets) == sorted(variable.path for variable in encoder.weights)
    assert len({source for _, source, _ in entries}) == len(entries)


def read_json_type(folder):
    return json.load(open(os.path.join(folder, "config.json")))["model_type"]


def test_family_options_read_from_configs(folders):
    configs = {name: read_checkpoint(folders[name][1]).encoder_config for name in FAMILIES}
    assert configs["electra"]["embedding_size"] == 16 and configs["electra"]["use_pooler"] is False
    assert configs["electra_no_projection"]["embedding_size"] is None  # ElectraModel projects only unequal widths
    assert configs["distilbert"]["type_vocab_size"] == 0 and configs["distilbert"]["use_pooler"] is False
    assert configs["albert"]["shared_layers"] is True and configs["albert"]["activation"] == "gelu_approximate"
    roberta = configs["roberta"]
    # 42 rows, the first two (up to the padding index 1) never read: 40 positions, from row 2.
    assert (roberta["position_offset"], roberta["max_sequence_length"], roberta["layer_norm_epsilon"],
            roberta["type_vocab_size"]) == (2, 40, 1e-5, 1)


def test_electra_discriminator_head_is_read_and_reported(folders):
    model, folder, _ = folders["electra"]
    weights = read_checkpoint(folder)
    assert weights.heads == [tables.DISCRIMINATOR] and weights.summary.heads == [tables.DISCRIMINATOR]
    np.testing.assert_array_equal(weights.arrays["discriminator.prediction.kernel"],
                                  model.discriminator_predictions.dense_prediction.weight.detach().numpy().T)
    assert weights.arrays["discriminator.dense.kernel"].shape == (32, 32)
    assert read_checkpoint(folder, with_heads=False).heads == []
    assert "pooler" not in weights.summary.not_in_checkpoint  # ELECTRA has no pooler to miss


def test_heads_the_family_does_not_convert_are_reported_unused(tmp_path):
    torch.manual_seed(0)
    config = transformers.ElectraConfig(**FAMILIES["electra"][1])
    folder = save_folder(transformers.ElectraForMaskedLM(config), tmp_path / "generator")
    assert load_checkpoint(folder).summary.heads == ["mlm"]  # the generator's masked LM is read
    summary = load_checkpoint(folder, with_heads=False).summary
    assert {name.split(".")[0] for name in summary.unused} == {"generator_predictions", "generator_lm_head"}
    config = transformers.AlbertConfig(**FAMILIES["albert"][1])
    folder = save_folder(transformers.AlbertForPreTraining(config), tmp_path / "albert")
    summary = load_checkpoint(folder).summary
    # The masked LM is read; sentence-order prediction is not next-sentence prediction: left unused.
    assert {name.split(".")[0] for name in summary.unused} == {"sop_classifier"}
    assert summary.heads == ["mlm"] and len(summary.loaded) == 5 + 2 + 16 + 2 + 5
    summary = load_checkpoint(folder, with_heads=False).summary
    assert {name.split(".")[0] for name in summary.unused} == {"predictions", "sop_classifier"}
    assert summary.heads == [] and len(summary.loaded) == 5 + 2 + 16 + 2


def test_albert_more_than_one_group_is_refused(tmp_path):
    model = make_model("albert")
    folder = save_folder(model, tmp_path / "albert")
    config_file = os.path.join(folder, "config.json")
    config = json.load(open(config_file))
    config["num_hidden_groups"] = 3
    json.dump(config, open(config_file, "w"))
    with pytest.raises(ConfigError, match=re.escape(config_file) + r", field 'num_hidden_groups': is 3; only 1 is "
                       r"supported \(one block shared by every layer"):
        read_checkpoint(folder)


def test_unknown_model_type_names_the_supported_ones(tmp_path):
    folder = save_folder(make_model("distilbert"), tmp_path / "m")
    config_file = os.path.join(folder, "config.json")
    config = json.load(open(config_file))
    config["model_type"] = "xlnet"
    json.dump(config, open(config_file, "w"))
    supported = ", ".join(repr(name) for name in tables.HF_MODEL_TYPES)
    assert "'roberta'" in supported and "'xlm-roberta'" in supported
    with pytest.raises(ConfigError, match=re.escape(config_file) + r".*'xlnet' config, not BERT or a model of its "
                       r"family \(supported model_type: " + re.escape(supported) + r"\)"):
        read_checkpoint(folder)


def test_family_config_disagreeing_with_weights_names_the_family_key(folders, tmp_path):
    folder = save_folder(make_model("electra"), tmp_path / "electra")
    config_file = os.path.join(folder, "config.json")
    config = json.load(open(config_file))
    config["embedding_size"] = 24
    json.dump(config, open(config_file, "w"))
    with pytest.raises(CheckpointError, match=r"embeddings.word_embeddings.weight.*has shape \(120, 16\), "
                       r"which means vocab_size=120, embedding_size=16; the config says embedding_size=24"):
        read_checkpoint(folder)


@pytest.mark.parametrize("name", ["albert", "distilbert", "electra", "roberta"])
def test_family_encoder_config_and_keras_file_round_trip(folders, name, tmp_path):
    encoder = BertEncoder.from_checkpoint(folders[name][1])
    config = encoder.get_config()
    assert BertEncoder.from_config(config).get_config() == config
    path = str(tmp_path / "encoder.keras")
    encoder.save(path)
    restored = keras.saving.load_model(path)
    inputs = family_inputs(name)
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(restored(inputs)[key], encoder(inputs)[key], atol=1e-6)
    assert restored.count_params() == encoder.count_params()
    assert len(restored.transformer_layers) == (1 if name == "albert" else 3)


def test_albert_shares_one_block_and_a_step_updates_it_once():
    encoder = BertEncoder(vocab_size=VOCAB, num_layers=4, hidden_size=16, num_heads=2, intermediate_size=32,
                          embedding_size=8, shared_layers=True, dropout=0.0, attention_dropout=0.0)
    block = encoder.transformer_layers[0]
    assert len(encoder.transformer_layers) == 1
    assert len(block.weights) == 16 and len(encoder.weights) == 5 + 2 + 16 + 2
    inputs = family_inputs("albert")
    outputs = encoder(inputs)
    assert len(outputs["encoder_outputs"]) == 4
    np.testing.assert_allclose(encoder.pooled_output(inputs), outputs["pooled_output"], atol=1e-5)
    variables = encoder.trainable_variables
    before = [np.array(v) for v in variables]
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(encoder(inputs)["pooled_output"] ** 2)
    grads = tape.gradient(loss, variables)
    optimizer = keras.optimizers.SGD(learning_rate=0.1)
    optimizer.apply(grads, variables)
    query = next(i for i, v in enumerate(variables) if v.path.endswith("attention/query/kernel"))
    # One variable, one update: the gradient of all four uses summed, applied once.
    np.testing.assert_allclose(np.array(variables[query]), before[query] - 0.1 * np.array(grads[query]), atol=1e-7)
    assert float(np.abs(np.array(variables[query]) - before[query]).max()) > 0
    assert int(optimizer.iterations) == 1


def test_no_pooler_and_no_token_types_options():
    encoder = BertEncoder(vocab_size=VOCAB, num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32,
                          type_vocab_size=0, use_pooler=False)
    assert encoder.pooler is None and encoder.embeddings.type_embeddings is None
    inputs = family_inputs("distilbert")
    other = dict(inputs, input_type_ids=np.ones_like(inputs["input_type_ids"]))
    outputs = encoder(inputs)
    np.testing.assert_array_equal(outputs["sequence_output"], encoder(other)["sequence_output"])  # types ignored
    np.testing.assert_allclose(encoder.pooled_output(inputs), outputs["sequence_output"][:, 0], atol=1e-6)
    with pytest.raises(ValueError, match="`use_pooler`, expected a bool. Received: use_pooler='no'"):
        BertEncoder(vocab_size=VOCAB, num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32, use_pooler="no")


def test_position_offset_reads_rows_after_the_offset():
    encoder = BertEncoder(vocab_size=VOCAB, num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32,
                          max_sequence_length=12, position_offset=2)
    assert tuple(encoder.embeddings.position_embeddings.shape) == (14, 16)
    ids = np.full((1, 13), 5, "int32")
    with pytest.raises(ValueError, match=r"input sequence length \(13\) exceeds max_sequence_length \(12\)"):
        encoder({"input_word_ids": ids, "input_mask": np.ones_like(ids), "input_type_ids": np.zeros_like(ids)})


FAMILY_PRESETS = {
    "albert_base_en_uncased": ("AlbertConfig", dict(vocab_size=30000, embedding_size=128, hidden_size=768,
                                                    num_attention_heads=12, intermediate_size=3072),
                               "AlbertModel", 11_683_584),
    "electra_base_discriminator_uncased_en": ("ElectraConfig", dict(embedding_size=768, hidden_size=768,
                                                                    num_attention_heads=12, intermediate_size=3072),
                                              "ElectraModel", 108_891_648),
    "electra_small_discriminator_uncased_en": ("ElectraConfig", dict(embedding_size=128, hidden_size=256,
                                                                     num_attention_heads=4, intermediate_size=1024),
                                               "ElectraModel", 13_483_008),
    "distil_bert_base_en_uncased": ("DistilBertConfig", {}, "DistilBertModel", 66_362_880),
    "roberta_base_en": ("RobertaConfig", dict(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
                                              layer_norm_eps=1e-5), "RobertaModel", 124_645_632),
    "xlm_roberta_base_multi": ("XLMRobertaConfig", dict(vocab_size=250002, max_position_embeddings=514,
                                                        type_vocab_size=1, layer_norm_eps=1e-5),
                               "XLMRobertaModel", 278_043_648),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FAMILY_PRESETS))
def test_family_preset_parameter_counts_equal_transformers(name):
    config_class, config, model_class, count = FAMILY_PRESETS[name]
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        model = getattr(transformers, model_class)(getattr(transformers, config_class)(**config))
    assert sum(p.numel() for p in model.parameters()) == count
    assert BertEncoder.from_architecture(name).count_params() == count
