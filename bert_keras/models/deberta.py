"""DebertaV3Encoder: DeBERTa-v3 (He et al., 2021) as a functional Keras model with the Hub contract."""

import keras

from bert_keras._checks import check_choice, check_int, check_positive_float, check_positive_int, check_rate
from bert_keras._contract import INPUT_KEYS
from bert_keras.encoder import EncoderModel
from bert_keras.layers import (
    DebertaBlock,
    DebertaEmbeddings,
    RelativeEmbeddings,
    RelativePositionBuckets,
    attention_bias_from_mask,
)
from bert_keras.layers._utils import get_activation, serialize_activation
from bert_keras.layers.relative_positions import REL_NORMS


@keras.saving.register_keras_serializable(package="bert_keras")
class DebertaV3Encoder(EncoderModel):
    """The DeBERTa-v3 encoder with TF Hub's inputs and outputs.

    Word embeddings with a LayerNorm (no absolute positions unless
    `position_biased_input`, no segments unless `type_vocab_size`), then
    `num_layers` post-LayerNorm `DebertaBlock`s whose
    `DisentangledSelfAttention` adds content-to-position and
    position-to-content scores. The relative positions `i - j` are put in
    log buckets once per batch (`RelativePositionBuckets`: exact within
    `position_buckets // 2`, logarithmic up to `max_relative_positions`) and
    every block reads the one shared table of `2 * position_buckets`
    relative embeddings (`RelativeEmbeddings`, LayerNorm-ed), projecting it
    with its own query and key layers (`share_attention_key`).

    DeBERTa's base model has no pooler: `pooled_output` is the first token's
    sequence output (as for DistilBERT and ELECTRA in `BertEncoder`). A
    `DebertaV2ForSequenceClassification` checkpoint pools with its
    `ContextPooler`, `activation(dense(first token))`: read from such a
    folder, the encoder holds it as its pooler (`pooler_activation`, as
    `BertEncoder` holds BERT's and RoBERTa's), and `pooled_output` is what
    that model's classifier reads.

    Args:
        vocab_size: int. Rows of the word table.
        num_layers: int. Number of blocks.
        hidden_size: int. Width of every hidden state.
        num_heads: int. Attention heads; must divide `hidden_size`.
        intermediate_size: int. Width of the feed-forward inner layer.
        activation: str or callable. Feed-forward activation. Defaults to `"gelu"` (exact).
        max_sequence_length: int. The longest input the checkpoint was trained
            for (transformers' `max_position_embeddings`); the rows of the
            absolute position table where `position_biased_input`. Relative
            positions set no limit. Defaults to `512`.
        position_biased_input: bool. Add learned absolute positions to the
            words. Defaults to `False` (DeBERTa-v3).
        type_vocab_size: int. Segment types; `0` for none (then
            `input_type_ids` is ignored). Defaults to `0`.
        embedding_size: optional int. Width of the embedding tables where
            narrower than `hidden_size`. Defaults to `None`.
        position_buckets: int. Relative buckets on each side; `<= 0` for
            unbucketed distances. Defaults to `256`.
        max_relative_positions: int. The distance the log buckets reach (and
            the table's half-size without buckets). Defaults to `512`.
        position_attention: list of str. `"c2p"` and/or `"p2c"`. Defaults to both.
        share_attention_key: bool. Defaults to `True`.
        relative_norm: str. `"layer_norm"` (DeBERTa-v3) or `"none"`: what
            normalizes the relative table. Defaults to `"layer_norm"`.
        layer_norm_epsilon: float. Defaults to `1e-7`.
        dropout: float. Dropout on embeddings, sublayer outputs and the
            relative table. Defaults to `0.1`.
        attention_dropout: float. Dropout on the attention probabilities. Defaults to `0.1`.
        initializer_range: float. Standard deviation of the truncated normal
            initializer. Defaults to `0.02`.
        pooler_activation: optional str or callable. With it, `pooled_output`
            is `activation(dense(first token))` (a dense layer `pooler`, as
            DeBERTa's `ContextPooler`); None: the first token itself.
            Defaults to `None`.
        return_attention_probs: bool. Also output `attention_probs`, one
            `(batch, num_heads, seq, seq)` per layer. Defaults to `False`.
        dtype: dtype or `keras.DTypePolicy`.

    Call arguments:
        inputs: dict of int32 `(batch, seq)` tensors `input_word_ids`,
            `input_mask` (1 for real tokens) and `input_type_ids`.
        training: bool. Whether dropout is applied.

    Returns:
        A dict: `sequence_output` `(batch, seq, hidden)`, `pooled_output`
        `(batch, hidden)` (the first token's, or the pooler's), `encoder_outputs` (one
        `(batch, seq, hidden)` per block, transformers' `hidden_states[1:]`;
        the last is `sequence_output`), `default` (= `pooled_output`).

    Example:
    >>> encoder = DebertaV3Encoder(vocab_size=50, num_layers=2, hidden_size=16, num_heads=2,
    ...                            intermediate_size=24, position_buckets=4, max_relative_positions=16)
    >>> ids = np.array([[1, 7, 9, 2, 0]], dtype="int32")
    >>> outputs = encoder({"input_word_ids": ids, "input_mask": (ids > 0).astype("int32"),
    ...                    "input_type_ids": np.zeros_like(ids)})
    >>> tuple(outputs["sequence_output"].shape), tuple(outputs["pooled_output"].shape)
    ((1, 5, 16), (1, 16))
    """

    encoder_kind = "deberta"

    def __init__(self, vocab_size, num_layers, hidden_size, num_heads, intermediate_size, activation="gelu",
                 max_sequence_length=512, position_biased_input=False, type_vocab_size=0, embedding_size=None,
                 position_buckets=256, max_relative_positions=512, position_attention=("p2c", "c2p"),
                 share_attention_key=True, relative_norm="layer_norm", layer_norm_epsilon=1e-7, dropout=0.1,
                 attention_dropout=0.1, initializer_range=0.02, pooler_activation=None, return_attention_probs=False,
                 dtype=None, **kwargs):
        check_positive_int("num_layers", num_layers)
        check_positive_int("hidden_size", hidden_size)
        check_positive_int("num_heads", num_heads)
        if hidden_size % num_heads:
            raise ValueError(f"`hidden_size` must be divisible by `num_heads`. Received: hidden_size={hidden_size}, "
                             f"num_heads={num_heads}")
        check_positive_int("max_sequence_length", max_sequence_length)
        check_int("position_buckets", position_buckets)
        check_positive_int("max_relative_positions", max_relative_positions)
        check_choice("relative_norm", relative_norm, REL_NORMS)
        check_rate("dropout", dropout)
        check_rate("attention_dropout", attention_dropout)
        check_positive_float("initializer_range", initializer_range)
        get_activation(activation)
        if pooler_activation is not None:
            get_activation(pooler_activation)
        span = position_buckets if position_buckets > 0 else max_relative_positions

        # === Layers ===
        def initializer():
            return keras.initializers.TruncatedNormal(stddev=initializer_range)

        embeddings = DebertaEmbeddings(
            vocab_size, hidden_size, max_sequence_length=max_sequence_length if position_biased_input else None,
            type_vocab_size=type_vocab_size, embedding_size=embedding_size, dropout=dropout,
            layer_norm_epsilon=layer_norm_epsilon, initializer=initializer(), dtype=dtype, name="embeddings")
        relative_embeddings = RelativeEmbeddings(span, hidden_size, norm=relative_norm,
                                                 layer_norm_epsilon=layer_norm_epsilon, initializer=initializer(),
                                                 dtype=dtype, name="relative_embeddings")
        relative_buckets = RelativePositionBuckets(position_buckets, max_relative_positions,
                                                   name="relative_position_buckets")
        blocks = [DebertaBlock(num_heads, intermediate_size, activation=activation,
                               position_attention=position_attention, share_attention_key=share_attention_key,
                               dropout=dropout, attention_dropout=attention_dropout,
                               layer_norm_epsilon=layer_norm_epsilon, kernel_initializer=initializer(), dtype=dtype,
                               name=f"transformer_layer_{i}")
                  for i in range(num_layers)]
        pooler = None
        if pooler_activation is not None:
            pooler = keras.layers.Dense(hidden_size, activation=get_activation(pooler_activation),
                                        kernel_initializer=initializer(), dtype=dtype, name="pooler_dense")

        # === Functional model ===
        inputs = {key: keras.Input(shape=(None,), dtype="int32", name=key) for key in INPUT_KEYS}
        x = embeddings(inputs["input_word_ids"], inputs["input_type_ids"], inputs["input_mask"])  # (batch, seq, hidden)
        table = relative_embeddings(x)  # (2 * span, hidden), shared by every block
        buckets = relative_buckets(inputs["input_word_ids"])  # (seq, seq)
        attention_bias = attention_bias_from_mask(inputs["input_mask"])  # (batch, 1, 1, seq)
        encoder_outputs, attention_probs = [], []
        for block in blocks:
            x, probs = block(x, table, buckets, attention_bias=attention_bias, return_attention_scores=True)
            encoder_outputs.append(x)
            attention_probs.append(probs)
        pooled_output = x[:, 0, :]  # (batch, hidden): the first token, or the ContextPooler's dense on it
        if pooler is not None:
            pooled_output = pooler(pooled_output)
        outputs = self.hub_outputs(x, pooled_output, encoder_outputs, attention_probs if return_attention_probs else None)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Config ===
        self.vocab_size = vocab_size
        self.num_layers = num_layers
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.activation = activation
        self.max_sequence_length = max_sequence_length
        self.position_biased_input = bool(position_biased_input)
        self.type_vocab_size = type_vocab_size
        self.embedding_size = embedding_size
        self.position_buckets = position_buckets
        self.max_relative_positions = max_relative_positions
        self.position_attention = list(blocks[0].position_attention)
        self.share_attention_key = bool(share_attention_key)
        self.relative_norm = relative_norm
        self.layer_norm_epsilon = layer_norm_epsilon
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.initializer_range = initializer_range
        self.pooler_activation = pooler_activation
        self.return_attention_probs = return_attention_probs
        self.pooler = pooler
        self.embeddings = embeddings
        self.relative_embeddings = relative_embeddings
        self.relative_position_buckets = relative_buckets
        self.transformer_layers = blocks

    def get_config(self):
        return self.shared_config(**{
            "max_sequence_length": self.max_sequence_length,
            "position_biased_input": self.position_biased_input,
            "type_vocab_size": self.type_vocab_size,
            "embedding_size": self.embedding_size,
            "position_buckets": self.position_buckets,
            "max_relative_positions": self.max_relative_positions,
            "position_attention": list(self.position_attention),
            "share_attention_key": self.share_attention_key,
            "relative_norm": self.relative_norm,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "initializer_range": self.initializer_range,
            "pooler_activation": (None if self.pooler_activation is None
                                  else serialize_activation(self.pooler_activation)),
            "return_attention_probs": self.return_attention_probs,
        })
