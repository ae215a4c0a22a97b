"""DeBERTa's embeddings and encoder block (post-LayerNorm, as BERT's, around a disentangled attention)."""

import keras
from keras import ops

from bert_keras._checks import check_int, check_positive_int, check_rate
from bert_keras.layers._utils import clone_initializer, serialize_activation
from bert_keras.layers.disentangled_attention import DisentangledSelfAttention
from bert_keras.layers.dropout import Dropout
from bert_keras.layers.feed_forward import FeedForward


@keras.saving.register_keras_serializable(package="bert_keras")
class DebertaEmbeddings(keras.layers.Layer):
    """DeBERTa's input embeddings: word (+ absolute position) (+ segment), projected, LayerNorm, masked, dropout.

    DeBERTa-v3 has word embeddings only (`max_sequence_length=None`: positions
    enter through the attention; `type_vocab_size=0`). Where `embedding_size`
    is given the tables are that wide and a dense layer without bias
    (`projection`) maps them to `hidden_size` before the LayerNorm. Padding
    positions (`input_mask` 0) come out as zeros, as in transformers.

    Args:
        vocab_size: int. Rows of the word table.
        hidden_size: int. Width of the output.
        max_sequence_length: optional int. Rows of an absolute position table
            added to the words (transformers' `position_biased_input`); None
            for none. Defaults to `None`.
        type_vocab_size: int. Segment types; `0` for none. Defaults to `0`.
        embedding_size: optional int. Width of the tables, projected to
            `hidden_size`. Defaults to `None` (tables of `hidden_size`).
        dropout: float. Defaults to `0.0`.
        layer_norm_epsilon: float. Defaults to `1e-7`.
        initializer: str or initializer. Defaults to `TruncatedNormal(stddev=0.02)`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        input_word_ids: int tensor `(batch, seq)`.
        input_type_ids: optional int tensor `(batch, seq)`; zeros if omitted.
        input_mask: optional 0/1 tensor `(batch, seq)`; padding rows are zeroed.
        training: bool. Whether dropout is applied.

    Returns:
        `(batch, seq, hidden_size)`.

    Example:
    >>> layer = DebertaEmbeddings(vocab_size=100, hidden_size=8)
    >>> tuple(layer(np.array([[2, 5, 0]]), input_mask=np.array([[1, 1, 0]])).shape)
    (1, 3, 8)
    """

    def __init__(self, vocab_size, hidden_size, max_sequence_length=None, type_vocab_size=0, embedding_size=None,
                 dropout=0.0, layer_norm_epsilon=1e-7, initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.max_sequence_length = (None if max_sequence_length is None
                                    else check_positive_int("max_sequence_length", max_sequence_length))
        self.type_vocab_size = check_int("type_vocab_size", type_vocab_size, minimum=0)
        self.embedding_size = None if embedding_size is None else check_positive_int("embedding_size", embedding_size)
        self.dropout = check_rate("dropout", dropout)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.initializer = keras.initializers.get(
            initializer if initializer is not None else keras.initializers.TruncatedNormal(stddev=0.02))

    @property
    def table_width(self):
        return self.embedding_size if self.embedding_size is not None else self.hidden_size

    def _embedding(self, rows, name, ids_shape):
        table = keras.layers.Embedding(rows, self.table_width, embeddings_initializer=clone_initializer(self.initializer),
                                       dtype=self.dtype_policy, name=name)
        table.build(ids_shape)
        return table

    def build(self, input_word_ids_shape):
        self.word_embeddings = self._embedding(self.vocab_size, "word_embeddings", input_word_ids_shape)
        self.position_embeddings = self.type_embeddings = self.projection = None
        if self.max_sequence_length is not None:
            self.position_embeddings = self._embedding(self.max_sequence_length, "position_embeddings",
                                                       input_word_ids_shape)
        if self.type_vocab_size:
            self.type_embeddings = self._embedding(self.type_vocab_size, "type_embeddings", input_word_ids_shape)
        if self.embedding_size is not None and self.embedding_size != self.hidden_size:
            self.projection = keras.layers.Dense(self.hidden_size, use_bias=False,
                                                 kernel_initializer=clone_initializer(self.initializer),
                                                 dtype=self.dtype_policy, name="projection")
            self.projection.build((None, self.table_width))
        self.layer_norm = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy,
                                                          name="layer_norm")
        self.layer_norm.build((None, self.hidden_size))
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy, name="dropout")
        self.built = True

    def call(self, input_word_ids, input_type_ids=None, input_mask=None, training=None):
        x = self.word_embeddings(input_word_ids)  # (batch, seq, width)
        if self.position_embeddings is not None:
            positions = ops.arange(ops.shape(input_word_ids)[1], dtype="int32")
            x = x + ops.expand_dims(self.position_embeddings(positions), 0)  # (batch, seq, width)
        if self.type_embeddings is not None:
            type_ids = ops.zeros_like(input_word_ids) if input_type_ids is None else input_type_ids
            x = x + self.type_embeddings(type_ids)
        if self.projection is not None:
            x = self.projection(x)  # (batch, seq, hidden)
        x = self.layer_norm(x)
        if input_mask is not None:
            x = x * ops.expand_dims(ops.cast(input_mask, x.dtype), -1)  # padding rows to zero
        return self.dropout_layer(x, training=training)

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "max_sequence_length": self.max_sequence_length,
            "type_vocab_size": self.type_vocab_size,
            "embedding_size": self.embedding_size,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "initializer": keras.initializers.serialize(self.initializer),
        })
        return config


@keras.saving.register_keras_serializable(package="bert_keras")
class DebertaBlock(keras.layers.Layer):
    """A DeBERTa encoder block: `x = LN(x + dropout(attention(x)))`, then `x = LN(x + dropout(ffn(x)))`.

    BERT's post-LayerNorm block (`TransformerEncoderBlock`) with a
    `DisentangledSelfAttention` in place of the plain one: it also takes the
    shared relative embeddings and the bucketed relative positions.

    Args:
        num_heads: int. Number of attention heads.
        intermediate_size: int. Width of the feed-forward inner layer.
        activation: str or callable. Defaults to `"gelu"` (exact).
        position_attention: list of str. `"c2p"` and/or `"p2c"`. Defaults to both.
        share_attention_key: bool. Defaults to `True`.
        dropout: float. Dropout on each sublayer's output (and on the
            relative embeddings) before the residual. Defaults to `0.0`.
        attention_dropout: float. Dropout on the attention probabilities. Defaults to `0.0`.
        layer_norm_epsilon: float. Defaults to `1e-7`.
        kernel_initializer: str or initializer. Defaults to `"glorot_uniform"`.
        bias_initializer: str or initializer. Defaults to `"zeros"`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        inputs: float tensor `(batch, seq, hidden)`.
        relative_embeddings: float `(2 * span, hidden)` (`RelativeEmbeddings`).
        relative_positions: int `(seq, seq)` (`RelativePositionBuckets`).
        attention_mask, attention_bias: as for `DisentangledSelfAttention`.
        training: bool. Whether dropout is applied.
        return_attention_scores: bool. Also return the attention probabilities.

    Returns:
        `(batch, seq, hidden)`, and with `return_attention_scores=True` also
        the probabilities `(batch, num_heads, seq, seq)`.

    Example:
    >>> from bert_keras.layers import RelativeEmbeddings, RelativePositionBuckets
    >>> x = np.zeros((2, 5, 8), "float32")
    >>> block = DebertaBlock(num_heads=2, intermediate_size=16)
    >>> tuple(block(x, RelativeEmbeddings(4, 8)(x), RelativePositionBuckets(4, 16)(x)).shape)
    (2, 5, 8)
    """

    def __init__(self, num_heads, intermediate_size, activation="gelu", position_attention=("c2p", "p2c"),
                 share_attention_key=True, dropout=0.0, attention_dropout=0.0, layer_norm_epsilon=1e-7,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.intermediate_size = check_positive_int("intermediate_size", intermediate_size)
        self.activation = activation
        self.dropout = check_rate("dropout", dropout)
        self.attention_dropout = check_rate("attention_dropout", attention_dropout)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        # Built here (not in build) so that a bad argument fails at construction.
        self.attention = DisentangledSelfAttention(
            num_heads, position_attention=position_attention, share_attention_key=share_attention_key,
            dropout=attention_dropout, relative_dropout=dropout,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer), dtype=self.dtype_policy, name="attention")
        self.feed_forward = FeedForward(
            intermediate_size, activation=activation, kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer), dtype=self.dtype_policy, name="feed_forward")

    @property
    def position_attention(self):
        return self.attention.position_attention

    @property
    def share_attention_key(self):
        return self.attention.share_attention_key

    def build(self, input_shape):
        self.attention.build(input_shape)
        self.feed_forward.build(input_shape)
        for prefix in ("attention", "feed_forward"):
            norm = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy,
                                                   name=f"{prefix}_layer_norm")
            norm.build(input_shape)
            setattr(self, f"{prefix}_layer_norm", norm)
            setattr(self, f"{prefix}_output_dropout",
                    Dropout(self.dropout, dtype=self.dtype_policy, name=f"{prefix}_output_dropout"))
        self.built = True

    def call(self, inputs, relative_embeddings, relative_positions, attention_mask=None, attention_bias=None,
             training=None, return_attention_scores=False):
        x, probs = self.attention(inputs, relative_embeddings, relative_positions, attention_mask=attention_mask,
                                  attention_bias=attention_bias, training=training, return_attention_scores=True)
        shape = ops.shape(inputs)
        # The feed-forward and the norms on the tokens as one matrix: 2-D GEMMs, the bias and the activation fused.
        tokens = ops.reshape(inputs + self.attention_output_dropout(x, training=training), (-1, shape[-1]))
        tokens = self.attention_layer_norm(tokens)  # (batch * seq, hidden)
        tokens = self.feed_forward_layer_norm(
            tokens + self.feed_forward_output_dropout(self.feed_forward(tokens), training=training))
        x = ops.reshape(tokens, shape)  # (batch, seq, hidden)
        if return_attention_scores:
            return x, probs
        return x

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_heads": self.num_heads,
            "intermediate_size": self.intermediate_size,
            "activation": serialize_activation(self.activation),
            "position_attention": list(self.position_attention),
            "share_attention_key": self.share_attention_key,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        })
        return config
