"""BertPreprocessor: raw strings to the TF Hub encoder inputs, as one Keras layer."""

import keras
import tensorflow as tf

from bert_keras._contract import INPUT_KEYS
from bert_keras.text.base import Tokenizer, to_string_tensor
from bert_keras.text.packer import BertPacker, pack_inputs
from bert_keras.text.tokenizer import WordPieceTokenizer

# Plain TensorFlow ops without Python control flow: tracing them through
# AutoGraph only makes `tf.function` and `tf.data` tracing slower.
_do_not_convert = tf.autograph.experimental.do_not_convert

OUTPUT_KEYS = INPUT_KEYS


class _TracedPacking:
    """`bert_pack_inputs` of tokenized segments as one `tf.function` per number of segments and packing.

    Traced once per preprocessor, where every function that preprocesses
    (a train step, an evaluation step, each serving signature) traced the
    packing's ops again. Held by this plain object, not as an attribute of
    the layer, so that a SavedModel does not take it for one of its functions.
    """

    def __init__(self, preprocessor):
        self._preprocessor = preprocessor
        self._functions = {}

    def pack(self, segments, seq_length, truncation):
        key = (len(segments), seq_length, truncation)
        if key not in self._functions:
            spec = tf.RaggedTensorSpec([None, None, None], tf.int32, ragged_rank=2)
            preprocessor = self._preprocessor

            def pack(*segments):
                return pack_inputs(list(segments), seq_length=seq_length, truncation=truncation,
                                   **preprocessor._special_ids())

            self._functions[key] = tf.function(pack, input_signature=[spec] * len(segments), autograph=False)
        return self._functions[key](*segments)


@keras.saving.register_keras_serializable(package="bert_keras")
class BertPreprocessor(keras.layers.Layer):
    """Strings (or pairs of strings) to BERT's inputs, inside the graph.

    The counterpart of a TF Hub `bert_*_preprocess` module: WordPiece
    tokenization (`WordPieceTokenizer`), then round-robin trimming, `[CLS]` /
    `[SEP]` and padding (`pack_inputs`). Special-token ids come from the
    vocabulary. Works on eager tensors, in `tf.function`, `tf.data` and in a
    functional model fed by `keras.Input(shape=(), dtype="string")`, and is
    saved with its vocabulary (`.keras` files, `model.export()`).

    Args:
        vocabulary: str, path-like, or list of str. A `vocab.txt` or its
            tokens. Give this or `tokenizer`.
        lower_case: bool. Uncased (`True`) or cased (`False`) vocabulary;
            used with `vocabulary`. Defaults to `True`.
        seq_length: int. Length of the packed sequences. Defaults to `128`.
        truncation: str. `"round_robin"` (TF Hub's rule) or `"waterfall"`.
            Defaults to `"round_robin"`.
        tokenizer: `WordPieceTokenizer`, `SentencePieceTokenizer` (ALBERT) or
            `BytePairTokenizer` (RoBERTa), optional. Used instead of building
            a WordPiece one from `vocabulary`; it also decides the packing
            (RoBERTa: `<s> A </s></s> B </s>`, type ids 0).

    Call arguments:
        inputs: a string tensor `(batch,)` for single texts, or a list of
            string tensors `[(batch,), (batch,)]` for text pairs (or more
            segments).

    Returns:
        A dict of int32 `(batch, seq_length)` tensors: `input_word_ids`,
        `input_mask` (1 for real tokens, 0 for padding) and `input_type_ids`
        (0 for `[CLS]`, segment A and its `[SEP]`; 1 for segment B and its
        `[SEP]`).

    Example:
    >>> preprocessor = BertPreprocessor(
    ...     ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world"], seq_length=6)
    >>> preprocessor(tf.constant(["Hello world"]))["input_word_ids"].numpy().tolist()
    [[2, 5, 6, 3, 0, 0]]
    >>> text = keras.Input(shape=(), dtype="string")
    >>> model = keras.Model(text, preprocessor(text))
    """

    def __init__(
        self,
        vocabulary=None,
        lower_case=True,
        seq_length=128,
        truncation="round_robin",
        tokenizer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if (vocabulary is None) == (tokenizer is None):
            raise ValueError(
                "Expected exactly one of the arguments `vocabulary` and `tokenizer`. Received: "
                f"vocabulary={'None' if vocabulary is None else '...'}, tokenizer={tokenizer!r}"
            )
        if isinstance(tokenizer, dict):
            tokenizer = keras.saving.deserialize_keras_object(tokenizer)
        if tokenizer is None:
            tokenizer = WordPieceTokenizer(vocabulary, lower_case=lower_case, name="tokenizer")
        elif not isinstance(tokenizer, Tokenizer):  # each says how its pairs are packed (`packing`)
            raise ValueError(
                "Received an invalid value for argument `tokenizer`, expected a WordPieceTokenizer, "
                f"SentencePieceTokenizer or BytePairTokenizer. Received: tokenizer={tokenizer!r}"
            )
        self.tokenizer = tokenizer
        self.seq_length = seq_length
        self.truncation = truncation
        self.packer = BertPacker(
            seq_length=seq_length,
            truncation=truncation,
            name="packer",
            **self._special_ids(),
        )
        self._traced_packing = _TracedPacking(self)
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.built = True

    @property
    def lower_case(self):
        return getattr(self.tokenizer, "lower_case", False)

    def _special_ids(self):
        return {
            "start_of_sequence_id": self.tokenizer.cls_id,
            "end_of_segment_id": self.tokenizer.sep_id,
            "padding_id": self.tokenizer.pad_id,
            "packing": self.tokenizer.packing,
        }

    def get_special_tokens_dict(self):
        """`vocab_size`, `start_of_sequence_id`, `end_of_segment_id`, `padding_id`, `mask_id`."""
        return self.tokenizer.get_special_tokens_dict()

    @_do_not_convert
    def tokenize(self, inputs):
        """Strings `(batch,)` to int32 ragged ids `(batch, words, word_pieces)`."""
        return self.tokenizer.tokenize(inputs)

    @_do_not_convert
    def bert_pack_inputs(self, segments, seq_length=None):
        """Packs tokenized segments (ragged rank 1 or 2) as TF Hub's `bert_pack_inputs`.

        Args:
            segments: list of 1 or more int ragged tensors `(batch, tokens)`
                or `(batch, words, word_pieces)`.
            seq_length: int, optional. Defaults to the layer's `seq_length`.

        Returns:
            The dict of int32 `(batch, seq_length)` encoder inputs.
        """
        return pack_inputs(
            segments,
            seq_length=self.seq_length if seq_length is None else seq_length,
            truncation=self.truncation,
            **self._special_ids(),
        )

    @_do_not_convert
    def call(self, inputs):
        if isinstance(inputs, dict):
            raise ValueError(
                "Received an invalid value for argument `inputs`, expected a string tensor or "
                f"a list of string tensors (one per segment). Received: a dict with keys "
                f"{sorted(inputs)}"
            )
        texts = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if not texts:
            raise ValueError(
                "Received an invalid value for argument `inputs`, expected at least one "
                "string tensor. Received: inputs=[]"
            )
        segments = [
            self.tokenizer.tokenize(to_string_tensor(text, f"inputs[{i}]" if len(texts) > 1 else "inputs"))
            for i, text in enumerate(texts)
        ]
        for segment in segments:
            if segment.shape.rank != 3:
                raise ValueError(
                    "Received an invalid value for argument `inputs`, expected a batch of "
                    "strings of shape (batch,). Received: a scalar string; wrap it in a list"
                )
        return self._traced_packing.pack(segments, self.seq_length, self.truncation)

    def compute_output_spec(self, inputs):
        first = inputs[0] if isinstance(inputs, (list, tuple)) else inputs
        shape = (first.shape[0], self.seq_length)
        return {key: keras.KerasTensor(shape, dtype="int32") for key in OUTPUT_KEYS}

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "seq_length": self.seq_length,
                "truncation": self.truncation,
                "tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
            }
        )
        return config
