"""`bert-keras finetune` and `bert-keras predict` on tiny Hub modules and users' files."""

import io
import json
import os
import sys

import keras
import pytest

from bert_keras import BertEncoder, cli
from bert_keras.export import export_encoder, export_preprocessor

WORDS = ["good", "great", "fun", "bad", "awful", "boring", "movie", "the", "was", "a", "plot", "?"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    root = tmp_path_factory.mktemp("modules")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    keras.utils.set_random_seed(3)
    encoder = BertEncoder(vocab_size=len(VOCAB), num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16, max_sequence_length=32)
    export_encoder(encoder, str(root / "encoder"), str(vocab), do_lower_case=True)
    export_preprocessor(str(root / "preprocess"), str(vocab), do_lower_case=True, seq_length=16)
    return str(root)


ROWS = [("the movie was good", "pos"), ("great fun", "pos"), ("a great plot", "pos"), ("good good", "pos"),
        ("the movie was bad", "neg"), ("awful plot", "neg"), ("boring boring", "neg"), ("bad bad movie", "neg")] * 3


def _csv(path, rows, header="text,label"):
    path.write_text(header + "\n" + "\n".join(f"{t},{l}" for t, l in rows) + "\n")
    return str(path)


def _finetune(modules, train, out, *extra):
    return cli.main(["finetune", "--train", train, "--modules", modules, "--out", out, "--seq-length", "16",
                     "--epochs", "1", "--batch-size", "8", *extra])


def test_a_default_length_beyond_the_models_positions_names_the_flag_that_fits(modules, tmp_path, capsys):
    # The modules' encoder holds 32 positions; --task classify packs 128 tokens unless told (a hostile review's find).
    code = cli.main(["finetune", "--train", _csv(tmp_path / "train.csv", ROWS), "--modules", modules,
                     "--out", str(tmp_path / "out"), "--epochs", "1"])
    error = capsys.readouterr().err
    assert code == 2 and error.endswith("bert-keras finetune: the model holds 32 positions, fewer than the 128 tokens "
                                        "per text that --task classify packs by default: pass --seq-length 32 (or "
                                        "less).\n"), error
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.slow
def test_finetune_then_predict(modules, tmp_path, capsys, monkeypatch):
    out = str(tmp_path / "classifier")
    test = _csv(tmp_path / "test.csv", ROWS[:8])
    assert _finetune(modules, _csv(tmp_path / "train.csv", ROWS), out, "--test", test) == 0
    printed = capsys.readouterr().out
    assert "labels: ['neg', 'pos']" in printed and "Test set (" in printed and printed.count("macro-F1") == 1
    assert "Phase 1 of 2, head: encoder frozen" in printed and "Phase 2 of 2, full: encoder unfrozen, 1 epoch(s)" in printed
    assert os.path.exists(os.path.join(out, "saved_model.pb"))
    with open(os.path.join(out, "assets.extra", "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["label_names"] == ["neg", "pos"] and 0.0 <= metrics["test_accuracy"] <= 1.0
    assert "confusion matrix (rows: true, columns: predicted)" in printed and "macro-F1" in printed
    with open(os.path.join(out, "assets.extra", "evaluation.json")) as f:
        evaluation = json.load(f)
    assert evaluation["num_examples"] == 8 and sum(map(sum, evaluation["confusion_matrix"])) == 8
    assert evaluation["accuracy"] == metrics["test_accuracy"] and list(evaluation["per_class"]) == ["neg", "pos"]
    for name in ("confusion_matrix.png", "training_curves.png"):
        with open(os.path.join(out, "assets.extra", name), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"

    assert cli.main(["predict", "--model", out, "great fun", "awful plot"]) == 0
    lines = capsys.readouterr().out.strip().split("\n")
    assert [line.split("\t")[2] for line in lines] == ["great fun", "awful plot"]
    assert all(line.split("\t")[0] in ("neg", "pos") and 0.5 <= float(line.split("\t")[1]) <= 1.0 for line in lines)

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"good movie\nboring plot\n")))
    assert cli.main(["predict", "--model", out]) == 0
    assert len(capsys.readouterr().out.strip().split("\n")) == 2


@pytest.mark.slow
def test_finetune_options_delimiter_class_weights_early_stopping_dtype(modules, tmp_path, capsys):
    train = tmp_path / "train.csv"
    rows = ROWS + [("awful awful", "neg")] * 8  # 20 neg, 12 pos
    train.write_text("text;label\n" + "\n".join(f"{t};{l}" for t, l in rows) + "\n")
    out = str(tmp_path / "classifier")
    code = _finetune(modules, str(train), out, "--delimiter", ";", "--class-weights", "balanced",
                     "--early-stopping", "1", "--dtype", "mixed_bfloat16", "--head-epochs", "1")
    captured = capsys.readouterr()
    assert code == 0, captured.err
    # 32 examples, 10% held out by class: 18 neg + 11 pos train; balanced weights n / (classes * count)
    assert "Class weights (balanced): neg 0.806, pos 1.318" in captured.out
    assert cli.main(["predict", "--model", out, "--format", "jsonl", "good"]) == 0
    assert set(json.loads(capsys.readouterr().out)["scores"]) == {"neg", "pos"}
    assert _finetune(modules, str(train), str(tmp_path / "other"), "--delimiter", ";;") == 2
    assert "--delimiter" in capsys.readouterr().err


@pytest.mark.slow
def test_finetune_text_pairs(modules, tmp_path, capsys):
    rows = "\n".join(f"{a}\t{b}\t{l}" for a, b, l in [("good", "great", "same"), ("bad", "good", "diff"), ("awful", "bad", "same"), ("fun", "boring", "diff")] * 4)
    train = tmp_path / "pairs.tsv"
    train.write_text("a\tb\tlabel\n" + rows + "\n")
    out = str(tmp_path / "pairs")
    code = _finetune(modules, str(train), out, "--text-column", "a", "--text-pair-column", "b")
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    assert cli.main(["predict", "--model", out, "good\tgreat"]) == 0
    assert capsys.readouterr().out.split("\t")[0] in ("same", "diff")
    assert cli.main(["predict", "--model", out, "good only"]) == 2
    assert "TEXT<TAB>TEXT_PAIR" in capsys.readouterr().err


@pytest.mark.parametrize(
    "content, extra, pattern",
    [
        (None, (), r"no such file"),
        ("text,sentiment\ngood,pos\n", (), r"missing column\(s\) \['label'\]. Columns found: \['text', 'sentiment'\]"),
        ("", (), r"is empty"),
        (b"text,label\ngood,pos\n\xff\xfe bad,neg\n", (), r"line 3 is not valid UTF-8 \(byte 0xff"),
        ("text,label\ngood,pos\n\nbad,neg\n", (), r"line 3 is empty"),
        ("text,label\ngood,pos\nbad,neg\n", ("--test", "TEST"), r"label\(s\) \['meh'\] do not occur in the training data"),
    ],
    ids=["missing-file", "missing-column", "empty-file", "non-utf8", "empty-line", "label-only-in-test"],
)
def test_finetune_bad_input(modules, tmp_path, capsys, content, extra, pattern):
    train = tmp_path / "train.csv"
    if isinstance(content, bytes):
        train.write_bytes(content)
    elif content is not None:
        train.write_text(content)
    test = _csv(tmp_path / "test.csv", [("good", "pos"), ("so so", "meh")])
    extra = tuple(test if arg == "TEST" else arg for arg in extra)
    out = tmp_path / "out"
    assert _finetune(modules, str(train), str(out), *extra) == 2
    error = capsys.readouterr().err
    assert error.startswith("bert-keras finetune: ")
    assert __import__("re").search(pattern, error), error
    assert not out.exists()


def test_finetune_refuses_a_non_empty_output(modules, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    train = _csv(tmp_path / "train.csv", ROWS)
    for force in ((), ("--force",)):  # --force never empties a directory bert_keras did not write
        assert _finetune(modules, train, str(out), *force) == 2
        assert f"--out {out} exists and was not written by bert-keras (it holds ['keep.txt']); it is never replaced, even with --force" in capsys.readouterr().err
    assert os.listdir(out) == ["keep.txt"]


def test_finetune_force_refuses_the_working_directory_before_training(modules, tmp_path, capsys, monkeypatch):
    train = _csv(tmp_path / "train.csv", ROWS)
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("mine")
    monkeypatch.chdir(work)
    assert _finetune(modules, train, ".", "--force") == 2
    captured = capsys.readouterr()
    assert "--out .: it is the current directory or one of its parents; bert-keras never writes over it" in captured.err  # before TensorFlow
    assert "Fine-tuning" not in captured.out  # refused before any training
    assert os.listdir(work) == ["notes.txt"]


def test_predict_bad_input(tmp_path, capsys, monkeypatch):
    assert cli.main(["predict", "--model", str(tmp_path / "nothing"), "hello"]) == 2
    assert f"--model {tmp_path / 'nothing'}: no such file or directory." in capsys.readouterr().err
    # Blank inputs are empty predictions now (never an abort), and the model loads before standard input is
    # read: invalid UTF-8, empty input and blank lines are tested on a real classifier in test_cli_predict.py.


@pytest.mark.parametrize(
    "extra, pattern",
    [
        (("--epochs", "0"), r"argument --epochs: expected an integer >= 1, got 0"),
        (("--batch-size", "0"), r"argument --batch-size: expected an integer >= 1, got 0"),
        (("--seq-length", "x"), r"argument --seq-length: expected an integer, got 'x'"),
        (("--learning-rate", "-1"), r"argument --learning-rate: expected a positive number, got -1"),
        (("--lora-rank", "0"), r"argument --lora-rank: expected an integer >= 1, got 0"),
        (("--lora-rank", "-2"), r"argument --lora-rank: expected an integer >= 1, got -2"),
    ],
)
def test_finetune_bad_arguments_stop_before_any_work(modules, tmp_path, capsys, extra, pattern):
    with pytest.raises(SystemExit) as exit_info:
        _finetune(modules, _csv(tmp_path / "train.csv", ROWS), str(tmp_path / "out"), *extra)
    assert exit_info.value.code == 2
    assert __import__("re").search(pattern, capsys.readouterr().err)


def test_finetune_refuses_an_unwritable_out_before_training(modules, tmp_path, capsys):
    train = _csv(tmp_path / "train.csv", ROWS)
    (tmp_path / "notes.txt").write_text("x")  # a file where a parent directory should be
    assert _finetune(modules, train, str(tmp_path / "notes.txt" / "out")) == 2
    captured = capsys.readouterr()
    assert "notes.txt' is not a writable directory" in captured.err and "Fine-tuning (" not in captured.out


def test_finetune_seq_length_beyond_the_model_stops_before_training(modules, tmp_path, capsys):
    assert _finetune(modules, _csv(tmp_path / "train.csv", ROWS), str(tmp_path / "out"), "--seq-length", "600") == 2
    captured = capsys.readouterr()
    assert "seq_length" in captured.err and "Fine-tuning (" not in captured.out


def test_finetune_lora_unknown_target_lists_the_valid_ones(modules, tmp_path, capsys):
    out = str(tmp_path / "out")
    assert _finetune(modules, _csv(tmp_path / "train.csv", ROWS), out, "--lora-rank", "2", "--lora-targets", "query,qurey") == 2
    err = capsys.readouterr().err
    assert "expected one of ['query', 'key', 'value', 'attention_output', 'intermediate', 'output']" in err
    assert "Received: lora_targets='qurey'" in err
    assert not os.path.exists(out)


@pytest.mark.parametrize("option", [("--lora-targets", "query"), ("--lora-learning-rate", "1e-3")])
def test_finetune_lora_options_need_a_rank(modules, tmp_path, capsys, option):
    out = str(tmp_path / "out")
    assert _finetune(modules, _csv(tmp_path / "train.csv", ROWS), out, *option) == 2
    assert f"{option[0]} needs --lora-rank" in capsys.readouterr().err and not os.path.exists(out)


@pytest.mark.slow
def test_finetune_lora_on_hub_layers_says_what_it_needs(modules, tmp_path, capsys):
    assert _finetune(modules, _csv(tmp_path / "train.csv", ROWS), str(tmp_path / "out"), "--lora-rank", "2") == 2
    assert "BertEncoder.from_checkpoint" in capsys.readouterr().err


@pytest.mark.slow
def test_finetune_lora_exports_an_ordinary_classifier(modules, tmp_path, capsys):
    out = str(tmp_path / "classifier")
    argv = ["finetune", "--train", _csv(tmp_path / "train.csv", ROWS), "--checkpoint", os.path.join(modules, "encoder"),
            "--out", out, "--seq-length", "16", "--epochs", "1", "--batch-size", "8", "--head-epochs", "0",
            "--lora-rank", "2", "--lora-targets", "query,value", "--lora-learning-rate", "1e-2"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert "Phase 1 of 1, LoRA: adapters of rank 2 on query, value and the head, 1 epoch(s) (AdamW, peak 0.01 " in capsys.readouterr().out
    from bert_keras.export import load_classifier

    classifier = load_classifier(out, warm_up=False)
    names = [variable.name for variable in classifier._saved.variables]  # the export holds no adapter weights
    assert names and not [name for name in names if "lora" in name]
    assert classifier.predict(["great fun"])[0]["label"] in ("neg", "pos")


def test_finetune_bfloat16_export_on_a_cpu_without_it_stops_before_training(modules, tmp_path, capsys, monkeypatch):
    from bert_keras import dtypes

    monkeypatch.setattr(dtypes, "cpu_supports_bfloat16", lambda: False)
    out = str(tmp_path / "out")
    assert _finetune(modules, _csv(tmp_path / "train.csv", ROWS), out, "--export-dtype", "bfloat16") == 2
    captured = capsys.readouterr()
    assert "export_dtype" in captured.err and "avx512_bf16" in captured.err
    assert "Fine-tuning (" not in captured.out and not os.path.exists(out)


@pytest.mark.slow
def test_finetune_on_a_terminal_is_never_silent(modules, tmp_path):
    # issue 55, item 12: on a terminal (Keras' bar) only the steps spoke; 13-24 s went by between the last step and
    # the test report. Under a pseudo-terminal, the speaker's period shortened to 0.5 s: each wait is spoken for.
    import re

    from tests.commands.test_terminal_progress import under_a_terminal

    train, test = _csv(tmp_path / "train.csv", ROWS), _csv(tmp_path / "test.csv", ROWS[:8])
    argv = ["finetune", "--train", train, "--test", test, "--modules", modules, "--out", str(tmp_path / "out"),
            "--seq-length", "16", "--epochs", "1", "--batch-size", "8"]
    code = ("import sys; from bert_keras.commands import _common; _common.SILENCE_SECONDS = 0.5; "
            f"from bert_keras.cli import main; sys.exit(main({argv!r}))")
    status, chunks = under_a_terminal(code)
    text = "".join(chunk for _, chunk in chunks).replace("\r\n", "\n")
    assert status == 0, text
    assert re.search(r"bert-keras finetune: loading the training code \.\.\. \d+ s\n", text), text  # TensorFlow's import
    for start in ("head: preparing the first step (tracing the model)", "full: validating after epoch 1/1",
                  "Scoring the test set (8 examples)", "Exporting the classifier to"):
        assert start in text, (start, text)  # beside the bar too, where a wait begins
    assert re.search(r"bert-keras finetune: still working after: .+ \.\.\. \d+ s\n", text), text
