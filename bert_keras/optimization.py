"""BERT's optimizer recipe, the one used by fine-tuning and pre-training.

AdamW (epsilon 1e-6, weight decay 0.01, global gradient-norm clipping at 1.0)
on a schedule that warms up linearly from 0 to the peak rate and then decays
to the end rate, linearly (fine-tuning, as in BERT) or on a cosine. Weight
decay skips every variable of rank below 2 (biases, LayerNorm scales and
offsets): one rule by shape, as nanoGPT's `configure_optimizers`, instead of
lists of names that drift apart.
"""

import math

import keras
import tensorflow as tf

from bert_keras._platform.keras_private import GlobalClipAdamW
from bert_keras._checks import check_choice, check_float, check_int, check_positive_float, check_positive_int

DECAYS = ("linear", "cosine")


@keras.saving.register_keras_serializable(package="bert_keras")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak_learning_rate`, then linear or cosine decay to `end_learning_rate`.

    `lr(step) = peak * step / warmup_steps` for `step < warmup_steps`; then,
    with `p = (step - warmup_steps) / (total_steps - warmup_steps)` capped at
    1, `peak - (peak - end) * p` (linear) or
    `end + (peak - end) * (1 + cos(pi * p)) / 2` (cosine). `step` counts
    optimizer updates from 0.

    Args:
        peak_learning_rate: float. The rate reached at the end of warmup.
        total_steps: int. Steps of the whole schedule.
        warmup_steps: int. Steps of the warmup. Defaults to `0`.
        end_learning_rate: float. Defaults to `0.0`.
        decay: str. `"linear"` or `"cosine"`. Defaults to `"linear"`.

    Example:
    >>> schedule = WarmupDecay(2e-5, total_steps=100, warmup_steps=10)
    >>> [round(float(schedule(step)), 10) for step in (5, 10, 55, 100)]
    [1e-05, 2e-05, 1e-05, 0.0]
    >>> cosine = WarmupDecay(2e-5, total_steps=100, warmup_steps=10, decay="cosine")
    >>> [round(float(cosine(step)), 10) for step in (5, 10, 55, 100)]
    [1e-05, 2e-05, 1e-05, 0.0]
    """

    def __init__(self, peak_learning_rate, total_steps, warmup_steps=0, end_learning_rate=0.0, decay="linear"):
        self.peak_learning_rate = check_positive_float("peak_learning_rate", peak_learning_rate)
        self.total_steps = check_positive_int("total_steps", total_steps)
        self.warmup_steps = check_int("warmup_steps", warmup_steps, minimum=0, maximum=self.total_steps - 1)
        self.end_learning_rate = check_float("end_learning_rate", end_learning_rate, 0, self.peak_learning_rate)
        self.decay = check_choice("decay", decay, DECAYS)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        peak, end = self.peak_learning_rate, self.end_learning_rate
        warmup = peak * step / max(self.warmup_steps, 1)
        progress = tf.minimum((step - self.warmup_steps) / max(self.total_steps - self.warmup_steps, 1), 1.0)
        if self.decay == "linear":
            decayed = peak - (peak - end) * progress
        else:
            decayed = end + (peak - end) * 0.5 * (1.0 + tf.cos(math.pi * progress))
        return tf.where(step < self.warmup_steps, warmup, decayed)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "end_learning_rate": self.end_learning_rate,
            "decay": self.decay,
        }


@keras.saving.register_keras_serializable(package="bert_keras")
class BertAdamW(GlobalClipAdamW):
    """`keras.optimizers.AdamW` that never decays variables of rank below 2 (biases, LayerNorm).

    The rule goes by shape, so it holds for any model (our layers, Hub
    modules, a user's head) and travels with the optimizer's config.
    Names excluded with `exclude_from_weight_decay` are excluded as well.
    Under several replicas, `global_clipnorm` clips the norm of the whole
    batch's gradient, as on one replica (the overrides that do both are in
    `bert_keras._platform.keras_private.GlobalClipAdamW`: Keras has no public hook).
    """




def bert_optimizer(
    learning_rate,
    total_steps,
    warmup_steps=None,
    warmup_fraction=0.1,
    decay="linear",
    weight_decay=0.01,
    clipnorm=1.0,
):
    """BERT's AdamW on a warmup + decay schedule.

    Args:
        learning_rate: float. The peak rate (2e-5 for fine-tuning, 1e-4 for pre-training).
        total_steps: int. Optimizer steps of the run.
        warmup_steps: int, optional. Steps of the warmup; by default
            `warmup_fraction * total_steps`.
        warmup_fraction: float in [0, 1). Defaults to `0.1`.
        decay: str. `"linear"` (fine-tuning) or `"cosine"`. Defaults to `"linear"`.
        weight_decay: float. Decoupled weight decay on variables of rank >= 2. Defaults to `0.01`.
        clipnorm: float or None. Global gradient-norm clip. Defaults to `1.0`.

    Returns:
        A `BertAdamW`.

    Example:
    >>> optimizer = bert_optimizer(2e-5, total_steps=1000)
    >>> type(optimizer).__name__, optimizer.weight_decay, optimizer.global_clipnorm
    ('BertAdamW', 0.01, 1.0)
    """
    check_positive_int("total_steps", total_steps)
    if warmup_steps is None:
        warmup_steps = int(check_float("warmup_fraction", warmup_fraction, 0, 1, include_maximum=False) * total_steps)
    warmup_steps = min(check_int("warmup_steps", warmup_steps, minimum=0), total_steps - 1)
    schedule = WarmupDecay(learning_rate, total_steps, warmup_steps=warmup_steps, decay=decay)
    return BertAdamW(learning_rate=schedule, weight_decay=weight_decay, global_clipnorm=clipnorm, epsilon=1e-6)
