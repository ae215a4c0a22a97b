"""What a user sees on a terminal: no long silence (issue 55, item 12) and refusals before TensorFlow loads (item 11).

The commands' speaker (`commands._common.watching` / `working`, `commands._speaker`) is checked under a
pseudo-terminal, as a user's terminal: its lines must appear while a step is silent, also while the main thread
holds the GIL in C code (as TensorFlow's LiteRT converter does), and after a progress bar's open line.
"""

import json
import os
import pty
import re
import select
import subprocess
import sys
import time

import numpy as np
import pytest


def under_a_terminal(code, timeout=300):
    """Runs `python -c code` with standard output and error on a pseudo-terminal; `(status, [(seconds, text)])`."""
    main, child = pty.openpty()
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-c", code], stdin=child, stdout=child, stderr=child, close_fds=True)
    os.close(child)
    chunks = []
    while time.monotonic() - started < timeout:
        ready, _, _ = select.select([main], [], [], 1.0)
        if ready:
            try:
                data = os.read(main, 65536)
            except OSError:  # the terminal's other end closed: the process is gone
                break
            if not data:
                break
            chunks.append((time.monotonic() - started, data.decode("utf-8", "replace")))
        elif process.poll() is not None:
            break
    os.close(main)
    return process.wait(timeout=60), chunks


# A step of each kind that once left a terminal silent, the speaker's period shortened to 0.2 s.
SILENT_STEPS = r"""
import ctypes, time
from bert_keras.commands import _common
_common.SILENCE_SECONDS = 0.2
with _common.watching("demo"):
    _common.say("Phase 1: a silent step")
    time.sleep(1)
    _common.say("holding the GIL")
    ctypes.PyDLL(None).usleep(1500000)  # C code that keeps the GIL, as TensorFlow's LiteRT converter does
    _common.say("released")
    with _common.working("demo", "reloading the export"):
        time.sleep(1)
    print("12/157 [=====", end="", flush=True)  # a progress bar's open line
    time.sleep(1)
    _common.say("done")
import os
try:
    os.waitpid(-1, os.WNOHANG)
    print("speaker gone: False")
except ChildProcessError:  # no child left: the speaker process was waited for
    print("speaker gone:", _common._speaker is None)
"""


def _between(text, first, last):
    return text[text.index(first) + len(first): text.index(last)]


@pytest.mark.slow  # 5 s in the full run of 450d6b9
def test_every_silent_step_is_spoken_for_on_a_terminal():
    status, chunks = under_a_terminal(SILENT_STEPS)
    text = "".join(chunk for _, chunk in chunks).replace("\r\n", "\n")
    assert status == 0, text
    assert re.search(r"bert-keras demo: still working after: Phase 1: a silent step \.\.\. [01] s\n",
                     _between(text, "Phase 1: a silent step\n", "holding the GIL\n"))
    # Written while the main thread held the GIL: the speaker is a process of its own (a thread would wait).
    assert "bert-keras demo: still working after: holding the GIL ... " in _between(text, "holding the GIL\n", "released\n")
    assert re.search(r"bert-keras demo: reloading the export \.\.\. [01] s\n", _between(text, "released\n", "12/157"))
    # After an open progress line, the speaker's line starts on a line of its own, and so does the next say.
    assert re.search(r"12/157 \[=====\nbert-keras demo: still working after: released \.\.\. \d s\n", text), text
    assert text.endswith("done\nspeaker gone: True\n"), text


def test_the_speaker_says_what_is_under_way_after_each_silence():
    from bert_keras.commands._speaker import Silence

    silence = Silence("demo", 9.0, now=100.0)
    assert silence.wait(100.0) == 9.0 and silence.due(108.9) is None
    assert silence.due(109.0) == "bert-keras demo: still working ... 9 s\n"
    silence.news("said Phase 2 of 2", 110.0)
    assert silence.due(118.5) is None  # 9 s after its own last line, not after the said line
    assert silence.due(118.0 + 1.0) == "bert-keras demo: still working after: Phase 2 of 2 ... 9 s\n"
    silence.news("out 0", 120.0)  # a progress bar's open line
    assert silence.wait(120.0) == 9.0 and silence.due(128.0) is None
    silence.news("step reloading the export", 130.0)
    assert silence.due(141.0) == "\nbert-keras demo: reloading the export ... 11 s\n"  # on a line of its own
    silence.news("end", 142.0)
    assert silence.due(151.0) == "bert-keras demo: still working after: Phase 2 of 2 ... 41 s\n"


@pytest.mark.slow  # 5 s in the full run of 450d6b9
def test_a_quiet_run_has_no_speaker():
    code = SILENT_STEPS.replace("_common.SILENCE_SECONDS = 0.2", "_common.SILENCE_SECONDS = 0.2; _common.set_quiet(True)")
    status, chunks = under_a_terminal(code)
    text = "".join(chunk for _, chunk in chunks)
    assert status == 0 and "bert-keras demo:" not in text, text


def test_the_output_marker_is_the_writers():
    from bert_keras import _files
    from bert_keras.commands import _common

    assert _common.OUTPUT_MARKER == _files.MARKER


def _main_without_tensorflow(argv, cwd):
    """Runs `bert_keras.cli.main(argv)`; its status, whether TensorFlow was imported, and its standard error."""
    code = ("import json, sys; from bert_keras.cli import main; status = main(json.loads(sys.argv[1])); "
            "print(status, 'tensorflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(argv)], capture_output=True, text=True, cwd=cwd,
                          timeout=300)
    return done.stdout.splitlines()[-1], done.stderr


def test_demo_refuses_an_earlier_run_before_tensorflow_loads(tmp_path):
    # issue 55, item 11: a 70 s toy run replaced a 9-minute model.
    (tmp_path / "saved_models" / "tweet_sentiment_classifier").mkdir(parents=True)
    (tmp_path / "saved_models" / "tweet_sentiment_classifier" / "saved_model.pb").write_text("an earlier model")
    result, error = _main_without_tensorflow(["demo"], tmp_path)
    assert result == "2 False", error
    assert error.startswith("bert-keras demo: saved_models/tweet_sentiment_classifier already exist")
    assert "pass --force to replace them, or --out DIR" in error and "overwrite" not in error
    assert (tmp_path / "saved_models" / "tweet_sentiment_classifier" / "saved_model.pb").read_text() == "an earlier model"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "demo_results.json").write_text("{}")  # the results alone count too
    result, error = _main_without_tensorflow(["demo", "--out", "elsewhere", "--train-size", "8"], tmp_path)
    assert result == "2 False" and "elsewhere/demo_results.json already exist" in error, error


def test_finetune_refuses_an_earlier_output_before_tensorflow_loads(tmp_path):
    from bert_keras.commands._common import OUTPUT_MARKER

    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir(), theirs.mkdir()
    (ours / OUTPUT_MARKER).write_text("{}")
    (theirs / "notes.txt").write_text("mine")
    (tmp_path / "train.csv").write_text("text,label\ngood,pos\nbad,neg\n")
    result, error = _main_without_tensorflow(["finetune", "--train", "train.csv", "--out", "ours"], tmp_path)
    assert result == "2 False", error
    assert error == "bert-keras finetune: --out ours already holds an output of bert-keras; pass --force to replace " \
                    "it, or pick another --out.\n"
    result, error = _main_without_tensorflow(["finetune", "--train", "train.csv", "--out", "theirs", "--force"], tmp_path)
    assert result == "2 False" and "--out theirs exists and was not written by bert-keras" in error, error
    assert "even with --force" in error and "overwrite" not in error


def test_training_says_where_its_waits_begin_beside_a_progress_bar():
    # On a terminal (verbosity 1, Keras' bar) the bar stands still while the step is traced and while each
    # validation runs: a line says so, and no step lines are added to the bar's.
    import keras
    import tensorflow as tf

    from bert_keras.training import Harness

    x, y = np.arange(48, dtype="float32").reshape(16, 3) / 10, np.arange(16) % 2
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    model = keras.Sequential([keras.layers.Dense(2)])
    lines = []
    harness = Harness(verbose=1, report=lines.append)
    harness.compile(model, lambda: keras.optimizers.SGD(0.1),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    harness.fit(model, data, epochs=2, steps_per_epoch=4, phase="head", validation_data=data)
    harness.predict(model, data.map(lambda x, y: x), steps=4, what="Scoring the test set (16 examples)")
    assert lines == ["head: preparing the first step (tracing the model)", "head: validating after epoch 1/2",
                     "head: validating after epoch 2/2", "Scoring the test set (16 examples)"]
    quiet = []
    Harness(verbose=0, report=quiet.append).fit(model, data, epochs=1, steps_per_epoch=4)
    assert quiet == []


def test_convert_and_pretrain_refuse_an_earlier_output_before_tensorflow_loads(tmp_path):
    # issue 55, item 12: "pass overwrite=True (--force)" named a Python argument and came after TensorFlow loaded.
    from bert_keras.commands._common import OUTPUT_MARKER

    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / OUTPUT_MARKER).write_text("{}")
    result, error = _main_without_tensorflow(["convert", ".", "--out", "modules"], tmp_path)
    assert result == "2 False", error
    assert error == "bert-keras convert: --out modules already holds an output of bert-keras; pass --force to " \
                    "replace it, or pick another --out.\n"
    (tmp_path / "pretrained" / "encoder").mkdir(parents=True)
    (tmp_path / "corpus.txt").write_text("one sentence.\nanother one.\n")
    result, error = _main_without_tensorflow(["pretrain", "--corpus", "corpus.txt", "--out", "pretrained"], tmp_path)
    assert result == "2 False", error
    assert "pretrained/encoder already exists; pass --force to replace the modules in --out" in error
    assert "overwrite" not in error


def test_the_python_api_and_the_command_line_name_their_own_way_to_replace(tmp_path):
    from bert_keras._checks import replace_hint
    from bert_keras._files import check_target, staged_directory

    assert replace_hint("--out") == "pass --force" and replace_hint("export_dir") == "pass overwrite=True"
    target = str(tmp_path / "out")
    with staged_directory(target, kind="test") as staging:
        with open(os.path.join(staging, "data.txt"), "w") as f:
            f.write("x")
    with pytest.raises(FileExistsError, match=r"\(--out\) already exists; pass --force to replace it\.$"):
        check_target(target, False, argument="--out")
    with pytest.raises(FileExistsError, match=r"\(out_dir\) already exists; pass overwrite=True to replace it\.$"):
        check_target(target, False, argument="out_dir")
