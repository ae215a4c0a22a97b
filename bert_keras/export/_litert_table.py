"""Hugging Face's BERT normalisation as a table that tensorflow-text's LiteRT kernel `FastBertNormalize` reads.

`FastBertNormalizer` maps text code point by code point through a table: a
darts-clone double-array trie from each changed code point's UTF-8 bytes to
an entry of a pool of normalised strings (tensorflow-text's
`fast_bert_normalizer_model.fbs`). Its own table (NFKC case folding) differs
from Hugging Face's `BertNormalizer` on 13 % of all code points, on U+FFFD
among them, which the reference drops and the built-in table keeps: 12.6 %
of the demo's tweets got other ids. `normalizer_model` builds the table of
the package's own normalisation (`text.tokenizer.normalize_text`, equal to
the reference on every code point) instead, for every code point, with two
corrections for what `FastWordpieceTokenizer` splits off as punctuation:

- the few code points that the reference splits off and FastWordpiece does
  not are written with a space on each side;
- those that FastWordpiece splits off and the reference keeps inside a
  word are replaced by a private-use placeholder that no vocabulary token
  holds (input private-use characters are removed by the table, so it can
  only come from here): the word holding one stays whole, and is the
  unknown token in both. A vocabulary whose tokens hold such a code point
  cannot be matched there; `normalizer_model` names them.

The model's flatbuffer and its double array are built by
`_platform.text_models` (the layouts tensorflow-text's kernels read), so that
no compiled builder is needed.
"""

import functools

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_keras._platform.text_models import normalizer_model_buffer
from bert_keras.text import _unicode_tables as tables
from bert_keras.text.tokenizer import normalize_text

# The code point that stands in for characters FastWordpiece splits off and the reference keeps inside words.
PLACEHOLDER = 0xE000
_BATCH = 1 << 16  # code points per call of the TensorFlow ops that compute the table


def code_points():
    """Every Unicode scalar value (no surrogates: they have no UTF-8), int64 `(1,112,064,)`."""
    points = np.arange(0x110000)
    return points[(points < 0xD800) | (points > 0xDFFF)]


def _utf8(points):
    return [chr(point).encode("utf-8") for point in points]


def _in_batches(function, strings):
    out = []
    for begin in range(0, len(strings), _BATCH):
        out.extend(function(tf.constant(strings[begin : begin + _BATCH], tf.string)))
    return out


@functools.lru_cache(maxsize=2)
def reference_table(lower_case):
    """`{code point: normalised UTF-8}` for the code points whose normalisation is not themselves, and the
    sets of code points `(split_by_reference_only, split_by_fast_wordpiece_only)` among those kept as they are."""
    points = code_points()
    chars = _utf8(points)
    normalized = _in_batches(lambda x: normalize_text(x, lower_case=lower_case).numpy().tolist(), chars)
    changed = {int(p): n for p, c, n in zip(points, chars, normalized) if n != c}
    kept = [int(p) for p in points if int(p) not in changed]
    # FastWordpiece's own pre-tokenisation: "a" + c + "a" with the vocabulary "a", "##a" is one word ([UNK]) unless c is
    # split off (three pieces, or two when c itself is dropped as white space).
    wordpiece = tf_text.FastWordpieceTokenizer(["[UNK]", "a", "##a"], token_out_type=tf.int32)
    pieces = _in_batches(lambda x: wordpiece.tokenize(x).row_lengths().numpy().tolist(),
                         [b"a" + chr(p).encode("utf-8") + b"a" for p in kept])
    fast = {p for p, n in zip(kept, pieces) if n != 1 and p != ord("a")}
    reference = {p for first, last in tables.PUNCTUATION_RANGES for p in range(first, last + 1)}
    kept_set = set(kept)
    reference_only = frozenset(p for p in reference & kept_set if p not in fast)
    fast_only = frozenset(p for p in fast - reference if not chr(p).isspace())
    return changed, reference_only, fast_only


def normalizer_model(vocabulary, lower_case):
    """The `FastBertNormalizer(model_buffer=...)` bytes of the reference normalisation for `vocabulary`.

    Returns:
        `(model_buffer, unmatched)`: the flatbuffer, and the sorted code points
        that FastWordpiece splits off while the reference keeps them inside
        words and that a vocabulary token holds (their words may get other
        pieces than the reference's; empty for BERT's vocabularies).
    """
    changed, reference_only, fast_only = reference_table(lower_case)
    if any(chr(PLACEHOLDER) in token for token in vocabulary):  # it could not stand for "no piece" then
        raise ValueError(f"The vocabulary holds U+{PLACEHOLDER:04X}, which the LiteRT normaliser uses as a placeholder; "
                         "this vocabulary cannot be served from raw strings in LiteRT.")
    in_tokens = frozenset(p for p in fast_only if any(chr(p) in token for token in vocabulary))
    return _corrected_model(lower_case, in_tokens), sorted(in_tokens)


@functools.lru_cache(maxsize=4)
def _corrected_model(lower_case, in_tokens):
    """The model of `reference_table(lower_case)` with its corrections, but for the code points `in_tokens`."""
    changed, reference_only, fast_only = reference_table(lower_case)
    table = dict(changed)
    for point in reference_only:
        table[point] = b" " + chr(point).encode("utf-8") + b" "
    for point in fast_only - in_tokens:
        table[point] = chr(PLACEHOLDER).encode("utf-8")
    return normalizer_model_buffer(table, lower_case)
