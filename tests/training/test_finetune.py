import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import BertEncoder
from bert_keras._files import directory_under, staged_directory
from bert_keras.training import claim_backup, finetune
from bert_keras.training.backup import PHASE_KIND, SNAPSHOT_KIND, STATE_FILE
from bert_keras.optimization import BertAdamW, WarmupDecay, bert_optimizer

TINY = dict(vocab_size=30, num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16, max_sequence_length=8)
KEYS = ("input_word_ids", "input_mask", "input_type_ids")


def _classifier():
    encoder = BertEncoder(**TINY, dropout=0.0, attention_dropout=0.0)
    inputs = {k: keras.Input(shape=(None,), dtype="int32", name=k) for k in KEYS}
    logits = keras.layers.Dense(2, activation="softmax", name="head")(encoder(inputs)["pooled_output"])
    return keras.Model(inputs, logits), encoder


def _data(n=32, batch=8):
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 30, size=(n, 6)).astype("int32")
    ids[:, 0] = 2
    labels = (ids[:, 1] > 17).astype("int32")
    features = {"input_word_ids": ids, "input_mask": np.ones_like(ids), "input_type_ids": np.zeros_like(ids)}
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(batch)


def _snapshot(weights):
    return [w.numpy().copy() for w in weights]


def _changed(before, weights):
    return [not np.array_equal(a, w.numpy()) for a, w in zip(before, weights)]


class _PhaseProbe(keras.callbacks.Callback):
    """Records which weights changed by the end of each fit call."""

    def __init__(self, encoder, head):
        super().__init__()
        self.encoder, self.head, self.records = encoder, head, []

    def on_train_begin(self, logs=None):
        self.start = (_snapshot(self.encoder.weights), _snapshot(self.head.weights))

    def on_train_end(self, logs=None):
        self.records.append(
            (sum(_changed(self.start[0], self.encoder.weights)), sum(_changed(self.start[1], self.head.weights)))
        )


@pytest.mark.slow
def test_phase_one_trains_only_the_head_and_phase_two_the_encoder():
    model, encoder = _classifier()
    probe = _PhaseProbe(encoder, model.get_layer("head"))
    history = finetune(model, _data(), encoder=encoder, head_epochs=1, epochs=1, learning_rate=1e-3, callbacks=[probe], verbose=0)
    assert probe.records[0] == (0, 2)
    assert probe.records[1][0] == len(encoder.weights) and probe.records[1][1] == 2
    assert sorted(history.head) == ["accuracy", "loss"] and len(history.full["loss"]) == 1


@pytest.mark.slow
def test_learning_rate_follows_warmup_then_linear_decay():
    model, encoder = _classifier()
    rates = []

    class Recorder(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if encoder.trainable:
                rates.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

    finetune(model, _data(n=80, batch=8), encoder=encoder, head_epochs=1, epochs=2, learning_rate=2e-5, callbacks=[Recorder()], verbose=0)
    total, warmup = 20, 2
    expected = [2e-5 * s / warmup if s < warmup else 2e-5 * (1 - (s - warmup) / (total - warmup)) for s in range(total)]
    np.testing.assert_allclose(rates, expected, rtol=1e-5, atol=1e-12)
    assert rates[0] == 0.0 and rates[warmup] == pytest.approx(2e-5)


def test_optimizer_recipe():
    model, encoder = _classifier()
    optimizer = bert_optimizer(2e-5, total_steps=100)
    assert isinstance(optimizer, BertAdamW)
    assert optimizer.weight_decay == pytest.approx(0.01)
    assert optimizer.global_clipnorm == pytest.approx(1.0)
    decayed = {w.path for w in model.weights if optimizer._use_weight_decay(w)}
    excluded = {w.path for w in model.weights} - decayed
    assert all(name.endswith(("bias", "gamma", "beta")) for name in excluded)
    assert any(name.endswith("kernel") for name in decayed)
    assert any(name.endswith("embeddings") for name in decayed)
    assert not any(name.endswith(("bias", "gamma", "beta")) for name in decayed)
    # One rule by rank: what is excluded is exactly the variables of rank < 2.
    assert excluded == {w.path for w in model.weights if len(w.shape) < 2}


def test_schedule_values_and_errors():
    schedule = WarmupDecay(1e-4, total_steps=10, warmup_steps=4)
    assert [round(float(schedule(s)), 9) for s in (0, 2, 4, 7, 10, 12)] == [0.0, 5e-5, 1e-4, 5e-5, 0.0, 0.0]
    assert WarmupDecay.from_config(schedule.get_config()).get_config() == schedule.get_config()
    with pytest.raises(ValueError, match="warmup_steps=10"):
        WarmupDecay(1e-4, total_steps=10, warmup_steps=10)
    with pytest.raises(ValueError, match="total_steps=0"):
        WarmupDecay(1e-4, total_steps=0)


def test_unknown_steps_per_epoch_is_explained():
    model, encoder = _classifier()
    data = _data().repeat()
    with pytest.raises(ValueError, match="steps_per_epoch"):
        finetune(model, data, encoder=encoder, verbose=0)


def test_missing_encoder_is_explained():
    model, _ = _classifier()
    with pytest.raises(ValueError, match="Pass `encoder=`"):
        finetune(model, _data(), verbose=0)


@pytest.mark.slow
def test_interrupted_run_resumes(tmp_path):
    backup = str(tmp_path / "backup")

    class Interrupt(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if self.model.get_layer("head").trainable and getattr(self, "armed", False):
                raise KeyboardInterrupt

    model, encoder = _classifier()
    interrupt = Interrupt()

    class Arm(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            interrupt.armed = encoder.trainable

    with pytest.raises(KeyboardInterrupt):
        finetune(model, _data(), encoder=encoder, head_epochs=1, epochs=3, callbacks=[Arm(), interrupt], backup_dir=backup, verbose=0)
    assert os.path.exists(os.path.join(backup, "head", "epoch-0001", "model.weights.h5"))  # phase 1 is finished

    resumed, resumed_encoder = _classifier()
    history = finetune(resumed, _data(), encoder=resumed_encoder, head_epochs=1, epochs=3, backup_dir=backup, verbose=0)
    # Phase 1 is not redone, and phase 2 continues after its first (completed) epoch; the histories are whole
    # (the epochs of the interrupted run come from the backup).
    assert len(history.full["loss"]) == 3
    assert int(resumed.optimizer.iterations.numpy()) == 3 * 4
    assert len(history.head["loss"]) == 1


@pytest.mark.slow
def test_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(tmp_path):
    def shuffled():  # passes in an order that depends on their index: a resumed run must skip the done ones
        features, labels = next(iter(_data(n=32, batch=32)))
        data = tf.data.Dataset.from_tensor_slices((features, labels))
        return tf.data.Dataset.range(100).flat_map(lambda k: data.shuffle(32, seed=k, reshuffle_each_iteration=False).batch(8))

    class Interrupt(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if encoder.trainable and epoch == 1:
                raise KeyboardInterrupt

    def build():
        keras.utils.set_random_seed(11)
        return _classifier()

    model, encoder = build()
    straight = finetune(model, shuffled(), encoder=encoder, head_epochs=1, epochs=3, learning_rate=1e-3, steps_per_epoch=4,
                        backup_dir=str(tmp_path / "a"), verbose=0)
    expected = [w.numpy() for w in model.weights]

    model, encoder = build()
    with pytest.raises(KeyboardInterrupt):
        finetune(model, shuffled(), encoder=encoder, head_epochs=1, epochs=3, learning_rate=1e-3, steps_per_epoch=4,
                 callbacks=[Interrupt()], backup_dir=str(tmp_path / "b"), verbose=0)
    model, encoder = build()
    history = finetune(model, shuffled(), encoder=encoder, head_epochs=1, epochs=3, learning_rate=1e-3, steps_per_epoch=4,
                       backup_dir=str(tmp_path / "b"), verbose=0)
    # Epochs 1 and 2 were backed up before the interruption, with their history: the whole phase's equals
    # the uninterrupted run's, epoch by epoch.
    assert history.full["loss"] == straight.full["loss"] and len(history.full["loss"]) == 3
    for ours, theirs in zip(model.weights, expected):
        np.testing.assert_allclose(ours.numpy(), theirs, atol=1e-5)


def test_a_torn_backup_is_a_clear_error(tmp_path):
    backup = tmp_path / "backup"
    claim_backup(str(backup))  # a backup this package made, damaged since
    _damaged_snapshot(backup / "full")
    model, encoder = _classifier()
    with pytest.raises(ValueError, match=r"backup in .*full is torn: .*state.json cannot be read"):
        finetune(model, _data(), encoder=encoder, head_epochs=0, epochs=1, backup_dir=str(backup), verbose=0)


def _damaged_snapshot(phase_dir):
    """A whole (marked) snapshot of epoch 1 whose state file was emptied afterwards, in a phase folder made as the
    backup makes it (marked)."""
    directory_under(str(phase_dir.parent), phase_dir.name, kind=PHASE_KIND)
    with staged_directory(str(phase_dir / "epoch-0001"), kind=SNAPSHOT_KIND) as staging:
        open(os.path.join(staging, STATE_FILE), "w").close()
