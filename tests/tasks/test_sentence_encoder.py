"""SentenceEncoder: sentence-transformers folders reproduced, parity with sentence-transformers, encode, the export."""

import json
import os
import re
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import BertEncoder, cli, embedder, hub
from bert_keras.embedder import cosine_similarity
from bert_keras.heads import SentencePooling
from bert_keras.export import export_sentence_encoder, load_sentence_encoder
from bert_keras.formats import CheckpointError
from bert_keras.formats.sentence_transformers import read_sentence_transformers_folder
from bert_keras.tasks.sentence_encoder import SentenceEncoder
from bert_keras.text import BertPreprocessor
from tests import sentence_models
from tests.helpers import assert_close, run_model_test

pytest.importorskip("sentence_transformers", reason="sentence-transformers (test extra) is the reference")

# sentence-transformers' pooling names -> ours
ST_MODES = {"mean": "mean", "cls": "cls", "max": "max", "mean_sqrt_len_tokens": "mean_sqrt_len",
            "weightedmean": "weighted_mean", "lasttoken": "last_token"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random BERT folder, and the same model saved by sentence-transformers 6 (max pooling, Normalize)."""
    root = tmp_path_factory.mktemp("sentence")
    bert = sentence_models.write_tiny_bert(str(root / "bert"))
    reference = sentence_models.sentence_transformer(bert, pooling="max", normalize=True)
    reference.save(str(root / "st"))
    return {"root": root, "bert": bert, "st": str(root / "st"), "reference": reference}


@pytest.fixture(scope="module")
def tiny_model(tiny):
    return SentenceEncoder.from_checkpoint(tiny["st"])


def test_pooling_layer_matches_sentence_transformers_pooling_module():
    import torch
    from sentence_transformers.sentence_transformer.modules import Pooling

    rng = np.random.default_rng(0)
    tokens = rng.normal(size=(3, 7, 8)).astype("float32")
    mask = (np.arange(7)[None, :] < np.array([[7], [4], [2]])).astype("int64")
    features = {"token_embeddings": torch.tensor(tokens), "attention_mask": torch.tensor(mask)}
    for theirs, ours in list(ST_MODES.items()) + [(("cls", "max", "mean"), ["cls", "max", "mean"])]:
        expected = Pooling(8, pooling_mode=theirs)(dict(features))["sentence_embedding"].numpy()
        assert_close(SentencePooling(ours)(tokens, mask), expected, atol=1e-6)


@pytest.mark.slow
def test_a_sentence_transformers_6_folder_is_read_and_reproduced(tiny, tiny_model):
    config = read_sentence_transformers_folder(tiny["st"])
    assert (config.pooling, config.normalize, config.max_seq_length, config.dimension) == (("max",), True, None, 16)
    # sentence-transformers 6 keeps the length in the tokenizer's model_max_length (12), under the 40 positions.
    model = tiny_model
    assert (model.pooling, model.normalize, model.max_seq_length, model.embedding_dim) == ("max", True, 12, 16)
    assert model.source == tiny["st"]
    expected = tiny["reference"].encode(sentence_models.TINY_TEXTS)
    assert_close(model.encode(sentence_models.TINY_TEXTS), expected, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("normalize", [False, True])
def test_every_pooling_matches_sentence_transformers(tiny, tiny_model, normalize):
    """All six modes at once, concatenated in one order on both sides (each mode alone: the test above)."""
    reference = sentence_models.sentence_transformer(tiny["bert"], pooling=tuple(ST_MODES), normalize=normalize)
    model = SentenceEncoder(tiny_model.encoder, tiny_model.preprocessor, pooling=list(ST_MODES.values()), normalize=normalize)
    assert model.embedding_dim == 6 * 16
    texts = sentence_models.TINY_TEXTS
    assert_close(model.encode(texts, batch_size=3), reference.encode(texts), atol=1e-5)


@pytest.mark.slow
def test_a_legacy_folder_is_reproduced(tiny):
    """Older folders: the BERT in 0_Transformer/, `pooling_mode_*` booleans (two modes: concatenated in
    sentence-transformers' order, cls before mean), max_seq_length in sentence_bert_config.json, no Normalize."""
    from sentence_transformers import SentenceTransformer

    folder = sentence_models.write_legacy_folder(
        tiny["bert"], str(tiny["root"] / "legacy"), {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True}
    )
    config = read_sentence_transformers_folder(folder)
    assert config.pooling == ("cls", "mean") and not config.normalize and config.max_seq_length == 10
    assert config.transformer_path == os.path.join(folder, "0_Transformer")
    model = SentenceEncoder.from_checkpoint(folder)
    assert (model.pooling, model.normalize, model.max_seq_length, model.embedding_dim) == (["cls", "mean"], False, 10, 32)
    texts = sentence_models.TINY_TEXTS
    assert_close(model.encode(texts), SentenceTransformer(folder, device="cpu").encode(texts), atol=1e-5)

    # No mode set: sentence-transformers reads mean.
    with open(os.path.join(folder, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": 16, "pooling_mode_mean_tokens": False}, f)
    assert read_sentence_transformers_folder(folder).pooling == ("mean",)


def _copy(tiny, name):
    folder = str(tiny["root"] / name)
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(tiny["st"], folder)
    return folder


def _write(folder, name, value):
    with open(os.path.join(folder, name), "w") as f:
        f.write(value if isinstance(value, str) else json.dumps(value))


def test_refusals_name_the_file_and_what_to_do(tiny):
    # A plain BERT folder: pooling= is needed, and works.
    with pytest.raises(ValueError, match=r"has no sentence-transformers configuration \(modules.json.*Pass `pooling=`"):
        SentenceEncoder.from_checkpoint(tiny["bert"])
    plain = SentenceEncoder.from_checkpoint(tiny["bert"], pooling="cls", max_seq_length=12)
    assert (plain.pooling, plain.normalize, plain.max_seq_length) == ("cls", False, 12)
    # Without a length: the tokenizer's (none here) and the 40 positions.
    assert SentenceEncoder.from_checkpoint(tiny["bert"], pooling="mean").max_seq_length == 40

    with pytest.raises(ValueError, match=r"argument `mode`, expected one of \['mean', 'cls'.*Received: mode='average'"):
        SentenceEncoder.from_checkpoint(tiny["bert"], pooling="average")
    with pytest.raises(ValueError, match=r"argument `max_seq_length`, expected at most the encoder's max_sequence_length=40"):
        SentenceEncoder.from_checkpoint(tiny["st"], max_seq_length=64)

    folder = _copy(tiny, "bad_mode")
    _write(folder, "1_Pooling/config.json", {"embedding_dimension": 16, "pooling_mode": "median"})
    with pytest.raises(ValueError, match=r"1_Pooling/config.json: `pooling_mode` names the pooling mode\(s\) \['median'\], "
                       r"which do not exist. sentence-transformers' modes are \['cls', 'max', 'mean'"):
        SentenceEncoder.from_checkpoint(folder)

    _write(folder, "1_Pooling/config.json", "{not json")
    with pytest.raises(ValueError, match=r"1_Pooling/config.json cannot be read as JSON"):
        SentenceEncoder.from_checkpoint(folder)

    os.remove(os.path.join(folder, "1_Pooling", "config.json"))
    with pytest.raises(ValueError, match=r"1_Pooling/config.json is missing"):
        SentenceEncoder.from_checkpoint(folder)

    folder = _copy(tiny, "dense")
    modules = json.load(open(os.path.join(folder, "modules.json")))
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    _write(folder, "modules.json", modules)
    with pytest.raises(ValueError, match=r"lists the module 'sentence_transformers.models.Dense': SentenceEncoder "
                       r"reproduces Transformer -> Pooling \[-> Normalize\] only"):
        SentenceEncoder.from_checkpoint(folder)

    folder = _copy(tiny, "dimension")
    _write(folder, "1_Pooling/config.json", {"embedding_dimension": 384, "pooling_mode": "mean"})
    with pytest.raises(ValueError, match="embedding_dimension=384, but the encoder's hidden size is 16"):
        SentenceEncoder.from_checkpoint(folder)


@pytest.mark.slow
def test_encode_takes_lists_arrays_and_tensors_in_order(tiny_model, monkeypatch):
    model = tiny_model
    texts = sentence_models.TINY_TEXTS
    vectors = model.encode(texts)
    assert vectors.shape == (len(texts), 16) and vectors.dtype == np.float32
    # Two batches at a time give the very numbers of one at a time.
    in_pairs = model.encode(texts, batch_size=2)
    monkeypatch.setattr(embedder, "BATCHES_PER_CALL", 1)
    np.testing.assert_array_equal(model.encode(texts, batch_size=2), in_pairs)
    monkeypatch.undo()
    # Each row is its own text's, whatever the batching and the sorting by length.
    one_by_one = np.stack([model.encode(text) for text in texts])
    assert_close(model.encode(texts, batch_size=1), one_by_one, atol=1e-6)
    assert_close(vectors, one_by_one, atol=1e-6)
    assert model.encode("the good day").shape == (16,)
    for same in (np.array(texts), np.array(texts, dtype=object), tf.constant(texts), tuple(texts)):
        assert_close(model.encode(same), vectors, atol=1e-6)
    assert model.encode([]).shape == (0, 16)
    # Keras' predict and __call__ on a Python list, and keras-hub's names.
    assert_close(model.predict(texts, verbose=0), vectors, atol=1e-6)
    assert_close(model(texts), vectors, atol=1e-6)
    assert model.predict([], verbose=0).shape == (0, 16)
    assert_close(model.encode_documents(texts), vectors, atol=1e-6)
    assert_close(model.encode_query("the good day"), vectors[:1], atol=1e-6)
    similarity = model.similarity(vectors[:2], vectors)
    assert similarity.shape == (2, len(texts))
    assert_close(similarity, vectors[:2] @ vectors.T, atol=1e-6)  # normalised: cosine is the dot product
    assert abs(float(similarity[0, 0]) - 1.0) < 1e-6

    with pytest.raises(TypeError, match=r"Expected `texts` to hold strings. Received an item of type int at index 1: 3"):
        model.encode(["ok", 3])
    with pytest.raises(ValueError, match="argument `batch_size`, expected a positive integer. Received: batch_size=0"):
        model.encode(texts, batch_size=0)
    with pytest.raises(ValueError, match=r"expected a 1-D array of strings. Received: an array of shape \(2, 1\)"):
        model.encode(np.array([["a"], ["b"]]))


def test_cosine_similarity():
    assert_close(cosine_similarity([3.0, 4.0], [[4.0, 3.0], [-3.0, -4.0]]), [[0.96, -1.0]], atol=1e-6)
    with pytest.raises(ValueError, match=r"Received: \(1, 2\) and \(1, 3\)"):
        cosine_similarity([1.0, 0.0], [1.0, 0.0, 0.0])


@pytest.mark.slow
def test_keras_round_trip_and_a_fit_step_on_a_list(tiny_model, tmp_path):
    model = SentenceEncoder(tiny_model.encoder, tiny_model.preprocessor, pooling=["cls", "mean"], normalize=False)
    texts = tf.constant(sentence_models.TINY_TEXTS)
    expected, restored = run_model_test(model, texts, tmp_path)
    assert (restored.pooling, restored.normalize, restored.max_seq_length) == (["cls", "mean"], False, 12)
    assert_close(restored.encode(sentence_models.TINY_TEXTS), expected, atol=1e-6)

    # fit on a Python list of str (e.g. towards given vectors): the encoder's weights move.
    encoder = BertEncoder(vocab_size=len(sentence_models.VOCAB), num_layers=1, hidden_size=8, num_heads=2,
                          intermediate_size=16, max_sequence_length=16)
    trainee = SentenceEncoder(encoder, BertPreprocessor(sentence_models.VOCAB, seq_length=12))
    trainee.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    before = [w.copy() for w in trainee.encoder.get_weights()]
    targets = np.random.default_rng(0).normal(size=(4, 8)).astype("float32")
    history = trainee.fit(["the good day", "a bad day", "ok", ""], targets, epochs=1, batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert any(np.abs(a - b).max() > 0 for a, b in zip(trainee.encoder.get_weights(), before))


def test_hub_dict_inputs_without_a_preprocessor(tiny_model):
    model = SentenceEncoder(tiny_model.encoder, pooling="max", normalize=True)
    packed = tiny_model.preprocessor(tf.constant(sentence_models.TINY_TEXTS))  # padded to 12: trimmed inside
    assert_close(model(packed), tiny_model.encode(sentence_models.TINY_TEXTS), atol=1e-6)
    with pytest.raises(ValueError, match="has no preprocessor, so it cannot take text"):
        model.encode(["a"])


@pytest.mark.slow
def test_export_serves_strings_as_the_universal_sentence_encoder(tiny_model, tmp_path):
    texts = sentence_models.TINY_TEXTS
    expected = tiny_model.encode(texts)
    export_dir = str(tmp_path / "embedder")
    assert export_sentence_encoder(tiny_model, export_dir) == export_dir
    with pytest.raises(FileExistsError, match="already exists; pass overwrite=True"):
        export_sentence_encoder(tiny_model, export_dir)

    loaded = tf.saved_model.load(export_dir)
    vectors = loaded(tf.constant(texts))
    assert vectors.dtype == tf.float32 and tuple(vectors.shape) == (len(texts), 16)
    assert_close(vectors, expected, atol=1e-5)
    served = loaded.signatures["serving_default"](text=tf.constant(texts))
    assert sorted(served) == ["embeddings"]
    assert_close(served["embeddings"], expected, atol=1e-5)

    exported = load_sentence_encoder(export_dir)
    assert exported.embedding_dim == 16
    assert exported.info == {"source": os.path.abspath(tiny_model.source), "pooling": "max", "normalize": True,
                             "max_seq_length": 12, "dimension": 16}
    assert_close(exported.encode(texts, batch_size=3), expected, atol=1e-5)

    # hub.KerasLayer puts it into a Keras model: string in, vector out; a Dense head trains on top.
    text = keras.Input(shape=(), dtype="string")
    embedding = hub.KerasLayer(export_dir)(text)
    assert tuple(embedding.shape) == (None, 16)
    classifier = keras.Model(text, keras.layers.Dense(2, name="head")(embedding))
    classifier.compile(optimizer=keras.optimizers.SGD(0.1),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert [w.path for w in classifier.trainable_weights] == ["head/kernel", "head/bias"]
    before = classifier.get_layer("head").get_weights()[0].copy()
    classifier.fit(tf.constant(texts), np.arange(len(texts)) % 2, epochs=1, batch_size=len(texts), verbose=0)
    assert np.abs(classifier.get_layer("head").get_weights()[0] - before).max() > 0

    with pytest.raises(ValueError, match=r"expected a model from a \(batch,\) string input to \(batch, dim\) embeddings"):
        export_sentence_encoder(SentenceEncoder(tiny_model.encoder), str(tmp_path / "no_strings"))
    with pytest.raises(ValueError, match="is not an export: it holds no saved_model.pb"):
        load_sentence_encoder(str(tmp_path))


@pytest.mark.slow
def test_minilm_matches_sentence_transformers_on_2000_tweets(tmp_path, capsys):
    """all-MiniLM-L6-v2 over 2,000 tweets (an empty text, a blank one, non-ASCII, ~1,000 tokens cut at 256):
    encode, and `bert-keras embed` of the exported SavedModel, within 1e-5 of SentenceTransformer.encode.

    One test for both, so that the reference and the model are computed once: the command's output file
    goes through the export (the texts go in as JSON lines, so that empty, blank and multi-line texts stay
    whole); `tests/commands/test_cli_embed.py` checks on a tiny model that `--checkpoint` and `--model` give the
    same vectors."""
    folder, texts, reference = sentence_models.minilm_reference()
    model = SentenceEncoder.from_checkpoint(folder)
    assert (model.pooling, model.normalize, model.max_seq_length, model.embedding_dim) == ("mean", True, 256, 384)
    vectors = model.encode(texts, batch_size=32)
    assert_close(vectors, reference, atol=1e-5)
    export_dir = export_sentence_encoder(model, str(tmp_path / "minilm"))
    source = tmp_path / "tweets.jsonl"
    source.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
    out = str(tmp_path / "tweets.npy")
    code = cli.main(["embed", "--model", export_dir, "--input", str(source), "--out", out])
    assert code == 0, capsys.readouterr().err
    assert_close(np.load(out), reference, atol=1e-5)


# === Hostile files in a sentence-transformers folder: a ValueError naming the file (and the field), exit 2 ===


_HANDMADE = {
    "modules.json": [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ],
    "1_Pooling/config.json": {"embedding_dimension": 16, "pooling_mode": "mean", "include_prompt": True},
    "2_Normalize/config.json": {},
    "sentence_bert_config.json": {"max_seq_length": 12, "do_lower_case": False},
    "config.json": {},
    "model.safetensors": "",  # never read: every refusal here comes before the weights
}


def _handmade(tmp_path, files=None):
    """A sentence-transformers folder of hand-written files: `_HANDMADE`, with `files` (name -> value) over it."""
    folder = tmp_path / "folder"
    for name, value in dict(_HANDMADE, **(files or {})).items():
        os.makedirs(folder / os.path.dirname(name), exist_ok=True)
        _write(str(folder), name, value)
    return str(folder)


def _refused_by_embed(folder, tmp_path, capsys, message):
    out = str(tmp_path / "vectors.npy")
    code = cli.main(["embed", "--checkpoint", folder, "--out", out, "ok"])
    err = capsys.readouterr().err
    assert code == 2 and f"bert-keras embed: cannot load a sentence encoder from {folder}: " in err and message in err, err
    assert not os.path.exists(out)


def test_a_handmade_folder_is_read(tmp_path):
    config = read_sentence_transformers_folder(_handmade(tmp_path))
    assert (config.pooling, config.normalize, config.max_seq_length, config.do_lower_case, config.dimension) == (
        ("mean",), True, 12, False, 16)


@pytest.mark.parametrize("name", ["modules.json", "1_Pooling/config.json", "2_Normalize/config.json",
                                  "sentence_bert_config.json"])
def test_deeply_nested_json_is_refused_naming_the_file(tmp_path, capsys, name):
    folder = _handmade(tmp_path)
    _write(folder, name, "[" * 100_000 + "]" * 100_000)
    message = f"{os.path.join(folder, name)} cannot be read as JSON (maximum recursion depth exceeded"
    with pytest.raises(ValueError, match=re.escape(message)):
        read_sentence_transformers_folder(folder)
    _refused_by_embed(folder, tmp_path, capsys, message)


@pytest.mark.parametrize("name, value, message", [
    ("1_Pooling/config.json", {"embedding_dimension": 16, "pooling_mode": [["mean"]]},
     ": `pooling_mode` must be a mode's name or a non-empty list of names. Received: pooling_mode=[['mean']]"),
    ("1_Pooling/config.json", {"embedding_dimension": 16, "pooling_mode": []},
     ": `pooling_mode` must be a mode's name or a non-empty list of names. Received: pooling_mode=[]"),
    ("1_Pooling/config.json", {"embedding_dimension": 16, "pooling_mode_mean_tokens": "yes"},
     ": `pooling_mode_mean_tokens` must be true or false. Received: pooling_mode_mean_tokens='yes'"),
    ("1_Pooling/config.json", {"embedding_dimension": "16", "pooling_mode": "mean"},
     ": `embedding_dimension` must be a positive integer. Received: embedding_dimension='16'"),
    ("1_Pooling/config.json", {"word_embedding_dimension": [16]},
     ": `word_embedding_dimension` must be a positive integer. Received: word_embedding_dimension=[16]"),
    ("2_Normalize/config.json", {"module_input_name": ["sentence_embedding"]},
     ": `module_input_name` must be 'sentence_embedding' (only the normalisation of the sentence embedding is "
     "reproduced). Received: module_input_name=['sentence_embedding']"),
    ("2_Normalize/config.json", {"module_output_name": "normalized"},
     ": `module_output_name` must be 'sentence_embedding' (only the normalisation of the sentence embedding is "
     "reproduced). Received: module_output_name='normalized'"),
    ("2_Normalize/config.json", ["sentence_embedding"], " must hold a JSON object. Received: list"),
    ("sentence_bert_config.json", ["max_seq_length", 12], " must hold a JSON object. Received: list"),
    ("sentence_bert_config.json", {"max_seq_length": 12, "do_lower_case": "false"},
     ": `do_lower_case` must be true or false. Received: do_lower_case='false'"),
    ("sentence_bert_config.json", {"max_seq_length": [12]},
     ": `max_seq_length` must be an integer >= 3. Received: max_seq_length=[12]"),
    ("modules.json", [{"idx": 0, "path": "", "type": ["sentence_transformers.models.Transformer"]}],
     " lists the module ['sentence_transformers.models.Transformer']: SentenceEncoder reproduces Transformer"),
])
def test_config_fields_of_the_wrong_type_are_refused_naming_the_file_and_field(tmp_path, capsys, name, value, message):
    folder = _handmade(tmp_path, {name: value})
    message = os.path.join(folder, name) + message
    with pytest.raises(ValueError, match=re.escape(message)):
        read_sentence_transformers_folder(folder)
    _refused_by_embed(folder, tmp_path, capsys, message)


def test_a_long_value_is_shown_cut(tmp_path):
    folder = _handmade(tmp_path, {"1_Pooling/config.json": {"pooling_mode": list(range(10_000))}})
    with pytest.raises(ValueError) as info:
        read_sentence_transformers_folder(folder)
    assert str(info.value).endswith("Received: pooling_mode=[0, 1, 2, 3, 4, 5, ...]")


def test_an_unusable_tokenizer_length_is_ignored_and_a_nested_one_refused(tiny):
    folder = _copy(tiny, "tokenizer_length")
    _write(folder, "tokenizer_config.json", '{"model_max_length": 1e400}')  # reads as inf, which has no int
    assert SentenceEncoder.from_checkpoint(folder).max_seq_length == 40  # the encoder's positions, as with none
    _write(folder, "tokenizer_config.json", "[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=re.escape(f"{os.path.join(folder, 'tokenizer_config.json')}: is not valid "
                                                   "JSON (maximum recursion depth exceeded")):
        SentenceEncoder.from_checkpoint(folder)


def test_a_tokenizer_json_with_ids_that_are_not_integers_is_refused(tiny):
    folder = _copy(tiny, "tokenizer_json")  # transformers 5 writes no vocab.txt: the vocabulary is tokenizer.json's
    tokenizer = json.load(open(os.path.join(folder, "tokenizer.json")))
    tokenizer["model"]["vocab"]["[UNK]"] = "1"
    _write(folder, "tokenizer.json", tokenizer)
    # Named as every tokenizer file is, by the checkpoint's reader (the tasks and the inspector read it the same way).
    with pytest.raises(CheckpointError, match=re.escape(f"{os.path.join(folder, 'tokenizer.json')}: is not BERT's "
                                                        "WordPiece tokenizer")):
        SentenceEncoder.from_checkpoint(folder)


def test_a_path_that_does_not_exist_is_told_so_not_asked_for_its_pooling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a model hub's name, as a user types it: no such folder here
    with pytest.raises(CheckpointError, match=r"is not a checkpoint directory \(it does not exist.*nothing is downloaded"):
        SentenceEncoder.from_checkpoint("sentence-transformers/all-MiniLM-L6-v2")
