"""A `LiteRTModel` shared between threads (its calls serialised by one lock), and the LiteRT tagger's windows per
call equal to the SavedModel tagger's."""

import json
import subprocess
import sys

import pytest

from tests.export.test_litert import TEXTS, classifier, tagger  # noqa: F401 (fixtures)

pytest.importorskip("ai_edge_litert")

# 8 threads call one model 15 times each; every answer is compared with the one a single thread got. Run in a child
# process: an interpreter used by two threads at once can end the process (abort, segmentation fault).
_THREADS = """
import json, sys, threading
import numpy as np
from bert_keras.export import load_litert

classifier, tagger, unlocked = sys.argv[1], sys.argv[2], sys.argv[3] == "unlocked"
texts = ["good day", "bad city"] * 12
models = load_litert(classifier), load_litert(tagger)
if unlocked:  # the model as it was before its lock
    import contextlib
    for model in models:
        model._lock = contextlib.nullcontext()
work = [(lambda m=models[0]: m.predict_proba(texts)), (lambda m=models[1]: m.predict(texts[:4] + [sys.argv[4]])),
        (lambda m=models[0]: m.serve_ids(**{name: np.ones((5, 8), np.int32) for name in
                                             ("input_word_ids", "input_mask", "input_type_ids")})["probabilities"])]
references = [job() for job in work]
wrong, calls = [], [0]

def run(index):
    for step in range(15):
        job = (index + step) % len(work)
        answer = work[job]()
        same = answer == references[job] if job == 1 else np.array_equal(answer, references[job])
        calls[0] += 1
        if not same:
            wrong.append(job)

threads = [threading.Thread(target=run, args=(index,)) for index in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({"calls": calls[0], "wrong": len(wrong)}))
"""


def _shared(classifier_path, tagger_path, mode):
    return subprocess.run([sys.executable, "-c", _THREADS, classifier_path, tagger_path, mode, TEXTS[-1] * 3],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_model_shared_by_eight_threads_answers_every_call_as_one_thread_does(classifier, tagger):
    # A hostile review: 8 threads calling one model's predict_proba crashed the process or answered wrongly (a LiteRT
    # interpreter is not thread-safe); every use of the interpreter now holds the model's lock.
    _, _, classifier_path = classifier
    _, tagger_path = tagger
    out = _shared(classifier_path, tagger_path, "locked")
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"calls": 120, "wrong": 0}


def test_the_litert_taggers_windows_per_call_are_the_saved_model_taggers():
    # litert_engine cannot import _serving (TensorFlow): the two numbers are kept apart and must agree.
    from bert_keras.export import _serving, litert_engine

    assert litert_engine.WINDOWS_PER_CALL == _serving.WINDOWS_PER_CALL == 64
    assert litert_engine.load_litert.__defaults__[-1] == litert_engine.WINDOWS_PER_CALL
