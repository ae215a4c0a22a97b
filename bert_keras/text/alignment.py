"""Word labels onto word pieces for tagging (named entities), each piece keeping its span in the raw text.

Users label words (CoNLL tokens); BERT sees word pieces. `join_words` makes
the raw text of a sentence (its words joined by single spaces) and each
word's character span; in the graph, `word_of_pieces` finds each piece's
word by its character offsets, so that the first piece of each word carries
the word's label (`IGNORE_LABEL` elsewhere) and, after the model, each word
reads the tag of its first piece (`bert_keras.export.tagger.word_tags`).
The windows a long text is cut into are `text.windows.tagging_windows`', the
same the tagger export serves.

Character offsets count Unicode code points (Python `str` indices), as
`WordPieceTokenizer.tokenize_with_char_offsets` does.
"""

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text


# The label of positions that the loss skips (pieces after a word's first, [CLS], [SEP], padding): Keras'
# and PyTorch's conventional ignore index.
IGNORE_LABEL = -100


def join_words(words):
    """A sentence's raw text (its words joined by single spaces) and each word's character span in it.

    Args:
        words: list (or 1-D numpy array) of str, the sentence's words.

    Returns:
        A tuple `(text, starts, ends)`: the str, and two lists of int with
        `text[starts[i]:ends[i]] == words[i]`.

    Example:
    >>> join_words(["Paris", "is", "nice"])
    ('Paris is nice', [0, 6, 9], [5, 8, 13])
    """
    words = _as_words(words, "words")
    starts, ends, position = [], [], 0
    for word in words:
        starts.append(position)
        ends.append(position + len(word))
        position += len(word) + 1
    return " ".join(words), starts, ends


def _as_words(words, argument):
    if isinstance(words, np.ndarray):
        words = words.tolist()
    if not isinstance(words, (list, tuple)) or not all(isinstance(word, str) for word in words):
        raise TypeError(
            f"Received an invalid value for argument `{argument}`, expected a list of str (one sentence's "
            f"words). Received: {argument}={words!r:.80}"
        )
    return list(words)


def as_ragged(values, argument, dtype=tf.int64):
    """A ragged `(batch, (n))` tensor from a ragged or dense tensor, numpy arrays or lists of lists."""
    if isinstance(values, tf.RaggedTensor):
        return tf.cast(values, dtype)
    if isinstance(values, tf.Tensor) or (isinstance(values, np.ndarray) and values.dtype != object):
        return tf.RaggedTensor.from_tensor(tf.cast(values, dtype))
    try:
        rows = [np.asarray(row, dtype=np.int64).tolist() for row in values]
        return tf.ragged.constant(rows, dtype=dtype, ragged_rank=1, inner_shape=())
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"Received an invalid value for argument `{argument}`, expected one list of int per text. "
            f"Received: {argument}={values!r:.80}"
        ) from error


def pack_values(values, seq_length, fill):
    """`(batch, (pieces))` -> `(batch, seq_length)`: trimmed, combined and padded as `pack_inputs` does the ids.

    Per-piece values (labels, offsets) beside the packed ids: `fill` at `[CLS]`, `[SEP]` and padding.
    """
    trimmed = tf_text.RoundRobinTrimmer(max_seq_length=seq_length - 2).trim([values])
    fill = tf.constant(fill, values.dtype)
    combined, _ = tf_text.combine_segments(trimmed, start_of_sequence_id=fill, end_of_segment_id=fill)
    packed, _ = tf_text.pad_model_inputs(combined, max_seq_length=seq_length, pad_value=fill)
    return packed


def word_of_pieces(starts, word_starts, word_ends):
    """Each piece's word (index within its text, -1 for none) and whether it is its word's first piece.

    Args:
        starts: int64 ragged `(batch, (pieces))`, the pieces' first characters.
        word_starts, word_ends: int64 ragged `(batch, (words))`.

    Returns:
        Two flat tensors over the pieces: int64 word indices and bool.
    """
    # Keys row * width + offset sort every text's words and pieces into one line, so that one 1-D search finds,
    # for each piece, the last word starting at or before it.
    width = tf.reduce_max(tf.concat([[0], word_ends.flat_values, starts.flat_values], 0)) + 1
    piece_row = starts.value_rowids()
    word_keys = word_starts.value_rowids() * width + word_starts.flat_values
    found = tf.searchsorted(word_keys, piece_row * width + starts.flat_values, side="right", out_type=tf.int64) - 1
    row_first_word = tf.gather(word_starts.row_starts(), piece_row)
    clipped = tf.maximum(found, 0)
    inside = (found >= row_first_word) & (starts.flat_values < tf.gather(word_ends.flat_values, clipped))
    global_word = tf.where(inside, found, -1)
    # A piece is its word's first unless the piece before it, in the same text, has the same word.
    previous = tf.concat([[-1], global_word[:-1]], 0)
    same_row = tf.concat([[False], piece_row[1:] == piece_row[:-1]], 0)
    first = inside & ~(same_row & (previous == global_word))
    return tf.where(inside, found - row_first_word, -1), first
