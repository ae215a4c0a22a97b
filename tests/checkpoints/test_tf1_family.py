"""Google's original TF1 checkpoints of ALBERT (google-research/albert) and ELECTRA (google-research/electra).

A tiny random transformers model is written as the original code names its variables (TF1's Saver, optimizer slots,
ALBERT's masked-LM and sentence-order heads, ELECTRA's generator beside the discriminator), with the original files
(ALBERT: `albert_config.json`, `30k-clean.model` and `.vocab`; ELECTRA: `vocab.txt` only, no config); the names are
written out longhand here, independently of the reader's tables. Then our reader must give transformers' outputs.
"""

import json
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

from bert_keras import cli
from bert_keras.checkpoints import CheckpointError, ConfigError, detect_format, load_checkpoint
from bert_keras.formats.google import find_checkpoint_prefix
from bert_keras.tasks.sentence_encoder import SentenceEncoder
from bert_keras.tasks import BertClassifier
from tests.checkpoints._models import max_diff, perturb_torch, random_inputs, write_vocab
from tests.checkpoints.test_google import write_tf1_checkpoint
from tests.text.test_sentencepiece import albert_reference_text

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")

SEQ = 24
TEXTS = ["the cat sat on the mat", "a dog ran far away", "Héllo  ``world''", "", "cats and dogs " * 8]


def _torch_run(model, inputs):
    with torch.no_grad():
        return model(input_ids=torch.tensor(inputs["input_word_ids"], dtype=torch.long),
                     attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long),
                     token_type_ids=torch.tensor(inputs["input_type_ids"], dtype=torch.long))


def _real_tokens_diff(sequence, expected, inputs):
    """Max difference over the real tokens (our padded positions are zeros, transformers' are not)."""
    real = np.asarray(inputs["input_mask"]).astype(bool)
    return max_diff(np.asarray(sequence)[real], np.asarray(expected)[real])


def _float32(arrays):
    return {name: np.ascontiguousarray(value, dtype="float32") for name, value in arrays.items()}


# ---------------------------------------------------------------------------
# ALBERT
# ---------------------------------------------------------------------------

ALBERT_SIZES = dict(embedding_size=16, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                    intermediate_size=48, max_position_embeddings=SEQ, type_vocab_size=2)


def _albert_arrays(model, rng):
    """A transformers AlbertModel under google-research/albert's names (modeling.py, run_pretraining.py)."""
    state = {name: value.numpy() for name, value in model.state_dict().items()}
    hf, g = "encoder.albert_layer_groups.0.albert_layers.0.", "bert/encoder/transformer/group_0/inner_group_0/"
    arrays = {
        "bert/embeddings/word_embeddings": state["embeddings.word_embeddings.weight"],
        "bert/embeddings/position_embeddings": state["embeddings.position_embeddings.weight"],
        "bert/embeddings/token_type_embeddings": state["embeddings.token_type_embeddings.weight"],
        "bert/embeddings/LayerNorm/gamma": state["embeddings.LayerNorm.weight"],
        "bert/embeddings/LayerNorm/beta": state["embeddings.LayerNorm.bias"],
        "bert/encoder/embedding_hidden_mapping_in/kernel": state["encoder.embedding_hidden_mapping_in.weight"].T,
        "bert/encoder/embedding_hidden_mapping_in/bias": state["encoder.embedding_hidden_mapping_in.bias"],
        g + "LayerNorm/gamma": state[hf + "attention.LayerNorm.weight"],
        g + "LayerNorm/beta": state[hf + "attention.LayerNorm.bias"],
        g + "LayerNorm_1/gamma": state[hf + "full_layer_layer_norm.weight"],
        g + "LayerNorm_1/beta": state[hf + "full_layer_layer_norm.bias"],
        "bert/pooler/dense/kernel": state["pooler.weight"].T,
        "bert/pooler/dense/bias": state["pooler.bias"],
    }
    for hf_part, g_part in [("attention.query", "attention_1/self/query"),
                            ("attention.key", "attention_1/self/key"),
                            ("attention.value", "attention_1/self/value"),
                            ("attention.dense", "attention_1/output/dense"),
                            ("ffn", "ffn_1/intermediate/dense"),
                            ("ffn_output", "ffn_1/intermediate/output/dense")]:
        arrays[g + g_part + "/kernel"] = state[hf + hf_part + ".weight"].T
        arrays[g + g_part + "/bias"] = state[hf + hf_part + ".bias"]
    # The pre-training heads: the masked LM (to the embedding width, read as "mlm"); sentence order (not read).
    hidden, width = ALBERT_SIZES["hidden_size"], ALBERT_SIZES["embedding_size"]
    vocab = len(state["embeddings.word_embeddings.weight"])
    arrays.update({
        "cls/predictions/transform/dense/kernel": rng.normal(size=(hidden, width)),
        "cls/predictions/transform/dense/bias": rng.normal(size=(width,)),
        "cls/predictions/transform/LayerNorm/gamma": rng.normal(size=(width,)),
        "cls/predictions/transform/LayerNorm/beta": rng.normal(size=(width,)),
        "cls/predictions/output_bias": rng.normal(size=(vocab,)),
        "cls/seq_relationship/output_weights": rng.normal(size=(2, hidden)),
        "cls/seq_relationship/output_bias": rng.normal(size=(2,)),
    })
    return _float32(arrays)


def _train_sentencepiece(prefix):
    """A tiny unigram model as google-research/albert's `30k-clean` (its `.model` and `.vocab`). Returns its size."""
    corpus = [albert_reference_text(text) for text in TEXTS[:3]] + ["the mat and the cat", "far away dogs sat"] * 20
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_prefix=str(prefix), vocab_size=40, model_type="unigram",
        pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"],
        hard_vocab_limit=False, minloglevel=2, num_threads=1,
    )
    return spm.SentencePieceProcessor(model_file=str(prefix) + ".model").get_piece_size()


def write_albert_directory(folder, config_changes=None, extra_arrays=None, seed=3):
    """An ALBERT TF1 folder as google-research/albert's tars: returns `(transformers AlbertModel, folder)`."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = _train_sentencepiece(folder / "30k-clean")
    torch.manual_seed(seed)
    config = transformers.AlbertConfig(**ALBERT_SIZES, vocab_size=vocab_size, hidden_act="gelu_new")
    model = perturb_torch(transformers.AlbertModel(config), seed=seed)
    arrays = {**_albert_arrays(model, np.random.default_rng(seed)), **(extra_arrays or {})}
    write_tf1_checkpoint(str(folder / "model.ckpt-best"), arrays)
    original = {  # albert_config.json as the tars carry it
        "attention_probs_dropout_prob": 0, "hidden_act": "gelu", "hidden_dropout_prob": 0,
        "embedding_size": ALBERT_SIZES["embedding_size"], "hidden_size": ALBERT_SIZES["hidden_size"],
        "initializer_range": 0.02, "intermediate_size": ALBERT_SIZES["intermediate_size"],
        "max_position_embeddings": SEQ, "num_attention_heads": ALBERT_SIZES["num_attention_heads"],
        "num_hidden_layers": ALBERT_SIZES["num_hidden_layers"], "num_hidden_groups": 1, "net_structure_type": 0,
        "gap_size": 0, "num_memory_blocks": 0, "inner_group_num": 1, "down_scale_factor": 1, "type_vocab_size": 2,
        "vocab_size": vocab_size, **(config_changes or {}),
    }
    (folder / "albert_config.json").write_text(json.dumps(original))
    return model, str(folder)


@pytest.fixture(scope="module")
def albert(tmp_path_factory):
    return write_albert_directory(tmp_path_factory.mktemp("albert_base"))


def test_albert_tf1_checkpoint_gives_transformers_outputs(albert):
    model, folder = albert
    assert detect_format(folder) == "google"
    loaded = load_checkpoint(folder, with_heads=False)
    encoder = loaded.encoder
    assert loaded.summary.format == "google" and loaded.heads == {}
    assert (encoder.shared_layers, encoder.num_layers, encoder.embedding_size, encoder.activation) == (
        True, 3, 16, "gelu_approximate")
    assert loaded.tokenizer_kind == "sentencepiece"
    # One block's weights, shared by the three layers, not copies: 16 tensors of the block, read once.
    assert len(encoder.transformer_layers) == 1
    assert len(encoder.weights) == 7 + 16 + 2  # embeddings with the projection, the block, the pooler
    assert len(loaded.summary.loaded) == 25
    # Without heads, ALBERT's masked LM and sentence-order head are listed, not read; the optimizer's slots are
    # ignored. (With heads, the masked LM is read: tests/checkpoints/test_family_mlm_heads.py.)
    assert sorted(loaded.summary.unused) == sorted(
        ["cls/predictions/output_bias", "cls/seq_relationship/output_bias", "cls/seq_relationship/output_weights"]
        + [f"cls/predictions/transform/{name}" for name in ("dense/kernel", "dense/bias", "LayerNorm/gamma",
                                                            "LayerNorm/beta")])
    assert "bert/encoder/transformer/group_0/inner_group_0/LayerNorm_1/gamma/adam_m" in loaded.summary.ignored

    inputs, _ = random_inputs(vocab=model.config.vocab_size)
    outputs = encoder(inputs)
    expected = _torch_run(model, inputs)
    assert _real_tokens_diff(outputs["sequence_output"], expected.last_hidden_state.numpy(), inputs) <= 1e-5
    assert max_diff(outputs["pooled_output"], expected.pooler_output.numpy()) <= 1e-5


@pytest.mark.slow
def test_albert_30k_clean_model_is_its_tokenizer(albert, tmp_path):
    """The tars name the SentencePiece model `30k-clean.model`: raw strings go through it, ALBERT's ids."""
    model, folder = albert
    assert not os.path.exists(os.path.join(folder, "spiece.model"))
    classifier = BertClassifier.from_checkpoint(folder, num_classes=2, seq_length=SEQ)
    assert type(classifier.preprocessor.tokenizer).__name__ == "SentencePieceTokenizer"
    packed = classifier.preprocessor(np.array(TEXTS))
    processor = spm.SentencePieceProcessor(model_file=os.path.join(folder, "30k-clean.model"))
    rows = [[2] + processor.encode(albert_reference_text(t), out_type=int)[: SEQ - 2] + [3] for t in TEXTS]
    np.testing.assert_array_equal(packed["input_word_ids"], [row + [0] * (SEQ - len(row)) for row in rows])
    # The sentence embedding of the same strings: transformers' outputs, mean-pooled over the real tokens.
    embedder = SentenceEncoder.from_checkpoint(folder, pooling="mean", max_seq_length=SEQ)
    embeddings = np.asarray(embedder.encode(TEXTS))
    mask = np.asarray(packed["input_mask"], "float64")[..., None]
    sequence = _torch_run(model, {k: np.asarray(v) for k, v in packed.items()}).last_hidden_state.numpy()
    assert max_diff(embeddings, (sequence * mask).sum(1) / mask.sum(1)) <= 1e-5
    # The exported module carries the model's own bytes as its sp_model_file.
    files = load_checkpoint(folder).tokenizer_files()
    with open(files["sp_model_file"], "rb") as copy, open(os.path.join(folder, "30k-clean.model"), "rb") as original:
        assert copy.read() == original.read()


def test_albert_of_two_groups_is_refused_naming_the_field(tmp_path):
    _, folder = write_albert_directory(tmp_path / "groups", config_changes={"num_hidden_groups": 2})
    with pytest.raises(ConfigError, match="num_hidden_groups.*only 1 is supported"):
        load_checkpoint(folder)
    _, folder = write_albert_directory(tmp_path / "inner", config_changes={"inner_group_num": 2})
    with pytest.raises(ConfigError, match="inner_group_num"):
        load_checkpoint(folder)


def test_albert_tensors_of_a_second_group_are_refused(tmp_path):
    second = "bert/encoder/transformer/group_1/inner_group_0/LayerNorm/gamma"
    _, folder = write_albert_directory(tmp_path / "second", extra_arrays={second: np.ones(32, "float32")})
    with pytest.raises(CheckpointError, match="group_1.*num_hidden_groups > 1"):
        load_checkpoint(folder)


def test_albert_sentencepiece_model_larger_than_the_embeddings_is_refused_naming_it(albert, tmp_path):
    """The model itself is read (not the `.vocab` listing beside it): pieces appended to it are refused."""
    from tests.checkpoints.test_hostile_family import piece_field

    model, folder = albert
    copy = tmp_path / "albert"
    shutil.copytree(folder, copy)
    with open(copy / "30k-clean.model", "ab") as f:
        f.write(piece_field("▁zz") + piece_field("▁zzz"))
    rows = model.config.vocab_size
    with pytest.raises(CheckpointError, match=re.escape(
            f"{copy / '30k-clean.model'}, tensor 'bert/embeddings/word_embeddings': the vocabulary has {rows + 2} "
            f"tokens but the word embeddings 'bert/embeddings/word_embeddings' in ")):
        load_checkpoint(str(copy))


def test_albert_without_its_config_is_refused(albert, tmp_path):
    _, folder = albert
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in os.listdir(folder):
        if name.startswith("model.ckpt-best"):
            os.symlink(os.path.join(folder, name), bare / name)
    with pytest.raises(CheckpointError, match="ALBERT checkpoint .* but no albert_config.json"):
        load_checkpoint(str(bare))


# ---------------------------------------------------------------------------
# ELECTRA
# ---------------------------------------------------------------------------


def _electra_arrays(model, rng):
    """A transformers ElectraForPreTraining under google-research/electra's names, with a generator beside it."""
    state = {name: value.numpy() for name, value in model.state_dict().items()}
    config = model.config
    arrays = {
        "electra/embeddings/word_embeddings": state["electra.embeddings.word_embeddings.weight"],
        "electra/embeddings/position_embeddings": state["electra.embeddings.position_embeddings.weight"],
        "electra/embeddings/token_type_embeddings": state["electra.embeddings.token_type_embeddings.weight"],
        "electra/embeddings/LayerNorm/gamma": state["electra.embeddings.LayerNorm.weight"],
        "electra/embeddings/LayerNorm/beta": state["electra.embeddings.LayerNorm.bias"],
        "discriminator_predictions/dense/kernel": state["discriminator_predictions.dense.weight"].T,
        "discriminator_predictions/dense/bias": state["discriminator_predictions.dense.bias"],
        "discriminator_predictions/dense_1/kernel": state["discriminator_predictions.dense_prediction.weight"].T,
        "discriminator_predictions/dense_1/bias": state["discriminator_predictions.dense_prediction.bias"],
    }
    if "electra.embeddings_project.weight" in state:
        arrays["electra/embeddings_project/kernel"] = state["electra.embeddings_project.weight"].T
        arrays["electra/embeddings_project/bias"] = state["electra.embeddings_project.bias"]
    for i in range(config.num_hidden_layers):
        hf, g = f"electra.encoder.layer.{i}.", f"electra/encoder/layer_{i}/"
        for part in ("attention/self/query", "attention/self/key", "attention/self/value", "attention/output/dense",
                     "intermediate/dense", "output/dense"):
            arrays[g + part + "/kernel"] = state[hf + part.replace("/", ".") + ".weight"].T
            arrays[g + part + "/bias"] = state[hf + part.replace("/", ".") + ".bias"]
        for part in ("attention/output/LayerNorm", "output/LayerNorm"):
            arrays[g + part + "/gamma"] = state[hf + part.replace("/", ".") + ".weight"]
            arrays[g + part + "/beta"] = state[hf + part.replace("/", ".") + ".bias"]
    # The generator: a quarter of the width, three blocks, its own projection and masked-LM head. Not the encoder.
    small, width = config.hidden_size // 4, config.embedding_size
    arrays.update({
        "generator/embeddings_project/kernel": rng.normal(size=(width, small)),
        "generator/embeddings_project/bias": rng.normal(size=(small,)),
        "generator_predictions/dense/kernel": rng.normal(size=(small, width)),
        "generator_predictions/LayerNorm/gamma": rng.normal(size=(width,)),
        "generator_predictions/output_bias": rng.normal(size=(config.vocab_size,)),
    })
    for i in range(3):
        arrays[f"generator/encoder/layer_{i}/attention/self/query/kernel"] = rng.normal(size=(small, small))
        arrays[f"generator/encoder/layer_{i}/intermediate/dense/kernel"] = rng.normal(size=(small, 4 * small))
    return _float32(arrays)


def write_electra_directory(folder, hidden_size=128, embedding_size=16, num_heads=2, prefix="electra_small",
                            config=None, seed=4):
    """An ELECTRA TF1 folder as the released zips: the checkpoint and `vocab.txt`, no config."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = perturb_torch(transformers.ElectraForPreTraining(transformers.ElectraConfig(
        vocab_size=40, embedding_size=embedding_size, hidden_size=hidden_size, num_hidden_layers=2,
        num_attention_heads=num_heads, intermediate_size=64, max_position_embeddings=SEQ, hidden_act="gelu")),
        seed=seed)
    write_tf1_checkpoint(str(folder / prefix), _electra_arrays(model, np.random.default_rng(seed)))
    write_vocab(folder / "vocab.txt", 40)
    if config is not None:
        (folder / "bert_config.json").write_text(json.dumps(config))
    return model, str(folder)


@pytest.fixture(scope="module")
def electra(tmp_path_factory):
    return write_electra_directory(tmp_path_factory.mktemp("electra_small"))


def _check_electra_parity(model, loaded):
    inputs, _ = random_inputs(vocab=40)
    outputs = loaded.encoder(inputs)
    expected = _torch_run(model, inputs)
    hidden = _torch_run(model.electra, inputs).last_hidden_state.numpy()
    assert _real_tokens_diff(outputs["sequence_output"], hidden, inputs) <= 1e-5
    assert max_diff(outputs["pooled_output"], hidden[:, 0]) <= 1e-5  # no pooler: the first token
    logits = loaded.heads["discriminator"](outputs["sequence_output"])[..., None]
    assert _real_tokens_diff(logits, expected.logits.numpy()[..., None], inputs) <= 1e-5


def test_electra_tf1_checkpoint_without_config_gives_transformers_outputs(electra):
    model, folder = electra
    assert sorted(os.listdir(folder)) == ["checkpoint", "electra_small.data-00000-of-00001", "electra_small.index",
                                          "vocab.txt"]
    assert detect_format(folder) == "google"
    loaded = load_checkpoint(folder)
    config = loaded.encoder.get_config()
    # Sizes from the stored shapes; heads by ELECTRA's rule, max(1, 128 // 64) = 2; the exact GELU; no pooler.
    assert {key: config[key] for key in ("vocab_size", "num_layers", "hidden_size", "num_heads", "intermediate_size",
                                         "max_sequence_length", "type_vocab_size", "embedding_size", "activation",
                                         "use_pooler")} == dict(
        vocab_size=40, num_layers=2, hidden_size=128, num_heads=2, intermediate_size=64, max_sequence_length=SEQ,
        type_vocab_size=2, embedding_size=16, activation="gelu", use_pooler=False)
    assert loaded.summary.heads == ["discriminator"] and loaded.do_lower_case is True
    assert loaded.tokenizer_kind == "wordpiece" and loaded.vocab_file == os.path.join(folder, "vocab.txt")
    # The generator is not the encoder: every one of its tensors is left unused.
    assert loaded.summary.unused and all(name.startswith(("generator/", "generator_predictions/"))
                                         for name in loaded.summary.unused)
    assert len(loaded.summary.unused) == 5 + 2 * 3
    _check_electra_parity(model, loaded)


def test_electra_heads_follow_the_hidden_size(tmp_path):
    """max(1, hidden_size // 64): one head for a width of 64 (whose embeddings need no projection)."""
    model, folder = write_electra_directory(tmp_path / "electra_tiny", hidden_size=64, embedding_size=64, num_heads=1)
    loaded = load_checkpoint(folder)
    assert (loaded.encoder.num_heads, loaded.encoder.embedding_size) == (1, None)
    assert loaded.encoder.embeddings.projection is None
    _check_electra_parity(model, loaded)


def test_electra_config_names_the_heads_where_the_rule_would_not(tmp_path):
    model, folder = write_electra_directory(tmp_path / "four_heads", num_heads=4, config={"num_attention_heads": 4})
    loaded = load_checkpoint(folder)
    assert loaded.encoder.num_heads == 4
    _check_electra_parity(model, loaded)
    os.remove(os.path.join(folder, "bert_config.json"))
    assert load_checkpoint(folder).encoder.num_heads == 2  # the rule, and so other outputs


def test_electra_sentence_encoder_on_raw_strings(electra):
    model, folder = electra
    texts = ["tok1 tok2 tok3", "TOK7 tok30 unknown", ""]
    reference = transformers.BertTokenizerFast(vocab=os.path.join(folder, "vocab.txt"), do_lower_case=True)
    ids = reference(texts, padding="max_length", max_length=SEQ, truncation=True, return_tensors="np")
    assert ids["input_ids"][1, :5].tolist() == [2, 12, 35, 1, 3]  # [CLS] tok7 tok30 [UNK] [SEP]
    embeddings = np.asarray(SentenceEncoder.from_checkpoint(folder, pooling="cls", max_seq_length=SEQ).encode(texts))
    with torch.no_grad():
        expected = model.electra(input_ids=torch.tensor(ids["input_ids"]),
                                 attention_mask=torch.tensor(ids["attention_mask"])).last_hidden_state.numpy()[:, 0]
    assert max_diff(embeddings, expected) <= 1e-5


def test_several_checkpoints_pick_the_latest_the_checkpoint_file_names(electra, tmp_path):
    model, folder = electra
    arrays = _electra_arrays(model, np.random.default_rng(0))
    run = tmp_path / "run"
    run.mkdir()
    write_tf1_checkpoint(str(run / "model.ckpt-100"), {name: value * 0 for name, value in arrays.items()})
    write_tf1_checkpoint(str(run / "model.ckpt-200"), arrays)  # Saver records it, by an absolute path, as the latest
    write_vocab(run / "vocab.txt", 40)
    assert find_checkpoint_prefix(str(run)) == str(run / "model.ckpt-200")
    _check_electra_parity(model, load_checkpoint(str(run)))
    (run / "checkpoint").write_text('model_checkpoint_path: "/elsewhere/model.ckpt-300"\n')
    with pytest.raises(CheckpointError, match="expected one TensorFlow checkpoint"):
        find_checkpoint_prefix(str(run))


def test_a_truncated_electra_checkpoint_names_the_missing_tensor(electra, tmp_path):
    model, _ = electra
    arrays = _electra_arrays(model, np.random.default_rng(0))
    del arrays["electra/encoder/layer_1/output/LayerNorm/beta"]
    (tmp_path / "cut").mkdir()
    write_tf1_checkpoint(str(tmp_path / "cut" / "electra_small"), arrays)
    with pytest.raises(CheckpointError, match="layer_1/output/LayerNorm/beta.*missing"):
        load_checkpoint(str(tmp_path / "cut"))


# ---------------------------------------------------------------------------
# bert-keras convert
# ---------------------------------------------------------------------------


@pytest.mark.slow  # a module pair written and loaded
@pytest.mark.parametrize("family", ["albert", "electra"])
def test_convert_reads_the_tf1_family(albert, electra, tmp_path, capsys, family):
    from bert_keras import hub

    model, folder = {"albert": albert, "electra": electra}[family]
    out = str(tmp_path / "modules")
    assert cli.main(["convert", folder, "--out", out, "--seq-length", str(SEQ)]) == 0
    # The SentencePiece model keeps the name the checkpoint gives it (google-research/albert's `30k-clean.model`).
    assets = {"albert": ["30k-clean.model"], "electra": ["vocab.txt"]}[family]
    assert sorted(os.listdir(os.path.join(out, "preprocess", "assets"))) == assets
    texts = ["tok1 tok2", "the cat sat"]
    inputs = hub.PreprocessLayer(os.path.join(out, "preprocess"), seq_length=SEQ)(tf.constant(texts))
    outputs = hub.KerasLayer(os.path.join(out, "encoder"))(inputs)
    expected = _torch_run(model if family == "albert" else model.electra, {k: np.asarray(v) for k, v in inputs.items()})
    assert _real_tokens_diff(outputs["sequence_output"], expected.last_hidden_state.numpy(), inputs) <= 1e-5
