"""Dropout that draws 16 random bits per element instead of 32.

On a CPU, drawing the random numbers is most of what dropout costs: in a
MiniLM-L6 training step (batch 32, seq 128) Keras' dropout spent about 210 ms
of 1.6 s in `StatelessRandomUniformV2`, most of it on the attention
probabilities (`batch x heads x seq x seq` per layer). Each 32-bit draw here
decides two elements (its two 16-bit halves), which halves that cost; the rate
is rounded to a multiple of 1/65536 (0.1 becomes 0.100006).
"""

import keras
import tensorflow as tf

_HALF_RANGE = 1 << 15  # the 16-bit halves are int16: uniform over [-32768, 32767]


def dropout_keep_mask(shape, rate, seed):
    """A boolean mask of `shape`, each entry True with probability `1 - rate`.

    Args:
        shape: 1-D int tensor or list, the mask's shape.
        rate: float in [0, 1), the probability of False (rounded to a multiple
            of 1/65536).
        seed: int32 tensor of shape `(2,)` for the stateless generator.

    Returns:
        bool tensor of `shape`.
    """
    size = tf.reduce_prod(shape)
    bits = tf.random.stateless_uniform(
        [(size + 1) // 2], seed=seed, dtype=tf.int32, minval=None, maxval=None
    )  # (ceil(size / 2),) uniform 32-bit
    halves = tf.reshape(tf.bitcast(bits, tf.int16), (-1,))[:size]  # (size,) uniform 16-bit
    threshold = round(rate * 2 * _HALF_RANGE) - _HALF_RANGE
    return tf.reshape(halves >= threshold, shape)


def next_seed(seed_generator):
    """The next int32 `(2,)` seed of a `keras.random.SeedGenerator` (as Keras' own ops use it)."""
    seed = seed_generator.next()
    if seed.dtype == tf.int32:
        return seed
    return tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)


@keras.saving.register_keras_serializable(package="bert_keras")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with 16 random bits per element (see the module docstring).

    Same arguments, config and semantics as `keras.layers.Dropout`; the rate is
    rounded to a multiple of 1/65536. With `noise_shape` it falls back to the
    Keras implementation.

    Example:
    >>> layer = Dropout(0.5, seed=1)
    >>> y = layer(np.ones((1000,), "float32"), training=True)
    >>> sorted(set(np.asarray(y).tolist()))
    [0.0, 2.0]
    """

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        if self.noise_shape is not None:
            return super().call(inputs, training=training)
        keep = dropout_keep_mask(tf.shape(inputs), self.rate, next_seed(self.seed_generator))
        scale = tf.cast(1.0 / (1.0 - self.rate), inputs.dtype)
        return tf.where(keep, inputs * scale, tf.zeros_like(inputs))
