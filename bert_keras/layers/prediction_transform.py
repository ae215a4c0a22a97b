"""`PredictionTransform`: a token's dense layer, activation and LayerNorm before a task's output layer."""

import keras

from bert_keras.layers._utils import get_activation, serialize_activation

# The arguments a head's `transform=` dict may hold.
OPTIONS = ("activation", "use_bias", "use_norm_bias", "layer_norm_epsilon")


@keras.saving.register_keras_serializable(package="bert_keras")
class PredictionTransform(keras.layers.Layer):
    """Every token's `dense -> activation -> LayerNorm` at the hidden size, before a task's output layer.

    ModernBERT's task models put this (transformers' `ModernBertPredictionHead`,
    named `head`) between the encoder and their classifier; `bert_keras.heads.TokenClassificationHead`
    and `SpanHead` build one when given `transform=` (its arguments as a dict).

    Args:
        activation: str or callable. Defaults to `"gelu"`.
        use_bias: bool. Whether the dense layer has a bias. Defaults to `True`.
        use_norm_bias: bool. Whether the LayerNorm has a bias. Defaults to `True`.
        layer_norm_epsilon: float. Defaults to `1e-12`.
        kernel_initializer: str or initializer. Defaults to
            `TruncatedNormal(stddev=0.02)`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        x: float tensor `(..., hidden)`.

    Returns:
        A tensor of the shape of `x`.

    Example:
    >>> tuple(PredictionTransform(use_bias=False)(np.ones((2, 3, 8))).shape)
    (2, 3, 8)
    """

    def __init__(self, activation="gelu", use_bias=True, use_norm_bias=True, layer_norm_epsilon=1e-12,
                 kernel_initializer=None, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(use_bias, bool) or not isinstance(use_norm_bias, bool):
            raise ValueError(f"Received an invalid value for argument `use_bias` or `use_norm_bias`, expected a "
                             f"bool. Received: use_bias={use_bias!r}, use_norm_bias={use_norm_bias!r}")
        self.activation = activation
        self._activation_fn = get_activation(activation)
        self.use_bias = use_bias
        self.use_norm_bias = use_norm_bias
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer if kernel_initializer is not None else keras.initializers.TruncatedNormal(stddev=0.02)
        )

    def build(self, input_shape):
        hidden_size = input_shape[-1]
        self.dense = keras.layers.Dense(hidden_size, use_bias=self.use_bias,
                                        kernel_initializer=keras.initializers.get(keras.initializers.serialize(self.kernel_initializer)), dtype=self.dtype_policy,
                                        name="dense")
        self.dense.build(input_shape)
        self.layer_norm = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, center=self.use_norm_bias,
                                                          dtype=self.dtype_policy, name="layer_norm")
        self.layer_norm.build(input_shape)
        self.built = True

    def call(self, x):
        return self.layer_norm(self._activation_fn(self.dense(x)))  # (..., hidden)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def options(self):
        """The arguments a head's `transform=` takes to build this transform again (no initializer, no name)."""
        return {"activation": serialize_activation(self.activation), "use_bias": self.use_bias,
                "use_norm_bias": self.use_norm_bias, "layer_norm_epsilon": self.layer_norm_epsilon}

    @classmethod
    def from_options(cls, options, kernel_initializer, dtype):
        """A head's transform, named `transform`, from its `transform=` dict (`options()`); None for None."""
        if options is None:
            return None
        if not isinstance(options, dict) or set(options) - set(OPTIONS):
            raise ValueError(f"Received an invalid value for argument `transform`, expected None or a dict of "
                             f"PredictionTransform arguments among {list(OPTIONS)}. Received: transform={options!r}")
        return cls(**options, kernel_initializer=kernel_initializer, dtype=dtype, name="transform")

    def get_config(self):
        config = super().get_config()
        config.update(self.options())
        config["kernel_initializer"] = keras.initializers.serialize(self.kernel_initializer)
        return config
