"""ModernBertEncoder: ModernBERT (Warner et al., 2024) as a functional Keras model with the Hub contract."""

import keras
from keras import ops

from bert_keras._checks import check_choice, check_positive_float, check_positive_int, check_rate
from bert_keras._contract import INPUT_KEYS
from bert_keras.encoder import EncoderModel
from bert_keras.layers import ModernBertBlock, ModernBertEmbeddings, SlidingWindowBias
from bert_keras.layers._utils import get_activation, serialize_activation

FULL_ATTENTION, SLIDING_ATTENTION = "full_attention", "sliding_attention"
POOLINGS = ("cls", "mean")


def layer_types_every(num_layers, global_attention_every):
    """ModernBERT's pattern: layer `i` is global (full attention) where `i % global_attention_every == 0`, else local.

    >>> layer_types_every(4, 3)
    ['full_attention', 'sliding_attention', 'sliding_attention', 'full_attention']
    """
    check_positive_int("global_attention_every", global_attention_every)
    return [SLIDING_ATTENTION if i % global_attention_every else FULL_ATTENTION for i in range(num_layers)]


def _check_layer_types(layer_types, num_layers):
    if (not isinstance(layer_types, (list, tuple)) or len(layer_types) != num_layers
            or any(kind not in (FULL_ATTENTION, SLIDING_ATTENTION) for kind in layer_types)):
        raise ValueError(
            f"Received an invalid value for argument `layer_types`, expected a list of {num_layers} (num_layers) "
            f"entries, each {FULL_ATTENTION!r} or {SLIDING_ATTENTION!r}. Received: layer_types={layer_types!r}")
    return list(layer_types)


def masked_mean(sequence_output, input_mask):
    """The mean of `sequence_output` `(batch, seq, hidden)` over the positions where `input_mask` is 1."""
    weights = ops.expand_dims(ops.cast(input_mask, sequence_output.dtype), -1)  # (batch, seq, 1)
    total = ops.sum(sequence_output * weights, axis=1)  # (batch, hidden)
    return total / ops.maximum(ops.sum(weights, axis=1), ops.cast(1.0, sequence_output.dtype))


@keras.saving.register_keras_serializable(package="bert_keras")
class ModernBertEncoder(EncoderModel):
    """The ModernBERT encoder with TF Hub's inputs and outputs.

    Token embeddings with a LayerNorm (no positions), `num_layers`
    `ModernBertBlock`s (pre-LayerNorm without biases, rotary attention, a
    GeGLU feed-forward; the first block has no attention LayerNorm), and a
    final LayerNorm. Global layers (`layer_types`, by default every
    `global_attention_every`-th from the first) attend over the whole
    sequence with RoPE of `global_rope_theta`; the others over a sliding
    window of `local_attention` tokens (`|i - j| <= local_attention // 2`)
    with `local_rope_theta`. On sequences of `BANDED_MIN_LENGTH` tokens or
    more (`bert_keras.layers.modernbert_block`), a local layer attends in
    bands of its window (`banded_attention`: cost and memory linear in the
    length), and a global layer attends `QUERY_CHUNK` queries at a time
    (memory linear in the length, cost still quadratic); with
    `return_attention_probs` every layer computes its whole `(seq, seq)`
    probabilities, a local layer's window a dense mask over full attention.

    ModernBERT has no pooler and no segments: `input_type_ids` is accepted
    and ignored, and `pooled_output` is what transformers'
    `ModernBertForSequenceClassification` feeds its head
    (`classifier_pooling`): the first token's sequence output (`"cls"`), or
    the mean over real tokens (`"mean"`). That head's own dense layer and
    LayerNorm belong to the task, not to the encoder.

    Args:
        vocab_size: int. Rows of the token table.
        num_layers: int. Number of blocks.
        hidden_size: int. Width of every hidden state.
        num_heads: int. Attention heads; must divide `hidden_size` into even heads.
        intermediate_size: int. Width of each half of the GeGLU.
        activation: str or callable. The GeGLU's activation. Defaults to `"gelu"` (exact).
        max_sequence_length: int. The longest input (ModernBERT: 8192). Defaults to `8192`.
        global_attention_every: int. Every how many layers a global one comes. Defaults to `3`.
        layer_types: optional list of `"full_attention"` / `"sliding_attention"`,
            one per layer; takes the place of `global_attention_every`.
        local_attention: int. The sliding window's width in tokens. Defaults to `128`.
        global_rope_theta: float. Defaults to `160000.0`.
        local_rope_theta: float. Defaults to `10000.0`.
        layer_norm_epsilon: float. Defaults to `1e-5`.
        use_attention_bias, use_mlp_bias, use_norm_bias: bool. Biases of the
            attention projections, the feed-forward, the LayerNorms. Default to `False`.
        embedding_dropout, attention_dropout, mlp_dropout: float. Default to `0.0`.
        initializer_range: float. Standard deviation of the truncated normal
            initializer. Defaults to `0.02`.
        pooling: str. `"cls"` or `"mean"`: what `pooled_output` is. Defaults to `"cls"`.
        use_pooler: bool. Whether `pooled_output` then goes through
            `ModernBertForSequenceClassification`'s `head` (`pooler_dense`,
            its activation, `pooler_layer_norm`), as a sequence classifier
            fine-tuned with transformers reads it. Defaults to `False`.
        pooler_activation: str or callable. That head's activation (the
            config's `classifier_activation`). Defaults to `"gelu"`.
        pooler_bias: bool. Whether `pooler_dense` has a bias (`classifier_bias`).
            Defaults to `False`.
        return_attention_probs: bool. Also output `attention_probs`, a list
            of `(batch, num_heads, seq, seq)` per layer. Defaults to `False`.
        dtype: dtype or `keras.DTypePolicy`.

    Call arguments:
        inputs: dict of int32 `(batch, seq)` tensors `input_word_ids`,
            `input_mask` (1 for real tokens) and `input_type_ids` (ignored).
        training: bool. Whether dropout is applied.

    Returns:
        A dict: `sequence_output` `(batch, seq, hidden)` (after the final
        LayerNorm), `pooled_output` `(batch, hidden)`, `encoder_outputs` (one
        `(batch, seq, hidden)` per block, transformers' `hidden_states[1:]`,
        except that the last is after the final LayerNorm, equal to
        `sequence_output`), `default` (= `pooled_output`).

    Example:
    >>> encoder = ModernBertEncoder(vocab_size=50, num_layers=2, hidden_size=16, num_heads=2,
    ...                             intermediate_size=24, local_attention=4)
    >>> ids = np.array([[1, 7, 9, 2, 0]], dtype="int32")
    >>> outputs = encoder({"input_word_ids": ids, "input_mask": (ids > 0).astype("int32"),
    ...                    "input_type_ids": np.zeros_like(ids)})
    >>> tuple(outputs["sequence_output"].shape), len(outputs["encoder_outputs"])
    ((1, 5, 16), 2)
    """

    encoder_kind = "modernbert"

    def __init__(self, vocab_size, num_layers, hidden_size, num_heads, intermediate_size, activation="gelu",
                 max_sequence_length=8192, global_attention_every=3, layer_types=None, local_attention=128,
                 global_rope_theta=160000.0, local_rope_theta=10000.0, layer_norm_epsilon=1e-5,
                 use_attention_bias=False, use_mlp_bias=False, use_norm_bias=False, embedding_dropout=0.0,
                 attention_dropout=0.0, mlp_dropout=0.0, initializer_range=0.02, pooling="cls", use_pooler=False,
                 pooler_activation="gelu", pooler_bias=False, return_attention_probs=False, dtype=None, **kwargs):
        check_positive_int("num_layers", num_layers)
        check_positive_int("hidden_size", hidden_size)
        check_positive_int("num_heads", num_heads)
        if hidden_size % num_heads or (hidden_size // num_heads) % 2:
            raise ValueError(f"`hidden_size` must be divisible by `num_heads` into heads of even size (RoPE rotates "
                             f"pairs). Received: hidden_size={hidden_size}, num_heads={num_heads}")
        check_positive_int("max_sequence_length", max_sequence_length)
        check_positive_int("local_attention", local_attention)
        check_positive_float("initializer_range", initializer_range)
        for name, rate in (("embedding_dropout", embedding_dropout), ("attention_dropout", attention_dropout),
                           ("mlp_dropout", mlp_dropout)):
            check_rate(name, rate)
        check_choice("pooling", pooling, POOLINGS)
        if not isinstance(use_pooler, bool) or not isinstance(pooler_bias, bool):
            raise ValueError(f"Received an invalid value for argument `use_pooler` or `pooler_bias`, expected a bool. "
                             f"Received: use_pooler={use_pooler!r}, pooler_bias={pooler_bias!r}")
        get_activation(activation)
        get_activation(pooler_activation)
        if layer_types is None:
            layer_types = layer_types_every(num_layers, global_attention_every)
        layer_types = _check_layer_types(layer_types, num_layers)

        # === Layers ===
        initializer = keras.initializers.TruncatedNormal(stddev=initializer_range)
        embeddings = ModernBertEmbeddings(vocab_size, hidden_size, layer_norm_epsilon=layer_norm_epsilon,
                                          use_norm_bias=use_norm_bias, dropout=embedding_dropout,
                                          initializer=initializer, dtype=dtype, name="embeddings")
        blocks = []
        for i, kind in enumerate(layer_types):
            local = kind == SLIDING_ATTENTION
            blocks.append(ModernBertBlock(
                num_heads, intermediate_size, activation=activation,
                rope_theta=local_rope_theta if local else global_rope_theta,
                attention_window=local_attention if local else None, attention_norm=i > 0,
                layer_norm_epsilon=layer_norm_epsilon, use_attention_bias=use_attention_bias,
                use_mlp_bias=use_mlp_bias, use_norm_bias=use_norm_bias, attention_dropout=attention_dropout,
                mlp_dropout=mlp_dropout, kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
                dtype=dtype, name=f"transformer_layer_{i}"))
        final_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, center=use_norm_bias, dtype=dtype,
                                                     name="final_layer_norm")
        pooler_dense = pooler_norm = None
        if use_pooler:  # ModernBertPredictionHead of the sequence classifier: dense, activation, LayerNorm
            pooler_dense = keras.layers.Dense(hidden_size, activation=get_activation(pooler_activation),
                                              use_bias=pooler_bias, kernel_initializer=initializer, dtype=dtype,
                                              name="pooler_dense")
            pooler_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, center=use_norm_bias,
                                                          dtype=dtype, name="pooler_layer_norm")

        # === Functional model ===
        inputs = {key: keras.Input(shape=(None,), dtype="int32", name=key) for key in INPUT_KEYS}
        x = embeddings(inputs["input_word_ids"])  # (batch, seq, hidden)
        # The global bias is built once per batch and shared. Local layers take the mask and attend in bands on long
        # sequences (linear in the length); only for their probabilities is their window a shared dense bias.
        biases = {FULL_ATTENTION: SlidingWindowBias(None, name="global_attention_bias")(inputs["input_mask"])}
        if SLIDING_ATTENTION in layer_types and return_attention_probs:
            biases[SLIDING_ATTENTION] = SlidingWindowBias(local_attention, name="local_attention_bias")(
                inputs["input_mask"])  # (batch, 1, seq, seq)
        encoder_outputs, attention_probs = [], []
        for kind, block in zip(layer_types, blocks):
            if return_attention_probs:
                x, probs = block(x, attention_bias=biases[kind], return_attention_scores=True)
                attention_probs.append(probs)
            elif kind == FULL_ATTENTION:  # by chunks of queries on long sequences
                x = block(x, attention_bias=biases[kind])  # (batch, seq, hidden)
            else:  # in bands on long sequences
                x = block(x, attention_mask=inputs["input_mask"])  # (batch, seq, hidden)
            encoder_outputs.append(x)
        encoder_outputs[-1] = final_norm(encoder_outputs[-1])
        sequence_output = encoder_outputs[-1]
        if pooling == "cls":
            pooled_output = sequence_output[:, 0, :]
        else:
            pooled_output = masked_mean(sequence_output, inputs["input_mask"])
        if use_pooler:
            pooled_output = pooler_norm(pooler_dense(pooled_output))  # (batch, hidden)
        outputs = self.hub_outputs(sequence_output, pooled_output, encoder_outputs,
                                   attention_probs if return_attention_probs else None)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Config ===
        self.vocab_size = vocab_size
        self.num_layers = num_layers
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.activation = activation
        self.max_sequence_length = max_sequence_length
        self.global_attention_every = global_attention_every
        self.layer_types = layer_types
        self.local_attention = local_attention
        self.global_rope_theta = global_rope_theta
        self.local_rope_theta = local_rope_theta
        self.layer_norm_epsilon = layer_norm_epsilon
        self.use_attention_bias = use_attention_bias
        self.use_mlp_bias = use_mlp_bias
        self.use_norm_bias = use_norm_bias
        self.embedding_dropout = embedding_dropout
        self.attention_dropout = attention_dropout
        self.mlp_dropout = mlp_dropout
        self.initializer_range = initializer_range
        self.pooling = pooling
        self.use_pooler = use_pooler
        self.pooler_activation = pooler_activation
        self.pooler_bias = pooler_bias
        self.pooler_dense = pooler_dense
        self.pooler_layer_norm = pooler_norm
        self.return_attention_probs = return_attention_probs
        self.type_vocab_size = 0  # no segment table (as DistilBERT's): `input_type_ids` are ignored
        self.embeddings = embeddings
        self.transformer_layers = blocks
        self.final_layer_norm = final_norm

    def get_config(self):
        return self.shared_config(**{
            "max_sequence_length": self.max_sequence_length,
            "global_attention_every": self.global_attention_every,
            "layer_types": list(self.layer_types),
            "local_attention": self.local_attention,
            "global_rope_theta": self.global_rope_theta,
            "local_rope_theta": self.local_rope_theta,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "use_attention_bias": self.use_attention_bias,
            "use_mlp_bias": self.use_mlp_bias,
            "use_norm_bias": self.use_norm_bias,
            "embedding_dropout": self.embedding_dropout,
            "attention_dropout": self.attention_dropout,
            "mlp_dropout": self.mlp_dropout,
            "initializer_range": self.initializer_range,
            "pooling": self.pooling,
            "use_pooler": self.use_pooler,
            "pooler_activation": serialize_activation(self.pooler_activation),
            "pooler_bias": self.pooler_bias,
            "return_attention_probs": self.return_attention_probs,
        })
