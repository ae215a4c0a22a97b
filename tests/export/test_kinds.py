"""bert_keras.export.kinds: one answering class per kind, the same code on every engine (issue 56, step 1)."""

import sys

import numpy as np
import pytest

from bert_keras.export.engine import Engine
from bert_keras.export.kinds.classifier import ClassifierAnswers
from bert_keras.export.kinds.reader import RANGE_ENDPOINT, ReaderAnswers
from bert_keras.export.kinds.tagger import TaggerAnswers, piece_rows


def test_the_kinds_import_no_tensorflow():
    import subprocess

    code = ("import sys; import bert_keras.export.kinds.classifier, bert_keras.export.kinds.tagger, "
            "bert_keras.export.kinds.reader, bert_keras.export.engine; print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_both_engines_answer_through_the_kinds_own_methods():
    from bert_keras.export.classifier import ExportedClassifier
    from bert_keras.export.litert_engine import LiteRTClassifier, LiteRTModel, LiteRTReader, LiteRTTagger
    from bert_keras.export.loaded import LoadedExport
    from bert_keras.export.reader import ExportedReader
    from bert_keras.export.tagger import ExportedTagger

    for kind, methods, classes in [(ClassifierAnswers, ("predict", "predict_proba"), (ExportedClassifier, LiteRTClassifier)),
                                   (TaggerAnswers, ("predict", "tag_pieces"), (ExportedTagger, LiteRTTagger)),
                                   (ReaderAnswers, ("predict",), (ExportedReader, LiteRTReader))]:
        for method in methods:
            assert {getattr(cls, method) for cls in classes} == {getattr(kind, method)}, (kind, method)
    assert issubclass(LiteRTTagger, LiteRTModel) and issubclass(ExportedTagger, LoadedExport)
    assert issubclass(LiteRTModel, Engine) and issubclass(LoadedExport, Engine)


class _Classifier(ClassifierAnswers, Engine):
    inputs, num_classes, label_names = ["text"], 2, ["neg", "pos"]

    def __init__(self):
        self.batches = []

    def _scores(self, columns):  # logits: longer texts are more positive
        self.batches.append(list(columns[0]))
        return np.array([[-1.0, len(text) - 4.0] for text in columns[0]], "float32")


def test_the_classifier_leaves_blank_texts_out_and_batches_the_rest():
    model = _Classifier()
    answers = model.predict(["good", " ", "ok", "fine day"], batch_size=2, top_k=1)
    assert model.batches == [["good", "ok"], ["fine day"]]  # the blank text is never run
    assert answers[1] == {"label": None, "score": None, "scores": {}}
    assert [a["label"] for a in (answers[0], answers[2], answers[3])] == ["pos", "neg", "pos"]
    assert list(answers[2]["scores"]) == ["neg"] and answers[2]["score"] == pytest.approx(1 / (1 + np.exp(-1.0)))
    assert model.predict("good", top_k=1) == answers[0] and answers[0]["score"] == pytest.approx(1 / (1 + np.exp(-1.0)))
    assert model.predict_proba([]).shape == (0, 2)
    with pytest.raises(ValueError, match="`text_pairs` must be None"):
        model.predict(["a"], ["b"])
    with pytest.raises(ValueError, match="top_k=3"):
        model.predict("a", top_k=3)
    with pytest.raises(TypeError, match="Expected `texts` to hold strings. Received an item of type int: 3"):
        model.predict(["a", 3])


def test_piece_rows_cut_each_text_at_its_length_and_decode_its_tokens():
    outputs = {"lengths": np.array([2, 1]), "tokens": np.array([[b"pa", b"##ris"], [b"a", b""]], dtype=object),
               "tag_ids": np.array([[1, 2], [0, -1]])}
    rows = piece_rows(outputs)
    assert [row["tokens"] for row in rows] == [["pa", "##ris"], ["a"]]
    assert [row["tag_ids"].tolist() for row in rows] == [[1, 2], [0]] and "lengths" in outputs


class _Reader(ReaderAnswers, Engine):
    """One window per example: [CLS] and the context's two words."""

    def __init__(self, window_range):
        self._window_range, self.calls = window_range, []

    def run(self, signature, **inputs):
        self.calls.append(signature)
        count = len(inputs["context"])
        windows = {
            "example_index": np.arange(count),
            "start_probabilities": np.tile([0.1, 0.2, 0.7], (count, 1)),
            "end_probabilities": np.tile([0.1, 0.1, 0.8], (count, 1)),
            "context_mask": np.tile([False, True, True], (count, 1)),
            "char_starts": np.tile([0, 0, 6], (count, 1)), "char_ends": np.tile([0, 5, 11], (count, 1)),
            "word_starts": np.tile([0, 0, 6], (count, 1)), "word_ends": np.tile([0, 5, 11], (count, 1)),
        }
        if signature == RANGE_ENDPOINT:
            windows = {key: value[inputs["begin"] : inputs["begin"] + inputs["size"]] for key, value in windows.items()}
            windows["window_count"] = np.int64(count)
        return windows


@pytest.mark.parametrize("window_range", [True, False])
def test_the_reader_decodes_whatever_engine_serves_its_windows(window_range):
    reader = _Reader(window_range)
    answers = reader.predict(["where?", "what?"], "hello world", top_k=2)
    assert reader.calls == [RANGE_ENDPOINT if window_range else "windows"]
    for answer in answers:
        assert [(a["answer"], a["start"], a["end"]) for a in answer] == [("world", 6, 11), ("hello world", 0, 11)]
        assert answer[0]["score"] == pytest.approx(0.56)
