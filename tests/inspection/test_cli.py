"""`bert-keras explain` and `bert-keras probe`: outputs, and exit status 2 with a clear message on bad input."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.cli import main
from bert_keras.inspection.probing import held_out_warning
from tests.inspection.conftest import MODEL_GARDEN_MODULE


def _run(capsys, *argv):
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.slow
def test_explain_from_modules(module_pair, tmp_path, capsys):
    modules, _ = module_pair
    out = str(tmp_path / "explained")
    status, printed, _ = _run(capsys, "explain", "--modules", modules, "--out", out, "--seq-length", "8",
                              "the cat sat on the mat, and the dog ran")
    assert status == 0
    assert "Truncated: 11 word pieces do not fit in --seq-length 8" in printed
    assert "8 tokens: [CLS] the cat sat on the mat [SEP]" in printed
    assert sorted(os.listdir(out)) == [".bert_keras_output.json", "attention.html", "attention.json",
                                       "attention_layer_01.png", "attention_layer_02.png"]
    with open(os.path.join(out, "attention.json"), encoding="utf-8") as f:
        data = json.load(f)
    assert data["truncated"] is True and len(data["attention"][0][0]) == 8
    assert data["source"] == os.path.abspath(modules)  # the page and the data name what was explained
    with open(os.path.join(out, "attention.html"), encoding="utf-8") as f:
        assert f"<title>Attention of {os.path.abspath(modules)}</title>" in f.read()

    status, _, error = _run(capsys, "explain", "--modules", modules, "--out", out, "the cat")
    assert status == 2 and "--out" in error and "exists" in error  # an earlier output needs --force


def test_explain_bad_input(tmp_path, capsys):
    out = str(tmp_path / "out")
    status, _, error = _run(capsys, "explain", "--modules", MODEL_GARDEN_MODULE, "--out", out, "   ")
    assert status == 2 and "TEXT is empty" in error
    status, _, error = _run(capsys, "explain", "--modules", MODEL_GARDEN_MODULE, "--out", out, "a cat", "--text-pair", "")
    assert status == 2 and "--text-pair is empty" in error

    no_vocab = str(tmp_path / "encoder")
    shutil.copytree(MODEL_GARDEN_MODULE, no_vocab)
    os.remove(os.path.join(no_vocab, "assets", "vocab.txt"))
    status, _, error = _run(capsys, "explain", "--modules", no_vocab, "--out", out, "a cat")
    assert status == 2 and "has no vocabulary" in error

    other = tf.Module()
    other.__call__ = tf.function(lambda x: x + 1.0, input_signature=[tf.TensorSpec([None])])
    tf.saved_model.save(other, str(tmp_path / "not_bert"))
    status, _, error = _run(capsys, "explain", "--modules", str(tmp_path / "not_bert"), "--out", out, "a cat")
    assert status == 2 and "not a BERT encoder module" in error

    status, _, error = _run(capsys, "explain", "--checkpoint", str(tmp_path / "missing"), "--out", out, "a cat")
    assert status == 2 and "missing" in error
    status, _, error = _run(capsys, "explain", "--modules", MODEL_GARDEN_MODULE, "--out", out, "--seq-length", "100", "a cat")
    assert status == 2 and "seq_length" in error and "max_sequence_length=64" in error
    assert not os.path.exists(out)


@pytest.mark.slow  # 3 s in the full run of 450d6b9
def test_probe_on_a_labelled_file(tmp_path, capsys):
    rng = np.random.default_rng(0)
    words = ["good", "bad", "the", "cat", "dog", "look", "what", "was", "not", "hello"]
    rows = ["text,label"]
    for i in range(60):
        label = ["good", "bad"][i % 2]
        rows.append(" ".join([label] + list(rng.choice(words, 4))) + "," + ("pos" if label == "good" else "neg"))
    data = tmp_path / "data.csv"
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = str(tmp_path / "probe")
    status, printed, error = _run(capsys, "probe", "--modules", MODEL_GARDEN_MODULE, "--data", str(data), "--out", out,
                                  "--max-examples", "50", "--batch-size", "16")
    assert status == 0, error
    assert "Probing 50 examples" in printed and "layer  [CLS]  [SEP]" in printed
    assert sorted(os.listdir(out)) == [".bert_keras_output.json", "attention_statistics.png", "probe.json", "probe_accuracy.png"]
    with open(os.path.join(out, "probe.json"), encoding="utf-8") as f:
        result = json.load(f)
    assert result["num_examples"] == 50
    per_layer = result["attention"]["per_layer"]
    assert set(per_layer) == {"cls", "sep", "punctuation", "self", "previous", "next", "entropy"}
    assert all(len(values) == 2 for values in per_layer.values())
    assert all(0.0 <= per_layer[name][0] <= 1.0 for name in ("cls", "sep", "self"))
    assert per_layer["punctuation"] == [0.0, 0.0]  # no punctuation in these texts
    assert result["probe"]["layers"] == ["embeddings", "layer 1", "layer 2"]
    assert result["probe"]["train_size"] + result["probe"]["test_size"] == 50
    # The label is the first word: some layer's features give it away, far above the majority class.
    print(result["probe"]["accuracy"])
    assert result["probe"]["majority_baseline"] == 0.5
    assert max(max(values) for values in result["probe"]["accuracy"].values()) >= 0.9
    # 10 held-out examples: the accuracies' uncertainty is said, on stderr and in probe.json.
    assert result["warnings"] == [held_out_warning(10)] and "+-0.310 (95%)" in result["warnings"][0]
    assert "bert-keras probe: warning: The probes are scored on 10 held-out examples" in error


def test_probe_bad_input(tmp_path, capsys):
    data = tmp_path / "one_label.csv"
    data.write_text("text,label\nthe cat,a\nthe dog,a\n", encoding="utf-8")
    out = str(tmp_path / "probe")
    status, _, error = _run(capsys, "probe", "--modules", MODEL_GARDEN_MODULE, "--data", str(data), "--out", out)
    assert status == 2 and "a probe needs two or more" in error
    status, _, error = _run(capsys, "probe", "--modules", MODEL_GARDEN_MODULE, "--data", str(tmp_path / "nope.csv"), "--out", out)
    assert status == 2 and "nope.csv" in error
    status, _, error = _run(capsys, "probe", "--modules", MODEL_GARDEN_MODULE, "--data", str(data), "--out", out, "--max-examples", "3")
    assert status == 2 and "--max-examples must be at least 10" in error
    with pytest.raises(SystemExit) as exit_info:  # argparse: --modules or --checkpoint is required
        main(["probe", "--data", str(data), "--out", out])
    assert exit_info.value.code == 2
