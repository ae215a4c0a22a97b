"""Word pieces' offsets from the normalised text back to the user's raw string, in the graph.

The tokenizer cuts pieces from the normalised text (lower-cased, accents and
control characters dropped, spaces put around CJK ideographs), so its byte
offsets point into a string the user never saw. `char_offsets` turns them
into code point offsets into the raw string, the unit of Python's `str`,
with tf ops only (traceable, servable, no `py_function`).
"""

import tensorflow as tf

# ASCII text that normalisation maps byte for byte (tab, newline and carriage return become spaces, letters
# lower-case), dropping nothing: the other ASCII characters are the control characters of `REMOVED_RANGES`.
_ASCII_KEPT = r"[\t\n\r\x20-\x7e]*"


@tf.autograph.experimental.do_not_convert
def char_offsets(texts, starts, ends, normalize):
    """Byte offsets into the normalised texts -> code point offsets into `texts` themselves.

    BERT's normalisation works character by character, so each raw code point
    owns the bytes that it gives when normalised alone (none when dropped,
    several when expanded); the running sum of those lengths maps normalised
    bytes back to raw code points. A piece starts at the code point holding
    its first byte and ends after the one holding its last, as
    `BertTokenizerFast`'s offsets do. The one difference: where NFD's
    canonical reordering moves a kept (spacing) mark across a dropped one at
    the end of a piece, the reference's span can leave out the kept mark or
    take in the dropped one (`"a\\u302b\\u302e!"`: the reference (0, 2),
    ours (0, 3), which holds the kept U+302E); 2 of 449,671 pieces when every
    code point up to U+2FFFF and U+E0000-E01FF was probed.

    Args:
        texts: string tensor `(batch,)`, the raw input. Bytes that are not
            valid UTF-8 count as one U+FFFD per invalid sequence, as
            Python's `bytes.decode(errors="replace")` counts them.
        starts, ends: int64 ragged tensors `(batch, words, pieces)`, byte
            offsets into `normalize(texts)`.
        normalize: the tokenizer's normalisation, a function from a string
            tensor `(n,)` to one of the same shape.

    Returns:
        A tuple `(starts, ends)` of int64 ragged tensors shaped like the
        inputs, in code points of `texts`.
    """
    # Printable ASCII text (most text) normalises byte for byte: its offsets stay. The other texts are decoded.
    same = tf.strings.regex_full_match(texts, _ASCII_KEPT)
    # chars: (batch, (code points)), empty for the texts whose offsets stay; only distinct code points are normalised.
    chars = tf.strings.unicode_decode(tf.where(same, "", texts), "UTF-8", errors="replace", replacement_char=0xFFFD)
    unique, index = tf.unique(chars.flat_values)
    unique_bytes = tf.strings.length(normalize(tf.strings.unicode_encode(unique[:, None], "UTF-8")))
    char_bytes = tf.cast(tf.gather(unique_bytes, index), tf.int64)
    # Counted over the whole batch, so that one 1-D search serves every text: char_ends[i] is where code point i's
    # normalised bytes end, text_bytes[r] where text r's begin, text_chars[r] where its code points begin.
    char_ends = tf.cumsum(char_bytes)
    text_bytes = tf.cumsum(
        tf.math.unsorted_segment_sum(char_bytes, chars.value_rowids(), tf.shape(texts, out_type=tf.int64)[0]),
        exclusive=True,
    )
    text_chars = chars.row_starts()
    piece_text = tf.gather(starts.value_rowids(), starts.values.value_rowids())  # (pieces,)
    byte_base, char_base = tf.gather(text_bytes, piece_text), tf.gather(text_chars, piece_text)
    first = tf.searchsorted(char_ends, starts.flat_values + byte_base, side="right", out_type=tf.int64)
    last = tf.searchsorted(char_ends, ends.flat_values + byte_base, side="left", out_type=tf.int64)
    same = tf.gather(same, piece_text)
    return (
        starts.with_flat_values(tf.where(same, starts.flat_values, first - char_base)),
        ends.with_flat_values(tf.where(same, ends.flat_values, last + 1 - char_base)),
    )
