"""SentencePiece's unigram encoding in TensorFlow ops, with the `sentencepiece` library's own tie-breaking.

tensorflow-text's `SentencepieceTokenizer` normalises a text and segments it
with the sentencepiece version it bundles. Its segmentation picks the same
best path as the `sentencepiece` library (0.2.x, what ALBERT's tokenizer runs)
except where two paths have the same score up to float rounding: there the
bundled encoder compares a double candidate with a float best and the library
adds and compares in float, so "0" "00" and "00" "0" of "000" come out in
either order (0.62% of 20,000 tweets with a 2,000-piece ALBERT model).

`UnigramSegmenter` keeps tensorflow-text's normalisation (its pieces, as
strings, concatenate to the normalised text) and segments that text again the
way `sentencepiece` 0.2.3's `Model::EncodeOptimized` does, step for step:

- for each end position, in character order, the candidates are the pieces
  ending there (normal and user-defined pieces; unused ones are skipped), plus
  an unknown piece over one character where no one-character piece starts;
- a candidate's score is `float32(best[start] + score)`; the best is the
  largest, and among equal ones the one starting first (the library replaces
  the best only when a later candidate is strictly larger);
- a user-defined piece scores `float32(0.1 * (bytes - 1))`, an unknown one
  `float32(min normal score - 10)`;
- when the best score at a start passes +-100,000, the library subtracts it
  from every position it has reached so far (kept here: a text of about
  10,000 pieces reaches it);
- runs of unknown pieces are merged into one.

The dynamic programme runs in one `tf.while_loop` over character positions,
every text of the batch at once; the pieces' candidates are found before it,
by extending substrings one character at a time while they are the prefix of
some piece (a trie walk, vectorised).
"""

import struct

import numpy as np
import tensorflow as tf

from bert_keras.text._subword import row_ids

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


def _fields(data):
    """(field number, value) of a serialized protocol buffer message: ints, bytes, or 4/8 raw bytes."""
    for number, _, value in _typed_fields(data):
        yield number, value


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


class UnigramSegmenter(tf.Module):
    """Segments normalised texts with a SentencePiece unigram model as the `sentencepiece` library does.

    Args:
        proto: bytes. The serialized SentencePiece model (a unigram model
            without byte fallback: ALBERT's).
        float64: bool. Add the scores in float64, as Hugging Face's
            `tokenizers` does, instead of float32, as the `sentencepiece`
            library does: the two break a few ties differently (16 of 20,000
            tweets with ALBERT's pieces). Defaults to `False`.
    """

    def __init__(self, proto, name=None, float64=False):
        super().__init__(name=name)
        self._dtype = np.float64 if float64 else np.float32
        pieces = read_pieces(proto)
        kinds = [kind for _, _, kind in pieces]
        if _BYTE in kinds:
            raise ValueError("byte-fallback models are not supported (ALBERT's SentencePiece model has none)")
        if kinds.count(_UNKNOWN) != 1:
            raise ValueError(f"expected one unknown piece, found {kinds.count(_UNKNOWN)}")
        self.unk_id = kinds.index(_UNKNOWN)
        normal_scores = [score for _, score, kind in pieces if kind == _NORMAL]
        if not all(np.isfinite(score) for _, score, _ in pieces) or not normal_scores:
            raise ValueError("scores must be finite and some pieces normal")
        self.unk_score = self._dtype(min(normal_scores) - _UNK_PENALTY)
        in_trie = [(i, piece, kind) for i, (piece, _, kind) in enumerate(pieces) if kind in (_NORMAL, _USER_DEFINED, _UNUSED)]
        # The longest piece, in characters: how far candidates are looked for back from an end position.
        self.max_chars = max(len(piece) for _, piece, _ in in_trie)
        # A reset (see the module docstring) is emulated for one at a time among a position's candidates: it holds
        # when no `max_chars` characters can cross 100,000 in score.
        largest = max([abs(float(self.unk_score))] + [abs(float(score)) for _, score, _ in pieces])
        self._largest_score = np.float32(largest)
        if largest * self.max_chars >= _RESET_THRESHOLD:
            raise ValueError(f"piece scores as large as {largest:g} are not supported (real models' are below 100)")
        scores = [
            np.float32(0.1 * (len(piece.encode("utf-8")) - 1)) if kind == _USER_DEFINED else score
            for piece, score, kind in pieces
        ]
        self._scores = tf.constant(np.array(scores, self._dtype))
        usable = [(piece, i) for i, piece, kind in in_trie if kind != _UNUSED]
        self._pieces = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant([piece for piece, _ in usable]), tf.constant([i for _, i in usable], tf.int32)
            ),
            default_value=-1,
        )
        prefixes = sorted({piece[:n] for _, piece, _ in in_trie for n in range(1, len(piece))})
        self._prefixes = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(prefixes or [""], tf.string), tf.constant([bool(prefixes)] * max(len(prefixes), 1))
            ),
            default_value=False,
        )

    def _candidates(self, chars):
        """Every piece found in the texts: `(row, start, length, id, score)`, lengths in characters.

        Substrings grow one character at a time while they are the prefix of
        some piece, in a `tf.while_loop`: the graph is the same whatever the
        longest piece, and the loop ends when no substring can grow.

        Args:
            chars: ragged `(batch, chars)` string tensor of single characters.
        """
        flat = chars.flat_values
        rows = row_ids(chars)
        limits = tf.gather(chars.row_limits(), rows)
        position = tf.range(tf.size(flat, tf.int64), dtype=tf.int64)
        # No one-character piece starts here: the character is an unknown piece.
        unknown = tf.boolean_mask(position, self._pieces.lookup(flat) < 0)
        found = [tf.TensorArray(dtype, size=0, dynamic_size=True, infer_shape=False, element_shape=[None])
                 for dtype in (tf.int64, tf.int32, tf.int32)]
        found = [found[0].write(0, unknown), found[1].write(0, tf.ones_like(unknown, tf.int32)),
                 found[2].write(0, tf.fill(tf.shape(unknown), self.unk_id))]

        def step(length, text, start, found_at, found_length, found_id):
            ids = self._pieces.lookup(text)
            hit = ids >= 0
            at = tf.boolean_mask(start, hit)
            index = length  # the unknown pieces took index 0
            found_at = found_at.write(index, at)
            found_length = found_length.write(index, tf.fill(tf.shape(at), length))
            found_id = found_id.write(index, tf.boolean_mask(ids, hit))
            longer = self._prefixes.lookup(text) & (start + tf.cast(length, tf.int64) < tf.gather(limits, start))
            text, start = tf.boolean_mask(text, longer), tf.boolean_mask(start, longer)
            text = tf.strings.join([text, tf.gather(flat, start + tf.cast(length, tf.int64))])
            return length + 1, text, start, found_at, found_length, found_id

        *_, found_at, found_length, found_id = tf.while_loop(
            lambda length, text, *_: (length <= self.max_chars) & (tf.size(text) > 0),
            step,
            (tf.constant(1), flat, position, *found),
            shape_invariants=(tf.TensorShape([]), tf.TensorShape([None]), tf.TensorShape([None]),
                              *(tf.TensorShape(None) for _ in found)),
        )
        at, length, piece_id = found_at.concat(), found_length.concat(), found_id.concat()
        score = tf.where(piece_id == self.unk_id, self.unk_score, tf.gather(self._scores, piece_id))
        row = tf.gather(rows, at)
        start_in_row = at - tf.gather(chars.row_starts(), row)
        return row, start_in_row, length, piece_id, score

    def segment(self, chars):
        """Best path of each text: ragged `(batch, pieces)` ids, and the pieces' start and end characters.

        Args:
            chars: ragged `(batch, chars)` string tensor of single characters
                (the normalised text, as `tf.strings.unicode_split` gives it).

        Returns:
            `(ids, starts, ends)`: int32 ids and int64 character positions,
            ragged `(batch, pieces)`, runs of unknown pieces merged.
        """
        row, start, length, piece_id, score = self._candidates(chars)
        width = self.max_chars
        num_rows = chars.nrows()
        lengths = chars.row_lengths()
        steps = tf.reduce_max(tf.concat([[0], lengths], 0))
        # Candidates grouped by end position; each reads the best score at its start from a window of the last
        # `width` positions (window[:, k - 1]: the best at e - k), flattened.
        end = start + tf.cast(length, tf.int64)
        order = tf.argsort(end, stable=True)
        row, length, piece_id, score, end = (tf.gather(x, order) for x in (row, length, piece_id, score, end))
        bounds = tf.searchsorted(end, tf.range(steps + 2, dtype=tf.int64), side="left")
        in_window = row * width + tf.cast(length - 1, tf.int64)
        # Among equal scores the first start wins: the longest piece. Key: length, then id, in one integer.
        vocabulary = tf.constant(self._scores.shape[0], tf.int64)
        key = tf.cast(length, tf.int64) * vocabulary + tf.cast(piece_id, tf.int64)
        window = tf.concat([tf.zeros([num_rows, 1], self._dtype),
                            tf.fill(tf.stack([num_rows, width - 1]), self._dtype(-np.inf))], 1)
        no_reset = tf.fill(tf.stack([num_rows]), tf.constant(-(2**62), tf.int64))
        best_key = tf.TensorArray(tf.int64, size=tf.cast(steps + 1, tf.int32), element_shape=[None])
        best_key = best_key.write(0, tf.zeros(tf.stack([num_rows]), tf.int64))

        def search(with_resets):
            def step(e, window, reset_at, reset_by, best_key):
                lo, hi = bounds[e], bounds[e + 1]
                rows = row[lo:hi]
                candidate = tf.gather(tf.reshape(window, [-1]), in_window[lo:hi]) + score[lo:hi]
                keys = key[lo:hi]
                if not with_resets:
                    best, chosen = _first_best(candidate, keys, rows, num_rows)
                    window = tf.concat([best[:, None], window[:, :-1]], 1)
                    return e + 1, window, reset_at, reset_by, best_key.write(tf.cast(e, tf.int32), chosen)
                # A reset since these candidates' start: those starting before it were compared unshifted, then
                # their best was shifted (the library's order); only then come the later ones.
                before = tf.cast(length[lo:hi], tf.int64) > e - tf.gather(reset_at, rows)
                best, chosen = tf.cond(
                    tf.reduce_any(before),
                    lambda: _best_across_reset(candidate, keys, rows, before, reset_by, num_rows),
                    lambda: _first_best(candidate, keys, rows, num_rows),
                )
                reset = (chosen > 0) & ((best < -_RESET_THRESHOLD) | (best > _RESET_THRESHOLD))
                reset_at = tf.where(reset, e, reset_at)
                reset_by = tf.where(reset, best, reset_by)
                best = tf.where(reset, tf.zeros_like(best), best)
                window = tf.concat([best[:, None], window[:, :-1]], 1)
                return e + 1, window, reset_at, reset_by, best_key.write(tf.cast(e, tf.int32), chosen)

            return tf.while_loop(
                lambda e, *_: e <= steps,
                step,
                (tf.constant(1, tf.int64), window, no_reset, tf.zeros(tf.stack([num_rows]), self._dtype), best_key),
            )[-1]

        # No path of `steps` pieces can reach 100,000 in score: the search without the library's reset.
        best_key = tf.cond(
            tf.cast(steps, tf.float32) * self._largest_score < 0.5 * _RESET_THRESHOLD,
            lambda: search(with_resets=False),
            lambda: search(with_resets=True),
        )
        best_key = tf.transpose(best_key.stack())  # (batch, positions + 1)
        return _backtrack(best_key // vocabulary, tf.cast(best_key % vocabulary, tf.int32), lengths, self.unk_id)


def _first_best(candidate, keys, rows, num_rows):
    """Per row: the largest candidate, and the largest key among the candidates equal to it."""
    best = tf.math.unsorted_segment_max(candidate, rows, num_rows)
    ties = candidate == tf.gather(best, rows)
    chosen = tf.math.unsorted_segment_max(tf.where(ties, keys, tf.zeros_like(keys)), rows, num_rows)
    return best, tf.maximum(chosen, 0)


def _best_across_reset(candidate, keys, rows, before, shift, num_rows):
    """`_first_best` where some candidates started before a reset: their best, shifted, then the later ones."""
    low, none = tf.constant(-np.inf, candidate.dtype), tf.zeros_like(keys)
    first, first_key = _first_best(tf.where(before, candidate, low), tf.where(before, keys, none), rows, num_rows)
    first = tf.where(first_key > 0, first - shift, low)
    later, later_key = _first_best(tf.where(before, low, candidate), tf.where(before, none, keys), rows, num_rows)
    take_later = (later_key > 0) & ((first_key == 0) | (later > first))
    return tf.where(take_later, later, first), tf.where(take_later, later_key, first_key)


def _backtrack(best_length, best_id, lengths, unk_id):
    """The best paths from `(batch, positions + 1)` lengths and ids of the best piece ending at each position."""
    rows = tf.range(tf.shape(best_length, out_type=tf.int64)[0])
    longest = tf.reduce_max(tf.concat([[0], lengths], 0))
    ends = tf.TensorArray(tf.int64, size=0, dynamic_size=True, element_shape=[None])

    def step(i, position, ends):
        size = tf.gather_nd(best_length, tf.stack([rows, position], 1))
        return i + 1, tf.where(position > 0, position - size, 0), ends.write(i, position)

    # One piece of every text per step, from the last; the first step writes the ends of the texts.
    _, _, ends = tf.while_loop(
        lambda i, position, _: (i == 0) | ((tf.cast(i, tf.int64) <= longest) & tf.reduce_any(position > 0)),
        step,
        (tf.constant(0), lengths, ends),
    )
    ends = tf.reverse(tf.transpose(ends.stack()), [1])  # (batch, steps): 0s, then the pieces' ends in text order
    piece = ends > 0
    splits = tf.concat([[0], tf.cumsum(tf.reduce_sum(tf.cast(piece, tf.int64), 1))], 0)
    ends = tf.RaggedTensor.from_row_splits(tf.boolean_mask(ends, piece), splits, validate=False)
    index = tf.stack([row_ids(ends), ends.flat_values], 1)
    starts = ends.with_flat_values(ends.flat_values - tf.gather_nd(best_length, index))
    ids = ends.with_flat_values(tf.gather_nd(best_id, index))
    return _merge_unknown(ids, starts, ends, unk_id)


def _merge_unknown(ids, starts, ends, unk_id):
    """Runs of unknown pieces become one unknown piece spanning the run."""
    flat_ids = ids.flat_values
    rows = row_ids(ids)
    unknown = flat_ids == unk_id
    previous_unknown = tf.concat([[False], unknown[:-1] & (rows[1:] == rows[:-1])], 0)
    keep = ~(unknown & previous_unknown)
    run = tf.cumsum(tf.cast(keep, tf.int64)) - 1
    num_runs = tf.reduce_sum(tf.cast(keep, tf.int64))
    run_end = tf.math.unsorted_segment_max(ends.flat_values, run, num_runs)
    kept_per_row = tf.math.unsorted_segment_sum(tf.cast(keep, tf.int64), rows, ids.nrows())
    splits = tf.concat([[0], tf.cumsum(kept_per_row)], 0)
    return (
        tf.RaggedTensor.from_row_splits(tf.boolean_mask(flat_ids, keep), splits, validate=False),
        tf.RaggedTensor.from_row_splits(tf.boolean_mask(starts.flat_values, keep), splits, validate=False),
        tf.RaggedTensor.from_row_splits(run_end, splits, validate=False),
    )
