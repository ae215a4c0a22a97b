"""`load_classifier(...).predict`, `bert-keras predict` and `bert-keras evaluate` on tiny classifiers with fixed outputs.

The classifiers' heads have a zero kernel and the bias log([0.2, 0.3, 0.5]), so every text gets the
probabilities [0.2, 0.3, 0.5] exactly (up to float32 rounding): the outputs can be asserted value for value.
"""

import io
import json
import logging
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import BertEncoder, cli, hub
from bert_keras.export import export_classifier, export_module_pair, load_classifier
from bert_keras.tasks import BertClassifier

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "great", "bad", "movie", "the", "plot"]
PROBABILITIES = [0.2, 0.3, 0.5]
NAMES = ["neg", "neu", "pos"]


def _fix_head(dense):
    kernel, bias = dense.weights
    kernel.assign(np.zeros(kernel.shape, "float32"))
    bias.assign(np.log(np.array(PROBABILITIES, "float32")))


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """`{name: export dir}`: export_classifier (single, pairs) and Keras' model.export (softmax, logits)."""
    root = tmp_path_factory.mktemp("classifiers")
    (root / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    keras.utils.set_random_seed(5)
    encoder = BertEncoder(vocab_size=len(VOCAB), num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16,
                          max_sequence_length=32)
    export_module_pair(str(root / "modules"), encoder, str(root / "vocab.txt"), do_lower_case=True, seq_length=16)
    dirs = {}
    for pairs in (False, True):
        classifier = BertClassifier.from_checkpoint(str(root / "modules"), num_classes=3, seq_length=16, text_pairs=pairs)
        _fix_head(classifier.classifier_head.dense)
        name = "pairs" if pairs else "single"
        dirs[name] = export_classifier(classifier, str(root / name), NAMES)
        if not pairs:  # logits out, no label names: the directory BertClassifier.export writes
            classifier.export(str(root / "keras_logits"), verbose=False)
            dirs["keras_logits"] = str(root / "keras_logits")
    # The README's workflow: Hub layers, a softmax Dense, Keras' model.export.
    text = keras.layers.Input(shape=(), dtype=tf.string, name="text")
    pooled = hub.KerasLayer(str(root / "modules" / "encoder"))(hub.KerasLayer(str(root / "modules" / "preprocess"))(text))
    dense = keras.layers.Dense(3, activation="softmax")
    model = keras.Model(text, dense(pooled["pooled_output"]))
    _fix_head(dense)
    model.export(str(root / "keras_softmax"), verbose=False)
    dirs["keras_softmax"] = str(root / "keras_softmax")
    # Something else: a SavedModel that is no text classifier.
    module = tf.Module()
    module.f = tf.function(lambda x: {"y": x * 2.0}, input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    tf.saved_model.save(module, str(root / "other"), signatures={"serving_default": module.f})
    dirs["other"] = str(root / "other")
    return dirs


@pytest.mark.slow
def test_predict_one_text_a_list_top_k_and_pairs(exports):
    classifier = load_classifier(exports["single"], warm_up=False)
    assert classifier.label_names == NAMES and classifier.label_source == "export" and classifier.inputs == ["text"]
    one = classifier.predict("the movie")  # one string: one prediction (not one per character)
    assert list(one) == ["label", "score", "scores"] and one["label"] == "pos"
    assert one["score"] == pytest.approx(0.5, abs=1e-6)
    assert list(one["scores"]) == NAMES
    np.testing.assert_allclose(list(one["scores"].values()), PROBABILITIES, atol=1e-6)
    many = classifier.predict(["good", "bad plot", ""], top_k=2, batch_size=2)
    assert len(many) == 3 and [list(p["scores"]) for p in many] == [["pos", "neu"]] * 2 + [[]]  # a blank text: no label
    assert many[2] == {"label": None, "score": None, "scores": {}}
    np.testing.assert_allclose(classifier.predict_proba(["good"] * 5, batch_size=2), [PROBABILITIES] * 5, atol=1e-6)
    with pytest.raises(ValueError, match="top_k"):
        classifier.predict("good", top_k=4)
    with pytest.raises(TypeError, match="Expected `texts` to hold strings"):
        classifier.predict(["good", 3])

    pairs = load_classifier(exports["pairs"], warm_up=False)
    assert pairs.inputs == ["text", "text_pair"]
    assert pairs.predict(("good", "bad"))["label"] == "pos"
    assert len(pairs.predict([("good", "bad"), ("the", "plot")])) == 2
    assert len(pairs.predict(["good", "the"], text_pairs=["bad", "plot"])) == 2
    with pytest.raises(ValueError, match="text pairs"):
        pairs.predict(["good"])


@pytest.mark.slow
def test_model_export_directories_are_read_with_numbered_labels(exports, caplog):
    for name in ("keras_softmax", "keras_logits"):  # probabilities kept; logits get a softmax
        with caplog.at_level(logging.WARNING):
            classifier = load_classifier(exports[name], warm_up=False)
        assert classifier.label_names == ["0", "1", "2"] and classifier.label_source == "numbered"
        assert "carries no label names" in caplog.text and "classes are numbered 0..2" in caplog.text
        caplog.clear()
        prediction = classifier.predict("good movie")
        assert prediction["label"] == "2"
        np.testing.assert_allclose(list(prediction["scores"].values()), PROBABILITIES, atol=1e-6)
    named = load_classifier(exports["keras_softmax"], label_names=NAMES, warm_up=False)
    assert named.label_source == "given" and named.predict("good")["label"] == "pos"
    with pytest.raises(ValueError, match="Received 2 label names for a classifier with 3 classes"):
        load_classifier(exports["keras_softmax"], label_names=["a", "b"])
    with pytest.raises(ValueError, match=r"is not a classifier written by bert_keras' `export_classifier`: .*its inputs are \{'x': 'float32 \(None, 4\)'\}"):
        load_classifier(exports["other"])


@pytest.mark.slow
def test_a_manifest_without_its_keys_does_not_crash(exports, tmp_path, caplog):
    import shutil

    from bert_keras.export.manifest import manifest_path

    copy = tmp_path / "copy"
    shutil.copytree(exports["single"], copy)
    with open(manifest_path(copy), "w") as f:
        json.dump({"format": "bert_keras export", "version": 1, "kind": "classifier", "label_names": 1}, f)
    with caplog.at_level(logging.WARNING):
        classifier = load_classifier(str(copy), warm_up=False)
    assert classifier.label_names == NAMES  # from the export's `label_names` endpoint
    assert "the manifest holds no list of `label_names`; ignoring it" in caplog.text


def _run(argv, capsys, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.slow
def test_predict_formats(exports, capsys):
    model = exports["single"]
    code, out, _ = _run(["predict", "--model", model, "--format", "jsonl", "good movie", "bad"], capsys)
    assert code == 0
    first = json.loads(out.splitlines()[0])
    assert first == {"text": "good movie", "label": "pos", "score": 0.5, "scores": {"neg": 0.2, "neu": 0.3, "pos": 0.5}}
    assert len(out.splitlines()) == 2
    code, out, _ = _run(["predict", "--model", model, "--format", "json", "--top-k", "2", "a", "b"], capsys)
    assert [record["scores"] for record in json.loads(out)] == [{"pos": 0.5, "neu": 0.3}] * 2
    code, out, _ = _run(["predict", "--model", model, "--top-k", "2", "good"], capsys)
    assert out == "pos\t0.5000\tneu\t0.3000\tgood\n"
    code, out, err = _run(["predict", "--model", model, "--top-k", "4", "good"], capsys)
    assert code == 2 and "--top-k 4 exceeds the classifier's 3 classes" in err


@pytest.mark.slow
def test_predict_escapes_control_characters(exports, capsys):
    text = "red \x1b[31mALERT\x1b[0m\ttab \\ back \x9b2J"
    code, out, _ = _run(["predict", "--model", exports["single"], text], capsys)
    assert code == 0
    assert out == "pos\t0.5000\tred \\x1b[31mALERT\\x1b[0m\\ttab \\\\ back \\x9b2J\n"
    code, out, _ = _run(["predict", "--model", exports["single"], "--format", "jsonl", text], capsys)
    assert "\x1b" not in out and "\x9b" not in out and "\\u001b[31m" in out and "\\u009b2J" in out
    assert json.loads(out)["text"] == text


@pytest.mark.slow
def test_predict_blank_lines_kept_or_skipped(exports, capsys, monkeypatch):
    stdin = b"good\n\n   \nbad movie\n"
    code, out, err = _run(["predict", "--model", exports["single"]], capsys, stdin, monkeypatch)
    assert code == 0 and out == "pos\t0.5000\tgood\n\t\t\n\t\t   \npos\t0.5000\tbad movie\n"
    code, out, err = _run(["predict", "--model", exports["single"], "--format", "jsonl"], capsys, stdin, monkeypatch)
    assert json.loads(out.splitlines()[1]) == {"text": "", "label": None, "score": None, "scores": {}}
    code, out, err = _run(["predict", "--model", exports["single"], "--skip-blank"], capsys, stdin, monkeypatch)
    assert code == 0 and out.count("\n") == 2 and "skipped 2 blank input(s) of 4" in err


@pytest.mark.slow
def test_predict_input_files(exports, tmp_path, capsys):
    model = exports["single"]
    csv = tmp_path / "in.csv"
    csv.write_text('id;review\n1;"good, really\nsaid twice"\n2;bad\n')
    code, out, err = _run(["predict", "--model", model, "--input", str(csv), "--text-column", "review",
                           "--delimiter", ";"], capsys)
    assert code == 0, err
    assert out == "pos\t0.5000\tgood, really\\nsaid twice\npos\t0.5000\tbad\n"
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text('{"t": "good"}\n\n{"t": "bad"}\n')
    code, out, _ = _run(["predict", "--model", model, "--input", str(jsonl), "--text-column", "t", "--skip-blank"], capsys)
    assert out.splitlines() == ["pos\t0.5000\tgood", "pos\t0.5000\tbad"]
    code, out, err = _run(["predict", "--model", model, "--input", str(jsonl), "--text-column", "text"], capsys)
    assert code == 2 and "in.jsonl: line 1 has no key(s) ['text']. Keys found: ['t']" in err
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a\tb\ngood\tbad\n")
    code, out, err = _run(["predict", "--model", exports["pairs"], "--input", str(pairs), "--text-column", "a",
                           "--text-pair-column", "b", "--format", "jsonl"], capsys)
    assert code == 0, err
    assert json.loads(out)["text_pair"] == "bad"
    code, out, err = _run(["predict", "--model", model, "--input", str(tmp_path / "missing.txt")], capsys)
    assert code == 2 and "--input " in err and "missing.txt: no such file or directory." in err


@pytest.mark.slow
def test_predict_bad_input_messages(exports, tmp_path, capsys, monkeypatch):
    code, _, err = _run(["predict", "--model", str(tmp_path / "nothing"), "hello"], capsys)
    assert code == 2 and "--model " in err and "nothing: no such file or directory." in err
    code, _, err = _run(["predict", "--model", exports["other"], "hello"], capsys)
    assert code == 2 and "is not a classifier written by bert_keras" in err
    code, out, err = _run(["predict", "--model", exports["single"]], capsys, b"fine\n\xffbad\n", monkeypatch)
    assert code == 2 and "standard input line 2 is not valid UTF-8 (byte 0xff at column 1)" in err
    assert out == "" or out.startswith("pos")
    code, _, err = _run(["predict", "--model", exports["single"]], capsys, b"", monkeypatch)
    assert code == 2 and "no text given" in err
    code, _, err = _run(["predict", "--model", exports["pairs"], "good only"], capsys)
    assert code == 2 and "TEXT<TAB>TEXT_PAIR" in err


@pytest.mark.slow
def test_predict_argument_with_invalid_utf8_exits_2_without_a_traceback(exports, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-m", "bert_keras.cli", "predict", "--model", exports["single"], b"ok \xff"],
                          capture_output=True, env=env, timeout=120)
    assert done.returncode == 2
    assert b"bert-keras predict: TEXT argument 1 is not valid UTF-8 (byte 0xff at character 4)" in done.stderr
    assert b"Traceback" not in done.stderr


@pytest.mark.slow
def test_predict_streams_in_batches(exports, monkeypatch, capsys):
    """Each batch is printed before the next is read: output follows input, not the end of it."""
    printed_before = []

    class Lines:
        def __iter__(self):
            for index in range(7):
                printed_before.append(sys.stdout.getvalue().count("\n") if hasattr(sys.stdout, "getvalue") else None)
                yield f"text {index}\n".encode()

    class Stdin:
        buffer = Lines()

        @staticmethod
        def isatty():
            return False

    out = io.StringIO()
    monkeypatch.setattr(sys, "stdin", Stdin())
    monkeypatch.setattr(sys, "stdout", out)
    assert cli.main(["predict", "--model", exports["single"], "--batch-size", "3"]) == 0
    assert out.getvalue().count("\n") == 7
    assert printed_before == [0, 0, 0, 3, 3, 3, 6]


@pytest.mark.slow
def test_evaluate_report(exports, tmp_path, capsys):
    data = tmp_path / "test.csv"
    data.write_text("text,label\ngood,pos\ngreat,pos\nbad,neg\nthe plot,neu\n")
    out = tmp_path / "report"
    code, printed, err = _run(["evaluate", "--model", exports["single"], "--data", str(data), "--out", str(out)], capsys)
    assert code == 0, err
    assert "accuracy 0.5000, macro-F1 0.2222 (4 examples)" in printed
    report = json.loads((out / "evaluation.json").read_text())
    assert report["confusion_matrix"] == [[0, 0, 1], [0, 0, 1], [0, 0, 2]]
    assert report["per_class"]["pos"] == {"precision": 0.5, "recall": 1.0, "f1": pytest.approx(2 / 3), "support": 2}
    assert (out / "confusion_matrix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data.write_text("text,label\ngood,great\n")
    code, _, err = _run(["evaluate", "--model", exports["single"], "--data", str(data)], capsys)
    assert code == 2 and "['great'] do not occur" in err and "the classifier's labels: ['neg', 'neu', 'pos']" in err


@pytest.mark.slow
def test_predict_reads_files_with_the_reader_and_messages_of_finetune(exports, tmp_path, capsys, monkeypatch):
    model = exports["single"]
    bad = tmp_path / "bad.csv"
    bad.write_text('text,label\ngood,pos\n"bad "quote" here",neg\n')
    code, out, err = _run(["predict", "--model", model, "--input", str(bad)], capsys)
    assert code == 2 and out == ""  # the bad record is met while the first batch is read
    assert f"bert-keras predict: {bad}: line 3: malformed quoting (',' expected after '\"')" in err
    lines_json = tmp_path / "lines.json"  # .json holding one object per line, as read_labelled_file reads it
    lines_json.write_text('{"text": "good"}\n{"text": "bad movie"}\n')
    code, out, _ = _run(["predict", "--model", model, "--input", str(lines_json)], capsys)
    assert code == 0 and out == "pos\t0.5000\tgood\npos\t0.5000\tbad movie\n"
    code, _, err = _run(["predict", "--model", model, "--input", str(lines_json), "--delimiter", ";"], capsys)
    assert code == 2 and f"argument `--delimiter`: it applies to CSV and TSV files, not to {lines_json} (JSON)" in err
    code, _, err = _run(["predict", "--model", model, "--text-column", "review"], capsys, b"good\n", monkeypatch)
    assert code == 2 and "argument `--text-column`: it applies to CSV, TSV, JSON and JSONL files; standard input" in err
    code, _, err = _run(["predict", "--model", exports["pairs"]], capsys, b"good\tbad\nno pair\n", monkeypatch)
    assert code == 2 and "standard input line 2 is not a text pair: give each as TEXT<TAB>TEXT_PAIR" in err


# --- readers (issue 50, item 3): a question and its context, on the command line -------------------------------


@pytest.fixture(scope="module")
def reader_export(tmp_path_factory):
    from bert_keras.export import export_reader, load_reader
    from bert_keras.tasks import BertSpanLabeler
    from bert_keras.text import BertPreprocessor

    keras.utils.set_random_seed(3)
    encoder = BertEncoder(vocab_size=len(VOCAB), num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16,
                          max_sequence_length=32)
    labeler = BertSpanLabeler(encoder, preprocessor=BertPreprocessor(VOCAB, seq_length=16))
    directory = export_reader(labeler, str(tmp_path_factory.mktemp("reader") / "qa"), seq_length=16, doc_stride=2,
                              max_question_length=4)
    return directory, load_reader(directory, warm_up=False)


@pytest.mark.slow  # 16 s in the full run of 450d6b9
def test_predict_answers_a_question_from_a_reader(reader_export, capsys, monkeypatch):
    model, reader = reader_export
    question, context = "the plot", "good movie the plot bad great movie"
    expected = reader.predict(question, context)
    code, out, err = _run(["predict", "--model", model, "--question", question, "--context", context,
                           "--format", "jsonl"], capsys)
    assert code == 0, err
    [record] = [json.loads(line) for line in out.splitlines()]
    assert record["question"] == question and len(record["answers"]) == 1
    answer = record["answers"][0]
    assert (answer["answer"], answer["start"], answer["end"]) == (expected["answer"], expected["start"], expected["end"])
    assert context[answer["start"]:answer["end"]] == answer["answer"] and answer["score"] == round(expected["score"], 6)
    # Records of two fields: standard input (QUESTION<TAB>CONTEXT), or a JSONL file of questions and contexts.
    code, out, err = _run(["predict", "--model", model], capsys, stdin=f"{question}\t{context}\nbad\tgood movie\n".encode(),
                          monkeypatch=monkeypatch)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2 and lines[0] == f"{expected['score']:.4f}\t{expected['answer']}\t{question}", err
    records = os.path.join(os.path.dirname(model), "questions.jsonl")
    with open(records, "w") as f:
        f.write(json.dumps({"question": question, "context": context, "id": 7}) + "\n")
    code, out, err = _run(["predict", "--model", model, "--input", records, "--format", "json"], capsys)
    assert code == 0 and json.loads(out)[0]["answers"][0]["answer"] == expected["answer"], err


def test_a_reader_is_told_what_it_needs_before_tensorflow_loads(reader_export, tmp_path):
    model, _ = reader_export
    program = ("import sys; from bert_keras import cli; code = cli.main(sys.argv[1:]); "
               "print('tensorflow' in sys.modules); sys.exit(code)")
    for argv, message in (
            (["a text"], "is a reader: pass --question QUESTION --context CONTEXT (or --input FILE of question and "
                         "context columns), not TEXT arguments."),
            (["--question", "who?"], "pass --question and --context together."),
    ):
        result = subprocess.run([sys.executable, "-c", program, "predict", "--model", model, *argv], capture_output=True,
                                text=True, timeout=120, env=dict(os.environ, PYTHONPATH=os.getcwd()))
        assert result.returncode == 2 and result.stdout.strip() == "False", result.stderr
        assert result.stderr.startswith("bert-keras predict: ") and message in result.stderr, result.stderr


def test_a_classifier_loader_and_evaluate_given_a_reader_say_what_it_is(reader_export, tmp_path, capsys):
    model, _ = reader_export
    with pytest.raises(ValueError, match=r"is a reader export, not a classifier one. Serve it with "
                                         r"bert_keras.export.load_reader\(.*\).predict\(question, context\), or on the "
                                         r'command line: bert-keras predict --model .* --question "..." --context "..."'):
        load_classifier(model)
    data = tmp_path / "x.csv"
    data.write_text("text,label\ngood movie,pos\n")
    code, _, err = _run(["evaluate", "--model", model, "--data", str(data)], capsys)
    assert code == 2 and "is a reader export, not a classifier or tagger one" in err
