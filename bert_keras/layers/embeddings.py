"""Token, position and segment embeddings."""

import math

import keras
import tensorflow as tf
from keras import ops

from bert_keras._checks import check_choice, check_int, check_positive_int, check_rate
from bert_keras.layers._utils import clone_initializer
from bert_keras.layers.dropout import Dropout

POSITION_EMBEDDINGS = ("learned", "sinusoidal")


@keras.saving.register_keras_serializable(package="bert_keras")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """Fixed sinusoidal position encodings of "Attention Is All You Need".

    `PE[pos, 2i] = sin(pos / max_wavelength ** (2i / hidden))` and
    `PE[pos, 2i + 1] = cos(pos / max_wavelength ** (2i / hidden))`. The layer
    has no weights and works for any sequence length.

    Args:
        max_wavelength: float. The longest wavelength. Defaults to `10000`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        inputs: tensor `(batch, seq, hidden)`; only its shape is used.

    Returns:
        The encodings, `(batch, seq, hidden)` (the same for every batch entry).

    Example:
    >>> tuple(SinusoidalPositionEncoding()(np.zeros((2, 5, 8))).shape)
    (2, 5, 8)
    """

    def __init__(self, max_wavelength=10000.0, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(max_wavelength, (int, float)) or max_wavelength <= 1:
            raise ValueError(
                "Received an invalid value for argument `max_wavelength`, expected a "
                f"number greater than 1. Received: max_wavelength={max_wavelength!r}"
            )
        self.max_wavelength = float(max_wavelength)
        self.built = True

    def call(self, inputs):
        shape = ops.shape(inputs)
        seq_length, hidden_size = shape[-2], inputs.shape[-1]
        positions = ops.cast(ops.arange(seq_length), "float32")  # (seq,)
        dims = ops.arange(hidden_size)  # (hidden,)
        exponents = ops.cast(2 * (dims // 2), "float32") / float(hidden_size)
        inverse_freq = ops.exp(-math.log(self.max_wavelength) * exponents)  # (hidden,)
        angles = positions[:, None] * inverse_freq[None, :]  # (seq, hidden)
        encodings = ops.where(dims % 2 == 0, ops.sin(angles), ops.cos(angles))  # (seq, hidden)
        return ops.broadcast_to(ops.cast(encodings, self.compute_dtype), shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength})
        return config


@keras.saving.register_keras_serializable(package="bert_keras")
class BertEmbeddings(keras.layers.Layer):
    """BERT input embeddings: word + position + segment, then LayerNorm and dropout.

    The options of BERT's family: ALBERT and ELECTRA keep narrower tables
    (`embedding_size`) and map them to `hidden_size` with a dense layer after
    the LayerNorm and dropout; DistilBERT has no segment table
    (`type_vocab_size=0`); RoBERTa's positions start after its padding index
    (`position_offset`).

    Args:
        vocab_size: int. Size of the WordPiece vocabulary.
        hidden_size: int. Width of the output.
        max_sequence_length: int. Longest input; with learned positions the
            table has `max_sequence_length + position_offset` rows and longer
            inputs are rejected. With sinusoidal positions it is only
            recorded. Defaults to `512`.
        type_vocab_size: int. Number of segment types; `0` for none (the
            `input_type_ids` are then ignored). Defaults to `2`.
        embedding_size: optional int. Width of the tables; when given, a
            dense layer (`projection`) maps the normalized embeddings to
            `hidden_size` (even when the widths are equal, as ALBERT's
            checkpoints hold one). Defaults to `None`: tables of `hidden_size`,
            no projection.
        position_offset: int. Index of the first position's row of the
            learned table (RoBERTa: its padding index + 1 = 2; the rows before
            it are never read). Defaults to `0`.
        position_embedding: str. `"learned"` (a trained table, as in BERT) or
            `"sinusoidal"` (fixed, no weights). Defaults to `"learned"`.
        dropout: float. Dropout rate after the LayerNorm. Defaults to `0.0`.
        layer_norm_epsilon: float. Defaults to `1e-12`.
        initializer: str or initializer. Initializer of the embedding tables.
            Defaults to `TruncatedNormal(stddev=0.02)`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        input_word_ids: int tensor `(batch, seq)`.
        input_type_ids: optional int tensor `(batch, seq)`; zeros if omitted.
        training: bool. Whether dropout is applied.

    Returns:
        `(batch, seq, hidden_size)`.

    Example:
    >>> layer = BertEmbeddings(vocab_size=100, hidden_size=8)
    >>> tuple(layer(np.array([[2, 5, 3]])).shape)
    (1, 3, 8)
    """

    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_sequence_length=512,
        type_vocab_size=2,
        position_embedding="learned",
        dropout=0.0,
        layer_norm_epsilon=1e-12,
        initializer=None,
        embedding_size=None,
        position_offset=0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.max_sequence_length = check_positive_int("max_sequence_length", max_sequence_length)
        self.type_vocab_size = check_int("type_vocab_size", type_vocab_size, minimum=0)
        self.embedding_size = None if embedding_size is None else check_positive_int("embedding_size", embedding_size)
        self.position_offset = check_int("position_offset", position_offset, minimum=0)
        self.position_embedding = check_choice("position_embedding", position_embedding, POSITION_EMBEDDINGS)
        self.dropout = check_rate("dropout", dropout)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.initializer = keras.initializers.get(
            initializer if initializer is not None else keras.initializers.TruncatedNormal(stddev=0.02)
        )

    @property
    def table_width(self):
        """The width of the tables: `embedding_size`, or `hidden_size` without a projection."""
        return self.embedding_size if self.embedding_size is not None else self.hidden_size

    def build(self, input_word_ids_shape, input_type_ids_shape=None):
        width = self.table_width
        self.word_embeddings = keras.layers.Embedding(
            self.vocab_size,
            width,
            embeddings_initializer=clone_initializer(self.initializer),
            dtype=self.dtype_policy,
            name="word_embeddings",
        )
        self.word_embeddings.build(input_word_ids_shape)
        self.type_embeddings = None
        if self.type_vocab_size:
            self.type_embeddings = keras.layers.Embedding(
                self.type_vocab_size,
                width,
                embeddings_initializer=clone_initializer(self.initializer),
                dtype=self.dtype_policy,
                name="type_embeddings",
            )
            self.type_embeddings.build(input_word_ids_shape)
        if self.position_embedding == "learned":
            self.position_embeddings = self.add_weight(
                shape=(self.max_sequence_length + self.position_offset, width),
                initializer=clone_initializer(self.initializer),
                name="position_embeddings",
            )
        else:
            self.sinusoidal_encoding = SinusoidalPositionEncoding(dtype=self.dtype_policy, name="position_encoding")
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
        )
        self.layer_norm.build(tuple(input_word_ids_shape) + (width,))
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy, name="dropout")
        self.projection = None
        if self.embedding_size is not None:
            self.projection = keras.layers.Dense(
                self.hidden_size,
                kernel_initializer=clone_initializer(self.initializer),
                dtype=self.dtype_policy,
                name="projection",
            )
            self.projection.build(tuple(input_word_ids_shape) + (width,))
        self.built = True

    def _learned_positions(self, seq_length):
        static_length = seq_length if isinstance(seq_length, int) else None
        if static_length is not None and static_length > self.max_sequence_length:
            raise ValueError(self._too_long_message(static_length))
        checks = [] if static_length is not None else [self._length_check(seq_length)]
        # The slice waits for the check, so that a graph fails with its message, not the slice's own.
        with tf.control_dependencies(checks):
            table = ops.convert_to_tensor(self.position_embeddings)
            return ops.slice(table, (self.position_offset, 0), (seq_length, self.table_width))  # (seq, width)

    def _length_check(self, seq_length):
        """An op that fails with `_too_long_message` (an `InvalidArgumentError`) when the traced length is too long.

        Not an `Assert` op: XLA drops every Assert with a warning line per
        compilation ("Ignoring Assert operator ..."), one per length bucket
        that `load_classifier` warms up. `CheckNumerics` on a scalar that is NaN only past
        the limit raises the same error with the same message and compiles
        under XLA without a word (where the shapes are static, so the slice
        refuses a too-long input anyway). Eager calls never get here: their
        length is known and `_learned_positions` raises a `ValueError`.
        """
        too_long = ops.greater(seq_length, self.max_sequence_length)
        flag = tf.where(too_long, float("nan"), 0.0)  # a scalar: NaN only when the input is too long
        # TensorFlow appends " : Tensor had NaN values" to the message: say that it is not a numerical fault.
        message = self._too_long_message("<seq_length>") + " Found by a length check (no numerical fault)"
        return tf.debugging.check_numerics(flag, message)

    def _too_long_message(self, seq_length):
        return (
            f"The input sequence length ({seq_length}) exceeds max_sequence_length "
            f"({self.max_sequence_length}) of the learned position embeddings. Truncate "
            f"the inputs to at most {self.max_sequence_length} tokens (the preprocessor's "
            "`seq_length`), or build the encoder with a larger `max_sequence_length`."
        )

    def call(self, input_word_ids, input_type_ids=None, training=None):
        if input_type_ids is None:
            input_type_ids = ops.zeros_like(input_word_ids)
        embeddings = self.word_embeddings(input_word_ids)  # (batch, seq, width)
        if self.type_embeddings is not None:
            embeddings = embeddings + self.type_embeddings(input_type_ids)  # (batch, seq, width)
        if self.position_embedding == "learned":
            static_length = input_word_ids.shape[1]
            seq_length = static_length if static_length is not None else ops.shape(input_word_ids)[1]
            positions = self._learned_positions(seq_length)  # (seq, width)
            embeddings = embeddings + ops.cast(positions, embeddings.dtype)[None, :, :]
        else:
            embeddings = embeddings + self.sinusoidal_encoding(embeddings)
        embeddings = self.layer_norm(embeddings)
        embeddings = self.dropout_layer(embeddings, training=training)
        if self.projection is not None:
            embeddings = self.projection(embeddings)  # (batch, seq, hidden)
        return embeddings

    def compute_output_shape(self, input_word_ids_shape, input_type_ids_shape=None):
        return tuple(input_word_ids_shape) + (self.hidden_size,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "hidden_size": self.hidden_size,
                "max_sequence_length": self.max_sequence_length,
                "type_vocab_size": self.type_vocab_size,
                "position_embedding": self.position_embedding,
                "dropout": self.dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "initializer": keras.initializers.serialize(self.initializer),
                "embedding_size": self.embedding_size,
                "position_offset": self.position_offset,
            }
        )
        return config
