import gc
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import pytest  # noqa: E402

# Python's cyclic collector, run less often in test processes. Tracing graphs creates objects by the million, and
# with the default thresholds (700, 10, 10) every collection of the oldest generation walks TensorFlow's and
# Keras' imports too. In a ModernBERT fine-tune-and-export test the collector took 3.30 s of 21.7 s of CPU; with
# these thresholds 1.52 s, and 0.62 s once pytest's collections at the session's end are left out (see
# `pytest_configure`), peak memory unchanged (2-core AMD EPYC, 2026-12-07, `gc.callbacks` timing each collection).
# Nothing a test checks depends on when cycles are freed.
gc.set_threshold(10_000, 20, 20)


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


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)
    yield

