"""Gated feed-forward network (GLU variants, Shazeer 2020): GeGLU as in ModernBERT."""

import keras
from keras import ops

from bert_keras._checks import check_positive_int, check_rate
from bert_keras.layers._utils import clone_initializer, get_activation, serialize_activation
from bert_keras.layers.dropout import Dropout
from bert_keras.layers.lora_dense import LoraDense


def _check_bool(name, value):
    if not isinstance(value, bool):
        raise ValueError(f"Received an invalid value for argument `{name}`, expected a bool. Received: {name}={value!r}")
    return value


@keras.saving.register_keras_serializable(package="bert_keras")
class GatedFeedForward(keras.layers.Layer):
    """Position-wise gated feed-forward network: `output(act(x W_in) * (x W_gate))`.

    One dense layer (`intermediate`, `hidden -> 2 * intermediate_size`: the
    two projections as one GEMM, in ModernBERT's layout `Wi`) gives the input
    half (its first `intermediate_size` features) and the gate half (the
    rest); the activation of the input half times the gate goes through
    `output` (`intermediate_size -> hidden`). With `"gelu"` this is GeGLU.
    Both are `LoraDense` layers, which `bert_keras.lora.enable_lora` can give
    LoRA adapters.

    Args:
        intermediate_size: int. Width of each half (1152 in ModernBERT-base).
        activation: str or callable. Applied to the input half: `"gelu"`
            (exact, as ModernBERT's `hidden_activation="gelu"`),
            `"gelu_approximate"`, `"relu"` or a callable. Defaults to `"gelu"`.
        use_bias: bool. Whether both dense layers have biases (ModernBERT's
            `mlp_bias`). Defaults to `False`.
        dropout: float. Dropout on the gated features before `output`.
            Defaults to `0.0`.
        kernel_initializer: str or initializer. Defaults to `"glorot_uniform"`.
        bias_initializer: str or initializer. Defaults to `"zeros"`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        inputs: float tensor `(..., hidden)`.
        training: bool. Whether dropout is applied.

    Returns:
        A tensor of the input's shape.

    Example:
    >>> layer = GatedFeedForward(intermediate_size=6)
    >>> tuple(layer(np.zeros((2, 4, 8))).shape), tuple(layer.intermediate_dense.kernel.shape)
    ((2, 4, 8), (8, 12))
    """

    def __init__(
        self,
        intermediate_size,
        activation="gelu",
        use_bias=False,
        dropout=0.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.intermediate_size = check_positive_int("intermediate_size", intermediate_size)
        self.activation = activation
        self._activation_fn = get_activation(activation)
        self.use_bias = _check_bool("use_bias", use_bias)
        self.dropout = check_rate("dropout", dropout)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, input_shape):
        hidden_size = input_shape[-1]
        kwargs = dict(use_bias=self.use_bias, dtype=self.dtype_policy)
        self.intermediate_dense = LoraDense(
            2 * self.intermediate_size,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            name="intermediate",
            **kwargs,
        )
        self.intermediate_dense.build(input_shape)
        self.output_dense = LoraDense(
            hidden_size,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            name="output",
            **kwargs,
        )
        self.output_dense.build(tuple(input_shape[:-1]) + (self.intermediate_size,))
        self.gate_dropout = Dropout(self.dropout, dtype=self.dtype_policy, name="gate_dropout")
        self.built = True

    def call(self, inputs, training=None):
        both = self.intermediate_dense(inputs)  # (..., 2 * intermediate)
        hidden, gate = ops.split(both, 2, axis=-1)  # each (..., intermediate)
        gated = self._activation_fn(hidden) * gate  # (..., intermediate)
        return self.output_dense(self.gate_dropout(gated, training=training))  # (..., hidden)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_size": self.intermediate_size,
                "activation": serialize_activation(self.activation),
                "use_bias": self.use_bias,
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
