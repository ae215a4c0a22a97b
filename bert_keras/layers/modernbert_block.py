"""ModernBERT's parts (Warner et al., 2024): embeddings without positions, rotary self-attention over a full or a
sliding window, and the pre-LayerNorm block with a GeGLU feed-forward."""

import keras
import tensorflow as tf
from keras import ops

from bert_keras._checks import check_positive_float, check_positive_int, check_rate
from bert_keras.layers._utils import clone_initializer, serialize_activation
from bert_keras.layers.attention import _MASK_NEGATIVE, _softmax_dtype, attention_bias_from_mask
from bert_keras.layers.dropout import Dropout
from bert_keras.layers.geglu import GatedFeedForward, _check_bool
from bert_keras.layers.lora_dense import LoraDense
from bert_keras.layers.rotary import RotaryEmbedding


# From this many tokens on, a local layer that is not asked for its probabilities attends in bands
# (`banded_attention`); below it the dense mask is as fast (docs/performance.md, "Long documents").
BANDED_MIN_LENGTH = 512
# A global layer not asked for its probabilities attends this many queries at a time, from twice as many tokens on.
QUERY_CHUNK = 512


def _check_window(attention_window):
    """None (full attention) or a positive int (a sliding window of that many tokens)."""
    return None if attention_window is None else check_positive_int("attention_window", attention_window)


def sliding_window_bias(attention_mask, attention_window=None):
    """The additive float32 bias of padding and, for a local layer, of a sliding window.

    A query at position `i` may attend to a real (unpadded) key at `j` where
    `|i - j| <= attention_window // 2` (ModernBERT's `local_attention=128`:
    64 positions on either side, 129 keys). The window is applied as a dense
    `(seq, seq)` mask over full attention, as transformers does on CPU.

    Args:
        attention_mask: 0/1 int or bool tensor `(batch, seq)`, 1 for real tokens.
        attention_window: optional int. The window's width in tokens; None
            for full attention (padding only).

    Returns:
        float32 `(batch, 1, 1, seq)` for full attention, `(batch, 1, seq, seq)`
        with a window: 0 where allowed, -1e9 where not.

    Example:
    >>> bias = sliding_window_bias(np.ones((1, 5), "int32"), attention_window=2)
    >>> (np.asarray(bias[0, 0]) == 0).astype(int).tolist()[0]  # position 0 sees 0 and 1
    [1, 1, 0, 0, 0]
    """
    attention_window = _check_window(attention_window)
    if attention_window is None:
        return attention_bias_from_mask(attention_mask)
    positions = ops.arange(ops.shape(attention_mask)[1])  # (seq,)
    distance = ops.abs(ops.expand_dims(positions, 1) - ops.expand_dims(positions, 0))  # (seq_q, seq_k)
    band = ops.expand_dims(distance <= attention_window // 2, 0)  # (1, seq_q, seq_k)
    keys = ops.expand_dims(ops.cast(attention_mask, "bool"), 1)  # (batch, 1, seq_k)
    return attention_bias_from_mask(ops.logical_and(band, keys))  # (batch, 1, seq_q, seq_k)


def _with_neighbours(blocks):
    """`(..., num_blocks + 2, block, ...)` -> each of the middle blocks beside its two neighbours, on the block axis.

    The block axis is the one after the blocks' axis: `(batch, heads, n + 2, block, d)` gives
    `(batch, heads, n, 3 * block, d)` (keys before, own, after); `(batch, n + 2, block)` gives `(batch, n, 3 * block)`.
    """
    axis = 3 if len(blocks.shape) == 5 else 2
    if axis == 3:
        return tf.concat([blocks[:, :, :-2], blocks[:, :, 1:-1], blocks[:, :, 2:]], axis=axis)
    return tf.concat([blocks[:, :-2], blocks[:, 1:-1], blocks[:, 2:]], axis=axis)


def banded_attention(query, key, value, attention_mask, attention_window, scale=1.0, softmax_dtype="float32",
                     dropout=None):
    """Sliding-window attention computed in bands: cost and memory linear in the length.

    The sequence is padded to a multiple of a block of `w = attention_window // 2`
    tokens; each block of queries attends to its own block of keys and its two
    neighbours (`3 * w` keys), under the exact band `|i - j| <= w` and the
    padding mask, so a layer computes `seq * 3 * w` scores instead of
    `seq * seq`. Equal to `sliding_window_bias`'s dense mask over full attention
    on every real query.

    Args:
        query, key, value: float tensors `(batch, heads, seq, head_size)`,
            positions already rotated.
        attention_mask: 0/1 tensor `(batch, seq)` of real tokens.
        attention_window: int. The window's width in tokens.
        scale: float. The scores' factor (`1 / sqrt(head_size)`). Defaults to `1.0`.
        softmax_dtype: the dtype the scores and softmax run in. Defaults to `"float32"`.
        dropout: optional callable on the probabilities before they weigh the
            values (a `Dropout` layer). Defaults to `None`.

    Returns:
        `(context, probs)`: context `(batch, heads, seq, head_size)` in `value`'s
        dtype; probs `(batch, heads, num_blocks, w, 3 * w)`, the band's probabilities.

    Example:
    >>> q = np.random.default_rng(0).normal(size=(1, 1, 10, 4)).astype("float32")
    >>> context, probs = banded_attention(q, q, q, np.ones((1, 10)), attention_window=4)
    >>> tuple(context.shape), tuple(probs.shape)
    ((1, 1, 10, 4), (1, 1, 5, 2, 6))
    """
    half = attention_window // 2
    block = max(half, 1)
    shape = tf.shape(query)
    batch_size, num_heads, seq_length, head_size = shape[0], shape[1], shape[2], shape[3]
    num_blocks = (seq_length + block - 1) // block
    pad = num_blocks * block - seq_length
    # Queries padded to whole blocks; keys, values and mask by one more block on either side (never attended to).
    query = tf.pad(query, [[0, 0], [0, 0], [0, pad], [0, 0]])
    sides = [[0, 0], [0, 0], [block, pad + block], [0, 0]]
    key, value = tf.pad(key, sides), tf.pad(value, sides)
    mask = tf.pad(tf.cast(attention_mask, softmax_dtype), [[0, 0], [block, pad + block]])  # (batch, (n + 2) * w)
    query = tf.reshape(query, [batch_size, num_heads, num_blocks, block, head_size])  # (batch, heads, n, w, d)
    blocks = [batch_size, num_heads, num_blocks + 2, block, head_size]
    key = _with_neighbours(tf.reshape(key, blocks))  # (batch, heads, n, 3w, d)
    value = _with_neighbours(tf.reshape(value, blocks))  # (batch, heads, n, 3w, d)
    mask = _with_neighbours(tf.reshape(mask, [batch_size, num_blocks + 2, block]))  # (batch, n, 3w)
    # Query `a` of block `b` sits at `b * w + a`, key `c` of its neighbourhood at `(b - 1) * w + c`.
    offsets = tf.range(block)[:, None] + block - tf.range(3 * block)[None, :]  # (w, 3w)
    band = tf.cast(tf.abs(offsets) <= half, softmax_dtype)  # (w, 3w)
    allowed = band[None, None] * mask[:, :, None, :]  # (batch, n, w, 3w)
    bias = tf.expand_dims((1.0 - allowed) * _MASK_NEGATIVE, 1)  # (batch, 1, n, w, 3w)
    scores = tf.cast(tf.linalg.matmul(query, key, transpose_b=True), softmax_dtype)  # (batch, heads, n, w, 3w)
    probs = tf.cast(tf.nn.softmax(scores * tf.cast(scale, softmax_dtype) + bias, axis=-1), value.dtype)
    weights = probs if dropout is None else dropout(probs)
    context = tf.linalg.matmul(weights, value)  # (batch, heads, n, w, d)
    context = tf.reshape(context, [batch_size, num_heads, num_blocks * block, head_size])
    return context[:, :, :seq_length], probs  # (batch, heads, seq, d)


def _keys_only(attention_bias):
    """Whether a bias is None or of the keys only, `(batch, 1, 1, seq)`: the same for every query."""
    return attention_bias is None or (len(attention_bias.shape) == 4 and attention_bias.shape[2] == 1)


def chunked_attention(query, key, value, attention_bias=None, scale=1.0, softmax_dtype="float32"):
    """Full attention computed `QUERY_CHUNK` queries at a time: the same context, the scores never all at once.

    Args:
        query, key, value: float tensors `(batch, heads, seq, head_size)`.
        attention_bias: optional float bias of the keys, `(batch, 1, 1, seq)`.
        scale: float. The scores' factor. Defaults to `1.0`.
        softmax_dtype: the dtype the scores and softmax run in. Defaults to `"float32"`.

    Returns:
        The context `(batch, heads, seq, head_size)`; at most `(batch, heads,
        QUERY_CHUNK, seq)` scores exist at once.

    Example:
    >>> q = np.random.default_rng(0).normal(size=(1, 2, 1100, 4)).astype("float32")
    >>> tuple(chunked_attention(q, q, q).shape)
    (1, 2, 1100, 4)
    """
    shape = tf.shape(query)
    batch_size, num_heads, seq_length, head_size = shape[0], shape[1], shape[2], shape[3]
    num_chunks = (seq_length + QUERY_CHUNK - 1) // QUERY_CHUNK
    query = tf.pad(query, [[0, 0], [0, 0], [0, num_chunks * QUERY_CHUNK - seq_length], [0, 0]])
    query = tf.reshape(query, [batch_size, num_heads, num_chunks, QUERY_CHUNK, head_size])
    query = tf.transpose(query, [2, 0, 1, 3, 4])  # (chunks, batch, heads, chunk, d)

    def attend(chunk):  # (batch, heads, chunk, d)
        # The queries scaled, not the scores: one (chunk, seq) tensor fewer.
        scores = tf.linalg.matmul(chunk * tf.cast(scale, chunk.dtype), key, transpose_b=True)
        scores = tf.cast(scores, softmax_dtype)  # (batch, heads, chunk, seq)
        if attention_bias is not None:
            scores = scores + tf.cast(attention_bias, softmax_dtype)
        return tf.linalg.matmul(tf.cast(tf.nn.softmax(scores, axis=-1), value.dtype), value)  # (batch, heads, chunk, d)

    context = tf.map_fn(attend, query, parallel_iterations=1, fn_output_signature=value.dtype)
    context = tf.reshape(tf.transpose(context, [1, 2, 0, 3, 4]), [batch_size, num_heads, -1, head_size])
    return context[:, :, :seq_length]  # (batch, heads, seq, d)


@keras.saving.register_keras_serializable(package="bert_keras")
class SlidingWindowBias(keras.layers.Layer):
    """`sliding_window_bias` as a layer: one bias per batch, shared by every layer of its kind.

    Args:
        attention_window: optional int. The window's width in tokens; None
            for full attention. Defaults to `None`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        attention_mask: 0/1 tensor `(batch, seq)`.

    Returns:
        float32 `(batch, 1, 1, seq)`, or `(batch, 1, seq, seq)` with a window.

    Example:
    >>> tuple(SlidingWindowBias(attention_window=4)(np.ones((2, 6), "int32")).shape)
    (2, 1, 6, 6)
    """

    def __init__(self, attention_window=None, **kwargs):
        super().__init__(**kwargs)
        self.attention_window = _check_window(attention_window)

    def call(self, attention_mask):
        return sliding_window_bias(attention_mask, self.attention_window)

    def compute_output_shape(self, input_shape):
        seq = 1 if self.attention_window is None else input_shape[1]
        return (input_shape[0], 1, seq, input_shape[1])

    def compute_output_spec(self, attention_mask):
        return keras.KerasTensor(self.compute_output_shape(attention_mask.shape), dtype="float32")

    def get_config(self):
        config = super().get_config()
        config.update({"attention_window": self.attention_window})
        return config


@keras.saving.register_keras_serializable(package="bert_keras")
class RotarySelfAttention(keras.layers.Layer):
    """Multi-head self-attention with rotary positions and an optional sliding window (ModernBERT's `attn`).

    One fused projection (`qkv`, `hidden -> 3 * hidden`: queries, keys and
    values in that order, ModernBERT's `Wqkv`), a `RotaryEmbedding` of theta
    `rope_theta` on queries and keys, scaled dot products under an additive
    bias, and the output projection (`output`, ModernBERT's `Wo`). Both
    projections are `LoraDense` layers. The softmax runs in float32.

    A sliding window given as `attention_mask` (not as a ready bias), on a
    sequence of at least `banded_min_length` tokens and without
    `return_attention_scores`, is computed in bands (`banded_attention`):
    cost and memory linear in the length. Full attention under a bias of the
    keys only, from `2 * QUERY_CHUNK` tokens on and without probabilities or
    dropout, is computed `QUERY_CHUNK` queries at a time (`chunked_attention`:
    memory linear in the length). Otherwise the window is a dense `(seq, seq)`
    mask over full attention, which also gives the probabilities.

    Args:
        num_heads: int. Number of heads; must divide the hidden size.
        rope_theta: float. The rotary base wavelength. Defaults to `10000.0`.
        attention_window: optional int. A sliding window of this many
            tokens (`|i - j| <= attention_window // 2`); None: full attention.
            Used where the call passes `attention_mask`, not a ready bias.
            Defaults to `None`.
        use_bias: bool. Biases in both projections. Defaults to `False`.
        dropout: float. Dropout on the probabilities and on the output.
            Defaults to `0.0`.
        kernel_initializer: str or initializer. Defaults to `"glorot_uniform"`.
        bias_initializer: str or initializer. Defaults to `"zeros"`.
        banded_min_length: int. The shortest sequence a local layer attends
            to in bands. Defaults to `BANDED_MIN_LENGTH`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        inputs: float tensor `(batch, seq, hidden)`.
        attention_mask: optional 0/1 tensor `(batch, seq)` of real tokens.
        attention_bias: optional float bias broadcastable to
            `(batch, heads, seq, seq)` (`sliding_window_bias`); takes the
            place of `attention_mask` (and so of the bands).
        training: bool. Whether dropout is applied.
        return_attention_scores: bool. Also return the probabilities.

    Returns:
        `(batch, seq, hidden)`, and with `return_attention_scores=True` also
        the probabilities `(batch, num_heads, seq, seq)`.

    Example:
    >>> layer = RotarySelfAttention(num_heads=2, attention_window=4)
    >>> tuple(layer(np.random.rand(2, 6, 8), attention_mask=np.ones((2, 6))).shape)
    (2, 6, 8)
    """

    def __init__(self, num_heads, rope_theta=10000.0, attention_window=None, use_bias=False, dropout=0.0,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", banded_min_length=BANDED_MIN_LENGTH,
                 **kwargs):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.rope_theta = check_positive_float("rope_theta", rope_theta)
        self.attention_window = _check_window(attention_window)
        self.banded_min_length = check_positive_int("banded_min_length", banded_min_length)
        self.use_bias = _check_bool("use_bias", use_bias)
        self.dropout = check_rate("dropout", dropout)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, input_shape):
        hidden_size = input_shape[-1]
        if hidden_size is None or hidden_size % self.num_heads or (hidden_size // self.num_heads) % 2:
            raise ValueError(
                f"The hidden size must be known and divisible by `num_heads` into heads of even size (RoPE rotates "
                f"pairs). Received: input_shape={input_shape}, num_heads={self.num_heads}"
            )
        self.hidden_size, self.head_size = hidden_size, hidden_size // self.num_heads
        for name, units in (("qkv", 3 * hidden_size), ("output", hidden_size)):
            dense = LoraDense(units, use_bias=self.use_bias, kernel_initializer=clone_initializer(self.kernel_initializer),
                              bias_initializer=clone_initializer(self.bias_initializer), dtype=self.dtype_policy, name=name)
            dense.build((None, hidden_size))
            setattr(self, f"{name}_dense", dense)
        self.rotary = RotaryEmbedding(self.rope_theta, sequence_axis=-2, dtype=self.dtype_policy, name="rotary")
        self.rotary.build((None, self.num_heads, None, self.head_size))
        self.probs_dropout = Dropout(self.dropout, dtype=self.dtype_policy, name="probs_dropout")
        self.output_dropout = Dropout(self.dropout, dtype=self.dtype_policy, name="output_dropout")
        self.built = True

    def call(self, inputs, attention_mask=None, attention_bias=None, training=None, return_attention_scores=False):
        shape = ops.shape(inputs)
        batch_size, seq_length = shape[0], shape[1]
        qkv = self.qkv_dense(ops.reshape(inputs, (-1, self.hidden_size)))  # (batch * seq, 3 * hidden)
        qkv = ops.reshape(qkv, (batch_size, seq_length, 3, self.num_heads, self.head_size))
        qkv = ops.transpose(qkv, (2, 0, 3, 1, 4))  # (3, batch, heads, seq, head_size)
        query, key, value = qkv[0], qkv[1], qkv[2]  # each (batch, heads, seq, head_size)
        query, key = self.rotary(query), self.rotary(key)
        dense = lambda: self._dense_attention(query, key, value, attention_mask, attention_bias, training)
        if return_attention_scores:
            context, probs = dense()
        elif self.attention_window is not None and attention_bias is None and attention_mask is not None:
            # A local layer asked for its outputs only: in bands where the sequence is long enough to gain.
            context = self._by_length(inputs, self.banded_min_length, dense, lambda: self._banded_attention(
                query, key, value, attention_mask, training))
            probs = None
        elif self.attention_window is None and _keys_only(attention_bias) and not (self.dropout and training):
            # A global layer: full attention, a block of queries at a time, so that a long sequence's scores are
            # never whole (memory linear in the length; the cost stays quadratic).
            context = self._by_length(inputs, 2 * QUERY_CHUNK, dense, lambda: chunked_attention(
                query, key, value, attention_bias, scale=1.0 / self.head_size**0.5,
                softmax_dtype=_softmax_dtype(self.compute_dtype)))
            probs = None
        else:
            context, probs = dense()
        context = ops.transpose(context, (0, 2, 1, 3))  # (batch, seq, heads, head_size)
        outputs = self.output_dense(ops.reshape(context, (-1, self.hidden_size)))  # (batch * seq, hidden)
        outputs = ops.reshape(outputs, (batch_size, seq_length, self.hidden_size))  # (batch, seq, hidden)
        outputs = self.output_dropout(outputs, training=training)
        return (outputs, probs) if return_attention_scores else outputs

    def _by_length(self, inputs, min_length, dense, other):
        """`other()` from `min_length` tokens on, else the dense context; decided in the graph for an unknown length."""
        static_length = inputs.shape[1]
        if static_length is not None:
            return other() if static_length >= min_length else dense()[0]
        return tf.cond(ops.shape(inputs)[1] >= min_length, other, lambda: dense()[0])

    def _dense_attention(self, query, key, value, attention_mask, attention_bias, training):
        """Full attention under an additive bias (the window as a dense mask): context and probabilities."""
        softmax_dtype = _softmax_dtype(self.compute_dtype)
        scores = tf.linalg.matmul(query, key, transpose_b=True)  # (batch, heads, seq_q, seq_k)
        scores = ops.cast(scores, softmax_dtype) * ops.cast(1.0 / self.head_size**0.5, softmax_dtype)
        if attention_bias is None and attention_mask is not None:
            attention_bias = sliding_window_bias(attention_mask, self.attention_window)
        if attention_bias is not None:
            scores = scores + ops.cast(attention_bias, softmax_dtype)
        probs = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)  # (batch, heads, seq_q, seq_k)
        context = ops.matmul(self.probs_dropout(probs, training=training), value)  # (batch, heads, seq, head_size)
        return context, probs

    def _banded_attention(self, query, key, value, attention_mask, training):
        """The sliding window in bands (`banded_attention`): the context `(batch, heads, seq, head_size)`."""
        context, _ = banded_attention(
            query, key, value, attention_mask, self.attention_window, scale=1.0 / self.head_size**0.5,
            softmax_dtype=_softmax_dtype(self.compute_dtype),
            dropout=lambda probs: self.probs_dropout(probs, training=training))
        return context

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_heads": self.num_heads,
            "rope_theta": self.rope_theta,
            "attention_window": self.attention_window,
            "use_bias": self.use_bias,
            "dropout": self.dropout,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "banded_min_length": self.banded_min_length,
        })
        return config


def _layer_norm(epsilon, use_bias, dtype, name):
    """ModernBERT's LayerNorm: a scale, and a bias only where the config's `norm_bias` says so."""
    return keras.layers.LayerNormalization(epsilon=epsilon, center=use_bias, dtype=dtype, name=name)


@keras.saving.register_keras_serializable(package="bert_keras")
class ModernBertBlock(keras.layers.Layer):
    """A ModernBERT encoder layer: pre-LayerNorm rotary attention and GeGLU feed-forward, with residuals.

    `x = x + attention(LN(x))`, then `x = x + feed_forward(LN(x))`. The first
    layer of ModernBERT has no attention LayerNorm (the embeddings end with
    one): `attention_norm=False`. A local layer attends within a sliding
    window (`attention_window`, with the local `rope_theta`), a global one
    over the whole sequence.

    Args:
        num_heads: int. Number of attention heads.
        intermediate_size: int. Width of each half of the GeGLU.
        activation: str or callable. The GeGLU's activation. Defaults to `"gelu"`.
        rope_theta: float. The rotary base wavelength. Defaults to `10000.0`.
        attention_window: optional int. A sliding window of this many tokens;
            None: full attention. Defaults to `None`.
        attention_norm: bool. Whether the attention has a LayerNorm before it.
            Defaults to `True`.
        layer_norm_epsilon: float. Defaults to `1e-5`.
        use_attention_bias: bool. Biases in the attention's projections. Defaults to `False`.
        use_mlp_bias: bool. Biases in the feed-forward's. Defaults to `False`.
        use_norm_bias: bool. Biases (centers) in the LayerNorms. Defaults to `False`.
        attention_dropout: float. Defaults to `0.0`.
        mlp_dropout: float. Defaults to `0.0`.
        kernel_initializer: str or initializer. Defaults to `"glorot_uniform"`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        inputs: float tensor `(batch, seq, hidden)`.
        attention_mask: optional 0/1 tensor `(batch, seq)` of real tokens.
        attention_bias: optional additive bias in its place (`sliding_window_bias`,
            with this layer's window), built once per batch and shared.
        training: bool. Whether dropout is applied.
        return_attention_scores: bool. Also return the probabilities.

    Returns:
        `(batch, seq, hidden)`, and with `return_attention_scores=True` also
        the probabilities `(batch, num_heads, seq, seq)`.

    Example:
    >>> block = ModernBertBlock(num_heads=2, intermediate_size=12, attention_window=4)
    >>> tuple(block(np.zeros((2, 6, 8)), attention_mask=np.ones((2, 6))).shape)
    (2, 6, 8)
    """

    def __init__(self, num_heads, intermediate_size, activation="gelu", rope_theta=10000.0, attention_window=None,
                 attention_norm=True, layer_norm_epsilon=1e-5, use_attention_bias=False, use_mlp_bias=False,
                 use_norm_bias=False, attention_dropout=0.0, mlp_dropout=0.0, kernel_initializer="glorot_uniform",
                 **kwargs):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.intermediate_size = check_positive_int("intermediate_size", intermediate_size)
        self.activation = activation
        self.rope_theta = check_positive_float("rope_theta", rope_theta)
        self.attention_window = _check_window(attention_window)
        self.attention_norm = _check_bool("attention_norm", attention_norm)
        self.layer_norm_epsilon = check_positive_float("layer_norm_epsilon", layer_norm_epsilon)
        self.use_attention_bias = _check_bool("use_attention_bias", use_attention_bias)
        self.use_mlp_bias = _check_bool("use_mlp_bias", use_mlp_bias)
        self.use_norm_bias = _check_bool("use_norm_bias", use_norm_bias)
        self.attention_dropout = check_rate("attention_dropout", attention_dropout)
        self.mlp_dropout = check_rate("mlp_dropout", mlp_dropout)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        # Built here (not in build) so that a bad activation fails at construction.
        self.feed_forward = GatedFeedForward(
            self.intermediate_size, activation=activation, use_bias=self.use_mlp_bias, dropout=self.mlp_dropout,
            kernel_initializer=clone_initializer(self.kernel_initializer), dtype=self.dtype_policy, name="feed_forward")

    def build(self, input_shape):
        self.attention = RotarySelfAttention(
            self.num_heads, rope_theta=self.rope_theta, attention_window=self.attention_window,
            use_bias=self.use_attention_bias, dropout=self.attention_dropout,
            kernel_initializer=clone_initializer(self.kernel_initializer), dtype=self.dtype_policy, name="attention")
        self.attention.build(input_shape)
        self.feed_forward.build(input_shape)
        self.attention_layer_norm = None
        if self.attention_norm:
            self.attention_layer_norm = _layer_norm(self.layer_norm_epsilon, self.use_norm_bias, self.dtype_policy,
                                                    "attention_layer_norm")
            self.attention_layer_norm.build(input_shape)
        self.feed_forward_layer_norm = _layer_norm(self.layer_norm_epsilon, self.use_norm_bias, self.dtype_policy,
                                                   "feed_forward_layer_norm")
        self.feed_forward_layer_norm.build(input_shape)
        self.built = True

    def call(self, inputs, attention_mask=None, attention_bias=None, training=None, return_attention_scores=False):
        x = inputs if self.attention_layer_norm is None else self.attention_layer_norm(inputs)
        # Asked for probabilities only where the caller wants them: without, a local layer may attend in bands.
        x = self.attention(x, attention_mask=attention_mask, attention_bias=attention_bias, training=training,
                           return_attention_scores=return_attention_scores)
        x, probs = x if return_attention_scores else (x, None)
        x = inputs + x  # (batch, seq, hidden)
        x = x + self.feed_forward(self.feed_forward_layer_norm(x), training=training)
        return (x, probs) if return_attention_scores else x

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_heads": self.num_heads,
            "intermediate_size": self.intermediate_size,
            "activation": serialize_activation(self.activation),
            "rope_theta": self.rope_theta,
            "attention_window": self.attention_window,
            "attention_norm": self.attention_norm,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "use_attention_bias": self.use_attention_bias,
            "use_mlp_bias": self.use_mlp_bias,
            "use_norm_bias": self.use_norm_bias,
            "attention_dropout": self.attention_dropout,
            "mlp_dropout": self.mlp_dropout,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        })
        return config


@keras.saving.register_keras_serializable(package="bert_keras")
class ModernBertEmbeddings(keras.layers.Layer):
    """ModernBERT's embeddings: the token table, a LayerNorm and dropout; no positions (RoPE adds them in attention).

    Args:
        vocab_size: int. Rows of the token table.
        hidden_size: int. Its width.
        layer_norm_epsilon: float. Defaults to `1e-5`.
        use_norm_bias: bool. A bias (center) in the LayerNorm. Defaults to `False`.
        dropout: float. Defaults to `0.0`.
        initializer: str or initializer of the table. Defaults to `"glorot_uniform"`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        input_ids: int tensor `(batch, seq)`.
        input_type_ids: ignored (ModernBERT has no segments); taken as
            `BertEmbeddings` takes it, so that code for the family runs.
        training: bool. Whether dropout is applied.

    Returns:
        `(batch, seq, hidden_size)`.

    Example:
    >>> tuple(ModernBertEmbeddings(vocab_size=10, hidden_size=8)(np.zeros((2, 3), "int32")).shape)
    (2, 3, 8)
    """

    def __init__(self, vocab_size, hidden_size, layer_norm_epsilon=1e-5, use_norm_bias=False, dropout=0.0,
                 initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.layer_norm_epsilon = check_positive_float("layer_norm_epsilon", layer_norm_epsilon)
        self.use_norm_bias = _check_bool("use_norm_bias", use_norm_bias)
        self.dropout = check_rate("dropout", dropout)
        self.initializer = keras.initializers.get(initializer)
        self.word_embeddings = keras.layers.Embedding(vocab_size, hidden_size, embeddings_initializer=self.initializer,
                                                      dtype=self.dtype_policy, name="word_embeddings")
        self.layer_norm = _layer_norm(self.layer_norm_epsilon, use_norm_bias, self.dtype_policy, "layer_norm")
        self.embeddings_dropout = Dropout(dropout, dtype=self.dtype_policy, name="dropout")

    def build(self, input_shape=None):
        self.word_embeddings.build()
        self.layer_norm.build((None, None, self.hidden_size))
        self.built = True

    def call(self, input_ids, input_type_ids=None, training=None):
        x = self.layer_norm(self.word_embeddings(input_ids))  # (batch, seq, hidden)
        return self.embeddings_dropout(x, training=training)

    def compute_output_shape(self, input_ids_shape, input_type_ids_shape=None):
        return tuple(input_ids_shape) + (self.hidden_size,)

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "use_norm_bias": self.use_norm_bias,
            "dropout": self.dropout,
            "initializer": keras.initializers.serialize(self.initializer),
        })
        return config
