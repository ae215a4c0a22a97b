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

The double array is built here (`double_array`), in the layout darts-clone
writes and tensorflow-text's kernels read, so that no compiled builder is
needed.
"""

import functools

import flatbuffers
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_keras.text import _unicode_tables as tables
from bert_keras.text.tokenizer import normalize_text

# The code point that stands in for characters FastWordpiece splits off and the reference keeps inside words.
PLACEHOLDER = 0xE000
# tensorflow-text's entry of a code point: this bit set (the normalised text differs), its length in the low
# `_LENGTH_BITS` bits, its offset in the pool above them; an empty normalisation (a removed character) is the bit alone.
_DIFFERENT = 0x40000000
_LENGTH_BITS = 6
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
    return _model_buffer(table, lower_case)


def _model_buffer(table, lower_case):
    """tensorflow-text's `FastBertNormalizerModel` flatbuffer of `{code point: normalised UTF-8}`."""
    pool, offsets, keys, values = bytearray(), {}, [], []
    zero = 0
    for point in sorted(table):
        normalized = table[point]
        data = _DIFFERENT
        if normalized:
            if len(normalized) >= 1 << _LENGTH_BITS:
                raise ValueError(f"U+{point:04X} normalises to {len(normalized)} bytes; the table holds at most "
                                 f"{(1 << _LENGTH_BITS) - 1}.")
            if normalized not in offsets:
                offsets[normalized] = len(pool)
                pool += normalized
            data |= len(normalized) | (offsets[normalized] << _LENGTH_BITS)
        if point == 0:
            zero = data  # U+0000 is not a key of the trie (its UTF-8 is the byte 0): the model holds it apart
            continue
        keys.append(chr(point).encode("utf-8"))
        values.append(data)
    order = sorted(range(len(keys)), key=keys.__getitem__)  # the trie takes keys in byte order
    array = double_array([keys[i] for i in order], [values[i] for i in order])
    builder = flatbuffers.Builder(4 * len(array) + len(pool) + 1024)
    pool_vector = builder.CreateNumpyVector(np.frombuffer(bytes(pool), dtype=np.uint8))
    trie_vector = builder.CreateNumpyVector(array)
    builder.StartObject(4)  # table FastBertNormalizerModel
    builder.PrependBoolSlot(0, lower_case, False)  # lower_case_nfd_strip_accents (informational)
    builder.PrependUOffsetTRelativeSlot(1, trie_vector, 0)  # trie_array: [uint32]
    builder.PrependInt32Slot(2, zero, 0)  # data_for_codepoint_zero
    builder.PrependUOffsetTRelativeSlot(3, pool_vector, 0)  # normalized_string_pool: [ubyte]
    builder.Finish(builder.EndObject())
    return bytes(builder.Output())


# darts-clone's unit: bit 31 marks a value (a leaf), bit 9 an offset stored shifted by 8, bit 8 a node that has a
# value child (label 0); the label in the low 8 bits, the offset to the children's block from bit 10.
_IS_LEAF, _EXTENDED, _HAS_LEAF = 1 << 31, 1 << 9, 1 << 8
_BLOCK = 256
_OPEN_BLOCKS = 16  # darts-clone's: bases are looked for in the last 16 blocks
_TRIES = 256  # free units tried for a node's base before a new block is opened


def double_array(keys, values):
    """The darts-clone double array of sorted, distinct byte-string `keys` (no byte 0) to `values` (< 2**31).

    Each node's children lie at `base ^ label` for one `base` that no other
    node uses, so the label check of a lookup tells them apart; a key's
    last node has a child of label 0, a leaf unit holding its value. As in
    darts-clone, a base is looked for among the free units of the last
    `_OPEN_BLOCKS` blocks, else a new block is opened; unused units get
    labels that no lookup reaching them expects (darts-clone's
    `fix_block`). What `lookup` reads.

    Returns:
        uint32 numpy array, a whole number of 256-unit blocks.
    """
    units, used, bases, following = [], bytearray(), bytearray(), []  # following[i]: a unit > i, all used between

    def grow():
        begin = len(used)
        units.extend([0] * _BLOCK)
        used.extend(bytes(_BLOCK))
        bases.extend(bytes(_BLOCK))
        following.extend(range(begin + 1, begin + _BLOCK + 1))

    def free_from(unit):
        """The first free unit at or after `unit` (`len(used)` if none), shortening the chain on the way."""
        end = unit
        while end < len(used) and used[end]:
            end = following[end]
        while unit < end and used[unit]:
            following[unit], unit = end, following[unit]
        return end

    def place(node, labels):
        unit, tries = free_from(max(1, len(used) - _OPEN_BLOCKS * _BLOCK)), 0
        while unit < len(used) and tries < _TRIES:
            base = unit ^ labels[0]
            if not bases[base] and all(not used[base ^ label] for label in labels):
                break
            unit, tries = free_from(unit + 1), tries + 1
        else:  # a new block; the node's low byte in the base, so that the offset's low byte is 0 (always storable)
            base = len(used) | (node & 0xFF)
            grow()
        relative = node ^ base
        if relative >= 1 << 29 or (relative >= 1 << 21 and relative & 0xFF):
            raise ValueError("The normaliser's trie grew past darts-clone's offsets.")
        units[node] |= (relative << 10) if relative < 1 << 21 else ((relative << 2) | _EXTENDED)
        bases[base] = 1
        for label in labels:
            used[base ^ label] = 1
        return base

    grow()
    used[0] = bases[0] = 1
    stack = [(0, 0, len(keys), 0)]  # (node, first key, end key, depth)
    while stack:
        node, begin, end, depth = stack.pop()
        labels, groups = [], []
        if len(keys[begin]) == depth:  # a key ends here: the value child (label 0), first in byte order
            labels.append(0)
            begin += 1
        i = begin
        while i < end:
            label = keys[i][depth]
            j = i + 1
            while j < end and keys[j][depth] == label:
                j += 1
            labels.append(label)
            groups.append((label, i, j))
            i = j
        base = place(node, labels)
        if labels[0] == 0:
            units[node] |= _HAS_LEAF
            units[base] = values[begin - 1] | _IS_LEAF
        for label, first, last in groups:
            units[base ^ label] |= label
            stack.append((base ^ label, first, last, depth + 1))
    _fix_blocks(units, used, bases)
    return np.array(units, dtype=np.uint32)


def _fix_blocks(units, used, bases):
    """Unused units labelled so that no lookup matches them (darts-clone's `fix_block`): in each block, the label
    of an unused unit is its id xor an unused base of the block, which no node's children start from."""
    for block in range(0, len(used), _BLOCK):
        spare = next((block + k for k in range(_BLOCK) if not bases[block + k]), None)
        if spare is None:
            continue
        for unit in range(block, block + _BLOCK):
            if not used[unit]:
                units[unit] = (unit ^ spare) & 0xFF


def lookup(array, key):
    """The value of `key` (bytes) in a `double_array`, or None: darts-clone's exact-match search."""
    def offset(unit):
        return (unit >> 10) << ((unit & _EXTENDED) >> 6)

    node, unit = 0, int(array[0])
    for byte in key:
        node ^= offset(unit) ^ byte
        unit = int(array[node])
        if unit & (_IS_LEAF | 0xFF) != byte:
            return None
    if not unit & _HAS_LEAF:
        return None
    return int(array[node ^ offset(unit)]) & ~_IS_LEAF
