"""SentencePiece's `ModelProto` read as data: its pieces, their scores and its normaliser's charsmap, each checked.

A `spiece.model`, or the model written from a `tokenizer.json`
(`bert_keras.text.tokenizer_json.write_model_proto`), is read from the wire
format directly: the `sentencepiece` package's generated protobuf module needs
a newer protobuf runtime than TensorFlow 2.21 allows. What tensorflow-text's
op and the segmenter (`bert_keras.text.unigram`) trust in it is checked here
first: pieces (`read_pieces`), scores (`check_scores`) and the charsmap
(`check_charsmap`).
"""

import struct

import numpy as np

# ModelProto.SentencePiece.Type
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6
_UNK_PENALTY = np.float32(10.0)
_RESET_THRESHOLD = 100000.0
# The longest piece read, in characters. sentencepiece's trainer cuts pieces at `max_sentencepiece_length`, 16 by
# default, which ALBERT's, T5's and XLNet's models keep; user-defined pieces ("<mask>", "[CLS]") are shorter still.
# The search looks this far back from every position: a piece of thousands of characters would make every text pay
# for it.
MAX_PIECE_CHARS = 64
# The most characters the pieces' prefixes may have in all (a piece of n characters has prefixes of 1 to n - 1: n(n-1)/2
# characters), which the search keeps in a table. A model trained on 38,000 tweets with ALBERT's settings (30,000
# pieces of at most 16 characters) has 464,721; 4,000 pieces of 64 characters reach the bound (0.8 s and 70 MB to
# build), while 50,000 of them would take 2.1 GB from a 3 MB file.
MAX_PREFIX_CHARS = 8_000_000
# The largest `precompiled_charsmap` read, in bytes: sentencepiece's own `nmt_nfkc` rule, which ALBERT's, XLNet's,
# T5's and XLM-R's models carry, is 240,007 bytes; a larger one is refused before anything parses it.
MAX_CHARSMAP_BYTES = 1 << 20
# The largest score a piece may have, in magnitude: a SentencePiece model stores float32 scores.
MAX_SCORE = float(np.finfo(np.float32).max)


def _varint(data, at):
    value, shift = 0, 0
    while True:
        if at >= len(data):
            raise ValueError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _typed_fields(data):
    """(field number, wire type, value) of a serialized protocol buffer message: ints, bytes, or 4/8 raw bytes."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 2:
            size, at = _varint(data, at)
            value, at = data[at : at + size], at + size
        elif wire == 5:
            value, at = data[at : at + 4], at + 4
        elif wire == 1:
            value, at = data[at : at + 8], at + 8
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if at > len(data):
            raise ValueError("truncated field")
        yield number, wire, value


def read_pieces(proto):
    """The pieces of a serialized SentencePiece `ModelProto`: a list of `(piece, score, type)`.

    Read from the wire format directly (field 1 of the model, and the piece's
    fields 1-3): the `sentencepiece` package's generated protobuf module needs
    a newer protobuf runtime than TensorFlow 2.21 allows.

    Raises:
        ValueError: the bytes are not such a message, a piece is not UTF-8,
            is defined twice, or is longer than `MAX_PIECE_CHARS` characters,
            or the pieces' prefixes have more than `MAX_PREFIX_CHARS` in all.
    """
    pieces, seen, prefix_chars = [], {}, 0
    for number, wire, value in _typed_fields(bytes(proto)):
        if number != 1:
            continue
        if wire != 2:
            raise ValueError(f"piece {len(pieces)} is not a message (wire type {wire})")
        piece, score, kind = None, 0.0, _NORMAL
        for field, field_wire, item in _typed_fields(value):
            if (field, field_wire) == (1, 2):
                try:
                    piece = item.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise ValueError(f"piece {len(pieces)} is not UTF-8 ({error})") from None
            elif (field, field_wire) == (2, 5):
                score = struct.unpack("<f", item)[0]
            elif (field, field_wire) == (3, 0):
                kind = item
            elif field in (1, 2, 3):
                raise ValueError(f"piece {len(pieces)} has field {field} of wire type {field_wire}")
        if piece is None:
            raise ValueError(f"piece {len(pieces)} has no text")
        if len(piece) > MAX_PIECE_CHARS:
            raise ValueError(
                f"piece {len(pieces)} ({piece[:20]!r}...) has {len(piece)} characters; at most {MAX_PIECE_CHARS} are "
                "read: sentencepiece's trainer makes pieces of at most max_sentencepiece_length characters, 16 by "
                "default, as in ALBERT's, T5's and XLNet's models"
            )
        prefix_chars += len(piece) * (len(piece) - 1) // 2
        if prefix_chars > MAX_PREFIX_CHARS:
            raise ValueError(
                f"the prefixes of pieces 0 to {len(pieces)} have {prefix_chars:,} characters in all; at most "
                f"{MAX_PREFIX_CHARS:,} are read: the search keeps every prefix of every piece (a model trained with "
                "ALBERT's settings, 30,000 pieces, has about 465,000)"
            )
        if piece in seen:  # the library refuses a model that defines a piece twice
            raise ValueError(f"piece {len(pieces)} ({piece[:20]!r}) repeats piece {seen[piece]}")
        seen[piece] = len(pieces)
        pieces.append((piece, np.float32(score), kind))
    if not pieces:
        raise ValueError("no pieces")
    return pieces


def check_scores(pieces):
    """Raises a `ValueError` naming the first piece (of `read_pieces`' `(piece, score, type)`) whose score the
    segmenter cannot add: not finite, or large enough that a path of the longest piece's length could reach the
    library's reset (100,000) in one piece; or where no piece is normal."""
    normal_scores = [float(score) for _, score, kind in pieces if kind == _NORMAL]
    if not normal_scores:
        raise ValueError("no piece is normal (every piece is special)")
    max_chars = max(len(piece) for piece, _, kind in pieces if kind in (_NORMAL, _USER_DEFINED, _UNUSED))
    # The unknown piece scores the lowest normal score less 10: it counts as that piece's.
    lowest = min(range(len(pieces)), key=lambda i: pieces[i][1] if pieces[i][2] == _NORMAL else np.inf)
    for index, (piece, score, _) in enumerate(pieces):
        if not np.isfinite(score):
            raise ValueError(f"piece {index} ({piece[:20]!r}) has the score {float(score)!r}; scores must be finite")
        largest = max(abs(float(score)), abs(float(score) - float(_UNK_PENALTY)) if index == lowest else 0.0)
        if largest * max_chars >= _RESET_THRESHOLD:
            raise ValueError(f"piece {index} ({piece[:20]!r}) has the score {float(pieces[index][1]):g}: scores this "
                             "large are not supported (real models' are log probabilities, between about -30 and 0)")


def model_charsmaps(proto):
    """The `precompiled_charsmap`s of a serialized `ModelProto`: its normalizer's and denormalizer's (field 2 of
    fields 3 and 4), as bytes.

    Raises:
        ValueError: the bytes are not a protocol buffer message.
    """
    for number, wire, spec in _typed_fields(bytes(proto)):
        if number in (3, 4) and wire == 2:
            for field, field_wire, value in _typed_fields(spec):
                if (field, field_wire) == (2, 2):
                    yield value


def _dart_offset(unit):
    return (unit >> 10) << ((unit & (1 << 9)) >> 6)


def check_charsmap(charsmap):
    """Raises a `ValueError` unless `charsmap`, a SentencePiece `precompiled_charsmap` (empty: none), stays within
    its own bytes wherever the `sentencepiece` library's normaliser walks it.

    The normaliser (which tensorflow-text's op runs) trusts the blob: a
    little-endian uint32 size, a darts-clone double array of that many
    bytes, then NUL-terminated replacement strings. For each byte of a text it
    reads the unit at `base ^ byte` and follows it where its label is that
    byte, without bounds checks: an array whose walk leaves it crashed the
    process (a segmentation fault on the first text). So every node reachable
    from the root is walked here, all 256 units of its block in bounds, and
    every leaf's value inside the strings, which end in a NUL.
    """
    if not charsmap:
        return
    if len(charsmap) > MAX_CHARSMAP_BYTES:
        raise ValueError(f"its precompiled_charsmap is {len(charsmap):,} bytes; at most {MAX_CHARSMAP_BYTES:,} are "
                         "read (sentencepiece's own nmt_nfkc rule is 240,007)")
    trie_bytes = struct.unpack("<I", charsmap[:4])[0] if len(charsmap) >= 4 else 0
    strings = charsmap[4 + trie_bytes :]
    if trie_bytes < 4 or trie_bytes % 4 or not strings or strings[-1:] != b"\0":
        raise ValueError(f"its precompiled_charsmap ({len(charsmap):,} bytes) is broken: expected a uint32 size, a "
                         "double array of that many bytes, then NUL-terminated strings")
    units = np.frombuffer(charsmap, "<u4", count=trie_bytes // 4, offset=4).astype(np.int64)
    positions = np.arange(len(units))
    # A unit is the child, by byte l, of the node whose children sit at `position ^ l` (l: its label, the low byte;
    # a unit with bit 31 set is a value, no child): the node's base. A walk reads `base ^ byte` for any byte.
    parent = np.where(units >> 31 == 0, positions ^ (units & 0xFF), len(units))
    reached = np.zeros(len(units) + 1, bool)  # the bases walked; the last slot stands for "no parent"
    bases = np.array([_dart_offset(units[0])])
    while bases.size:
        if int((bases | 0xFF).max()) >= len(units):
            raise ValueError("its precompiled_charsmap is broken: its double array points past its end")
        bases = bases[~reached[bases]]
        front = np.zeros(len(units) + 1, bool)
        front[bases] = True
        reached[bases] = True
        children = positions[front[np.minimum(parent, len(units))]]
        child_units = units[children]
        bases = children ^ _dart_offset(child_units)
        leaves = bases[(child_units >> 8) & 1 == 1]
        if leaves.size and (int(leaves.max()) >= len(units) or int((units[leaves] & 0x7FFFFFFF).max()) >= len(strings)):
            raise ValueError("its precompiled_charsmap is broken: a rule points past its strings")


