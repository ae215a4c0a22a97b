"""Heads that turn encoder outputs into task logits."""

import keras
from keras import ops

from bert_keras._checks import check_positive_int, check_rate
from bert_keras.layers._utils import get_activation, serialize_activation
from bert_keras.layers.prediction_transform import PredictionTransform


def _default_initializer():
    return keras.initializers.TruncatedNormal(stddev=0.02)


def _clone(initializer):
    return keras.initializers.get(keras.initializers.serialize(initializer))

@keras.saving.register_keras_serializable(package="bert_keras")
class MaskedLMHead(keras.layers.Layer):
    """BERT's masked-language-model head, with the output tied to the word embeddings.

    Gathers the hidden states at `masked_lm_positions`, transforms them
    (`dense -> activation -> LayerNorm`, from `hidden` to the width of the
    embedding table) and scores every vocabulary entry:
    `logits = x @ embeddings.T + output_bias`. For BERT, RoBERTa and
    DistilBERT that width is the hidden size; for ALBERT and ELECTRA's
    generator it is the narrower `embedding_size` (their heads map back to
    the embeddings' width before scoring against them).

    Args:
        vocab_size: int. Number of vocabulary entries scored.
        embedding: optional `keras.layers.Embedding` of shape `(vocab_size, width)`
            whose table is the output projection (weight tying, as in BERT); the
            transform's width is the table's `width`. It is not serialized: a
            task passes its encoder's embedding again when it is rebuilt. If
            `None`, the head owns an untied table `decoder_embeddings` of shape
            `(vocab_size, hidden)`. Defaults to `None`.
        activation: str or callable. Activation of the transform: `"gelu"`
            (exact), `"gelu_approximate"`, `"relu"` or a callable. Defaults to `"gelu"`.
        layer_norm_epsilon: float. Defaults to `1e-12`.
        kernel_initializer: str or initializer. Defaults to
            `TruncatedNormal(stddev=0.02)`.
        use_transform_bias: bool. Whether the transform's dense layer has a
            bias. Defaults to `True` (ModernBERT's: `classifier_bias`, false).
        use_norm_bias: bool. Whether its LayerNorm has a bias. Defaults to
            `True` (ModernBERT's: `norm_bias`, false).
        use_output_bias: bool. Whether the logits get `output_bias`. Defaults
            to `True` (ModernBERT's: `decoder_bias`).
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
    >>> embedding = keras.layers.Embedding(50, 8)  # ALBERT-like: embeddings of width 8, hidden size 16
    >>> embedding.build((None,))
    >>> tied = MaskedLMHead(vocab_size=50, embedding=embedding)
    >>> tuple(tied(np.zeros((2, 7, 16))).shape), tuple(tied.transform_dense.kernel.shape)
    ((2, 7, 50), (16, 8))
    """

    def __init__(
        self,
        vocab_size,
        embedding=None,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        kernel_initializer=None,
        use_transform_bias=True,
        use_norm_bias=True,
        use_output_bias=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        flags = {"use_transform_bias": use_transform_bias, "use_norm_bias": use_norm_bias,
                 "use_output_bias": use_output_bias}
        for key, value in flags.items():
            if not isinstance(value, bool):
                raise ValueError(f"Received an invalid value for argument `{key}`, expected a bool. "
                                 f"Received: {key}={value!r}")
        self.use_transform_bias, self.use_norm_bias, self.use_output_bias = flags.values()
        if embedding is not None:
            input_dim = getattr(embedding, "input_dim", None)
            if input_dim is None:
                raise ValueError(
                    "Received an invalid value for argument `embedding`, expected a "
                    f"keras.layers.Embedding. Received: embedding={embedding!r}"
                )
            output_dim = getattr(embedding, "output_dim", None)
            if isinstance(output_dim, bool) or not isinstance(output_dim, int) or output_dim <= 0:
                raise ValueError(
                    "Received an invalid value for argument `embedding`, expected a "
                    f"keras.layers.Embedding with a positive `output_dim`. Received: embedding={embedding!r}"
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
        # The transform ends at the width of the table it is scored against: the tied embedding's (ALBERT's and
        # ELECTRA's generator's embedding_size, narrower than the hidden size), else the hidden size.
        width = self.embedding.output_dim if self.embedding is not None else hidden_size
        self.transform_dense = keras.layers.Dense(
            width,
            use_bias=self.use_transform_bias,
            kernel_initializer=keras.initializers.get(keras.initializers.serialize(self.kernel_initializer)),
            dtype=self.dtype_policy,
            name="transform",
        )
        self.transform_dense.build((None, None, hidden_size))
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, center=self.use_norm_bias, dtype=self.dtype_policy, name="layer_norm"
        )
        self.layer_norm.build((None, None, width))
        if self.embedding is None:
            self.decoder_embeddings = self.add_weight(
                shape=(self.vocab_size, hidden_size),
                initializer=keras.initializers.get(keras.initializers.serialize(self.kernel_initializer)),
                name="decoder_embeddings",
            )
        self.output_bias = None
        if self.use_output_bias:
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
        x = self._activation_fn(self.transform_dense(x))  # (batch, predictions, width)
        x = self.layer_norm(x)
        table = ops.cast(self._output_table(), x.dtype)  # (vocab, width)
        # One 2-D matmul is several times faster on CPU than a batched 3-D one.
        shape = ops.shape(x)
        flat = ops.reshape(x, (-1, shape[-1]))  # (batch * predictions, width)
        logits = ops.matmul(flat, ops.transpose(table))  # (batch * predictions, vocab)
        if self.output_bias is not None:
            logits = logits + ops.cast(self.output_bias, x.dtype)
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
                "use_transform_bias": self.use_transform_bias,
                "use_norm_bias": self.use_norm_bias,
                "use_output_bias": self.use_output_bias,
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
        transform: optional dict of `PredictionTransform` arguments
            (`activation`, `use_bias`, `use_norm_bias`, `layer_norm_epsilon`):
            a dense layer, activation and LayerNorm before the dropout, as
            ModernBERT's task models have (`head`). Defaults to `None` (none).
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

    def __init__(self, num_classes, dropout=0.1, kernel_initializer=None, transform=None, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = check_positive_int("num_classes", num_classes)
        self.dropout = check_rate("dropout", dropout)
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer if kernel_initializer is not None else _default_initializer()
        )
        self.transform = PredictionTransform.from_options(transform, _clone(self.kernel_initializer), self.dtype_policy)

    def build(self, pooled_output_shape):
        if self.transform is not None:
            self.transform.build(pooled_output_shape)
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
        x = pooled_output if self.transform is None else self.transform(pooled_output)  # (batch, hidden)
        x = self.dropout_layer(x, training=training)  # (batch, hidden)
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
                "transform": None if self.transform is None else self.transform.options(),
            }
        )
        return config


@keras.saving.register_keras_serializable(package="bert_keras")
class TokenClassificationHead(ClassificationHead):
    """Token classification (e.g. NER tags) on the sequence output: dropout, then dense.

    The head of `BertForTokenClassification`: one set of logits per token;
    with `transform`, `ModernBertForTokenClassification`'s (`head`, then
    `classifier`).

    Args:
        num_classes: int. Number of tags.
        dropout: float. Dropout rate on the sequence output. Defaults to `0.1`.
        kernel_initializer: str or initializer. Defaults to
            `TruncatedNormal(stddev=0.02)`.
        transform: optional dict of `PredictionTransform` arguments: every
            token's dense layer, activation and LayerNorm before the dropout.
            Defaults to `None` (none).
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
        x = sequence_output if self.transform is None else self.transform(sequence_output)  # (batch, seq, hidden)
        x = self.dropout_layer(x, training=training)  # (batch, seq, hidden)
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
        transform: optional dict of `PredictionTransform` arguments: every
            token's dense layer, activation and LayerNorm first, as
            `ModernBertForQuestionAnswering`'s `head`. Defaults to `None`.
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

    def __init__(self, kernel_initializer=None, transform=None, **kwargs):
        super().__init__(**kwargs)
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer if kernel_initializer is not None else _default_initializer()
        )
        self.transform = PredictionTransform.from_options(transform, _clone(self.kernel_initializer), self.dtype_policy)

    def build(self, sequence_output_shape, context_mask_shape=None):
        if self.transform is not None:
            self.transform.build(sequence_output_shape)
        self.dense = keras.layers.Dense(
            2, kernel_initializer=_clone(self.kernel_initializer), dtype=self.dtype_policy, name="dense"
        )
        self.dense.build(sequence_output_shape)
        self.built = True

    def call(self, sequence_output, context_mask=None):
        x = sequence_output if self.transform is None else self.transform(sequence_output)  # (batch, seq, hidden)
        logits = self.dense(x)  # (batch, seq, 2)
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
        config.update({"kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                       "transform": None if self.transform is None else self.transform.options()})
        return config


@keras.saving.register_keras_serializable(package="bert_keras")
class DiscriminatorHead(keras.layers.Layer):
    """ELECTRA's replaced-token detection head: one logit a token, "this token was replaced".

    `logits = prediction(activation(dense(sequence_output)))`, a dense layer
    of width `hidden`, the activation, and a dense layer to one output, as
    transformers' `ElectraDiscriminatorPredictions` (the head of
    `ElectraForPreTraining`; the encoder's activation is the checkpoint's
    `hidden_act`). A positive logit means "replaced".

    Args:
        activation: str or callable. `"gelu"` (exact), `"gelu_approximate"`,
            `"relu"` or a callable. Defaults to `"gelu"`.
        kernel_initializer: str or initializer. Defaults to
            `TruncatedNormal(stddev=0.02)`.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        sequence_output: float tensor `(batch, seq, hidden)`.

    Returns:
        Logits `(batch, seq)`.

    Example:
    >>> tuple(DiscriminatorHead()(np.zeros((2, 7, 16))).shape)
    (2, 7)
    """

    def __init__(self, activation="gelu", kernel_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.activation = activation
        self._activation_fn = get_activation(activation)
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer if kernel_initializer is not None else _default_initializer()
        )

    def build(self, sequence_output_shape):
        hidden_size = sequence_output_shape[-1]
        self.dense = keras.layers.Dense(
            hidden_size, kernel_initializer=_clone(self.kernel_initializer), dtype=self.dtype_policy, name="dense"
        )
        self.dense.build(sequence_output_shape)
        self.prediction = keras.layers.Dense(
            1, kernel_initializer=_clone(self.kernel_initializer), dtype=self.dtype_policy, name="prediction"
        )
        self.prediction.build(tuple(sequence_output_shape[:-1]) + (hidden_size,))
        self.built = True

    def call(self, sequence_output):
        x = self._activation_fn(self.dense(sequence_output))  # (batch, seq, hidden)
        return self.prediction(x)[..., 0]  # (batch, seq)

    def compute_output_shape(self, sequence_output_shape):
        return tuple(sequence_output_shape[:-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "activation": serialize_activation(self.activation),
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config


POOLING_MODES = ("mean", "cls", "max", "mean_sqrt_len", "weighted_mean", "last_token")


def _check_pooling_modes(mode):
    """`mode` as a tuple of names from `POOLING_MODES`: one name, or a non-empty list of distinct ones."""
    modes = (mode,) if isinstance(mode, str) else tuple(mode) if isinstance(mode, (list, tuple)) else None
    if not modes or len(set(modes)) != len(modes) or any(m not in POOLING_MODES for m in modes):
        raise ValueError(
            f"Received an invalid value for argument `mode`, expected one of {list(POOLING_MODES)} or a list of "
            f"distinct ones (their poolings are concatenated). Received: mode={mode!r}"
        )
    return modes


@keras.saving.register_keras_serializable(package="bert_keras")
class SentencePooling(keras.layers.Layer):
    """One vector per text from the token vectors: pooling over the real tokens, optionally L2-normalised.

    The pooling of sentence-embedding models (sentence-transformers'
    `Pooling` and `Normalize` modules), over the positions where
    `input_mask` is 1:

    - `"mean"`: the mean of the real tokens' vectors (all-MiniLM-L6-v2, SBERT);
    - `"cls"`: the first token's vector (`[CLS]`);
    - `"max"`: the element-wise maximum over the real tokens;
    - `"mean_sqrt_len"`: their sum divided by the square root of their number;
    - `"weighted_mean"`: their mean weighted by position (1, 2, 3, ...);
    - `"last_token"`: the last real token's vector (`[SEP]` for BERT inputs).

    Several modes are concatenated in the order given. With `normalize`,
    each vector is divided by its L2 norm (at least 1e-12), so that dot
    products are cosine similarities.

    Args:
        mode: str, or a list of str. One of `"mean"`, `"cls"`, `"max"`,
            `"mean_sqrt_len"`, `"weighted_mean"`, `"last_token"`, or a list
            of distinct ones. Defaults to `"mean"`.
        normalize: bool. L2-normalise the pooled vector. Defaults to `False`.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        sequence_output: float tensor `(batch, seq, hidden)`.
        input_mask: int or bool tensor `(batch, seq)`, 1 for real tokens and
            0 for padding (padding after the real tokens, as BERT packs).

    Returns:
        `(batch, hidden * number_of_modes)`.

    Example:
    >>> tokens = np.array([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]])  # (1, 3, 2)
    >>> mask = np.array([[1, 1, 0]])                               # the third is padding
    >>> SentencePooling("mean")(tokens, mask).numpy().tolist()
    [[2.0, 3.0]]
    >>> SentencePooling(["cls", "max"])(tokens, mask).numpy().tolist()
    [[1.0, 2.0, 3.0, 4.0]]
    >>> SentencePooling("mean", normalize=True)(tokens, mask).numpy().round(4)
    array([[0.5547, 0.8321]], dtype=float32)
    """

    def __init__(self, mode="mean", normalize=False, **kwargs):
        super().__init__(**kwargs)
        self._modes = _check_pooling_modes(mode)
        self.mode = mode if isinstance(mode, str) else list(mode)
        if not isinstance(normalize, bool):
            raise ValueError(
                f"Received an invalid value for argument `normalize`, expected a bool. Received: normalize={normalize!r}"
            )
        self.normalize = normalize

    @property
    def modes(self):
        """The pooling modes, in the order their vectors are concatenated."""
        return self._modes

    def call(self, sequence_output, input_mask):
        x = sequence_output  # (batch, seq, hidden)
        # Added axes are expand_dims (not `[:, :, None]`): LiteRT converts those to builtin ops, a slice adding axes not.
        mask = ops.expand_dims(ops.cast(input_mask, x.dtype), -1)  # (batch, seq, 1)
        pooled = [self._pool(mode, x, mask) for mode in self._modes]  # each (batch, hidden)
        output = pooled[0] if len(pooled) == 1 else ops.concatenate(pooled, axis=-1)  # (batch, hidden * modes)
        if self.normalize:
            norm = ops.sqrt(ops.sum(ops.square(output), axis=-1, keepdims=True))  # (batch, 1)
            output = output / ops.maximum(norm, ops.cast(1e-12, output.dtype))
        return output

    @staticmethod
    def _pool(mode, x, mask):
        count = ops.sum(mask, axis=1)  # (batch, 1): real tokens per row
        if mode == "cls":
            return x[:, 0, :]  # (batch, hidden)
        if mode == "max":
            # The lowest finite value, not -inf: a row without real tokens gives no inf (nor NaN once normalised).
            lowest = -6.0e4 if keras.backend.standardize_dtype(x.dtype) == "float16" else -3.0e38
            return ops.max(ops.where(mask > 0, x, lowest), axis=1)  # (batch, hidden)
        if mode == "last_token":
            seq = ops.shape(x)[1]
            last = ops.expand_dims(ops.mod(ops.cast(count, "int32") - 1, seq), -1)  # (batch, 1, 1); none real: the last
            return ops.take_along_axis(x * mask, last, axis=1)[:, 0, :]  # (batch, hidden)
        if mode == "weighted_mean":
            positions = ops.reshape(ops.cast(ops.arange(1, ops.shape(x)[1] + 1), x.dtype), (1, -1, 1))  # (1, seq, 1)
            mask = mask * positions  # (batch, seq, 1)
            count = ops.sum(mask, axis=1)  # (batch, 1)
        total = ops.sum(x * mask, axis=1)  # (batch, hidden)
        count = ops.maximum(count, ops.cast(1e-9, x.dtype))  # (batch, 1)
        return total / (ops.sqrt(count) if mode == "mean_sqrt_len" else count)

    def compute_output_shape(self, sequence_output_shape, input_mask_shape=None):
        hidden = sequence_output_shape[-1]
        return (sequence_output_shape[0], None if hidden is None else hidden * len(self._modes))

    def get_config(self):
        config = super().get_config()
        config.update({"mode": self.mode, "normalize": self.normalize})
        return config
