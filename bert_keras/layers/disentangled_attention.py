"""DeBERTa's disentangled self-attention: content-to-content plus content-to-position and position-to-content."""

import keras
from keras import ops

from bert_keras._checks import check_positive_int, check_rate
from bert_keras.layers._utils import clone_initializer
from bert_keras.layers.attention import attention_bias_from_mask
from bert_keras.layers.dropout import Dropout
from bert_keras.layers.lora_dense import LoraDense

POSITION_ATTENTION_KINDS = ("c2p", "p2c")


def _check_position_attention(value):
    kinds = [value] if isinstance(value, str) else value
    if (not isinstance(kinds, (list, tuple)) or any(kind not in POSITION_ATTENTION_KINDS for kind in kinds)
            or len(set(kinds)) != len(kinds)):
        raise ValueError("Received an invalid value for argument `position_attention`, expected a list of distinct "
                         f"entries among {list(POSITION_ATTENTION_KINDS)}. Received: position_attention={value!r}")
    return [kind for kind in POSITION_ATTENTION_KINDS if kind in kinds]


def _shift_distances(by_column, seq_length):
    """`(batch, heads, seq, 2 * seq)` scores against distances `seq - 1, ..., -seq` -> `(batch, heads, seq, seq)`.

    Output `[i, j]` is input `[i, (seq - 1) - (i - j)]`, the column of distance `i - j`: with the rows laid end to
    end, row `i`'s entries start `2 * seq - 1` after row `i - 1`'s, so a cut and a reshape line them up (the
    relative shift of Transformer-XL, Dai et al., 2019) without a gather.
    """
    shape = ops.shape(by_column)
    flat = ops.reshape(by_column, (shape[0], shape[1], -1))  # (batch, heads, 2 * seq * seq)
    flat = flat[:, :, seq_length - 1:seq_length - 1 + seq_length * (2 * seq_length - 1)]
    rows = ops.reshape(flat, (shape[0], shape[1], seq_length, 2 * seq_length - 1))  # (batch, heads, seq, 2 * seq - 1)
    return rows[:, :, :, :seq_length]


@keras.saving.register_keras_serializable(package="bert_keras")
class DisentangledSelfAttention(keras.layers.Layer):
    """Multi-head self-attention with DeBERTa's disentangled relative positions (He et al., 2021).

    The score of query `i` and key `j` adds to the content term `q_i . k_j`
    a content-to-position term `q_i . Kr[b(i - j)]` (`"c2p"`) and a
    position-to-content term `k_j . Qr[b(i - j)]` (`"p2c"`), where `b` is the
    bucketed relative position (`RelativePositionBuckets`), clipped to the
    table, and `Kr`, `Qr` are the shared relative embeddings
    (`RelativeEmbeddings`) projected by this layer's own `key` and `query`
    dense layers (`share_attention_key=True`, DeBERTa-v3) or by separate
    `position_key` / `position_query` layers. The sum is scaled by
    `1 / sqrt(head_size * (1 + len(position_attention)))`, masked, and
    soft-maxed; the heads' context is projected back by `output`.

    Args:
        num_heads: int. Number of heads; must divide the hidden size.
        position_attention: list of str. Which position terms, among `"c2p"`
            and `"p2c"` (transformers' `pos_att_type`). Defaults to both.
        share_attention_key: bool. Project the relative embeddings with the
            content `query` and `key` layers. Defaults to `True`.
        dropout: float. Dropout on the attention probabilities. Defaults to `0.0`.
        relative_dropout: float. Dropout on the relative embeddings before they
            are projected. Defaults to `0.0`.
        kernel_initializer: str or initializer. Defaults to `"glorot_uniform"`.
        bias_initializer: str or initializer. Defaults to `"zeros"`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        inputs: float tensor `(batch, seq, hidden)`.
        relative_embeddings: float `(2 * span, hidden)`; row `span + b` is bucket `b`.
        relative_positions: int `(seq, seq)`, the bucket `b(i - j)` of query `i` and key `j`
            (`RelativePositionBuckets`). It depends on `i - j` alone, so only its first and last
            rows are read.
        attention_mask: optional 0/1 tensor `(batch, seq)` or `(batch, seq, seq)`.
        attention_bias: optional additive bias in place of `attention_mask`
            (`bert_keras.layers.attention_bias_from_mask`), built once per batch.
        training: bool. Whether dropout is applied.
        return_attention_scores: bool. Also return the probabilities.

    Returns:
        `(batch, seq, hidden)`, and with `return_attention_scores=True` also the
        probabilities `(batch, num_heads, seq, seq)`.

    Example:
    >>> from bert_keras.layers import RelativeEmbeddings, RelativePositionBuckets
    >>> x = np.random.rand(2, 5, 8).astype("float32")
    >>> table = RelativeEmbeddings(span=4, hidden_size=8)(x)
    >>> buckets = RelativePositionBuckets(4, 16)(x)
    >>> tuple(DisentangledSelfAttention(num_heads=2)(x, table, buckets, attention_mask=np.ones((2, 5))).shape)
    (2, 5, 8)
    """

    def __init__(self, num_heads, position_attention=("c2p", "p2c"), share_attention_key=True, dropout=0.0,
                 relative_dropout=0.0, kernel_initializer="glorot_uniform", bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.position_attention = _check_position_attention(position_attention)
        self.share_attention_key = bool(share_attention_key)
        self.dropout = check_rate("dropout", dropout)
        self.relative_dropout = check_rate("relative_dropout", relative_dropout)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def _dense(self, name, shape):
        dense = LoraDense(self.hidden_size, kernel_initializer=clone_initializer(self.kernel_initializer),
                          bias_initializer=clone_initializer(self.bias_initializer), dtype=self.dtype_policy,
                          name=name)
        dense.build(shape)
        return dense

    def build(self, input_shape):
        hidden_size = input_shape[-1]
        if hidden_size is None or hidden_size % self.num_heads:
            raise ValueError(f"The hidden size ({hidden_size}) must be known and divisible by `num_heads`. "
                             f"Received: num_heads={self.num_heads}")
        self.hidden_size = hidden_size
        self.head_size = hidden_size // self.num_heads
        shape = (None, hidden_size)
        self.query_dense = self._dense("query", shape)
        self.key_dense = self._dense("key", shape)
        self.value_dense = self._dense("value", shape)
        self.output_dense = self._dense("output", shape)
        self.position_key_dense = self.position_query_dense = None
        if not self.share_attention_key:
            if "c2p" in self.position_attention:
                self.position_key_dense = self._dense("position_key", shape)
            if "p2c" in self.position_attention:
                self.position_query_dense = self._dense("position_query", shape)
        self.relative_dropout_layer = Dropout(self.relative_dropout, dtype=self.dtype_policy, name="relative_dropout")
        self.probs_dropout = Dropout(self.dropout, dtype=self.dtype_policy, name="probs_dropout")
        self.built = True

    @property
    def scale_factor(self):
        """`1 + ` the number of position terms: the scores are divided by `sqrt(head_size * scale_factor)`."""
        return 1 + len(self.position_attention)

    def _heads(self, x, batch_size, seq_length):
        # x: (batch * seq, hidden) -> (batch, heads, seq, head_size)
        x = ops.reshape(x, (batch_size, seq_length, self.num_heads, self.head_size))
        return ops.transpose(x, (0, 2, 1, 3))

    def _table_heads(self, table):
        # table: (rows, hidden) -> (heads, rows, head_size)
        return ops.transpose(ops.reshape(table, (-1, self.num_heads, self.head_size)), (1, 0, 2))

    def position_scores(self, query, key, relative_embeddings, relative_positions, training=None):
        """The unscaled c2p + p2c terms `(batch, heads, seq_q, seq_k)`, or None without position terms.

        `query`, `key`: `(batch, heads, seq, head_size)`, already projected.
        """
        if not self.position_attention:
            return None
        by_distance, table = self._distance_rows(relative_embeddings, relative_positions, training=training)
        seq_length = ops.shape(query)[2]
        scores = 0.0
        if "c2p" in self.position_attention:
            project = self.key_dense if self.share_attention_key else self.position_key_dense
            # Columns: distances seq - 1 ... -(seq - 1), and one more never read (the shift wants 2 * seq).
            rows = ops.concatenate([by_distance, by_distance[-1:]], axis=0)  # (2 * seq,)
            position_key = self._table_heads(ops.take(project(table), rows, axis=0))  # (heads, 2 * seq, head_size)
            by_column = ops.matmul(query, ops.transpose(position_key, (0, 2, 1)))  # (batch, heads, seq_q, 2 * seq)
            scores = scores + _shift_distances(by_column, seq_length)  # (batch, heads, seq_q, seq_k)
        if "p2c" in self.position_attention:
            project = self.query_dense if self.share_attention_key else self.position_query_dense
            # Key j's term for query i reads the bucket of i - j = -(j - i): from key j's side the distances
            # j - i run seq - 1 ... -(seq - 1) over the buckets of their negatives, the list reversed.
            rows = ops.concatenate([ops.flip(by_distance, axis=0), by_distance[:1]], axis=0)  # (2 * seq,)
            position_query = self._table_heads(ops.take(project(table), rows, axis=0))  # (heads, 2 * seq, head_size)
            by_column = ops.matmul(key, ops.transpose(position_query, (0, 2, 1)))  # (batch, heads, seq_k, 2 * seq)
            scores = scores + ops.transpose(_shift_distances(by_column, seq_length), (0, 1, 3, 2))  # (b, h, q, k)
        return scores

    def _distance_rows(self, relative_embeddings, relative_positions, training=None):
        """The rows of distances `seq - 1, ..., -(seq - 1)` in the table cut to the rows they reach, and that table.

        Returns `(rows, table)`: int32 `(2 * seq - 1,)` and the reached rows of the relative embeddings
        `(reached, hidden)` after the relative dropout. `rows` depends on the length alone: constant under XLA.
        """
        span = ops.shape(relative_embeddings)[0] // 2
        buckets = ops.cast(relative_positions, "int32")  # (seq, seq): bucket(i - j), the same along each diagonal
        # The last row holds the distances seq - 1 ... 0, the first row from its second column -1 ... -(seq - 1).
        rows = ops.clip(ops.concatenate([buckets[-1], buckets[0, 1:]], axis=0) + span, 0, 2 * span - 1)
        # Only the rows the distances reach are projected (for short texts a fraction of the table).
        low = ops.min(rows)
        table = ops.slice(relative_embeddings, [low, 0], [ops.max(rows) - low + 1, ops.shape(relative_embeddings)[1]])
        return rows - low, self.relative_dropout_layer(table, training=training)

    def call(self, inputs, relative_embeddings, relative_positions, attention_mask=None, attention_bias=None,
             training=None, return_attention_scores=False):
        shape = ops.shape(inputs)
        batch_size, seq_length = shape[0], shape[1]
        tokens = ops.reshape(inputs, (-1, self.hidden_size))  # (batch * seq, hidden)
        query = self._heads(self.query_dense(tokens), batch_size, seq_length)  # (batch, heads, seq, head_size)
        key = self._heads(self.key_dense(tokens), batch_size, seq_length)  # (batch, heads, seq, head_size)
        value = self._heads(self.value_dense(tokens), batch_size, seq_length)  # (batch, heads, seq, head_size)
        # The scale goes on the queries, 4x smaller than the scores at 128 tokens of 32-wide heads; the position
        # terms are linear in the query (c2p) and the key (p2c), so with the keys scaled as well they come out scaled.
        scale = ops.cast(1.0 / float(self.head_size * self.scale_factor) ** 0.5, self.compute_dtype)
        scaled_query = query * scale  # (batch, heads, seq, head_size)
        scores = ops.matmul(scaled_query, ops.transpose(key, (0, 1, 3, 2)))  # (batch, heads, seq_q, seq_k)
        position = self.position_scores(scaled_query, key * scale, relative_embeddings, relative_positions,
                                        training=training)
        if attention_bias is None and attention_mask is not None:
            attention_bias = attention_bias_from_mask(attention_mask)
        # The softmax runs in float32 under mixed precision.
        scores = ops.cast(scores, "float32")
        if position is not None:
            scores = scores + ops.cast(position, "float32")
        if attention_bias is not None:
            scores = scores + ops.cast(attention_bias, "float32")
        probs = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)  # (batch, heads, seq_q, seq_k)
        context = ops.matmul(self.probs_dropout(probs, training=training), value)  # (batch, heads, seq, head_size)
        context = ops.reshape(ops.transpose(context, (0, 2, 1, 3)), (-1, self.hidden_size))  # (batch * seq, hidden)
        outputs = ops.reshape(self.output_dense(context), (batch_size, seq_length, self.hidden_size))
        if return_attention_scores:
            return outputs, probs
        return outputs

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_heads": self.num_heads,
            "position_attention": list(self.position_attention),
            "share_attention_key": self.share_attention_key,
            "dropout": self.dropout,
            "relative_dropout": self.relative_dropout,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        })
        return config
