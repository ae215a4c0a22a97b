"""One Transformer encoder block: self-attention and feed-forward with residuals."""

import keras

from bert_keras._checks import check_positive_int, check_rate
from bert_keras.layers._utils import clone_initializer, serialize_activation
from bert_keras.layers.attention import MultiHeadSelfAttention
from bert_keras.layers.dropout import Dropout
from bert_keras.layers.feed_forward import FeedForward


@keras.saving.register_keras_serializable(package="bert_keras")
class TransformerEncoderBlock(keras.layers.Layer):
    """A Transformer encoder block.

    Post-LayerNorm (BERT, the default):
    `x = LN(x + dropout(attention(x)))`, then `x = LN(x + dropout(ffn(x)))`.
    Pre-LayerNorm (`norm_first=True`):
    `x = x + dropout(attention(LN(x)))`, then `x = x + dropout(ffn(LN(x)))`.

    Args:
        num_heads: int. Number of attention heads.
        intermediate_size: int. Width of the feed-forward inner layer.
        activation: str or callable. Feed-forward activation: `"gelu"`,
            `"gelu_approximate"`, `"relu"` or a callable. Defaults to `"gelu"`.
        dropout: float. Dropout on each sublayer's output before the residual.
            Defaults to `0.0`.
        attention_dropout: float. Dropout on the attention probabilities.
            Defaults to `0.0`.
        layer_norm_epsilon: float. Defaults to `1e-12`.
        norm_first: bool. Pre-LayerNorm instead of BERT's post-LayerNorm.
            Defaults to `False`.
        kernel_initializer: str or initializer. Defaults to `"glorot_uniform"`.
        bias_initializer: str or initializer. Defaults to `"zeros"`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        inputs: float tensor `(batch, seq, hidden)`.
        attention_mask: optional 0/1 tensor `(batch, seq)` or `(batch, seq, seq)`.
        training: bool. Whether dropout is applied.
        return_attention_scores: bool. Also return the attention probabilities.
        attention_bias: optional additive float bias in place of
            `attention_mask`, built once per batch with
            `bert_keras.layers.attention_bias_from_mask` and shared by all blocks.
        packing: optional tuple `(token_index, position_index)` from
            `bert_keras.layers.PackedTokenIndex`; `inputs` are then the packed
            tokens `(n_packed, hidden)` and so is the output (see
            `bert_keras.layers.packing`).
        first_token_only: bool. Compute the output of the first position
            alone, `(batch, 1, hidden)`: it attends over every position,
            and the rest of the block runs on its row only (a pooled output
            needs no more of the last block). Not with `packing`.

    Returns:
        `(batch, seq, hidden)` (packed: `(n_packed, hidden)`), and with `return_attention_scores=True` also the
        probabilities `(batch, num_heads, seq, seq)`.

    Example:
    >>> block = TransformerEncoderBlock(num_heads=2, intermediate_size=32)
    >>> tuple(block(np.zeros((2, 5, 8)), attention_mask=np.ones((2, 5))).shape)
    (2, 5, 8)
    """

    def __init__(
        self,
        num_heads,
        intermediate_size,
        activation="gelu",
        dropout=0.0,
        attention_dropout=0.0,
        layer_norm_epsilon=1e-12,
        norm_first=False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.intermediate_size = check_positive_int("intermediate_size", intermediate_size)
        self.activation = activation
        self.dropout = check_rate("dropout", dropout)
        self.attention_dropout = check_rate("attention_dropout", attention_dropout)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.norm_first = bool(norm_first)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        # Built here (not in build) so that a bad activation fails at construction.
        self.feed_forward = FeedForward(
            self.intermediate_size,
            activation=self.activation,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name="feed_forward",
        )

    def build(self, input_shape):
        self.attention = MultiHeadSelfAttention(
            self.num_heads,
            dropout=self.attention_dropout,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name="attention",
        )
        self.attention.build(input_shape)
        self.feed_forward.build(input_shape)
        for prefix in ("attention", "feed_forward"):
            norm = keras.layers.LayerNormalization(
                epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=f"{prefix}_layer_norm"
            )
            norm.build(input_shape)
            setattr(self, f"{prefix}_layer_norm", norm)
            drop = Dropout(self.dropout, dtype=self.dtype_policy, name=f"{prefix}_output_dropout")
            setattr(self, f"{prefix}_output_dropout", drop)
        self.built = True

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
        x = inputs
        residual = x[:, :1, :] if first_token_only else x
        if self.norm_first:
            x = self.attention_layer_norm(x)
        x, probs = self.attention(
            x,
            attention_mask=attention_mask,
            training=training,
            return_attention_scores=True,
            attention_bias=attention_bias,
            packing=packing,
            first_token_only=first_token_only,
        )
        x = residual + self.attention_output_dropout(x, training=training)  # (batch, seq, hidden) or (n_packed, hidden)
        if not self.norm_first:
            x = self.attention_layer_norm(x)

        residual = x
        if self.norm_first:
            x = self.feed_forward_layer_norm(x)
        x = residual + self.feed_forward_output_dropout(self.feed_forward(x), training=training)
        if not self.norm_first:
            x = self.feed_forward_layer_norm(x)
        if return_attention_scores:
            return x, probs
        return x

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_size": self.intermediate_size,
                "activation": serialize_activation(self.activation),
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "norm_first": self.norm_first,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
