"""Position-wise feed-forward network."""

import keras

from bert_keras._checks import check_positive_int
from bert_keras.layers._utils import clone_initializer, get_activation, serialize_activation
from bert_keras.layers.lora_dense import LoraDense


@keras.saving.register_keras_serializable(package="bert_keras")
class FeedForward(keras.layers.Layer):
    """Position-wise feed-forward network: `dense -> activation -> dense`.

    Applied to every position independently: `intermediate` maps the hidden
    size to `intermediate_size`, the activation follows, and `output` maps
    back to the hidden size of the input. Both are `LoraDense` layers, which
    `bert_keras.lora.enable_lora` can give LoRA adapters.

    Args:
        intermediate_size: int. Width of the inner layer (3072 in BERT-Base).
        activation: str or callable. `"gelu"` (exact, erf-based, as in BERT),
            `"gelu_approximate"` (tanh approximation), `"relu"`, or a callable.
            Defaults to `"gelu"`.
        kernel_initializer: str or initializer. Defaults to `"glorot_uniform"`.
        bias_initializer: str or initializer. Defaults to `"zeros"`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        inputs: float tensor `(..., hidden)`.

    Returns:
        A tensor of the input's shape.

    Example:
    >>> tuple(FeedForward(intermediate_size=32)(np.zeros((2, 4, 8))).shape)
    (2, 4, 8)
    """

    def __init__(
        self,
        intermediate_size,
        activation="gelu",
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.intermediate_size = check_positive_int("intermediate_size", intermediate_size)
        self.activation = activation
        self._activation_fn = get_activation(self.activation)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, input_shape):
        hidden_size = input_shape[-1]
        self.intermediate_dense = LoraDense(
            self.intermediate_size,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name="intermediate",
        )
        self.intermediate_dense.build(input_shape)
        self.output_dense = LoraDense(
            hidden_size,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name="output",
        )
        self.output_dense.build(tuple(input_shape[:-1]) + (self.intermediate_size,))
        self.built = True

    def call(self, inputs):
        hidden = self._activation_fn(self.intermediate_dense(inputs))  # (..., intermediate)
        return self.output_dense(hidden)  # (..., hidden)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_size": self.intermediate_size,
                "activation": serialize_activation(self.activation),
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
