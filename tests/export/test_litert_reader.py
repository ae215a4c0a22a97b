"""A reader (extractive question answering) in LiteRT: the file answers as its SavedModel export does."""

import json
import os

import numpy as np
import pytest

from bert_keras.export.manifest import ExportError

pytest.importorskip("ai_edge_litert")

TINY = dict(num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32, max_sequence_length=32)
WORDS = ["good", "bad", "day", "new", "york", "##er", "paris", "ada", "love", "the", "city", "é", "中", "文",
         "!", ",", ".", "?", "@", "#", "cafe", "zurich", "who", "what", "where"]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + LETTERS + [f"##{c}" for c in LETTERS]
SEQ_LENGTH, STRIDE, MAX_QUESTION = 24, 6, 6
LONG = "Ada loves the city of Paris ! New Yorkers love Zürich too , the café is good @ada #paris " * 3
QUESTIONS = ["who loves paris?", "Where is the CAFÉ in Zürich, the city of new york and of paris?", "what", "x",
             "where"]
CONTEXTS = [LONG, LONG, "good day in new york", "", "Bad DAYS, é 中文 😀! " + "x" * 101 + " good"]


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    from bert_keras import BertEncoder
    from bert_keras.export import export_litert, export_reader, load_reader
    from bert_keras.tasks import BertSpanLabeler
    from bert_keras.text import BertPreprocessor

    root = tmp_path_factory.mktemp("litert_reader")
    model = BertSpanLabeler(BertEncoder(vocab_size=len(VOCAB), **TINY),
                            preprocessor=BertPreprocessor(VOCAB, seq_length=SEQ_LENGTH))
    rng = np.random.default_rng(3)  # weights far from their initialisation: answers that differ between spans
    for weight in model.weights:
        weight.assign(weight.numpy() + rng.normal(scale=1.0, size=weight.shape).astype(weight.dtype))
    export_dir = export_reader(model, str(root / "qa"), seq_length=SEQ_LENGTH, doc_stride=STRIDE,
                               max_question_length=MAX_QUESTION)
    path = export_litert(export_dir, str(root / "qa.tflite"))
    return load_reader(export_dir, warm_up=False), path


def _assert_same_answers(got, expected):
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected):
        ours, theirs = (x if isinstance(x, list) else [x] for x in (ours, theirs))
        assert [(a["start"], a["end"], a["answer"]) for a in ours] == [
            (a["start"], a["end"], a["answer"]) for a in theirs]
        np.testing.assert_allclose([a["score"] for a in ours], [a["score"] for a in theirs], atol=1e-4)


@pytest.mark.slow
def test_a_reader_file_answers_as_its_export_on_contexts_of_several_windows(reader):
    from bert_keras.export import load_litert
    from bert_keras.export.litert_engine import LiteRTReader

    export, path = reader
    lite = load_litert(path, windows_per_call=3)  # a long context's windows over several calls of the model
    assert type(lite) is LiteRTReader and lite.inputs == ["question", "context"]
    windows = export.all_windows(QUESTIONS[:2], CONTEXTS[:2])
    assert len(windows["example_index"]) > 2 * 3  # contexts longer than one window, more windows than one call
    for options in ({}, {"top_k": 3}, {"top_k": 2, "handle_impossible_answer": True, "max_answer_len": 4},
                    {"top_k": 2, "align_to_words": False}, {"top_k": 3, "merge_duplicates": True}):
        expected = export.predict(QUESTIONS, CONTEXTS, **options)
        got = lite.predict(list(QUESTIONS), list(CONTEXTS), **options)
        _assert_same_answers(got, expected)
    assert got[0] and all(LONG[a["start"] : a["end"]] == a["answer"] for a in got[0])
    one = lite.predict(QUESTIONS[0], LONG)  # one question and one context: one answer
    assert isinstance(one, dict) and one["answer"] == export.predict(QUESTIONS[0], LONG)["answer"]
    shared = lite.predict(np.array(QUESTIONS[:3]), LONG)  # numpy questions, one context for all
    _assert_same_answers(shared, export.predict(QUESTIONS[:3], LONG))
    with pytest.raises(ValueError, match="Received 2 questions and 3 contexts"):
        lite.predict(QUESTIONS[:2], CONTEXTS[:3])


@pytest.mark.slow
def test_the_windows_cut_outside_the_graph_are_the_exports_windows(reader):
    from bert_keras.export import load_litert

    export, path = reader
    lite = load_litert(path, windows_per_call=1000)
    [ours] = lite._window_reads(QUESTIONS, CONTEXTS)
    theirs = export.all_windows(QUESTIONS, CONTEXTS)
    width = ours["context_mask"].shape[1]
    assert theirs["context_mask"].shape == (len(ours["example_index"]), width)
    for name in ("example_index", "char_starts", "char_ends", "word_starts", "word_ends", "context_mask"):
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)
    for name in ("start_probabilities", "end_probabilities"):
        np.testing.assert_allclose(ours[name], theirs[name], atol=1e-5, err_msg=name)


def test_numpy_piece_windows_are_the_graphs():
    import tensorflow as tf

    from bert_keras.export.litert_windows import piece_windows as numpy_windows
    from bert_keras.text.windows import piece_windows

    rng = np.random.default_rng(0)
    for window, step in ((10, 7), (4, 1), (5, 5), (126, 95)):
        lengths = np.concatenate([np.arange(3 * window + 2), rng.integers(0, 1000, 20)])
        budgets = window - rng.integers(0, step, len(lengths))  # a reader's window shrinks with its question
        for size in (window, budgets):
            expected = [t.numpy() for t in piece_windows(tf.constant(lengths), size, step)]
            got = numpy_windows(lengths, size, step)
            for ours, theirs in zip(got, expected):
                np.testing.assert_array_equal(ours, theirs, err_msg=f"{window} {step}")


def test_a_reader_manifest_with_unusable_windows_is_refused_before_tensorflow_loads(tmp_path):
    from bert_keras.export.litert import served_manifest

    tokenizer = {"kind": "wordpiece", "seq_length": 24, "cls_id": 2, "sep_id": 3, "pad_id": 0,
                 "unknown_token": "[UNK]", "vocabulary_size": len(VOCAB)}
    for edits, message in (({"doc_stride": 20}, r"`doc_stride`, expected an integer in \[0, 14\]"),
                           ({"max_question_length": 0}, "`max_question_length`, expected an integer in"),
                           ({"inputs": ["text"]}, r"expected \[\"question\", \"context\"\]")):
        directory = tmp_path / str(len(os.listdir(tmp_path)))
        os.makedirs(directory / "assets.extra")
        (directory / "saved_model.pb").write_bytes(b"")
        manifest = {"format": "bert_keras export", "version": 1, "kind": "reader", "inputs": ["question", "context"],
                    "seq_length": 24, "doc_stride": 6, "max_question_length": 6, "tokenizer": tokenizer, **edits}
        (directory / "assets.extra" / "export.json").write_text(json.dumps(manifest))
        with pytest.raises(ExportError, match=message):
            served_manifest(str(directory))


@pytest.mark.slow
def test_predict_answers_from_a_reader_file_as_from_its_export(reader, capsys):
    from bert_keras.cli import main

    export, path = reader
    answers = {}
    for model in (export.export_dir, path):
        status = main(["predict", "--model", model, "--question", QUESTIONS[1], "--context", LONG, "--top-k", "2",
                       "--format", "json"])
        out = capsys.readouterr()
        assert status == 0, out.err
        [record] = json.loads(out.out)
        answers[model] = record["answers"]
    expected = [(a["start"], a["end"], a["answer"]) for a in export.predict(QUESTIONS[1], LONG, top_k=2)]
    assert [(a["start"], a["end"], a["answer"]) for a in answers[path]] == expected
    np.testing.assert_allclose([a["score"] for a in answers[path]], [a["score"] for a in answers[export.export_dir]],
                               atol=1e-4)
