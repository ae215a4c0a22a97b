"""The run harness owns what Keras' `fit` lacks under a strategy: applied to the model it fits, for that fit only."""

import collections

import keras
import numpy as np
import tensorflow as tf

from bert_keras._platform import keras_private
from bert_keras.training import Harness


TRACES = collections.Counter()


class Counted(keras.Model):
    """A plain subclassed model that counts the traces of its step functions (in `TRACES`)."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(2)

    def call(self, x):
        return self.dense(x)

    def train_step(self, data):
        TRACES["train"] += 1
        return super().train_step(data)

    def test_step(self, data):
        TRACES["test"] += 1
        return super().test_step(data)


def test_the_harness_fits_the_users_model_with_the_workaround_for_that_fit_only():
    x, y = np.arange(24, dtype="float32").reshape(8, 3) / 10, np.arange(8) % 2
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    keras.utils.set_random_seed(3)
    TRACES.clear()
    model = Counted()
    model(x[:1])  # built: its variables exist before the run
    harness = Harness(verbose=0)
    harness.compile(model, lambda: keras.optimizers.Adam(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    weights = list(model.weights)
    assert len(weights) == 2
    history, whole = harness.fit(model, data, epochs=2, steps_per_epoch=2, validation_data=data)
    # Built from the element spec before the trace (`keras_private.strategy_fit`): each step traced once, not twice.
    assert dict(TRACES) == {"train": 1, "test": 1}
    assert not set(keras_private._FIT_METHODS) & set(vars(model))  # a plain model again after the run
    assert [id(w) for w in model.weights] == [id(w) for w in weights]  # the user's variables were trained
    assert int(model.optimizer.iterations.numpy()) == 4
    assert history.model is model and len(whole["loss"]) == 2 and len(whole["val_loss"]) == 2


def test_a_piped_fit_reports_progress_lines_within_each_epoch(monkeypatch):
    """At verbosity 2 (the command line when piped) an epoch is never silent: a line every LINE_SECONDS."""
    from bert_keras.training import harness as harness_module

    ticks = iter(range(0, 10_000, 6))  # every clock reading is 6 s after the last
    monkeypatch.setattr(harness_module.time, "monotonic", lambda: next(ticks))
    x, y = np.arange(48, dtype="float32").reshape(16, 3) / 10, np.arange(16) % 2
    model = keras.Sequential([keras.layers.Dense(2)])
    lines = []
    harness = Harness(verbose=2, report=lines.append)
    harness.compile(model, lambda: keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    harness.fit(model, tf.data.Dataset.from_tensor_slices((x, y)).batch(2), epochs=2, steps_per_epoch=8, phase="head")
    # What the wait before the first step is for, then a reading at each epoch start and one per step: a line every
    # second step (12 s >= 10 s).
    assert lines[0] == "head: preparing the first step (tracing the model)"
    assert [line.split(", loss")[0] for line in lines[1:]] == [f"head: epoch {e}/2, step {s}/8 ({25 * s // 2}%)"
                                                              for e in (1, 2) for s in (2, 4, 6, 8)]
    assert lines[1].endswith(", 12 s")
