"""tensorflow-text's `FastBertNormalizerModel` flatbuffer and the darts-clone double-array trie it holds, built here.

Depends on:
- tensorflow-text's `fast_bert_normalizer_model.fbs` (2.21): a table of four fields, `lower_case_nfd_strip_accents`
  (bool, 0), `trie_array` ([uint32], 1), `data_for_codepoint_zero` (int32, 2), `normalized_string_pool` ([ubyte], 3);
  a code point's entry holds `_DIFFERENT` (the normalised text differs), its length in the low `_LENGTH_BITS` bits
  and its offset in the pool above them.
- darts-clone's double-array unit layout (bit 31 a leaf, bit 9 an offset stored shifted by 8, bit 8 a node with a
  value child, the label in the low 8 bits, the offset from bit 10) and its exact-match search, which
  tensorflow-text's kernel runs on `trie_array`.

Pinned by `tests/test_platform.py` (a model built here normalises in tensorflow-text's kernel as the table says)
and by the LiteRT tests, whose files carry it.
"""

import flatbuffers
import numpy as np

# tensorflow-text's entry of a code point: this bit set (the normalised text differs), its length in the low
# `_LENGTH_BITS` bits, its offset in the pool above them; an empty normalisation (a removed character) is the bit alone.
_DIFFERENT = 0x40000000
_LENGTH_BITS = 6


def normalizer_model_buffer(table, lower_case):
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
