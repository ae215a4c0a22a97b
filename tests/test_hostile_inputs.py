"""Hostile inputs of users' files: a vocabulary with a duplicated token, an export whose loose
`labels.json` was edited, a CSV field of 200,000 characters. Each is either read as it should be or
refused with a message that says what is wrong (exit status 2 on the command line)."""

import json
import os
import re
import shutil

import keras
import numpy as np
import pytest

from bert_keras import BertEncoder, cli
from bert_keras.export.manifest import manifest_path
from bert_keras.export import LABELS_FILE, export_classifier, load_classifier
from tests.helpers import as_written_before_the_manifest
from bert_keras.tasks import BertClassifier
from bert_keras.text import BertPreprocessor, WordPieceTokenizer, load_vocabulary

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "great", "bad", "movie", "the", "plot"]
NAMES = ["neg", "neu", "pos"]
PROBABILITIES = [0.2, 0.3, 0.5]


def _run(argv, capsys):
    capsys.readouterr()  # what came before (e.g. progress bars of transformers' save_pretrained)
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- a vocabulary with a duplicated token ---


def _duplicated_vocab(path):
    tokens = VOCAB[:6] + ["movie", "##s", "movie", "plot"]  # "movie" on lines 7 and 9
    path.write_text("\n".join(tokens) + "\n")
    return str(path)


def test_load_vocabulary_names_the_file_the_token_and_both_lines(tmp_path):
    path = _duplicated_vocab(tmp_path / "vocab.txt")
    with pytest.raises(ValueError, match=re.escape(
            f"Received an invalid value for argument `vocabulary`: {path} lists the token 'movie' twice, on lines 7 "
            "and 9. Every token of a vocabulary must be unique (line i is the token of id i).")):
        load_vocabulary(path)


def test_tokenizer_refuses_a_duplicated_token_before_tensorflow_text_sees_it(tmp_path):
    with pytest.raises(ValueError, match=re.escape(
            "Received an invalid value for argument `vocabulary`: the token 'good' appears twice, at ids 5 and 7. "
            "Every token of a vocabulary must be unique (line i is the token of id i).")):
        WordPieceTokenizer(VOCAB[:6] + ["bad", "good"])
    with pytest.raises(ValueError, match=re.escape("lists the token 'movie' twice, on lines 7 and 9")):
        WordPieceTokenizer(_duplicated_vocab(tmp_path / "vocab.txt"))


@pytest.mark.slow
def test_checkpoint_with_a_duplicated_token_is_refused_on_reading(tmp_path, capsys):
    pytest.importorskip("transformers")
    from bert_keras.checkpoints import load_checkpoint
    from tests.checkpoints._models import hf_pretraining_model, save_hf_directory

    directory = save_hf_directory(hf_pretraining_model(), tmp_path / "bert")
    vocab = os.path.join(directory, "vocab.txt")
    tokens = open(vocab).read().split("\n")
    tokens[20] = tokens[12]  # 40 tokens still, "tok7" on lines 13 and 21
    with open(vocab, "w") as f:
        f.write("\n".join(tokens))
    message = f"{vocab} lists the token 'tok7' twice, on lines 13 and 21."
    with pytest.raises(ValueError, match=re.escape(message)):
        load_checkpoint(directory)
    code, _, err = _run(["convert", directory, "--out", str(tmp_path / "out")], capsys)
    assert code == 2, err
    assert err.startswith(f"bert-keras convert: cannot convert {directory}: ") and message in err
    assert "internal error" not in err


# --- an exported classifier ---


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    keras.utils.set_random_seed(3)
    encoder = BertEncoder(vocab_size=len(VOCAB), num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16,
                          max_sequence_length=32)
    classifier = BertClassifier(encoder, num_classes=3, preprocessor=BertPreprocessor(VOCAB, seq_length=16))
    kernel, bias = classifier.classifier_head.dense.weights
    kernel.assign(np.zeros(kernel.shape, "float32"))  # every text: [0.2, 0.3, 0.5]
    bias.assign(np.log(np.array(PROBABILITIES, "float32")))
    return export_classifier(classifier, str(tmp_path_factory.mktemp("export") / "classifier"), NAMES)


def _copy(export, tmp_path):
    return shutil.copytree(export, tmp_path / "classifier")


def _write_labels(directory, names):
    path = manifest_path(directory)
    with open(path) as f:
        labels = json.load(f)
    labels["label_names"] = names
    with open(path, "w") as f:
        json.dump(labels, f)
    return path


@pytest.mark.slow
def test_edited_labels_json_is_refused_not_silently_used(export, tmp_path, capsys):
    directory = _copy(export, tmp_path)
    path = _write_labels(directory, ["pos", "neu", "neg"])  # flipped
    message = (f"The manifest of {directory} lists the labels ['pos', 'neu', 'neg'], but the SavedModel was exported "
               "with ['neg', 'neu', 'pos'] (its `label_names()` and the `label` it serves): the export was modified "
               "after it was written. Restore the file, or pass `label_names=` to load_classifier to name the classes "
               "yourself.")
    with pytest.raises(ValueError, match=re.escape(message)):
        load_classifier(directory)
    code, out, err = _run(["predict", "--model", str(directory), "good movie"], capsys)
    assert code == 2 and out == ""
    assert err == f"bert-keras predict: cannot load a classifier from {directory}: {message}\n"
    data = tmp_path / "x.csv"
    data.write_text("text,label\ngood movie,pos\n")  # a real file: the refusal must come from the labels
    code, out, err = _run(["evaluate", "--model", str(directory), "--data", str(data)], capsys)
    assert code == 2 and message in err


@pytest.mark.slow
def test_the_savedmodel_names_are_the_truth(export, tmp_path):
    directory = _copy(export, tmp_path)
    loaded = load_classifier(directory, warm_up=False)
    assert loaded.label_names == NAMES and loaded.label_source == "export"
    assert loaded.predict("good movie")["label"] == "pos"
    _write_labels(directory, None)  # the manifest's names are a copy, not needed
    loaded = load_classifier(directory, warm_up=False)
    assert loaded.label_names == NAMES and loaded.label_source == "export"
    as_written_before_the_manifest(directory)  # an export of an earlier version: its names in labels.json
    loaded = load_classifier(directory, warm_up=False)
    assert loaded.label_names == NAMES and loaded.label_source == "export"
    os.remove(os.path.join(directory, "assets.extra", LABELS_FILE))  # and with no file at all: a model.export() dir
    loaded = load_classifier(directory, warm_up=False)
    assert loaded.label_names == NAMES and loaded.label_source == "export"
    named = load_classifier(directory, label_names=["x", "y", "z"], warm_up=False)  # names given by the caller are theirs
    assert named.label_names == ["x", "y", "z"] and named.label_source == "given"


@pytest.mark.slow
def test_given_names_override_an_edited_file(export, tmp_path):
    directory = _copy(export, tmp_path)
    _write_labels(directory, ["pos", "neu", "neg"])
    named = load_classifier(directory, label_names=["x", "y", "z"], warm_up=False)
    assert named.label_names == ["x", "y", "z"] and named.predict("good")["label"] == "z"


# --- a CSV field of 200,000 characters: predict and evaluate read the same input ---


def _long_text():
    text = "good " * 40_000  # 200,000 characters, above csv's default limit of 131,072
    assert len(text) == 200_000
    return text


@pytest.mark.slow
def test_predict_and_evaluate_accept_the_same_long_field(export, tmp_path, capsys):
    data = tmp_path / "long.csv"
    data.write_text(f'text,label\n"{_long_text()}",pos\nbad,neg\n')
    code, out, err = _run(["predict", "--model", export, "--input", str(data), "--format", "jsonl"], capsys)
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert [len(r["text"]) for r in records] == [200_000, 3]
    assert [r["label"] for r in records] == ["pos", "pos"]
    code, out, err = _run(["evaluate", "--model", export, "--data", str(data)], capsys)
    assert code == 0, err
    assert "accuracy" in out.lower()


@pytest.mark.slow
@pytest.mark.parametrize("suffix, delimiter", [(".tsv", "\t"), (".csv", ";")])
def test_long_fields_of_tsv_and_other_delimiters(export, tmp_path, capsys, suffix, delimiter):
    data = tmp_path / f"long{suffix}"
    data.write_text(f"text{delimiter}label\n{_long_text()}{delimiter}pos\n")
    extra = ["--delimiter", delimiter] if delimiter == ";" else []
    code, out, err = _run(["predict", "--model", export, "--input", str(data)] + extra, capsys)
    assert code == 0, err
    assert out.startswith("pos\t0.5000\tgood good") and len(out) == len("pos\t0.5000\t") + 200_000 + 1
    code, _, err = _run(["evaluate", "--model", export, "--data", str(data)] + extra, capsys)
    assert code == 0, err


def test_csv_field_limit_is_left_as_it_was(export, tmp_path, capsys):
    import csv

    before = csv.field_size_limit()
    data = tmp_path / "long.csv"
    data.write_text(f'text,label\n"{_long_text()}",pos\n')
    assert _run(["predict", "--model", export, "--input", str(data)], capsys)[0] == 0
    assert csv.field_size_limit() == before


# --- a lone surrogate written as a JSON escape (the file is valid UTF-8): bad input, exit 2, file and line ---


def test_a_lone_surrogate_in_json_input_is_refused_by_every_command(export, tmp_path, capsys):
    good = tmp_path / "good.jsonl"
    good.write_text('{"text": "good movie", "label": "pos"}\n{"text": "bad plot", "label": "neg"}\n')
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "good movie", "label": "pos"}\n{"text": "a \\ud800 b", "label": "neg"}\n')
    message = f"{bad}: line 2: `text` holds a lone surrogate (\\ud800 at character 3), which is not text."
    before = sorted(os.listdir(tmp_path))
    code, out, err = _run(["predict", "--model", export, "--input", str(bad)], capsys)
    assert code == 2 and out == "" and err.startswith(f"bert-keras predict: {message}"), err
    report = str(tmp_path / "report")
    code, out, err = _run(["evaluate", "--model", export, "--data", str(bad), "--out", report], capsys)
    assert code == 2 and out == "" and err.startswith(f"bert-keras evaluate: {message}"), err
    for argument in ("--train", "--validation", "--test"):
        files = {"--train": str(good), argument: str(bad)}
        argv = ["finetune", "--checkpoint", export, "--out", str(tmp_path / "out")]
        code, out, err = _run(argv + [item for pair in files.items() for item in pair], capsys)
        assert code == 2 and err.startswith(f"bert-keras finetune: {message}"), err
    assert sorted(os.listdir(tmp_path)) == before  # no report, no output, no backup, no lock


# --- a damaged TF Serving warm-up file: a warning, and the classifier loads and predicts (only colder) ---


def _append_warmup_record(directory, payload):
    import tensorflow as tf

    from bert_keras.export import warmup

    path = os.path.join(directory, "assets.extra", warmup.WARMUP_FILE)
    records = list(tf.data.TFRecordDataset(path).as_numpy_iterator())
    with tf.io.TFRecordWriter(path) as writer:  # framed as TFRecord, so only the record itself is damaged
        for record in [records[0], payload] + records[1:]:
            writer.write(record)
    return path


def _string_request(dims, values):
    """A PredictionLog whose `text` input claims `dims` but holds `values`."""
    from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

    shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=n) for n in dims])
    request = predict_pb2.PredictRequest()
    request.inputs["text"].CopyFrom(tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, tensor_shape=shape, string_val=values))
    return prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request)).SerializeToString()


@pytest.mark.parametrize("payload, reason", [
    (b"\xff\xff\xff garbage, not a PredictionLog", "Error parsing message"),
    # one text said to be 2**62 of them: refused before anything is allocated for them
    (_string_request([2**62], [b"good"]), "holds 1 value(s) for a shape of 4611686018427387904"),
], ids=["garbage", "one text said to be 2**62"])
def test_a_damaged_warmup_file_is_a_warning_and_the_classifier_still_predicts(export, tmp_path, caplog, payload, reason):
    directory = _copy(export, tmp_path)
    path = _append_warmup_record(directory, payload)
    with caplog.at_level("WARNING", logger="bert_keras.export.warmup"):
        loaded = load_classifier(directory, warm_up=True)  # replayed before returning: the warning is logged here
    assert loaded.predict("good movie")["label"] == "pos"
    [warning] = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert warning.startswith(f"Could not replay the warm-up requests of {path} (") and reason in warning, warning
    assert warning.endswith("); continuing without warm-up.")


def test_a_manifest_nested_too_deep_is_refused_naming_it(export, tmp_path):
    directory = _copy(export, tmp_path)
    path = manifest_path(directory)
    with open(path, "w") as f:
        f.write("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=re.escape(f"{path} cannot be read (nested too deep): the export is damaged; "
                                                   "export the model again.")):
        load_classifier(directory, warm_up=False)


def test_an_export_whose_variables_are_a_fifo_is_refused_not_waited_on(export, tmp_path, capsys):
    # The fresh review after issue 47: a FIFO as variables/variables.index hung `predict` and the loaders.
    directory = _copy(export, tmp_path)
    index = os.path.join(directory, "variables", "variables.index")
    os.remove(index)
    os.mkfifo(index)
    with pytest.raises(OSError, match=re.escape(f"{index} cannot be read: it is a FIFO (named pipe), not a regular "
                                                "file")):
        load_classifier(directory, warm_up=False)
    code, out, err = _run(["predict", "--model", str(directory), "good movie"], capsys)
    assert code == 2 and out == "" and f"{index} cannot be read: it is a FIFO" in err


def test_an_export_with_damaged_variables_is_refused_naming_it(export, tmp_path, capsys):
    # The fresh review after issue 47: a truncated variables file ended in "internal error: IndexError" (exit 1).
    directory = _copy(export, tmp_path)
    [data] = [name for name in os.listdir(os.path.join(directory, "variables")) if name.startswith("variables.data")]
    path = os.path.join(directory, "variables", data)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    code, out, err = _run(["predict", "--model", str(directory), "good movie"], capsys)
    assert code == 2 and out == "", err
    assert err.startswith(f"bert-keras predict: cannot load a classifier from {directory}: The SavedModel at ") and \
        "cannot be read: its files are damaged or incomplete" in err and err.endswith("Write it again.\n"), err
