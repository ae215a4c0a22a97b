"""`predict`'s one sequence over every kind (`commands._kinds`), on stand-in models: no TensorFlow, no export.

The exports themselves are served in test_cli_predict.py and test_cli_tagger.py; here the loaders are replaced, so
that what the sequence owns (blanks, --skip-blank, the JSON array, an error mid-stream) is checked alike for each kind.
"""

import argparse
import io
import json
import sys

import pytest

from bert_keras.commands import _kinds, predict
from bert_keras.commands._io import Output
from bert_keras.export import opening
from bert_keras.export.manifest import CLASSIFIER, KINDS, READER, TAGGER


class _Classifier:
    inputs, num_classes = ["text"], 2

    @staticmethod
    def predict(texts, top_k=None, batch_size=64):
        return [{"label": None, "score": None, "scores": {}} if not text.strip() else
                {"label": "pos", "score": 0.75, "scores": {"neg": 0.25, "pos": 0.75}} for text in texts]


class _Tagger:
    @staticmethod
    def predict(texts, aggregation=None, batch_size=32):
        return [[{"entity_group": "PER", "score": 0.5, "word": text[:3], "start": 0, "end": 3}] if text.strip() else []
                for text in texts]


class _Reader:
    @staticmethod
    def predict(questions, contexts, top_k=1, batch_size=8):
        return [{"score": 0.5, "start": 0, "end": 3, "answer": context[:3]} for context in contexts]


MODELS = {CLASSIFIER: _Classifier, TAGGER: _Tagger, READER: _Reader}


def _predict(monkeypatch, kind, argv, stdin):
    monkeypatch.setattr(opening, "load", lambda path, kind, warm_up=None: MODELS[kind]())
    monkeypatch.setattr(predict, "served_kind", lambda model, command: kind)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    parser = argparse.ArgumentParser()
    predict.register(parser.add_subparsers(), argparse.ArgumentParser(add_help=False))
    code = predict.run(parser.parse_args(["predict", "--model", "export", *argv]))
    return code, out.getvalue(), err.getvalue()


def test_every_kind_predict_serves_has_its_pieces():
    assert set(_kinds.KINDS) == {CLASSIFIER, TAGGER, READER}
    for kind in _kinds.KINDS.values():
        assert kind.name in KINDS and all(callable(getattr(kind, piece)) for piece in ("answer", "tsv", "json"))


@pytest.mark.parametrize("kind, stdin, expected", [
    (CLASSIFIER, b"good\n \nbad\n", ["pos\t0.7500\tgood", "pos\t0.7500\tbad"]),
    (TAGGER, b"Ada\n\t\nBob\n", ["[Ada](PER 0.5000)", "[Bob](PER 0.5000)"]),
])
def test_blank_records_are_skipped_and_counted_alike(monkeypatch, kind, stdin, expected):
    code, out, err = _predict(monkeypatch, kind, ["--skip-blank"], stdin)
    assert (code, out.splitlines()) == (0, expected)
    assert err == "bert-keras predict: skipped 1 blank input(s) of 3.\n"


@pytest.mark.parametrize("kind, stdin", [(CLASSIFIER, b"good\n\xff\n"), (TAGGER, b"Ada\n\xff\n"),
                                         (READER, b"who\tAda met Bob\n\xff\n")])
def test_an_input_error_mid_stream_ends_the_json_array_for_every_kind(monkeypatch, kind, stdin):
    code, out, err = _predict(monkeypatch, kind, ["--format", "json", "--batch-size", "1"], stdin)
    assert code == 2 and "standard input line 2 is not valid UTF-8" in err
    assert len(json.loads(out)) == 1  # the answer printed before the error, in a closed array


def test_nothing_to_answer_is_said_in_the_kinds_words(monkeypatch):
    assert _predict(monkeypatch, TAGGER, ["--format", "json"], b"") == (
        2, "[]\n", "bert-keras predict: no text given: pass TEXT arguments, --input FILE, or lines on standard input.\n")
    code, out, err = _predict(monkeypatch, READER, [], b"")
    assert (code, out) == (2, "") and err.endswith("no question given: pass --question and --context, --input FILE, "
                                                   "or QUESTION<TAB>CONTEXT lines on standard input.\n")


def test_output_writes_tsv_jsonl_and_one_json_array():
    lines = {}
    for fmt in ("tsv", "jsonl", "json"):
        stream = io.StringIO()
        output = Output(fmt, stream, lambda fields, answer: f"{answer}\t{fields[0]}", lambda fields, answer: [answer])
        for number in range(2):
            output.write(["a\tb"], number)
        output.close()
        lines[fmt] = stream.getvalue()
    assert lines == {"tsv": "0\ta\tb\n1\ta\tb\n", "jsonl": "[0]\n[1]\n", "json": "[[0]\n,[1]\n]\n"}
