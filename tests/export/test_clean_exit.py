"""A process that served an export ends with its own exit status while a background warm-up is still running.

The warm-up replays requests in a daemon thread after the first answer. Left inside TensorFlow when the interpreter
finalizes, it woke to a finalizing interpreter that ended it by unwinding its C++ frames ("terminate called after
throwing an instance of ...", "FATAL: exception not rethrown": an abort after the user's output).
`loaded.stop_warm_ups` (an `atexit` hook) stops it between two requests first.
"""

import os
import select
import subprocess
import sys
import textwrap
import threading

import keras
import pytest

from bert_keras import BertEncoder
from bert_keras.export import export_classifier, load_classifier, loaded, warmup
from bert_keras.tasks import BertClassifier
from bert_keras.text import BertPreprocessor

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "movie"] + [f"w{i}" for i in range(24)]
TINY = dict(vocab_size=len(VOCAB), num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16,
            max_sequence_length=64)
LABELS = ["neg", "pos"]
RUNS = 2  # one exit status 0, one 3

# The user's script: one answer, then exit while the warm-up thread is certainly inside TensorFlow: each replayed
# request is made slow (many short TensorFlow calls, in and out of C++). The crash itself depends on where the thread
# is when the interpreter finalizes (measured on the real exports: 3 aborts in 11 runs); what makes it possible does
# not: a warm-up thread still running once the last atexit handler has run. The user's own atexit handlers, one
# registered before the package's import (it runs after the package's hook) and one after (before it), must run.
SCRIPT = textwrap.dedent("""
    import atexit, sys, threading
    replayed = []
    warming = lambda: [t for t in threading.enumerate() if t.name.startswith("warm-up of ") and t.is_alive()]
    atexit.register(lambda: print("after: replayed", len(replayed), "running", len(warming()), flush=True))
    import tensorflow as tf
    from bert_keras.export import load_classifier, warmup

    @tf.function
    def busy(x):
        return tf.while_loop(lambda i, x: i < 200, lambda i, x: (i + 1, tf.tanh(tf.matmul(x, x) * 1e-2)), (0, x))[1]

    inside = threading.Event()
    replay = warmup.replay

    def slow_replay(export_dir, signature, **options):
        def request(**inputs):
            inside.set()
            for _ in range(20):
                busy(tf.ones([64, 64]))
            replayed.append(1)
            return signature(**inputs)
        return replay(export_dir, request, **options)

    warmup.replay = slow_replay
    classifier = load_classifier(sys.argv[1])
    answer = classifier.predict("good movie")
    assert inside.wait(120), "the warm-up never started"
    atexit.register(lambda: print("before: warmed", classifier.warmed.is_set(), flush=True))
    print("answer", answer["label"], flush=True)
    sys.exit(int(sys.argv[2]))
""")


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    keras.utils.set_random_seed(0)
    model = BertClassifier(BertEncoder(**TINY), num_classes=2, preprocessor=BertPreprocessor(VOCAB, seq_length=64))
    return export_classifier(model, str(tmp_path_factory.mktemp("clean_exit") / "classifier"), LABELS)


@pytest.mark.slow
def test_a_script_exits_with_its_own_status_while_the_background_warm_up_runs(export_dir, tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    requests = len(warmup.read_warmup_requests(os.path.join(export_dir, "assets.extra", warmup.WARMUP_FILE)))
    assert requests == 9  # 8 length buckets up to 64 tokens, and one batch: the warm-up has work left at exit
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    for run in range(RUNS):
        code = (0, 3)[run % 2]
        done = subprocess.run([sys.executable, str(script), export_dir, str(code)], capture_output=True, text=True,
                              timeout=300, env=env)
        assert done.returncode == code, (run, done.returncode, done.stdout, done.stderr[-3000:])
        lines = done.stdout.splitlines()
        assert lines[0] in ("answer neg", "answer pos") and lines[1] == "before: warmed False", done.stdout
        # The package's hook ran between the two: the warm-up stopped between two requests, with requests left.
        words = lines[2].split()
        assert words[:2] == ["after:", "replayed"] and int(words[2]) < requests and words[3:] == ["running", "0"], \
            done.stdout
        assert len(lines) == 3 and "Fatal Python error" not in done.stderr, done.stderr[-3000:]


@pytest.mark.slow
def test_stop_warm_ups_stops_a_warm_up_between_two_requests_and_waits_for_it(export_dir, monkeypatch):
    classifier = load_classifier(export_dir)
    calls, entered, release = [], threading.Event(), threading.Event()
    signature = classifier.serving_signature()

    def request(**inputs):
        calls.append(1)
        entered.set()
        release.wait(60)  # the request in flight when the process exits
        return signature(**inputs)

    monkeypatch.setattr(classifier, "serving_signature", lambda: request)
    classifier.predict("good movie")  # the first answer starts the warm-up
    thread = classifier._warming_thread
    assert thread is not None and thread.daemon and entered.wait(60)
    # The answer a script printed to a pipe, still in its buffer (the interpreter flushes after the atexit hooks).
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb") as pipe_out, os.fdopen(write_end, "w") as pipe_in:
        stdout, sys.stdout = sys.stdout, pipe_in
        try:
            print("answer pos")
            assert not select.select([pipe_out], [], [], 0)[0]
            stopper = threading.Thread(target=lambda: stopped.append(loaded.stop_warm_ups(timeout=60)))
            stopped = []
            stopper.start()
            stopper.join(0.5)
            assert stopper.is_alive() and thread.is_alive()  # it waits for the request in flight ...
            # ... with the answer already out.
            assert select.select([pipe_out], [], [], 10)[0] and os.read(pipe_out.fileno(), 100) == b"answer pos\n"
        finally:
            sys.stdout = stdout
    release.set()
    stopper.join(60)
    assert stopped == [0] and not thread.is_alive() and calls == [1]  # ... and replays no other
    assert classifier.warmed.is_set()
    assert loaded.stop_warm_ups(timeout=1) == 0  # none left: returns at once


@pytest.mark.slow
def test_stop_warm_ups_is_bounded_by_its_timeout(export_dir, monkeypatch, caplog):
    classifier = load_classifier(export_dir)
    entered, release = threading.Event(), threading.Event()
    signature = classifier.serving_signature()

    def request(**inputs):  # a request that does not return until released
        entered.set()
        release.wait(60)
        return signature(**inputs)

    monkeypatch.setattr(classifier, "serving_signature", lambda: request)
    classifier.predict("good movie")
    assert entered.wait(60)
    try:
        assert loaded.stop_warm_ups(timeout=0.2) == 1  # a request that does not return: the exit does not hang on it
        assert "1 background warm-up(s) still inside TensorFlow" in caplog.text
    finally:
        release.set()
        classifier._warming_thread.join(60)
    assert not classifier._warming_thread.is_alive()
