"""The offset arithmetic the SentencePiece and byte-level BPE tokenizers share, on flat per-piece tensors.

Their words are the units pieces are cut from (a SentencePiece word starts at
a piece beginning with "▁", a BPE word is one chunk of GPT-2's
pre-tokenization); the layer's interface is `bert_keras.text.base.Tokenizer`.
"""

import tensorflow as tf


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
