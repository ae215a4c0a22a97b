"""`bert-keras evaluate` on a LiteRT file: the same report as on the export it was converted from."""

import json

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")

TINY = dict(num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32, max_sequence_length=32)
WORDS = ["good", "bad", "day", "new", "york", "paris", "ada", "love", "the", "city", "!", ","]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + LETTERS + [f"##{c}" for c in LETTERS]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
SENTENCES = [(["Ada", "loves", "Paris", "!"], ["B-PER", "O", "B-LOC", "O"]),
             (["New", "York", "is", "a", "good", "city"], ["B-LOC", "I-LOC", "O", "O", "O", "O"]),
             (["the", "bad", "day", "in", "Paris", ",", "Ada"], ["O", "O", "O", "O", "B-LOC", "O", "B-PER"])]


def _perturbed(model, scale):
    rng = np.random.default_rng(5)
    for weight in model.weights:
        weight.assign(weight.numpy() + rng.normal(scale=scale, size=weight.shape).astype(weight.dtype))
    return model


def _evaluate(tmp_path, capsys, model, data, name):
    from bert_keras.cli import main

    out = tmp_path / name
    status = main(["evaluate", "--model", model, "--data", str(data), "--out", str(out)])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    with open(out / "evaluation.json") as f:
        return json.load(f)


@pytest.mark.slow
def test_a_classifier_file_scores_as_its_export(tmp_path, capsys):
    from bert_keras import BertEncoder
    from bert_keras.export import export_classifier, export_litert
    from bert_keras.tasks import BertClassifier
    from bert_keras.text import BertPreprocessor

    model = _perturbed(BertClassifier(BertEncoder(vocab_size=len(VOCAB), **TINY), num_classes=3,
                                      preprocessor=BertPreprocessor(VOCAB, seq_length=12)), scale=0.5)
    export_dir = export_classifier(model, str(tmp_path / "clf"), ["neg", "neu", "pos"])
    path = export_litert(export_dir, str(tmp_path / "clf.tflite"))
    rows = [("good day", "pos"), ("bad day", "neg"), ("the city", "neu"), ("new york love", "pos"),
            ("Paris !", "neu"), ("ada bad !", "neg"), ("good good good", "pos"), ("day", "neu")]
    data = tmp_path / "labelled.csv"
    data.write_text("text,label\n" + "".join(f"{text},{label}\n" for text, label in rows))
    theirs = _evaluate(tmp_path, capsys, export_dir, data, "export")
    ours = _evaluate(tmp_path, capsys, path, data, "litert")
    assert ours["confusion_matrix"] == theirs["confusion_matrix"]
    assert ours["accuracy"] == pytest.approx(theirs["accuracy"]) and sum(map(sum, ours["confusion_matrix"])) == 8


@pytest.mark.slow
def test_a_tagger_file_scores_as_its_export(tmp_path, capsys):
    from bert_keras import BertEncoder
    from bert_keras.export import export_litert, export_tagger
    from bert_keras.tasks import BertTokenClassifier
    from bert_keras.text import BertPreprocessor

    model = _perturbed(BertTokenClassifier(BertEncoder(vocab_size=len(VOCAB), **TINY), num_classes=len(TAGS),
                                           preprocessor=BertPreprocessor(VOCAB, seq_length=12)), scale=1.0)
    export_dir = export_tagger(model, str(tmp_path / "ner"), tag_names=TAGS, stride=3)
    path = export_litert(export_dir, str(tmp_path / "ner.tflite"))
    data = tmp_path / "tagged.conll"
    data.write_text("\n\n".join("\n".join(f"{w} {t}" for w, t in zip(words, tags)) for words, tags in SENTENCES))
    theirs = _evaluate(tmp_path, capsys, export_dir, data, "export")
    ours = _evaluate(tmp_path, capsys, path, data, "litert")
    assert ours == theirs and theirs  # the same counts, per type and overall
