"""BertEncoder: the BERT network as a functional Keras model with the Hub contract."""

import collections.abc

import keras
import tensorflow as tf

from bert_keras.layers import (
    BertEmbeddings,
    PackedTokenIndex,
    PackTokens,
    TransformerEncoderBlock,
    UnpackTokens,
    attention_bias_from_mask,
)
from bert_keras._checks import check_positive_float, check_positive_int, check_rate
from bert_keras._contract import INPUT_KEYS
from bert_keras.formats import build_and_load, read_checkpoint
from bert_keras.layers._utils import get_activation, serialize_activation
from bert_keras.presets import get_preset



def _check_sizes(num_layers, hidden_size, num_heads, dropout, attention_dropout, initializer_range, activation):
    """`BertEncoder`'s argument checks, before any layer is built."""
    check_positive_int("num_layers", num_layers)
    check_positive_int("hidden_size", hidden_size)
    check_positive_int("num_heads", num_heads)
    if hidden_size % num_heads:
        raise ValueError(
            f"`hidden_size` must be divisible by `num_heads`. Received: "
            f"hidden_size={hidden_size}, num_heads={num_heads}. Pick num_heads among "
            f"the divisors of {hidden_size} (BERT uses hidden_size / 64)."
        )
    check_rate("dropout", dropout)
    check_rate("attention_dropout", attention_dropout)
    check_positive_float("initializer_range", initializer_range)
    get_activation(activation)

def _check_flag(name, value):
    if not isinstance(value, bool):
        raise ValueError(f"Received an invalid value for argument `{name}`, expected a bool. Received: {name}={value!r}")
    return value


# The class that holds each `encoder_kind` a checkpoint reader gives (`formats.read_checkpoint`), named in messages.
ENCODER_CLASSES = {"bert": "BertEncoder", "deberta": "DebertaV3Encoder", "modernbert": "ModernBertEncoder"}


class EncoderModel(keras.Model):
    """What every encoder class of the package shares: one way from a checkpoint, the Hub inputs, the outputs, the config.

    `BertEncoder`, `DebertaV3Encoder` and `ModernBertEncoder` are functional
    Keras models with TF Hub's inputs (`input_word_ids`, `input_mask`,
    `input_type_ids`, checked on every call) and outputs (`sequence_output`,
    `pooled_output`, `encoder_outputs`, `default`). Each names the
    checkpoints it holds (`encoder_kind`), builds its outputs with
    `hub_outputs`, and adds its own options to `shared_config`.
    """

    encoder_kind = None

    @classmethod
    def from_checkpoint(cls, path, *, format=None, dtype=None):
        """Loads the encoder with pretrained weights from a checkpoint of its kind (`bert_keras.formats` reads it).

        The reader returns a config and arrays (`formats.read_checkpoint`); the
        encoder is built from them here (for a Hub module, the first candidate
        config whose encoder gives the module's outputs). A checkpoint of
        another encoder class is refused with the class that reads it.

        Args:
            path: str. A checkpoint folder or file: Hugging Face or
                transformers 5 (config.json, model.safetensors), Google BERT,
                keras-nlp, or a Hub encoder module (see
                `bert_keras.checkpoints.load_checkpoint`).
            format: optional str. The checkpoint's format; detected when omitted.
            dtype: optional dtype policy of the encoder (e.g. `"bfloat16"`).

        Returns:
            The encoder, of this class.
        """
        weights = read_checkpoint(path, format=format, with_heads=False)
        if weights.encoder_kind != cls.encoder_kind:  # another class's config: its own encoder reads it
            other = ENCODER_CLASSES.get(weights.encoder_kind, "BertEncoder")
            raise ValueError(f"{path} holds a {weights.encoder_kind!r} checkpoint, which {cls.__name__} cannot hold; "
                             f"load it with bert_keras.{other}.from_checkpoint(path) or "
                             "bert_keras.checkpoints.load_pretrained(path).")
        return build_and_load(weights, lambda config: {"encoder": cls(**config, dtype=dtype)})["encoder"]

    def __call__(self, inputs, *args, **kwargs):
        return super().__call__(_check_inputs(inputs), *args, **kwargs)

    @staticmethod
    def hub_outputs(sequence_output, pooled_output, encoder_outputs, attention_probs=None):
        """TF Hub's outputs (`default` is `pooled_output`), with `attention_probs` where they are returned."""
        outputs = {"sequence_output": sequence_output, "pooled_output": pooled_output,
                   "encoder_outputs": encoder_outputs, "default": pooled_output}
        if attention_probs is not None:
            outputs["attention_probs"] = attention_probs
        return outputs

    def shared_config(self, **options):
        """The config every encoder class records (name, dtype, sizes, activation), then the class's `options`."""
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            "vocab_size": self.vocab_size,
            "num_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "num_heads": self.num_heads,
            "intermediate_size": self.intermediate_size,
            "activation": serialize_activation(self.activation),
            **options,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)


@keras.saving.register_keras_serializable(package="bert_keras")
class BertEncoder(EncoderModel):
    """The BERT encoder (Devlin et al., 2019) with TF Hub's inputs and outputs.

    Embeddings (word + position + segment, LayerNorm, dropout), `num_layers`
    Transformer blocks, and a pooler (`tanh(dense(sequence_output[:, 0]))`).

    One family with options, each defaulting to BERT: ALBERT
    (`embedding_size=128, shared_layers=True`), ELECTRA (`embedding_size`
    where it differs from `hidden_size`, `use_pooler=False`), DistilBERT
    (`type_vocab_size=0, use_pooler=False`) and RoBERTa (`position_offset=2,
    type_vocab_size=1, layer_norm_epsilon=1e-5`); see `bert_keras.presets`.

    Args:
        vocab_size: int. Size of the WordPiece vocabulary.
        num_layers: int. Number of Transformer blocks.
        hidden_size: int. Width of every hidden state.
        num_heads: int. Attention heads per block; must divide `hidden_size`.
        intermediate_size: int. Width of the feed-forward inner layer.
        activation: str or callable. `"gelu"` (exact, as BERT), `"gelu_approximate"`,
            `"relu"`, or a callable. Defaults to `"gelu"`.
        dropout: float. Dropout on embeddings and sublayer outputs. Defaults to `0.1`.
        attention_dropout: float. Dropout on attention probabilities. Defaults to `0.1`.
        max_sequence_length: int. Number of learned positions. Defaults to `512`.
        type_vocab_size: int. Number of segment types; `0` for none
            (DistilBERT: `input_type_ids` are then ignored). Defaults to `2`.
        position_embedding: str. `"learned"` or `"sinusoidal"`. Defaults to `"learned"`.
        norm_first: bool. Pre-LayerNorm blocks with a final LayerNorm. Defaults to `False`.
        layer_norm_epsilon: float. Defaults to `1e-12`.
        initializer_range: float. Standard deviation of the truncated normal
            initializer of all kernels and tables. Defaults to `0.02`.
        return_attention_probs: bool. Also output `attention_probs`, a list of
            `(batch, num_heads, seq, seq)` per layer. Defaults to `False`.
        pack_tokens: bool. Run every token-wise part of the blocks (the Q/K/V,
            output and feed-forward GEMMs, LayerNorms) on the real tokens only,
            gathered from the padded batch by `input_mask`, and scatter the
            results back (see `bert_keras.layers.packing`). Outputs at real
            positions are unchanged; at padding positions the sequence and
            encoder outputs are zero (except the first position of a row, which
            is always computed). Saves the batch's share of padding.
            Under XLA every position is kept. Defaults to `True`.
        embedding_size: optional int. Width of the embedding tables, mapped
            to `hidden_size` by a dense layer after the embedding LayerNorm
            (`embeddings.projection`; ALBERT, ELECTRA). Defaults to `None`: no
            projection, tables of `hidden_size`.
        shared_layers: bool. One Transformer block whose weights every one of
            the `num_layers` steps uses (ALBERT): the same layer object is
            called `num_layers` times, so there is one set of variables and
            training updates it once per step. `transformer_layers` then
            holds that one block. Defaults to `False`.
        position_offset: int. The learned position table's row of the first
            position (RoBERTa: padding index + 1 = 2); the table has
            `max_sequence_length + position_offset` rows, and
            `max_sequence_length` stays the longest input. Defaults to `0`.
        use_pooler: bool. Whether `pooled_output` is BERT's pooler,
            `tanh(dense(sequence_output[:, 0]))`. Without one (DistilBERT,
            ELECTRA) `pooled_output` is the first token's sequence output,
            `sequence_output[:, 0]`, with no weights of its own: what those
            models' own classifiers read. Defaults to `True`.
        dtype: dtype or `keras.DTypePolicy`, e.g. `"mixed_bfloat16"`.

    Call arguments:
        inputs: dict of int32 `(batch, seq)` tensors: `input_word_ids`,
            `input_mask` (1 for real tokens, 0 for padding) and
            `input_type_ids` (0 for segment A, 1 for segment B).
        training: bool. Whether dropout is applied.

    Returns:
        A dict: `sequence_output` `(batch, seq, hidden)`, `pooled_output`
        `(batch, hidden)`, `encoder_outputs` (a list of `num_layers` tensors
        `(batch, seq, hidden)`, the last equal to `sequence_output`), `default`
        (equal to `pooled_output`), and `attention_probs` when asked. With
        `pack_tokens=True` (the default) the sequence and encoder outputs are
        zero where `input_mask` is 0.

    Example:
    >>> encoder = BertEncoder(vocab_size=100, num_layers=2, hidden_size=16,
    ...                       num_heads=2, intermediate_size=32)
    >>> ids = np.array([[2, 7, 9, 3, 0]], dtype="int32")
    >>> outputs = encoder({"input_word_ids": ids, "input_mask": (ids > 0).astype("int32"),
    ...                    "input_type_ids": np.zeros_like(ids)})
    >>> tuple(outputs["pooled_output"].shape)
    (1, 16)
    """

    encoder_kind = "bert"

    def __init__(
        self,
        vocab_size,
        num_layers,
        hidden_size,
        num_heads,
        intermediate_size,
        activation="gelu",
        dropout=0.1,
        attention_dropout=0.1,
        max_sequence_length=512,
        type_vocab_size=2,
        position_embedding="learned",
        norm_first=False,
        layer_norm_epsilon=1e-12,
        initializer_range=0.02,
        return_attention_probs=False,
        pack_tokens=True,
        embedding_size=None,
        shared_layers=False,
        position_offset=0,
        use_pooler=True,
        dtype=None,
        **kwargs,
    ):
        _check_sizes(num_layers, hidden_size, num_heads, dropout, attention_dropout, initializer_range, activation)
        shared_layers, use_pooler = _check_flag("shared_layers", shared_layers), _check_flag("use_pooler", use_pooler)

        # === Layers ===
        initializer = keras.initializers.TruncatedNormal(stddev=initializer_range)
        embeddings = BertEmbeddings(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            max_sequence_length=max_sequence_length,
            type_vocab_size=type_vocab_size,
            position_embedding=position_embedding,
            dropout=dropout,
            layer_norm_epsilon=layer_norm_epsilon,
            initializer=initializer,
            embedding_size=embedding_size,
            position_offset=position_offset,
            dtype=dtype,
            name="embeddings",
        )
        # ALBERT: one block object, called num_layers times below (shared variables, not copies).
        blocks = _make_blocks(
            1 if shared_layers else num_layers,
            num_heads=num_heads,
            intermediate_size=intermediate_size,
            activation=activation,
            dropout=dropout,
            attention_dropout=attention_dropout,
            layer_norm_epsilon=layer_norm_epsilon,
            norm_first=norm_first,
            initializer_range=initializer_range,
            dtype=dtype,
        )
        output_layer_norm = None  # pre-LayerNorm blocks end with one
        if norm_first:
            output_layer_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=dtype, name="output_layer_norm")
        pooler = _make_pooler(hidden_size, initializer_range, dtype) if use_pooler else None

        # === Functional model ===
        inputs = {key: keras.Input(shape=(None,), dtype="int32", name=key) for key in INPUT_KEYS}
        x = embeddings(inputs["input_word_ids"], inputs["input_type_ids"])  # (batch, seq, hidden)
        # The additive mask is built once per batch and shared by every block.
        attention_bias = attention_bias_from_mask(inputs["input_mask"])  # (batch, 1, 1, seq)
        packing = None
        if pack_tokens:
            packing = PackedTokenIndex(name="packed_token_index")(inputs["input_mask"])
            x = PackTokens(dtype=dtype, name="pack_tokens")(x, packing)  # (n_packed, hidden)
        encoder_outputs, attention_probs = [], []
        for i in range(num_layers):
            x, probs = blocks[0 if shared_layers else i](
                x, attention_bias=attention_bias, packing=packing, return_attention_scores=True
            )
            encoder_outputs.append(x)
            attention_probs.append(probs)
        if output_layer_norm is not None:
            encoder_outputs[-1] = output_layer_norm(encoder_outputs[-1])
        if pack_tokens:
            unpack = UnpackTokens(dtype=dtype, name="unpack_tokens")
            encoder_outputs = [unpack(x, packing) for x in encoder_outputs]  # (batch, seq, hidden)
        sequence_output = encoder_outputs[-1]
        pooled_output = _pool(pooler, sequence_output[:, 0, :])
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
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.max_sequence_length = max_sequence_length
        self.type_vocab_size = type_vocab_size
        self.position_embedding = position_embedding
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.return_attention_probs = return_attention_probs
        self.pack_tokens = pack_tokens
        self.embedding_size = embedding_size
        self.shared_layers = shared_layers
        self.position_offset = position_offset
        self.use_pooler = use_pooler
        self.embeddings = embeddings
        self.transformer_layers = blocks
        self.output_layer_norm = output_layer_norm
        self.pooler = pooler

    @classmethod
    def from_architecture(cls, name, **kwargs):
        """Builds a named architecture with RANDOM weights (for pre-training from scratch).

        The names (`bert_keras.preset_names()`) describe published models'
        shapes only; pretrained weights come from `from_checkpoint`.

        Args:
            name: str. A name from `bert_keras.preset_names()`.
            **kwargs: overrides of the architecture's arguments (e.g. `dropout=0.0`).

        Example:
        >>> encoder = BertEncoder.from_architecture("small_bert_en_uncased_L-2_H-128_A-2")
        >>> encoder.num_layers, encoder.hidden_size
        (2, 128)
        """
        config = dict(get_preset(name)["config"])
        config.update(kwargs)
        return cls(**config)

    @classmethod
    def from_preset(cls, name, **kwargs):
        """Refuses, with directions: a preset name here would read like pretrained weights.

        Use `from_checkpoint(path)` for pretrained weights, or
        `from_architecture(name)` for a named architecture with random weights.
        """
        raise ValueError(
            f"BertEncoder.from_preset({name!r}) is ambiguous: bert_keras presets are architectures without "
            f"weights. For pretrained weights use BertEncoder.from_checkpoint(path) with a checkpoint folder "
            f"(Hugging Face, Google BERT, keras-nlp, or a Hub module pair); for random weights use "
            f"BertEncoder.from_architecture({name!r})."
        )

    def pooled_output(self, inputs, training=False):
        """The `pooled_output` alone: the last block computed for the first token only.

        Equal to `self(inputs)["pooled_output"]` up to float rounding, with
        less work: the pooler reads the first token of the last block, which
        attends over every position but needs no other position's output;
        so the last block's query, output projection and feed-forward run on
        one row per sequence instead of all of them (for a 6-block encoder
        at 32 tokens, ~14% of the matrix products). Runs the padded layout
        (no token packing): meant for small batches, e.g. under XLA
        (`bert_keras.export.export_classifier` serves single texts so).

        Args:
            inputs: the Hub input dict (`input_word_ids`, `input_mask`,
                `input_type_ids`), each `(batch, seq)`.
            training: bool. Whether dropout is applied. Defaults to `False`.

        Returns:
            `(batch, hidden)`.
        """
        return self.padded_outputs(inputs, training=training, first_token_only=True)["pooled_output"]

    def padded_outputs(self, inputs, training=False, first_token_only=False):
        """`sequence_output` and `pooled_output` in the padded layout, whatever `pack_tokens` is.

        Equal to `self(inputs)`'s up to float rounding. Every block runs on
        `(batch, seq, hidden)` with padding masked out of attention, without
        the gathers and branches of token packing: fewer ops, which pays in
        engines that spend per op rather than per multiply-add (LiteRT with
        XNNPACK: `bert_keras.export.export_litert` converts this layout).

        Args:
            inputs: the Hub input dict (`input_word_ids`, `input_mask`,
                `input_type_ids`), each `(batch, seq)`.
            training: bool. Whether dropout is applied. Defaults to `False`.
            first_token_only: bool. Compute the last block for the first
                token only (what the pooler reads); `sequence_output` is then
                `(batch, 1, hidden)`. Defaults to `False`.

        Returns:
            A dict: `sequence_output` `(batch, seq, hidden)` (`(batch, 1,
            hidden)` with `first_token_only`) and `pooled_output`
            `(batch, hidden)`.
        """
        inputs = _check_inputs(inputs)
        x = self.embeddings(inputs["input_word_ids"], inputs["input_type_ids"], training=training)  # (batch, seq, hidden)
        attention_bias = attention_bias_from_mask(inputs["input_mask"])  # (batch, 1, 1, seq)
        last = self.num_layers - 1
        for i in range(self.num_layers):
            block = self.transformer_layers[0 if self.shared_layers else i]
            x = block(x, attention_bias=attention_bias, training=training, first_token_only=first_token_only and i == last)
        if self.output_layer_norm is not None:
            x = self.output_layer_norm(x)
        return {"sequence_output": x, "pooled_output": _pool(self.pooler, x[:, 0, :])}

    def get_config(self):
        return self.shared_config(**{
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "max_sequence_length": self.max_sequence_length,
            "type_vocab_size": self.type_vocab_size,
            "position_embedding": self.position_embedding,
            "norm_first": self.norm_first,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "initializer_range": self.initializer_range,
            "return_attention_probs": self.return_attention_probs,
            "pack_tokens": self.pack_tokens,
            "embedding_size": self.embedding_size,
            "shared_layers": self.shared_layers,
            "position_offset": self.position_offset,
            "use_pooler": self.use_pooler,
        })


def _make_blocks(count, initializer_range, **kwargs):
    """`count` Transformer blocks named `transformer_layer_{i}`."""
    return [
        TransformerEncoderBlock(
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
            name=f"transformer_layer_{i}",
            **kwargs,
        )
        for i in range(count)
    ]


def _make_pooler(hidden_size, initializer_range, dtype):
    """BERT's pooler: `tanh(dense(first token))`."""
    return keras.layers.Dense(
        hidden_size,
        activation="tanh",
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
        dtype=dtype,
        name="pooler_dense",
    )


def _pool(pooler, first_token):
    """`pooled_output` from the first token's `(batch, hidden)`: the pooler's, or the token itself without one."""
    return first_token if pooler is None else pooler(first_token)


def _check_inputs(inputs):
    """Checks the Hub input dict; integer tensors are cast to int32."""
    if not isinstance(inputs, collections.abc.Mapping):
        raise ValueError(
            "BertEncoder expects a dict with keys "
            f"{list(INPUT_KEYS)} (int32 tensors of shape (batch, seq)), as produced by "
            f"a BERT preprocessor. Received: {type(inputs).__name__}"
        )
    missing = [key for key in INPUT_KEYS if key not in inputs]
    unexpected = [key for key in inputs if key not in INPUT_KEYS]
    if missing or unexpected:
        raise ValueError(
            f"BertEncoder expects exactly the keys {list(INPUT_KEYS)}. "
            f"Missing: {missing}. Unexpected: {unexpected}. Received keys: {sorted(inputs)}"
        )
    checked = {}
    for key in INPUT_KEYS:
        value = inputs[key]
        if not hasattr(value, "dtype"):
            value = tf.convert_to_tensor(value)
        dtype = keras.backend.standardize_dtype(value.dtype)
        if not dtype.startswith(("int", "uint")):
            raise ValueError(
                f"Input `{key}` must hold integer token data (int32). Received: "
                f"dtype={dtype}. Convert text with a BERT preprocessor, and cast "
                "ids and masks to int32."
            )
        if len(value.shape) != 2:
            raise ValueError(
                f"Input `{key}` must have shape (batch, seq). Received: shape={tuple(value.shape)}"
            )
        checked[key] = value if dtype == "int32" else keras.ops.cast(value, "int32")
    return checked
