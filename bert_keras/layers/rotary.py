"""Rotary position embedding (RoPE, Su et al., 2021): positions as rotations of query and key features."""

import keras
import numpy as np
from keras import ops

from bert_keras._checks import check_positive_float


def rotary_inverse_frequencies(head_size, theta):
    """The `head_size // 2` angular frequencies of RoPE, `theta ** (-2j / head_size)` for `j = 0, 1, ...`.

    Computed in float64 and rounded once to float32, so that every framework
    that rounds the same exact values agrees on them.

    Args:
        head_size: int. The (even) size of a head.
        theta: float. The base wavelength (10,000 in RoFormer; ModernBERT:
            160,000 for global layers, 10,000 for local ones).

    Returns:
        float32 numpy array `(head_size // 2,)`.
    """
    exponents = np.arange(0, head_size, 2, dtype=np.float64) / head_size
    return (1.0 / theta**exponents).astype(np.float32)


@keras.saving.register_keras_serializable(package="bert_keras")
class RotaryEmbedding(keras.layers.Layer):
    """Rotary position embedding: rotates pairs of features by angles proportional to the position.

    For a head vector `x` of size `d` at position `p`, the features `j` and
    `j + d / 2` (`j < d / 2`, the "rotate half" pairing of GPT-NeoX, Llama and
    ModernBERT) are rotated by the angle `p * theta ** (-2j / d)`:
    `x'[j] = x[j] cos - x[j + d/2] sin`, `x'[j + d/2] = x[j + d/2] cos + x[j] sin`.
    Applied to queries and keys, the dot product of a query at `p` and a key
    at `q` depends on `p - q` only. The layer has no weights.

    Args:
        theta: float. The base wavelength of the rotations. Defaults to `10000.0`.
        sequence_axis: int. The axis of positions in the input. Defaults to `-2`
            (inputs `(batch, heads, seq, head_size)`).
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        inputs: float tensor whose last axis is an even head size, with the
            positions on `sequence_axis`: `(batch, heads, seq, head_size)` by default.
        start_index: int or scalar tensor. The position of the first element.
            Defaults to `0`.

    Returns:
        A tensor of the input's shape and dtype (the rotation runs in float32).

    Example:
    >>> layer = RotaryEmbedding(theta=10000.0)
    >>> x = np.ones((1, 1, 3, 4), dtype="float32")
    >>> rotated = layer(x)
    >>> bool(np.allclose(rotated[0, 0, 0], x[0, 0, 0]))  # position 0 is not rotated
    True
    """

    def __init__(self, theta=10000.0, sequence_axis=-2, **kwargs):
        super().__init__(**kwargs)
        self.theta = check_positive_float("theta", theta)
        if not isinstance(sequence_axis, int) or isinstance(sequence_axis, bool):
            raise ValueError(f"Received an invalid value for argument `sequence_axis`, expected an integer axis. "
                             f"Received: sequence_axis={sequence_axis!r}")
        self.sequence_axis = sequence_axis
        self.supports_masking = False

    def build(self, input_shape):
        head_size = input_shape[-1]
        if head_size is None or head_size % 2:
            raise ValueError(
                "The last dimension of the input to RotaryEmbedding must be a known even head size. "
                f"Received: input_shape={input_shape}"
            )
        self.head_size = head_size
        self.built = True

    def angles(self, seq_length, start_index=0):
        """`(cos, sin)`, each float32 `(seq, head_size)`: the rotation of every position, both halves alike."""
        frequencies = ops.convert_to_tensor(rotary_inverse_frequencies(self.head_size, self.theta))
        positions = ops.cast(ops.arange(seq_length) + start_index, "float32")  # (seq,)
        angles = ops.einsum("s,f->sf", positions, frequencies)  # (seq, head_size / 2)
        angles = ops.concatenate([angles, angles], axis=-1)  # (seq, head_size)
        return ops.cos(angles), ops.sin(angles)

    def call(self, inputs, start_index=0):
        rank = len(inputs.shape)
        axis = self.sequence_axis % rank
        if axis == rank - 1:
            raise ValueError(f"`sequence_axis` must not be the feature axis. Received: sequence_axis={self.sequence_axis}")
        cos, sin = self.angles(ops.shape(inputs)[axis], start_index)  # (seq, head_size)
        # Broadcast (seq, head_size) over every axis between the positions and the features.
        for _ in range(rank - 2 - axis):
            cos, sin = ops.expand_dims(cos, 1), ops.expand_dims(sin, 1)
        x = ops.cast(inputs, "float32")
        first, second = ops.split(x, 2, axis=-1)  # each (..., head_size / 2)
        rotated_half = ops.concatenate([-second, first], axis=-1)  # (..., head_size)
        return ops.cast(x * cos + rotated_half * sin, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"theta": self.theta, "sequence_axis": self.sequence_axis})
        return config
