import gc
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import pytest  # noqa: E402

# Python's cyclic collector, in test processes: what was imported before the first test (TensorFlow's and Keras'
# hundreds of thousands of objects, which live as long as the process) is left out of its walks (`gc.freeze`, as
# `bert-keras` does after its own TensorFlow import), and it runs a third as often. Tracing graphs creates objects by
# the million; with the defaults (700, 10, 10) every full collection walked the imports again. Measured on the 2-core
# AMD EPYC, 2026-12-07, user CPU of one pytest process (`/usr/bin/time`), with no collection at the session's end in
# each (see `pytest_configure`):
#   tests/checkpoints/test_modernbert_heads.py: 70.8 s with the defaults, 53.0 s with these;
#   six tests of tests/commands/test_family_finetune_convert.py: 74.7 s and 1.82 GB peak with the defaults, 69.1 s
#   and 1.92 GB with these, and 69.3 s but 2.06 GB with thresholds (10,000, 20, 20) and nothing frozen: full
#   collections 57 times rarer held the garbage of finished fine-tunes longer. With those the full suite ran in
#   43 min 55 s (5,185 group-seconds, from 5,527) but peaked at 6.07 GB, over its 6 GB.
# Nothing a test checks depends on when cycles are freed.
gc.freeze()
gc.set_threshold(2_000, 10, 10)


def pytest_configure(config):
    """No forced collection at the session's end: pytest's unraisable-exception plugin runs one full collection at
    unconfigure and one at cleanup (0.5-0.8 s each in a process that traced graphs), to report exceptions raised
    in `__del__` of garbage still held in cycles. A group's process ends right after; exceptions raised while the
    tests ran are still reported."""
    try:
        from _pytest.unraisableexception import gc_collect_iterations_key
    except ImportError:  # another pytest: its default
        return
    config.stash[gc_collect_iterations_key] = 0


@pytest.fixture
def nothing_frozen():
    """The objects this module's `gc.freeze` set aside given back for the test, and set aside again after: for the
    tests of code that freezes objects itself (and leaves a process that already has frozen ones alone)."""
    gc.unfreeze()
    yield
    gc.freeze()


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)
    yield

