"""Heads that turn encoder outputs into task logits."""

import keras
from keras import ops

from bert_keras.layers._utils import (
    check_positive_int,
    deserialize_activation,
    get_activation,
    serialize_activation,
)


def _default_initializer():
    return keras.initializers.TruncatedNormal(stddev=0.02)


@keras.saving.register_keras_serializable(package="bert_keras")
class MaskedLMHead(keras.layers.Layer):
    """BERT's masked-language-model head, with the output tied to the word embeddings.

    Gathers the hidden states at `masked_lm_positions`, transforms them
    (`dense -> activation -> LayerNorm`, all of width `hidden`) and scores every
    vocabulary entry: `logits = x @ embeddings.T + output_bias`.

    Args:
        vocab_size: int. Number of vocabulary entries scored.
        embedding: optional `keras.layers.Embedding` of shape `(vocab_size, hidden)`
            whose table is the output projection (weight tying, as in BERT). It is
            not serialized: a task passes its encoder's embedding again when it is
            rebuilt. If `None`, the head owns an untied table `decoder_embeddings`
            of the same shape. Defaults to `None`.
        activation: str or callable. Activation of the transform: `"gelu"`
            (exact), `"gelu_approximate"`, `"relu"` or a callable. Defaults to `"gelu"`.
        layer_norm_epsilon: float. Defaults to `1e-12`.
        kernel_initializer: str or initializer. Defaults to
            `TruncatedNormal(stddev=0.02)`.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        sequence_output: float tensor `(batch, seq, hidden)`.
        masked_lm_positions: optional int tensor `(batch, num_predictions)`;
            if omitted, every position is scored.

    Returns:
        Logits `(batch, num_predictions, vocab_size)` (or `(batch, seq, vocab_size)`).

    Example:
    >>> head = MaskedLMHead(vocab_size=50)
    >>> head(np.zeros((2, 7, 16)), np.array([[1, 3], [2, 0]])).shape
    (2, 2, 50)
    """

    def __init__(
        self,
        vocab_size,
        embedding=None,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        kernel_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        if embedding is not None:
            input_dim = getattr(embedding, "input_dim", None)
            if input_dim is None:
                raise ValueError(
                    "Received an invalid value for argument `embedding`, expected a "
                    f"keras.layers.Embedding. Received: embedding={embedding!r}"
                )
            if input_dim != vocab_size:
                raise ValueError(
                    f"The tied `embedding` has {input_dim} rows but `vocab_size` is "
                    f"{vocab_size}. Received: vocab_size={vocab_size}, embedding.input_dim={input_dim}"
                )
        self.embedding = embedding
        self.activation = deserialize_activation(activation)
        self._activation_fn = get_activation(self.activation)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer if kernel_initializer is not None else _default_initializer()
        )

    def build(self, sequence_output_shape, masked_lm_positions_shape=None):
        hidden_size = sequence_output_shape[-1]
        if self.embedding is not None and self.embedding.output_dim != hidden_size:
            raise ValueError(
                f"The tied embedding has width {self.embedding.output_dim} but the "
                f"sequence output has hidden size {hidden_size}. Received: "
                f"sequence_output_shape={tuple(sequence_output_shape)}"
            )
        self.transform_dense = keras.layers.Dense(
            hidden_size,
            kernel_initializer=keras.initializers.get(keras.initializers.serialize(self.kernel_initializer)),
            dtype=self.dtype_policy,
            name="transform",
        )
        self.transform_dense.build((None, None, hidden_size))
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
        )
        self.layer_norm.build((None, None, hidden_size))
        if self.embedding is None:
            self.decoder_embeddings = self.add_weight(
                shape=(self.vocab_size, hidden_size),
                initializer=keras.initializers.get(keras.initializers.serialize(self.kernel_initializer)),
                name="decoder_embeddings",
            )
        self.output_bias = self.add_weight(shape=(self.vocab_size,), initializer="zeros", name="output_bias")
        self.built = True

    def _output_table(self):
        if self.embedding is not None:
            return self.embedding.embeddings
        return self.decoder_embeddings

    def call(self, sequence_output, masked_lm_positions=None):
        x = sequence_output
        if masked_lm_positions is not None:
            positions = ops.cast(masked_lm_positions, "int32")[:, :, None]  # (batch, predictions, 1)
            x = ops.take_along_axis(x, positions, axis=1)  # (batch, predictions, hidden)
        x = self._activation_fn(self.transform_dense(x))  # (batch, predictions, hidden)
        x = self.layer_norm(x)
        table = ops.cast(self._output_table(), x.dtype)  # (vocab, hidden)
        logits = ops.matmul(x, ops.transpose(table))  # (batch, predictions, vocab)
        return logits + ops.cast(self.output_bias, logits.dtype)

    def compute_output_shape(self, sequence_output_shape, masked_lm_positions_shape=None):
        length = sequence_output_shape[1] if masked_lm_positions_shape is None else masked_lm_positions_shape[1]
        return (sequence_output_shape[0], length, self.vocab_size)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "activation": serialize_activation(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config


@keras.saving.register_keras_serializable(package="bert_keras")
class NextSentenceHead(keras.layers.Layer):
    """BERT's next-sentence-prediction head: a dense layer on the pooled output.

    Class 0 means "sentence B follows sentence A", class 1 "B is random", as in
    the original BERT.

    Args:
        num_classes: int. Number of logits. Defaults to `2`.
        kernel_initializer: str or initializer. Defaults to
            `TruncatedNormal(stddev=0.02)`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        pooled_output: float tensor `(batch, hidden)`.

    Returns:
        Logits `(batch, num_classes)`.

    Example:
    >>> NextSentenceHead()(np.zeros((3, 16))).shape
    (3, 2)
    """

    def __init__(self, num_classes=2, kernel_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = check_positive_int("num_classes", num_classes)
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer if kernel_initializer is not None else _default_initializer()
        )

    def build(self, pooled_output_shape):
        self.dense = keras.layers.Dense(
            self.num_classes,
            kernel_initializer=keras.initializers.get(keras.initializers.serialize(self.kernel_initializer)),
            dtype=self.dtype_policy,
            name="dense",
        )
        self.dense.build(pooled_output_shape)
        self.built = True

    def call(self, pooled_output):
        return self.dense(pooled_output)  # (batch, num_classes)

    def compute_output_shape(self, pooled_output_shape):
        return tuple(pooled_output_shape[:-1]) + (self.num_classes,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_classes": self.num_classes,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
