"""Multi-head scaled dot-product self-attention."""

import keras
import tensorflow as tf
from keras import ops

from bert_keras._checks import check_positive_int, check_rate
from bert_keras._platform.keras_private import onednn_enabled
from bert_keras.layers._utils import clone_initializer
from bert_keras.layers.dropout import Dropout, dropout_keep_mask, next_seed
from bert_keras.layers.lora_dense import LoraDense
from bert_keras.layers.packing import pack_heads, unpack_heads


# Added to the scores of masked positions before the softmax.
_MASK_NEGATIVE = -1e9


def _softmax_dtype(compute_dtype):
    """The dtype the softmax runs in: the compute dtype where that is as exact as float32, else float32.

    oneDNN's softmax (what TensorFlow runs in a traced graph when oneDNN is on)
    accumulates bfloat16 inputs in float32: its bfloat16 probabilities equal
    float32's rounded to bfloat16 (measured: max difference 0 over 6.3M
    scores), and it saves the two casts around the largest tensor of a block.
    Eigen's bfloat16 softmax (oneDNN off, and eager ops) sums in bfloat16,
    five times less exactly, so there the scores are cast to float32 first.
    """
    if compute_dtype == "float32" or tf.executing_eagerly() or not onednn_enabled():
        return "float32"
    return compute_dtype if compute_dtype == "bfloat16" else "float32"


def attention_bias_from_mask(attention_mask):
    """The additive float32 bias of a 0/1 attention mask: 0 where allowed, -1e9 where not.

    Build it once per batch and pass it to every layer as `attention_bias`
    (`BertEncoder` does), instead of converting the mask in each layer.

    Args:
        attention_mask: 0/1 (or boolean) tensor, 1 where attention is allowed:
            `(batch, seq_k)` or `(batch, seq_q, seq_k)`.

    Returns:
        float32 `(batch, 1, 1, seq_k)` or `(batch, 1, seq_q, seq_k)`.
    """
    mask = ops.cast(attention_mask, "float32")
    # `expand_dims`, not `mask[:, None, None, :]`: a slice that adds axes cannot be lowered to LiteRT's builtin ops
    # when the batch and length are unknown (tests/layers/test_litert_lowering.py).
    if len(mask.shape) == 2:
        mask = ops.expand_dims(ops.expand_dims(mask, 1), 1)  # (batch, 1, 1, seq_k)
    elif len(mask.shape) == 3:
        mask = ops.expand_dims(mask, 1)  # (batch, 1, seq_q, seq_k)
    else:
        raise ValueError(
            "Expected `attention_mask` of rank 2 (batch, seq) or 3 (batch, seq, seq). "
            f"Received: attention_mask.shape={attention_mask.shape}"
        )
    # (Equal to `(1 - mask) * -1e9` for 0/1 masks; `where` also keeps Keras'
    # symbolic tensors dense in functional models.)
    return ops.where(mask > 0.5, 0.0, _MASK_NEGATIVE)


@keras.saving.register_keras_serializable(package="bert_keras")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head self-attention as in "Attention Is All You Need".

    The input is projected to queries, keys and values (`query`, `key`, `value`
    dense layers, each `hidden -> hidden`, applied as 2-D GEMMs to the flattened
    `(batch * seq, hidden)` tokens), split into `num_heads` heads of size
    `hidden // num_heads`, attended with scaled dot products under an additive
    padding mask, and the heads are concatenated and projected back (`output`).
    Each projection is a `LoraDense`, which `bert_keras.lora.enable_lora` can
    give LoRA adapters.
    Under mixed precision the softmax accumulates in float32 (in bfloat16
    graphs with oneDNN, TensorFlow's default on CPU, its kernel does so itself).

    Args:
        num_heads: int. Number of attention heads; must divide the hidden size
            of the input.
        dropout: float. Dropout rate on the attention probabilities. Defaults
            to `0.0`.
        kernel_initializer: str or initializer. Initializer of the four dense
            kernels. Defaults to `"glorot_uniform"`.
        bias_initializer: str or initializer. Initializer of the biases.
            Defaults to `"zeros"`.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: float tensor `(batch, seq, hidden)`.
        attention_mask: optional 0/1 (or boolean) tensor, 1 where attention is
            allowed: `(batch, seq)` for a padding mask over keys, or
            `(batch, seq, seq)` for a full query-by-key mask.
        training: bool. Whether dropout is applied.
        return_attention_scores: bool. If `True`, also return the attention
            probabilities.
        attention_bias: optional float tensor broadcastable to
            `(batch, num_heads, seq_q, seq_k)`, added to the scores; takes the
            place of `attention_mask` (see `attention_bias_from_mask`).
        packing: optional tuple `(token_index, position_index)` from
            `bert_keras.layers.PackedTokenIndex`. With it, `inputs` are the
            packed tokens `(n_packed, hidden)`: the four projections run on them
            alone, and only the attention products use the padded layout.
            Every position that is not packed must be masked out as a key.
        first_token_only: bool. Attend from the first position alone: the
            keys and values come from every position, the query from the
            first, so the output is `(batch, 1, hidden)` (what a pooled
            output needs of the last block). Not with `packing`.

    Returns:
        `(batch, seq, hidden)` (packed: `(n_packed, hidden)`), and with
        `return_attention_scores=True` a tuple of that and the probabilities
        `(batch, num_heads, seq, seq)`.

    Example:
    >>> layer = MultiHeadSelfAttention(num_heads=2)
    >>> x = np.random.rand(3, 5, 8).astype("float32")
    >>> tuple(layer(x, attention_mask=np.ones((3, 5))).shape)
    (3, 5, 8)
    """

    def __init__(
        self,
        num_heads,
        dropout=0.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.dropout = check_rate("dropout", dropout)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = False

    def build(self, input_shape):
        hidden_size = input_shape[-1]
        if hidden_size is None:
            raise ValueError(
                "The last dimension of the input to MultiHeadSelfAttention must be "
                f"known. Received: input_shape={input_shape}"
            )
        if hidden_size % self.num_heads:
            raise ValueError(
                f"The hidden size ({hidden_size}) must be divisible by `num_heads`. "
                f"Received: num_heads={self.num_heads}. Choose num_heads among the "
                f"divisors of {hidden_size}."
            )
        self.hidden_size = hidden_size
        self.head_size = hidden_size // self.num_heads
        dense_shape = (None, None, hidden_size)
        for name in ("query", "key", "value", "output"):
            dense = LoraDense(
                hidden_size,
                kernel_initializer=clone_initializer(self.kernel_initializer),
                bias_initializer=clone_initializer(self.bias_initializer),
                dtype=self.dtype_policy,
                name=name,
            )
            dense.build(dense_shape)
            setattr(self, f"{name}_dense", dense)
        self.probs_dropout = Dropout(self.dropout, dtype=self.dtype_policy, name="probs_dropout")
        self.built = True

    def _split_heads(self, x, batch_size, seq_length):
        # x: (batch * seq, hidden) -> (batch, heads, seq, head_size)
        x = ops.reshape(x, (batch_size, seq_length, self.num_heads, self.head_size))
        return ops.transpose(x, (0, 2, 1, 3))

    def call(
        self,
        inputs,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        attention_bias=None,
        packing=None,
        first_token_only=False,
    ):
        if packing is None:
            shape = ops.shape(inputs)
            tokens = ops.reshape(inputs, (-1, self.hidden_size))  # (batch * seq, hidden)
        else:
            if first_token_only:
                raise ValueError("`first_token_only=True` needs the padded layout: call without `packing`.")
            shape = ops.shape(packing[1])  # position_index: (batch, seq)
            tokens = inputs  # (n_packed, hidden)
        batch_size, seq_length = shape[0], shape[1]
        query_length = 1 if first_token_only else seq_length
        # The projections are plain 2-D GEMMs over the tokens of the batch (three of them: one
        # fused hidden x 3 hidden GEMM measured no faster, in fp32 and bf16).
        if first_token_only:
            query = self.query_dense(inputs[:, 0, :])  # (batch, hidden)
        else:
            query = self.query_dense(tokens)
        key = self.key_dense(tokens)
        value = self.value_dense(tokens)
        if packing is not None:
            # The padded layout, split into heads, for the attention products only, each head's rows
            # gathered into place (no transpose). Positions that are not packed get copies of a packed
            # row: as keys and values their weight is exactly zero, as queries their result is dropped.
            query, key, value = unpack_heads([query, key, value], packing, self.num_heads)
        else:
            query = self._split_heads(query, batch_size, query_length)  # (batch, heads, seq_q, head_size)
            key = self._split_heads(key, batch_size, seq_length)  # (batch, heads, seq, head_size)
            value = self._split_heads(value, batch_size, seq_length)  # (batch, heads, seq, head_size)
        # q k^T without materialising the transposed keys, then the scale and the mask bias: with
        # oneDNN, TensorFlow fuses matmul -> multiply -> add into one op (no pass over the scores
        # for either). The softmax runs in float32 unless the compute dtype is as exact there.
        softmax_dtype = _softmax_dtype(self.compute_dtype)
        scale = 1.0 / self.head_size**0.5
        if self.compute_dtype == "float16":  # scaled first: unscaled products could leave float16's range
            query, scale = query * ops.cast(scale, "float16"), 1.0
        scores = tf.linalg.matmul(query, key, transpose_b=True)  # (batch, heads, seq_q, seq_k)
        if softmax_dtype != self.compute_dtype:
            scores = ops.cast(scores, softmax_dtype)
        if scale != 1.0:
            scores = scores * ops.cast(scale, softmax_dtype)
        if attention_bias is None and attention_mask is not None:
            attention_bias = attention_bias_from_mask(attention_mask)
        if attention_bias is not None:
            scores = scores + ops.cast(attention_bias, softmax_dtype)
        probs = ops.softmax(scores, axis=-1)  # (batch, heads, seq_q, seq_k)
        if softmax_dtype != self.compute_dtype:
            probs = ops.cast(probs, self.compute_dtype)
        if training and self.dropout > 0:
            # Dropout on the probabilities, its 1 / (1 - rate) applied to the smaller context instead.
            keep = dropout_keep_mask(ops.shape(probs), self.dropout, next_seed(self.probs_dropout.seed_generator))
            dropped = ops.where(keep, probs, ops.zeros_like(probs))  # (batch, heads, seq_q, seq_k)
            context = ops.matmul(dropped, value) * ops.cast(1.0 / (1.0 - self.dropout), self.compute_dtype)
        else:
            context = ops.matmul(probs, value)  # (batch, heads, seq, head_size)
        if packing is not None:
            context = pack_heads(context, packing)  # (n_packed, hidden)
        else:
            context = ops.transpose(context, (0, 2, 1, 3))  # (batch, seq_q, heads, head_size)
            context = ops.reshape(context, (-1, self.hidden_size))  # (batch * seq_q, hidden)
        outputs = self.output_dense(context)  # (tokens, hidden)
        if packing is None:
            outputs = ops.reshape(outputs, (batch_size, query_length, self.hidden_size))  # (batch, seq_q, hidden)
        if return_attention_scores:
            return outputs, probs
        return outputs

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
