"""The one door (`bert_keras.export.opening`): a directory and its `.tflite` file described as one manifest, loaded
by one call as their kind's class on their engine, answering alike; what is not served refused by the same call."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from bert_keras.export import opening
from bert_keras.export.manifest import ExportError

pytest.importorskip("ai_edge_litert")
pytestmark = pytest.mark.slow  # two exports and their LiteRT conversions (about 30 s) before any test

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "day", "city", "love", "the", "!", ","] + [
    chr(c) for c in range(ord("a"), ord("z") + 1)]
TINY = dict(num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32, max_sequence_length=32)
TEXTS = ["good day", "Bad city, the day!", "", "love " * 30, "Zürich é 😀"]


def _perturbed(model):
    rng = np.random.default_rng(5)
    for weight in model.weights:  # far from the initialisation: texts answered differently
        weight.assign(weight.numpy() + rng.normal(scale=0.5, size=weight.shape).astype(weight.dtype))
    return model


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """A classifier and a sentence encoder, each as a directory and its `.tflite` file."""
    from bert_keras import BertEncoder
    from bert_keras.export import export_classifier, export_litert, export_sentence_encoder
    from bert_keras.tasks import BertClassifier
    from bert_keras.tasks.sentence_encoder import SentenceEncoder
    from bert_keras.text import BertPreprocessor

    root = tmp_path_factory.mktemp("opening")
    classifier = _perturbed(BertClassifier(BertEncoder(vocab_size=len(VOCAB), **TINY), num_classes=3,
                                           preprocessor=BertPreprocessor(VOCAB, seq_length=12)))
    classifier_dir = export_classifier(classifier, str(root / "clf"), ["neg", "neu", "pos"])
    encoder = _perturbed(SentenceEncoder(BertEncoder(vocab_size=len(VOCAB), **TINY),
                                         preprocessor=BertPreprocessor(VOCAB, seq_length=12), normalize=True))
    encoder_dir = export_sentence_encoder(encoder, str(root / "st"))
    return {"classifier": (classifier_dir, export_litert(classifier_dir, str(root / "clf.tflite"))),
            "sentence_encoder": (encoder_dir, export_litert(encoder_dir, str(root / "st.tflite"))), "root": root}


def test_a_directory_and_its_file_are_described_as_one_manifest(exports):
    directory, path = exports["classifier"]
    saved, lite = opening.describe(directory), opening.describe(path)
    assert (saved["engine"], lite["engine"]) == ("saved_model", "litert")
    assert saved["format"] == lite["format"] == "bert_keras export"
    for name in ("kind", "version", "label_names", "tokenizer"):  # what the export recorded, the file carries
        assert lite[name] == saved[name], name
    assert lite["kind"] == "classifier" and lite["label_names"] == ["neg", "neu", "pos"]
    assert (lite["strings"], lite["quantize"]) == (True, None)  # what the file adds: how it runs
    assert not {"sha256", "size", "writer", "converted_from", "previous"} & set(lite)  # the record's bookkeeping is not the manifest's


def test_one_call_loads_either_engine_as_its_kinds_class_and_both_answer_alike(exports):
    from bert_keras.export import ExportedClassifier, LiteRTClassifier, load

    directory, path = exports["classifier"]
    saved, lite = load(directory, warm_up=False), load(path)
    assert type(saved) is ExportedClassifier and type(lite) is LiteRTClassifier
    expected = saved.predict_proba(TEXTS)
    np.testing.assert_allclose(lite.predict_proba(np.array(TEXTS)), expected, atol=1e-5)  # numpy in, as lists
    assert np.ptp(expected[:, 0]) > 1e-3
    assert [p["label"] for p in lite.predict(TEXTS, top_k=2)] == [p["label"] for p in saved.predict(TEXTS, top_k=2)]
    assert lite.predict("") == saved.predict("") == {"label": None, "score": None, "scores": {}}
    assert load(path, kind=("tagger", "classifier"), num_threads=1).num_classes == 3


def test_the_sentence_encoder_file_has_the_exports_methods_and_settings(exports):
    from bert_keras.export import load

    directory, path = exports["sentence_encoder"]
    saved, lite = load(directory), load(path, kind="sentence_encoder")
    assert lite.info == saved.info and lite.embedding_dim == saved.embedding_dim == 16
    queries, documents = lite.encode_query("good day"), lite.encode_documents(TEXTS)
    np.testing.assert_allclose(queries, saved.encode_query("good day"), atol=1e-4)
    np.testing.assert_allclose(documents, saved.encode_documents(TEXTS), atol=1e-4)
    np.testing.assert_allclose(lite.similarity(queries, documents), saved.similarity(queries, documents), atol=1e-4)
    assert lite.similarity(queries, documents).shape == (1, len(TEXTS))


def test_a_sentence_encoder_file_indexes_and_records_itself(exports, tmp_path):
    from bert_keras.export import load
    from bert_keras.search import build_index, load_index

    _, path = exports["sentence_encoder"]
    index = build_index(load(path), TEXTS[:2], str(tmp_path / "index"))
    assert index.model["export"] == path and index.model["dimension"] == 16 and index.model["normalize"] is True
    assert load_index(str(tmp_path / "index")).count == 2


def test_what_the_caller_does_not_serve_is_refused_by_the_same_call(exports, tmp_path):
    from bert_keras.export import load

    directory, path = exports["classifier"]
    with pytest.raises(ExportError, match=r"is a LiteRT classifier; this serves a tagger or reader\. In Python: "
                       r"bert_keras\.export\.load\(path\)\.predict"):
        load(path, kind=("tagger", "reader"))
    with pytest.raises(ExportError, match=r"is a classifier export, not a reader one\. Serve it with "
                       r"bert_keras\.export\.load_classifier"):
        load(directory, kind="reader")
    with pytest.raises(ExportError, match=r"is a LiteRT sentence encoder; this serves a classifier.*\.encode\(texts\)"):
        opening.served_kind(exports["sentence_encoder"][1], "classifier")
    with pytest.raises(ValueError, match=r"argument `kind`, expected one of classifier, tagger, reader, "
                       r"sentence_encoder .* Received: kind='ner'"):
        load(path, kind="ner")
    with pytest.raises(ValueError, match=r"`num_threads`: it sets a LiteRT file's interpreter, and .* is a SavedModel "
                       r"directory"):
        load(directory, num_threads=2)
    cut = tmp_path / "cut.tflite"  # a file damaged after it was written: refused before LiteRT reads it
    shutil.copyfile(path, cut)
    shutil.copyfile(path + ".json", str(cut) + ".json")
    cut.write_bytes(cut.read_bytes()[:-10])
    with pytest.raises(ExportError, match="the file and its record are of different conversions, or the file was cut"):
        opening.describe(cut)
    with pytest.raises(ExportError, match="the file and its record are of different conversions"):
        load(cut)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "bert_keras.cli", *args], capture_output=True, text=True)


def test_the_commands_take_a_file_wherever_they_take_its_directory(exports, tmp_path):
    directory, path = exports["sentence_encoder"]
    for model, name in ((directory, "saved.npy"), (path, "lite.npy")):
        out = _cli("embed", "--model", model, "--out", str(tmp_path / name), *TEXTS[:3])
        assert out.returncode == 0, out.stderr
    np.testing.assert_allclose(np.load(tmp_path / "lite.npy"), np.load(tmp_path / "saved.npy"), atol=1e-4)
    (tmp_path / "data.tsv").write_text("text\tlabel\ngood day\tpos\n")
    out = _cli("evaluate", "--model", path, "--data", str(tmp_path / "data.tsv"))
    assert out.returncode == 2
    assert out.stderr.strip() == (f"bert-keras evaluate: {path!r} is a LiteRT sentence encoder; this serves a classifier "
                                  "or tagger. In Python: bert_keras.export.load(path).encode(texts).")
    out = _cli("predict", "--model", exports["classifier"][1], "--format", "json", "good day")
    assert out.returncode == 0, out.stderr
    [answer] = json.loads(out.stdout)
    assert answer["label"] in ("neg", "neu", "pos")
