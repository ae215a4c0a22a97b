"""Fine-tuning: freeze -> adapt -> unfreeze, with BERT's optimizer recipe.

Phase 1 trains the head with the encoder frozen (Adam at `head_learning_rate`).
Phase 2 unfreezes the encoder and trains everything with AdamW at
`learning_rate` (2e-5), linear warmup over the first 10% of the steps then
linear decay to zero, weight decay 0.01 on all weights but LayerNorm
parameters and biases, and global gradient-norm clipping at 1.0. The model is
recompiled between the phases. Models and optimizers are built by the caller
under a `tf.distribute` strategy scope; compiling here happens in that same
scope.
"""

import dataclasses
import json
import logging
import os

import keras
import tensorflow as tf

logger = logging.getLogger(__name__)

# Variables whose names match are not weight-decayed (BERT's AdamWeightDecay rule).
NO_DECAY_NAMES = ["bias", "gamma", "beta", "layer_norm", "LayerNorm"]


@keras.saving.register_keras_serializable(package="bert_keras")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak_learning_rate`, then linear decay to `end_learning_rate`.

    `lr(step) = peak * step / warmup_steps` for `step < warmup_steps`, then
    `peak - (peak - end) * (step - warmup_steps) / (total_steps - warmup_steps)`,
    and `end` after `total_steps`. `step` counts optimizer updates from 0.

    Args:
        peak_learning_rate: float. The rate reached at the end of warmup.
        total_steps: int. Steps of the whole schedule.
        warmup_steps: int. Steps of the warmup. Defaults to `0`.
        end_learning_rate: float. Defaults to `0.0`.

    Example:
    >>> schedule = WarmupLinearDecay(2e-5, total_steps=100, warmup_steps=10)
    >>> float(schedule(5)), float(schedule(10)), float(schedule(55))
    (1e-05, 2e-05, 1e-05)
    """

    def __init__(self, peak_learning_rate, total_steps, warmup_steps=0, end_learning_rate=0.0):
        if not peak_learning_rate > 0:
            raise ValueError(
                "Received an invalid value for argument `peak_learning_rate`, expected a positive "
                f"float. Received: peak_learning_rate={peak_learning_rate!r}"
            )
        if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps <= 0:
            raise ValueError(
                "Received an invalid value for argument `total_steps`, expected a positive integer. "
                f"Received: total_steps={total_steps!r}"
            )
        if not 0 <= warmup_steps < total_steps:
            raise ValueError(
                "Received an invalid value for argument `warmup_steps`, expected an integer in "
                f"[0, total_steps={total_steps}). Received: warmup_steps={warmup_steps!r}"
            )
        self.peak_learning_rate = float(peak_learning_rate)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.end_learning_rate = float(end_learning_rate)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        peak, end = self.peak_learning_rate, self.end_learning_rate
        warmup = peak * step / max(self.warmup_steps, 1)
        progress = (step - self.warmup_steps) / max(self.total_steps - self.warmup_steps, 1)
        decay = peak - (peak - end) * tf.minimum(progress, 1.0)
        return tf.where(step < self.warmup_steps, warmup, decay)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "end_learning_rate": self.end_learning_rate,
        }


def bert_adamw(learning_rate, total_steps, warmup_fraction=0.1, weight_decay=0.01, clipnorm=1.0):
    """AdamW with BERT's recipe: warmup + linear decay, no decay on LayerNorm and biases, clipping.

    Args:
        learning_rate: float. Peak learning rate (2e-5 for fine-tuning).
        total_steps: int. Number of optimizer steps of the run.
        warmup_fraction: float. Share of the steps spent warming up. Defaults to `0.1`.
        weight_decay: float. Defaults to `0.01`.
        clipnorm: float. Global gradient-norm clip. Defaults to `1.0`.

    Returns:
        A `keras.optimizers.AdamW`.
    """
    if not 0 <= warmup_fraction < 1:
        raise ValueError(
            "Received an invalid value for argument `warmup_fraction`, expected a float in [0, 1). "
            f"Received: warmup_fraction={warmup_fraction!r}"
        )
    schedule = WarmupLinearDecay(learning_rate, total_steps, warmup_steps=int(warmup_fraction * total_steps))
    optimizer = keras.optimizers.AdamW(
        learning_rate=schedule, weight_decay=weight_decay, global_clipnorm=clipnorm, epsilon=1e-6
    )
    optimizer.exclude_from_weight_decay(var_names=NO_DECAY_NAMES)
    return optimizer


@dataclasses.dataclass
class FineTuneHistory:
    """The Keras histories of both phases (`history.history` dicts)."""

    head: dict
    full: dict


def _steps_per_epoch(data, steps_per_epoch):
    if steps_per_epoch is not None:
        return int(steps_per_epoch)
    if isinstance(data, tf.data.Dataset):
        cardinality = int(data.cardinality())
        if cardinality > 0:
            return cardinality
    raise ValueError(
        "Cannot tell the number of steps per epoch of `train_data` (the learning-rate schedule needs "
        "it). Pass a batched tf.data.Dataset of known size, or `steps_per_epoch`."
    )


def _find_encoder(model, encoder):
    if encoder is not None:
        return encoder
    found = getattr(model, "encoder", None)
    if found is None:
        raise ValueError(
            "Pass `encoder=`: the layer or sub-model to freeze in phase 1 (e.g. the "
            "bert_keras.hub.KerasLayer or BertEncoder inside the model). The model has no `.encoder`."
        )
    return found


def finetune(
    model,
    train_data,
    validation_data=None,
    *,
    encoder=None,
    loss="sparse_categorical_crossentropy",
    metrics=("accuracy",),
    head_epochs=1,
    head_learning_rate=1e-3,
    epochs=2,
    learning_rate=2e-5,
    warmup_fraction=0.1,
    weight_decay=0.01,
    clipnorm=1.0,
    steps_per_epoch=None,
    callbacks=None,
    backup_dir=None,
    verbose="auto",
):
    """Fine-tunes a classifier in two phases: head only, then everything.

    Args:
        model: a compiled-or-not `keras.Model` (e.g. string input -> Hub
            preprocess -> Hub encoder -> Dense), built under the strategy scope.
        train_data: a batched `tf.data.Dataset` of `(inputs, labels)`.
        validation_data: optional dataset for `fit`'s validation.
        encoder: the layer to freeze in phase 1; defaults to `model.encoder`.
        loss, metrics: passed to `compile` in both phases.
        head_epochs: int. Epochs of phase 1 (0 skips it). Defaults to `1`.
        head_learning_rate: float. Adam's rate in phase 1. Defaults to `1e-3`.
        epochs: int. Epochs of phase 2. Defaults to `2`.
        learning_rate: float. Peak AdamW rate of phase 2. Defaults to `2e-5`.
        warmup_fraction, weight_decay, clipnorm: BERT's recipe (0.1, 0.01, 1.0).
        steps_per_epoch: int, optional. Needed when `train_data` has unknown size.
        callbacks: list of Keras callbacks, used in both phases.
        backup_dir: str, optional. Makes the run resumable: each phase backs
            up with `keras.callbacks.BackupAndRestore`, and a finished phase 1
            is recorded so that a rerun continues where the last one stopped.
        verbose: passed to `fit`.

    Returns:
        `FineTuneHistory` with both phases' histories.
    """
    encoder = _find_encoder(model, encoder)
    steps = _steps_per_epoch(train_data, steps_per_epoch)
    callbacks = list(callbacks or [])
    metrics = list(metrics)
    fit_kwargs = dict(validation_data=validation_data, verbose=verbose)
    if isinstance(train_data, tf.data.Dataset):
        fit_kwargs["shuffle"] = False  # a dataset brings its own order
    if steps_per_epoch is not None:
        fit_kwargs["steps_per_epoch"] = steps

    head_history = _run_head_phase(
        model, encoder, train_data, loss, metrics, head_epochs, head_learning_rate, callbacks, backup_dir, fit_kwargs
    )

    encoder.trainable = True
    model.compile(
        optimizer=bert_adamw(learning_rate, epochs * steps, warmup_fraction, weight_decay, clipnorm),
        loss=loss,
        metrics=metrics,
    )
    logger.info("Phase 2: encoder unfrozen, AdamW peak %g over %d steps", learning_rate, epochs * steps)
    phase_callbacks = _backup(backup_dir, "full") + callbacks
    full = model.fit(train_data, epochs=epochs, callbacks=phase_callbacks, **fit_kwargs)
    return FineTuneHistory(head=head_history, full=dict(full.history))


def _backup(backup_dir, phase):
    if backup_dir is None:
        return []
    return [keras.callbacks.BackupAndRestore(os.path.join(backup_dir, phase))]


def _run_head_phase(model, encoder, data, loss, metrics, epochs, learning_rate, callbacks, backup_dir, fit_kwargs):
    done_weights = done_history = None
    if backup_dir is not None:
        os.makedirs(backup_dir, exist_ok=True)
        done_weights = os.path.join(backup_dir, "head_phase.weights.h5")
        done_history = os.path.join(backup_dir, "head_phase.history.json")
        if os.path.exists(done_weights) and os.path.exists(done_history):
            logger.info("Phase 1 finished in an earlier run; restoring its weights from %s", done_weights)
            model.load_weights(done_weights)
            with open(done_history) as f:
                return json.load(f)
    if epochs <= 0:
        return {}
    encoder.trainable = False
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss=loss, metrics=metrics)
    logger.info("Phase 1: encoder frozen, head trained with Adam at %g", learning_rate)
    history = model.fit(data, epochs=epochs, callbacks=_backup(backup_dir, "head") + callbacks, **fit_kwargs)
    history = {key: [float(v) for v in values] for key, values in history.history.items()}
    if done_weights is not None:
        model.save_weights(done_weights)
        with open(done_history, "w") as f:
            json.dump(history, f)
    return history


def hub_classifier(preprocess, encoder, num_classes, seq_length=None, text_pairs=False, dropout=0.1, trainable=False):
    """The reference workflow's model: strings -> Hub preprocess -> Hub encoder -> dropout -> softmax.

    Args:
        preprocess: handle (path or URL) of a Hub preprocess module.
        encoder: handle of a Hub encoder module.
        num_classes: int.
        seq_length: optional int. Pack to this length (with
            `bert_keras.hub.PreprocessLayer`) instead of the module's default.
        text_pairs: bool. Two string inputs (`text`, `text_pair`) packed as
            segments A and B. Defaults to `False`.
        dropout: float. Dropout on `pooled_output`. Defaults to `0.1`.
        trainable: bool. Whether the encoder starts trainable. Defaults to `False`.

    Returns:
        `(model, encoder_layer)`: the `keras.Model` and the encoder's
        `bert_keras.hub.KerasLayer` (to freeze or unfreeze).
    """
    from bert_keras import hub

    encoder_layer = hub.KerasLayer(encoder, trainable=trainable, name="encoder")
    texts = [keras.Input(shape=(), dtype="string", name="text")]
    if text_pairs:
        texts.append(keras.Input(shape=(), dtype="string", name="text_pair"))
    if seq_length is None and not text_pairs:
        encoder_inputs = hub.KerasLayer(preprocess, name="preprocess")(texts[0])
    else:
        pack = hub.PreprocessLayer(preprocess, seq_length=seq_length, name="preprocess")
        encoder_inputs = pack(texts if text_pairs else texts[0])
    pooled = encoder_layer(encoder_inputs)["pooled_output"]
    pooled = keras.layers.Dropout(dropout, name="dropout")(pooled)
    probabilities = keras.layers.Dense(num_classes, activation="softmax", name="classifier")(pooled)
    model = keras.Model(texts if text_pairs else texts[0], probabilities, name="bert_classifier")
    return model, encoder_layer
