"""What the SentencePiece and byte-level BPE tokenizers share: the layer's interface and the offset arithmetic.

Both give what `WordPieceTokenizer` gives (`tokenize`, `tokenize_with_offsets`,
`tokenize_with_char_offsets`, `cls_id` / `sep_id` / `pad_id` / `mask_id`,
`get_special_tokens_dict`), so the preprocessor, the token-level tasks and the
exports take any of them. Their words are the units pieces are cut from (a
SentencePiece word starts at a piece beginning with "▁", a BPE word is one
chunk of GPT-2's pre-tokenization).
"""

import json
import os

import keras
import numpy as np
import tensorflow as tf

from bert_keras.text.tokenizer import VocabularyMethods, to_string_tensor

# Plain TensorFlow ops without Python control flow: tracing them through
# AutoGraph only makes `tf.function` and `tf.data` tracing slower.
_do_not_convert = tf.autograph.experimental.do_not_convert


class TokenizerFileError(ValueError):
    """A tokenizer's file (`vocab.json`, `merges.txt`, `spiece.model`, `tokenizer_config.json`) that cannot be read.

    The message names the file (and the JSON key at fault, where there is one),
    as `bert_keras.formats.CheckpointError` does: `"{file}, field {key!r}: {reason}"`.

    Attributes:
        file: str. The file at fault.
        key: str or None. The key of `tokenizer_config.json` at fault.
        reason: str. What is wrong, without the file's name.
    """

    def __init__(self, file, reason, key=None):
        self.file, self.key, self.reason = os.fspath(file), key, reason
        super().__init__(self.file + (f", field {key!r}" if key is not None else "") + f": {reason}")


def read_json_file(path):
    """The JSON value of a tokenizer's file; a `TokenizerFileError` naming it where it is not UTF-8 JSON."""
    with tf.io.gfile.GFile(os.fspath(path), "rb") as f:
        data = f.read()
    try:
        return json.loads(data.decode("utf-8"))
    # ValueError: not UTF-8, not JSON, or an integer of more than 4,300 digits; RecursionError: nested too deep.
    except (ValueError, RecursionError) as error:
        raise TokenizerFileError(path, f"is not valid JSON ({error}).") from error


def read_tokenizer_config(folder, keys):
    """The options among `keys` that `folder/tokenizer_config.json` records, as `{key: bool}`.

    An absent file, or a key absent or `null`, gives no entry (the
    tokenizer's default applies).

    Raises:
        TokenizerFileError: the file is not a JSON object, or holds one of
            `keys` that is not `true` or `false`.
    """
    path = os.path.join(os.fspath(folder), "tokenizer_config.json")
    if not tf.io.gfile.exists(path):
        return {}
    config = read_json_file(path)
    if not isinstance(config, dict):
        raise TokenizerFileError(path, f"expected a JSON object, found {type(config).__name__}.")
    options = {}
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise TokenizerFileError(path, f"expected true or false, found {value!r:.100}.", key=key)
        options[key] = value
    return options


def row_ids(ragged_or_splits):
    """Each value's row, from row splits (a ragged tensor's or given), in memory linear in the values.

    `RaggedTensor.value_rowids()` computes them with `tf.repeat`, whose memory
    grows with rows x longest row: a batch holding one 3,000-piece text among
    500,000 pieces asked for 12 GB.
    """
    splits = ragged_or_splits.row_splits if isinstance(ragged_or_splits, tf.RaggedTensor) else ragged_or_splits
    return tf.searchsorted(splits[1:], tf.range(splits[-1], dtype=splits.dtype), side="right", out_type=splits.dtype)


def in_ranges(code_points, ranges):
    """Whether each int32 code point lies in one of the sorted inclusive `(first, last)` ranges."""
    firsts = tf.constant([first for first, _ in ranges], tf.int32)
    lasts = tf.constant([last for _, last in ranges], tf.int32)
    index = tf.searchsorted(firsts, code_points, side="right") - 1
    return (index >= 0) & (code_points <= tf.gather(lasts, tf.maximum(index, 0)))


def previous_in_row(values, row_ids, fill):
    """`values` shifted by one within each row (flat tensors): the value before, `fill` at a row's start."""
    same_row = tf.concat([[False], row_ids[1:] == row_ids[:-1]], 0)
    return tf.where(same_row, tf.concat([[fill], values[:-1]], 0), fill)


def next_in_row(values, row_ids, fill):
    """`values` shifted by one within each row (flat tensors): the value after, `fill` at a row's end."""
    same_row = tf.concat([row_ids[1:] == row_ids[:-1], [False]], 0)
    return tf.where(same_row, tf.concat([values[1:], [fill]], 0), fill)


def nest_words(starts_word, row_lengths, values):
    """Flat per-piece tensors -> ragged `(batch, words, pieces)`, a word starting where `starts_word` is true.

    Args:
        starts_word: bool `(pieces,)`, true at least at each row's first piece.
        row_lengths: int64 `(batch,)`, pieces per row.
        values: list of flat `(pieces,)` tensors.
    """
    starts = tf.cast(starts_word, tf.int64)
    word_index = tf.cumsum(starts) - 1
    rows = row_ids(tf.concat([[0], tf.cumsum(tf.cast(row_lengths, tf.int64))], 0))
    words_per_row = tf.math.unsorted_segment_sum(starts, rows, tf.size(row_lengths))
    nested = []
    for value in values:
        pieces = tf.RaggedTensor.from_value_rowids(value, word_index, nrows=tf.reduce_sum(starts), validate=False)
        nested.append(tf.RaggedTensor.from_row_lengths(pieces, words_per_row, validate=False))
    return nested


def byte_to_char_spans(char_bytes, char_rows, num_rows, piece_rows, starts, ends, blank=None):
    """Byte offsets of pieces in each row's output text -> code point spans in the row's raw text.

    Each raw code point owns `char_bytes` bytes of the output (none when its
    text was dropped, several when expanded). A piece starts at the code point
    holding its first byte and ends after the one holding its last, plus the
    code points right after it that own no byte (a dropped accent, the second
    quote of "``"); `blank` code points are then trimmed from both ends, as
    Hugging Face's `trim_offsets`, and a piece of blanks only is empty where
    they end.

    Args:
        char_bytes: int64 `(chars,)`, the flat code points of all rows in order.
        char_rows: int64 `(chars,)`, each code point's row.
        num_rows: int64 scalar.
        piece_rows: int64 `(pieces,)`, each piece's row.
        starts, ends: int64 `(pieces,)`, byte offsets in the row's output.
        blank: optional bool `(chars,)`.

    Returns:
        Two int64 `(pieces,)` tensors, code point offsets within the row.
    """
    char_ends = tf.cumsum(char_bytes)
    row_bytes = tf.math.unsorted_segment_sum(char_bytes, char_rows, num_rows)
    row_byte_base = tf.cumsum(row_bytes, exclusive=True)
    row_chars = tf.math.unsorted_segment_sum(tf.ones_like(char_rows), char_rows, num_rows)
    row_char_base = tf.cumsum(row_chars, exclusive=True)
    byte_base = tf.gather(row_byte_base, piece_rows)
    char_base = tf.gather(row_char_base, piece_rows)
    row_last = char_base + tf.gather(row_chars, piece_rows) - 1
    first = tf.searchsorted(char_ends, starts + byte_base, side="right", out_type=tf.int64)
    holder = tf.searchsorted(char_ends, ends + byte_base, side="left", out_type=tf.int64)
    holder_end = tf.gather(char_ends, tf.clip_by_value(holder, 0, tf.maximum(tf.size(char_ends, tf.int64) - 1, 0)))
    last = tf.searchsorted(char_ends, holder_end, side="right", out_type=tf.int64) - 1
    last = tf.maximum(tf.minimum(last, row_last), first - 1)
    empty = ends <= starts
    last = tf.where(empty, first - 1, last)
    if blank is not None:
        # The first non-blank code point at or after each position, and the last at or before it.
        kept = tf.where(~blank)[:, 0]
        after = tf.searchsorted(kept, first, side="left", out_type=tf.int64)
        num_kept = tf.size(kept, tf.int64)
        # `kept` padded with one entry: a batch of blank texts keeps none, and a gather from nothing fails.
        padded = tf.concat([kept, [0]], 0)
        next_kept = tf.where(after < num_kept, tf.gather(padded, tf.minimum(after, num_kept)), row_last + 1)
        before = tf.searchsorted(kept, last, side="right", out_type=tf.int64) - 1
        prev_kept = tf.where(before >= 0, tf.gather(padded, tf.maximum(before, 0)), first - 1)
        first = tf.minimum(next_kept, last + 1)
        last = tf.maximum(prev_kept, first - 1)
    return first - char_base, last + 1 - char_base


class TracedTokenization:
    """A tokenizer's work on a batch of strings as `tf.function`s, traced once per tokenizer.

    As `WordPieceTokenizer`'s: held by this plain object, not as attributes of
    the layer, so that a SavedModel does not take them for the layer's functions.
    """

    def __init__(self, tokenize_rows, tokenize_rows_with_char_offsets):
        spec = [tf.TensorSpec([None], tf.string)]
        self.tokenize_rows = tf.function(tokenize_rows, input_signature=spec, autograph=False)
        self.tokenize_rows_with_char_offsets = tf.function(
            tokenize_rows_with_char_offsets, input_signature=spec, autograph=False
        )


class SubwordTokenizer(VocabularyMethods, keras.layers.Layer):
    """The interface of the in-graph tokenizers; subclasses set the ids and `self._traced`."""

    packing = "bert"

    def _set_special_tokens(self, vocabulary, **special):
        """Sets `<name>_id` for each `<name>_token=token`, raising a Keras-style error for a missing token."""
        index = {token: i for i, token in enumerate(vocabulary)}
        for argument, token in special.items():
            if not isinstance(token, str) or token not in index:
                raise ValueError(
                    f"Received an invalid value for argument `{argument}`, expected a token of the vocabulary "
                    f"({len(vocabulary)} tokens). Received: {argument}={token!r}, which the vocabulary lacks"
                )
            setattr(self, argument, token)
            setattr(self, argument.replace("_token", "_id"), index[token])
        self._token_to_id = index
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.built = True

    @_do_not_convert
    def tokenize_with_offsets(self, inputs):
        """Like `tokenize`, and also returns each piece's byte offsets in the text the pieces are cut from.

        Returns:
            A tuple `(token_ids, starts, ends)` of ragged tensors `(batch,
            words, pieces)`: int32 ids and int64 byte offsets.
        """
        return self._rows(self._traced.tokenize_rows, inputs)

    @_do_not_convert
    def tokenize_with_char_offsets(self, inputs):
        """Like `tokenize`, and also returns where every piece is in the raw input, in code points.

        Returns:
            A tuple `(token_ids, starts, ends)` of ragged tensors `(batch,
            words, pieces)`: int32 ids and int64 code point offsets into
            `inputs` (an invalid UTF-8 sequence counts as one U+FFFD, as in
            Python's `bytes.decode(errors="replace")`).
        """
        return self._rows(self._traced.tokenize_rows_with_char_offsets, inputs)

    @_do_not_convert
    def tokenize(self, inputs):
        """Strings to int32 piece ids, a ragged tensor `(batch, words, pieces)`."""
        return self.tokenize_with_offsets(inputs)[0]

    @_do_not_convert
    def call(self, inputs):
        return self.tokenize(inputs)

    def _rows(self, tokenize_rows, inputs):
        """`tokenize_rows` on a batch of strings; a scalar string is a batch of one, given back without its batch."""
        inputs = to_string_tensor(inputs)
        rank = inputs.shape.rank
        if rank == 2 and inputs.shape[-1] == 1:
            inputs = tf.squeeze(inputs, axis=-1)
        elif rank is not None and rank > 1:
            raise ValueError(
                "Received an invalid value for argument `inputs`, expected a scalar or a batch of strings of "
                f"shape (batch,) or (batch, 1). Received: inputs.shape={inputs.shape}"
            )
        scalar = inputs.shape.rank == 0
        if scalar:
            inputs = tf.expand_dims(inputs, 0)
        outputs = tokenize_rows(inputs)
        if scalar:
            outputs = tuple(output[0] for output in outputs)
        return outputs

    def compute_output_spec(self, inputs):
        raise NotImplementedError(
            f"{type(self).__name__} returns a tf.RaggedTensor, which Keras' functional models cannot carry; "
            "call it on tensors, or use BertPreprocessor inside a model."
        )


def check_bool(name, value):
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a bool. Received: {name}={value!r}"
        )
    return bool(value)
