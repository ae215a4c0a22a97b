"""Heads that turn encoder outputs into task logits."""

import keras
from keras import ops

from bert_keras._checks import check_positive_int, check_rate
from bert_keras.layers._utils import get_activation, serialize_activation


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
    >>> tuple(head(np.zeros((2, 7, 16)), np.array([[1, 3], [2, 0]])).shape)
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
        self.activation = activation
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
        # One 2-D matmul is several times faster on CPU than a batched 3-D one.
        shape = ops.shape(x)
        flat = ops.reshape(x, (-1, shape[-1]))  # (batch * predictions, hidden)
        logits = ops.matmul(flat, ops.transpose(table)) + ops.cast(self.output_bias, x.dtype)  # (batch * predictions, vocab)
        return ops.reshape(logits, (shape[0], shape[1], self.vocab_size))  # (batch, predictions, vocab)

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
    >>> tuple(NextSentenceHead()(np.zeros((3, 16))).shape)
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


def _clone(initializer):
    return keras.initializers.get(keras.initializers.serialize(initializer))


@keras.saving.register_keras_serializable(package="bert_keras")
class ClassificationHead(keras.layers.Layer):
    """Sentence classification on the pooled output: dropout, then a dense layer.

    The head of `BertForSequenceClassification` and of TF Hub's classifier
    examples: `logits = dense(dropout(pooled_output))`.

    Args:
        num_classes: int. Number of logits.
        dropout: float. Dropout rate on the pooled output. Defaults to `0.1`.
        kernel_initializer: str or initializer. Defaults to
            `TruncatedNormal(stddev=0.02)`.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        pooled_output: float tensor `(batch, hidden)`.
        training: bool. Whether dropout is applied.

    Returns:
        Logits `(batch, num_classes)`.

    Example:
    >>> tuple(ClassificationHead(num_classes=3)(np.zeros((2, 16))).shape)
    (2, 3)
    """

    def __init__(self, num_classes, dropout=0.1, kernel_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = check_positive_int("num_classes", num_classes)
        self.dropout = check_rate("dropout", dropout)
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer if kernel_initializer is not None else _default_initializer()
        )

    def build(self, pooled_output_shape):
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy, name="dropout")
        self.dense = keras.layers.Dense(
            self.num_classes,
            kernel_initializer=_clone(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="dense",
        )
        self.dense.build(pooled_output_shape)
        self.built = True

    def call(self, pooled_output, training=None):
        x = self.dropout_layer(pooled_output, training=training)  # (batch, hidden)
        return self.dense(x)  # (batch, num_classes)

    def compute_output_shape(self, pooled_output_shape):
        return tuple(pooled_output_shape[:-1]) + (self.num_classes,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_classes": self.num_classes,
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config


@keras.saving.register_keras_serializable(package="bert_keras")
class TokenClassificationHead(ClassificationHead):
    """Token classification (e.g. NER tags) on the sequence output: dropout, then dense.

    The head of `BertForTokenClassification`: one set of logits per token.

    Args:
        num_classes: int. Number of tags.
        dropout: float. Dropout rate on the sequence output. Defaults to `0.1`.
        kernel_initializer: str or initializer. Defaults to
            `TruncatedNormal(stddev=0.02)`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        sequence_output: float tensor `(batch, seq, hidden)`.
        training: bool. Whether dropout is applied.

    Returns:
        Logits `(batch, seq, num_classes)`.

    Example:
    >>> tuple(TokenClassificationHead(num_classes=5)(np.zeros((2, 7, 16))).shape)
    (2, 7, 5)
    """

    def call(self, sequence_output, training=None):
        x = self.dropout_layer(sequence_output, training=training)  # (batch, seq, hidden)
        return self.dense(x)  # (batch, seq, num_classes)


@keras.saving.register_keras_serializable(package="bert_keras")
class SpanHead(keras.layers.Layer):
    """Span labelling for extractive QA: start and end logits, masked to the context.

    `start_logits, end_logits = unstack(dense_2(sequence_output))`, the head
    of `BertForQuestionAnswering`. Positions outside `context_mask` get a
    large negative logit, so that softmax and argmax never pick them.

    Args:
        kernel_initializer: str or initializer. Defaults to
            `TruncatedNormal(stddev=0.02)`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        sequence_output: float tensor `(batch, seq, hidden)`.
        context_mask: optional int or bool tensor `(batch, seq)`: 1 where an
            answer may start or end. If omitted, nothing is masked.

    Returns:
        A tuple `(start_logits, end_logits)`, each `(batch, seq)`.

    Example:
    >>> start, end = SpanHead()(np.zeros((2, 7, 16)), np.ones((2, 7)))
    >>> tuple(start.shape), tuple(end.shape)
    ((2, 7), (2, 7))
    """

    def __init__(self, kernel_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer if kernel_initializer is not None else _default_initializer()
        )

    def build(self, sequence_output_shape, context_mask_shape=None):
        self.dense = keras.layers.Dense(
            2, kernel_initializer=_clone(self.kernel_initializer), dtype=self.dtype_policy, name="dense"
        )
        self.dense.build(sequence_output_shape)
        self.built = True

    def call(self, sequence_output, context_mask=None):
        logits = self.dense(sequence_output)  # (batch, seq, 2)
        if context_mask is not None:
            # float16 cannot hold -1e9; -3e4 is still far below any real logit.
            low = -3e4 if keras.backend.standardize_dtype(logits.dtype) == "float16" else -1e9
            allowed = ops.cast(context_mask, "bool")[:, :, None]  # (batch, seq, 1)
            logits = ops.where(allowed, logits, ops.cast(low, logits.dtype))
        return logits[:, :, 0], logits[:, :, 1]  # (batch, seq) each

    def compute_output_shape(self, sequence_output_shape, context_mask_shape=None):
        shape = tuple(sequence_output_shape[:-1])
        return shape, shape

    def get_config(self):
        config = super().get_config()
        config.update({"kernel_initializer": keras.initializers.serialize(self.kernel_initializer)})
        return config
