"""Packing of tokenized segments into BERT's inputs, as TF Hub preprocessors do.

`[CLS] A [SEP] B [SEP] [PAD] ...`: trimmed to fit `seq_length`, combined with
the special tokens, padded; `input_type_ids` are 0 for `[CLS]`, A and its
`[SEP]`, 1 for B and its `[SEP]` (i for the i-th segment). All steps are
tensorflow-text ops (`RoundRobinTrimmer` / `WaterfallTrimmer`,
`combine_segments`, `pad_model_inputs`), as in TF Model Garden's
`export_tfhub_lib.py`.
"""

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from bert_keras._checks import check_choice, check_int

# Plain TensorFlow ops without Python control flow: tracing them through
# AutoGraph only makes `tf.function` and `tf.data` tracing slower.
_do_not_convert = tf.autograph.experimental.do_not_convert

TRUNCATIONS = ("round_robin", "waterfall")
# "bert": [CLS] A [SEP] B [SEP], type ids by segment (BERT, ALBERT, ELECTRA, DistilBERT); "roberta": <s> A </s></s> B
# </s>, every type id 0 (RoBERTa has no token types).
PACKINGS = ("bert", "roberta")


def num_special_tokens(num_segments, packing="bert"):
    """How many special tokens `packing` adds around `num_segments` segments: `[CLS]` and one `[SEP]` per segment,
    and RoBERTa's second `</s>` before each later segment (BERT: 2 and 3, RoBERTa: 2 and 4).

    >>> num_special_tokens(2), num_special_tokens(2, "roberta")
    (3, 4)
    """
    check_choice("packing", packing, PACKINGS)
    return num_segments + 1 + (num_segments - 1 if packing == "roberta" else 0)


def pieces_of_words(words):
    """`(batch, (words), (pieces))` -> `(batch, (pieces))`: `words.merge_dims(1, 2)` without its checks.

    A valid ragged tensor merges into a valid one, so the checks `merge_dims`
    puts in the graph (three assertion conditionals a tensor) only cost: a
    SavedModel's load turns each into functions (a reader's windows made 18
    of the 88 functions its `window_range` reaches).
    """
    if not isinstance(words, tf.RaggedTensor) or words.ragged_rank != 2 or isinstance(words.values.values,
                                                                                      tf.RaggedTensor):
        return words.merge_dims(1, 2)
    splits = tf.gather(words.values.row_splits, words.row_splits)
    return tf.RaggedTensor.from_row_splits(words.values.values, splits, validate=False)


def _as_segment(segment, index):
    """A ragged `(batch, tokens)` integer tensor from ragged rank 1 or 2 input."""
    if not isinstance(segment, tf.RaggedTensor):
        segment = tf.convert_to_tensor(segment)
        if segment.shape.rank != 2:
            raise ValueError(
                f"Received an invalid value for argument `segments[{index}]`, expected token "
                "ids of shape (batch, tokens) or (batch, words, word_pieces). Received: "
                f"shape={segment.shape}"
            )
        segment = tf.RaggedTensor.from_tensor(segment)
    if not segment.dtype.is_integer:
        raise TypeError(
            f"Received an invalid value for argument `segments[{index}]`, expected integer "
            f"token ids. Received: dtype={segment.dtype.name}"
        )
    if segment.shape.rank == 3:
        # (batch, words, word_pieces) -> (batch, tokens)
        segment = pieces_of_words(segment)
    elif segment.shape.rank != 2:
        raise ValueError(
            f"Received an invalid value for argument `segments[{index}]`, expected token ids "
            "of shape (batch, tokens) or (batch, words, word_pieces). Received: "
            f"shape={segment.shape}"
        )
    return segment


@_do_not_convert
def pack_inputs(
    segments,
    seq_length,
    start_of_sequence_id,
    end_of_segment_id,
    padding_id=0,
    truncation="round_robin",
    packing="bert",
):
    """Packs 1 or more tokenized segments into the Hub encoder's input dict.

    The TF Hub `bert_pack_inputs` contract: trim the segments together to
    `seq_length - (len(segments) + 1)` tokens, then
    `[CLS] A [SEP] B [SEP]`, padded to `seq_length`.

    Args:
        segments: list of integer tensors, each `(batch, tokens)` (ragged or
            dense) or ragged `(batch, words, word_pieces)`, as returned by
            `WordPieceTokenizer`. A single tensor counts as one segment.
        seq_length: int. Length of the packed sequences.
        start_of_sequence_id: int. Id of `[CLS]`.
        end_of_segment_id: int. Id of `[SEP]`.
        padding_id: int. Id of `[PAD]`. Defaults to `0`.
        truncation: str. `"round_robin"` (one token at a time from each
            segment that still has tokens, in turn, as TF Hub does) or
            `"waterfall"` (the first segments keep all they can). Defaults to
            `"round_robin"`.
        packing: str. `"bert"` (above) or `"roberta"`: `<s> A </s></s> B
            </s>` (`end_of_segment_id` twice between segments, as
            transformers' RoBERTa tokenizer), all type ids 0. Defaults to
            `"bert"`.

    Returns:
        A dict of int32 `(batch, seq_length)` tensors: `input_word_ids`,
        `input_mask` (1 for real tokens) and `input_type_ids` (the segment
        index; 0 everywhere for `"roberta"`).

    Example:
    >>> packed = pack_inputs([tf.ragged.constant([[7, 8, 9]]), tf.ragged.constant([[5]])],
    ...                      seq_length=6, start_of_sequence_id=2, end_of_segment_id=3)
    >>> packed["input_word_ids"].numpy().tolist(), packed["input_type_ids"].numpy().tolist()
    ([[2, 7, 8, 3, 5, 3]], [[0, 0, 0, 0, 1, 1]])
    """
    if isinstance(segments, (tf.Tensor, tf.RaggedTensor)):
        segments = [segments]
    if not isinstance(segments, (list, tuple)) or not segments:
        raise ValueError(
            "Received an invalid value for argument `segments`, expected a non-empty list of "
            f"token-id tensors. Received: segments={segments!r:.80}"
        )
    check_choice("truncation", truncation, TRUNCATIONS)
    num_special = num_special_tokens(len(segments), packing)
    if isinstance(seq_length, tf.Tensor):
        # A scalar tensor, as the exported `bert_pack_inputs(..., seq_length=)` receives it.
        seq_length = tf.cast(seq_length, tf.int32)
        tf.debugging.assert_greater_equal(
            seq_length,
            num_special,
            message=f"`seq_length` must be at least {num_special} for {len(segments)} segment(s)",
        )
    else:
        check_int("seq_length", seq_length, minimum=num_special)
    segments = [_as_segment(segment, i) for i, segment in enumerate(segments)]
    dtype = segments[0].dtype
    segments = [segment if segment.dtype == dtype else tf.cast(segment, dtype) for segment in segments]

    budget = seq_length - num_special
    if truncation == "round_robin":
        trimmer = tf_text.RoundRobinTrimmer(max_seq_length=budget)
    else:
        trimmer = tf_text.WaterfallTrimmer(max_seq_length=budget)
    trimmed = trimmer.trim(segments)
    if packing == "roberta":
        # </s> </s> between segments: each later segment starts with one more </s>.
        trimmed = trimmed[:1] + [
            tf.concat([tf.fill([segment.nrows(), 1], tf.constant(end_of_segment_id, dtype)), segment], axis=1)
            for segment in trimmed[1:]
        ]
    # ids, type_ids: (batch, (tokens)) with [CLS] and one [SEP] per segment
    ids, type_ids = tf_text.combine_segments(
        trimmed,
        start_of_sequence_id=tf.constant(start_of_sequence_id, dtype),
        end_of_segment_id=tf.constant(end_of_segment_id, dtype),
    )
    # word_ids, mask, type_ids: (batch, seq_length)
    word_ids, mask = tf_text.pad_model_inputs(ids, max_seq_length=seq_length, pad_value=padding_id)
    if packing == "roberta":
        type_ids = tf.zeros_like(type_ids)
    type_ids, _ = tf_text.pad_model_inputs(type_ids, max_seq_length=seq_length, pad_value=0)
    return {
        "input_word_ids": tf.cast(word_ids, tf.int32),
        "input_mask": tf.cast(mask, tf.int32),
        "input_type_ids": tf.cast(type_ids, tf.int32),
    }


@keras.saving.register_keras_serializable(package="bert_keras")
class BertPacker(keras.layers.Layer):
    """Keras layer around `pack_inputs`: token-id segments to the Hub input dict.

    Args:
        seq_length: int. Length of the packed sequences. Defaults to `128`.
        start_of_sequence_id: int. Id of `[CLS]`.
        end_of_segment_id: int. Id of `[SEP]`.
        padding_id: int. Id of `[PAD]`. Defaults to `0`.
        truncation: str. `"round_robin"` or `"waterfall"`; see `pack_inputs`.
            Defaults to `"round_robin"`.
        packing: str. `"bert"` or `"roberta"`; see `pack_inputs`. Defaults
            to `"bert"`.

    Call arguments:
        inputs: an integer tensor or a list of them, each `(batch, tokens)`
            or ragged `(batch, words, word_pieces)`.
        seq_length: int, optional. Overrides the layer's `seq_length`.

    Returns:
        A dict of int32 `(batch, seq_length)` tensors: `input_word_ids`,
        `input_mask` and `input_type_ids`.

    Example:
    >>> packer = BertPacker(seq_length=5, start_of_sequence_id=2, end_of_segment_id=3)
    >>> packer(tf.ragged.constant([[7, 8]]))["input_word_ids"].numpy().tolist()
    [[2, 7, 8, 3, 0]]
    """

    def __init__(
        self,
        start_of_sequence_id,
        end_of_segment_id,
        seq_length=128,
        padding_id=0,
        truncation="round_robin",
        packing="bert",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.seq_length = check_int("seq_length", seq_length, minimum=2)
        self.packing = check_choice("packing", packing, PACKINGS)
        self.start_of_sequence_id = check_int("start_of_sequence_id", start_of_sequence_id, minimum=0)
        self.end_of_segment_id = check_int("end_of_segment_id", end_of_segment_id, minimum=0)
        self.padding_id = check_int("padding_id", padding_id, minimum=0)
        self.truncation = check_choice("truncation", truncation, TRUNCATIONS)
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.built = True

    @_do_not_convert
    def call(self, inputs, seq_length=None):
        return pack_inputs(
            inputs,
            seq_length=self.seq_length if seq_length is None else seq_length,
            start_of_sequence_id=self.start_of_sequence_id,
            end_of_segment_id=self.end_of_segment_id,
            padding_id=self.padding_id,
            truncation=self.truncation,
            packing=self.packing,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "seq_length": self.seq_length,
                "start_of_sequence_id": self.start_of_sequence_id,
                "end_of_segment_id": self.end_of_segment_id,
                "padding_id": self.padding_id,
                "truncation": self.truncation,
                "packing": self.packing,
            }
        )
        return config
