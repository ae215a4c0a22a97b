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

Both keep the same best score at every position (the largest float32 sum);
they part only where two candidates ending at a position tie in float32, in
which piece they keep. So only the words where that can happen are searched
again (`UnigramSegmenter.resegment`), each from the library's score at its
start; the search is a `tf.while_loop` over positions, the rows still
searched at once, after a vectorised trie walk finds the candidates.
"""

import numpy as np
import tensorflow as tf

from bert_keras.text._model_proto import (  # noqa: F401 (read_pieces, _typed_fields, _varint, the bounds: named here too)
    _BYTE, _NORMAL, _RESET_THRESHOLD, _UNK_PENALTY, _UNKNOWN, _UNUSED, _USER_DEFINED, MAX_PIECE_CHARS,
    MAX_PREFIX_CHARS, _typed_fields, _varint, check_scores, read_pieces)
from bert_keras.text._subword import row_ids

# Texts of at most this many characters are searched word by word (`UnigramSegmenter.resegment`); the best scores
# before their pieces take a dense (texts, characters) table.
MAX_WORDWISE_CHARS = 2048
_WORD_MARK = "\u2581"


class UnigramSegmenter(tf.Module):
    """Segments normalised texts with a SentencePiece unigram model as the `sentencepiece` library does.

    Args:
        proto: bytes. The serialized SentencePiece model (a unigram model
            without byte fallback: ALBERT's).
        float64: bool. Add the scores in float64, as Hugging Face's
            `tokenizers` does, instead of float32, as the `sentencepiece`
            library does: the two break a few ties differently (16 of 20,000
            tweets with ALBERT's pieces). Defaults to `False`.
        scores: optional list of float. The pieces' scores in id order, where
            they are finer than the model's float32 (a `tokenizer.json`'s
            float64 scores of a model trained by `tokenizers`: rounded to
            float32, equal paths' sums broke ties the other way).
        words_alone: bool. Search every word (a "▁" and the characters up to
            the next) alone from a score of 0, as the `tokenizers` library
            does after its `Metaspace` pre-tokenizer (its sums, so its ties,
            start again at each word), rather than the whole text as the
            `sentencepiece` library does. Defaults to `False`.
    """

    def __init__(self, proto, name=None, float64=False, scores=None, words_alone=False):
        super().__init__(name=name)
        self._dtype = np.float64 if float64 else np.float32
        self._words_alone = words_alone
        pieces = read_pieces(proto)
        if scores is not None:
            if len(scores) != len(pieces):
                raise ValueError(f"expected {len(pieces)} scores, one a piece, found {len(scores)}")
            pieces = [(piece, float(score), kind) for (piece, _, kind), score in zip(pieces, scores)]
        kinds = [kind for _, _, kind in pieces]
        if _BYTE in kinds:
            raise ValueError("byte-fallback models are not supported (ALBERT's SentencePiece model has none)")
        if kinds.count(_UNKNOWN) != 1:
            raise ValueError(f"expected one unknown piece, found {kinds.count(_UNKNOWN)}")
        self.unk_id = kinds.index(_UNKNOWN)
        check_scores(pieces)
        normal_scores = [score for _, score, kind in pieces if kind == _NORMAL]
        # In the search's own precision: with float64 scores (tokenizers') the penalty is not rounded to float32, which
        # NumPy's promotion of a float minus a float32 penalty would do.
        self.unk_score = self._dtype(self._dtype(min(normal_scores)) - self._dtype(_UNK_PENALTY))
        in_trie = [(i, piece, kind) for i, (piece, _, kind) in enumerate(pieces) if kind in (_NORMAL, _USER_DEFINED, _UNUSED)]
        # The longest piece, in characters: how far candidates are looked for back from an end position.
        self.max_chars = max(len(piece) for _, piece, _ in in_trie)
        # A reset (see the module docstring) is emulated for one at a time among a position's candidates: it holds
        # when no `max_chars` characters can cross 100,000 in score.
        largest = max([abs(float(self.unk_score))] + [abs(float(score)) for _, score, _ in pieces])
        self._largest_score = np.float32(largest)  # below 100,000 / max_chars (`check_scores`)
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
        # Words are searched apart (`resegment`) when "▁" is a piece and no piece holds it after its first character,
        # no piece is only characters that are no piece alone (tensorflow-text writes a run of unknown ones as one
        # piece, which would read as it), and the sums are float32, the bundled encoder's.
        singles = {piece for piece, _ in usable if len(piece) == 1}
        self._by_words = (
            not float64
            and _WORD_MARK in singles
            and not any(_WORD_MARK in piece[1:] for _, piece, _ in in_trie)
            and not any(len(piece) > 1 and not set(piece) & singles for piece, _ in usable)
        )
        self._prefixes = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(prefixes or [""], tf.string), tf.constant([bool(prefixes)] * max(len(prefixes), 1))
            ),
            default_value=False,
        )

    def resegment(self, pieces):
        """tensorflow-text's segmentation of normalised texts, segmented again as the library does.

        Args:
            pieces: ragged `(batch, pieces)` strings, tensorflow-text's pieces
                (an unknown piece is its characters), spelling the texts.

        Returns:
            `(ids, starts, ends, chars)`: as `segment`, and the characters.

        A word (a "▁" and the characters up to the next one) starts a piece on
        every path when no piece holds "▁" after its first character: a word
        keeps tensorflow-text's pieces unless two candidates at one of its
        positions come within the float32 rounding of its text's scores
        (`_gaps`); those words are searched alone, all at once, from the
        library's score at their start (`_word_bases`). Texts that may reach
        the library's reset or pass `MAX_WORDWISE_CHARS`, and every text of a
        model that does not allow it (`_by_words`), are searched whole.
        """
        flat = pieces.flat_values
        rows = row_ids(pieces)
        num_rows = pieces.nrows()
        position = tf.range(tf.size(flat, tf.int64))
        starts_word = (position == tf.gather(pieces.row_starts(), rows)) | tf.equal(
            tf.strings.substr(flat, 0, len(_WORD_MARK.encode("utf-8"))), _WORD_MARK
        )
        num_words = tf.reduce_sum(tf.cast(starts_word, tf.int64))
        word = tf.cumsum(tf.cast(starts_word, tf.int64)) - 1
        word_text = tf.strings.reduce_join(
            tf.RaggedTensor.from_value_rowids(flat, word, nrows=num_words, validate=False), axis=1
        )
        word_chars = tf.strings.unicode_split(word_text, "UTF-8")  # (words, chars)
        word_rows = tf.boolean_mask(rows, starts_word)
        word_lengths = word_chars.row_lengths()
        lengths = tf.math.unsorted_segment_sum(word_lengths, word_rows, num_rows)
        chars = tf.RaggedTensor.from_row_lengths(word_chars.flat_values, lengths, validate=False)
        if self._words_alone:
            return (*self._segment_words_alone(word_chars, word_rows, chars), chars)
        if not self._by_words:
            return (*self.segment(chars), chars)
        fast = (lengths <= MAX_WORDWISE_CHARS) & (
            tf.cast(lengths, tf.float32) * self._largest_score < 0.5 * _RESET_THRESHOLD
        )
        slow_rows = tf.where(~fast)[:, 0]
        slow = self._segment_any(tf.gather(chars, slow_rows))
        ids = self._pieces.lookup(flat)
        unknown = ids < 0
        piece_chars = tf.cast(tf.strings.length(flat, unit="UTF8_CHAR"), tf.int64)
        # A word keeps tensorflow-text's pieces unless two candidates at one of its positions come within the float32
        # rounding of its text's scores (`_gaps`, once per distinct word): then the library may keep the other one.
        unique, unique_index = tf.unique(word_text)
        gap, magnitude = self._gaps(tf.strings.unicode_split(unique, "UTF-8"))
        # Every score the text's search computes is at most the sum of its words' largest in magnitude; each of the
        # (characters + 1) float32 roundings on the way to two candidates moves them by at most 2^-24 of that.
        text_magnitude = tf.math.unsorted_segment_sum(tf.gather(magnitude, unique_index), word_rows, num_rows)
        tolerance = (tf.cast(lengths, tf.float64) + 2.0) * 2.0**-22 * text_magnitude
        fast_word = tf.gather(fast, word_rows)
        close = tf.gather(gap, unique_index) <= tf.gather(tolerance, word_rows)
        fast_words = tf.where(fast_word)[:, 0]
        close = tf.gather(close, fast_words)
        kept, redone = tf.where(~close)[:, 0], tf.where(close)[:, 0]
        # tensorflow-text's pieces of the words kept, their characters counted from the word's start.
        piece_end = tf.cumsum(piece_chars)
        word_first_piece = tf.boolean_mask(position, starts_word)
        piece_end -= tf.gather(tf.gather(piece_end - piece_chars, word_first_piece), word)

        def by_word(values):
            words = tf.RaggedTensor.from_value_rowids(values, word, nrows=num_words, validate=False)
            return tf.gather(words, tf.gather(fast_words, kept))

        as_is = [by_word(tf.where(unknown, self.unk_id, ids)), by_word(piece_end - piece_chars), by_word(piece_end)]
        redone_words = tf.gather(fast_words, redone)
        searched = self._segment_any(tf.gather(word_chars, redone_words), base=lambda: self._word_bases(
            pieces, ids, piece_chars, tf.gather(word_first_piece, redone_words), fast))
        order = tf.math.invert_permutation(tf.concat([kept, redone], 0))
        word_ids, word_first, word_end = (tf.gather(tf.concat([a, b], 0), order) for a, b in zip(as_is, searched))
        # Back to texts: a word's characters start where the words before it in its text end.
        word_at = tf.gather(tf.cumsum(word_lengths, exclusive=True) - tf.gather(chars.row_splits, word_rows), fast_words)
        shift = tf.gather(word_at, row_ids(word_ids))
        per_row = tf.math.unsorted_segment_sum(word_ids.row_lengths(), tf.gather(word_rows, fast_words), num_rows)
        slow_per_row = tf.scatter_nd(slow_rows[:, None], slow[0].row_lengths(), tf.reshape(num_rows, [1]))

        def joined(by_words, searched_whole):
            return tf.concat([
                tf.RaggedTensor.from_row_lengths(by_words, per_row, validate=False),
                tf.RaggedTensor.from_row_lengths(searched_whole.flat_values, slow_per_row, validate=False),
            ], axis=1)

        by_words = (word_ids.flat_values, word_first.flat_values + shift, word_end.flat_values + shift)
        return (*(joined(ours, whole) for ours, whole in zip(by_words, slow)), chars)

    def _segment_words_alone(self, word_chars, word_rows, chars):
        """Every word searched alone from 0 (`words_alone`), its pieces back in its text: `(ids, starts, ends)`."""
        ids, first, end = self._segment_any(word_chars)  # (words, pieces)
        # A word's characters start where the words before it in its text end.
        word_at = tf.cumsum(word_chars.row_lengths(), exclusive=True) - tf.gather(chars.row_splits, word_rows)
        shift = tf.gather(word_at, row_ids(ids))
        per_row = tf.math.unsorted_segment_sum(ids.row_lengths(), word_rows, chars.nrows())
        return tuple(tf.RaggedTensor.from_row_lengths(values, per_row, validate=False)
                     for values in (ids.flat_values, first.flat_values + shift, end.flat_values + shift))

    def _word_bases(self, pieces, ids, piece_chars, word_first_piece, fast):
        """The library's best score where each word starts (`word_first_piece`): the float32 sum, in order, of
        tensorflow-text's pieces before it (an unknown one once per character), a dense cumsum of the `fast` texts."""
        rows = row_ids(pieces)
        num_rows = pieces.nrows()
        nodes = tf.where(ids < 0, piece_chars, 1)
        nodes = tf.where(tf.gather(fast, rows), nodes, 0)
        score = tf.where(ids < 0, self.unk_score, tf.gather(self._scores, tf.maximum(ids, 0)))
        node_ends = tf.cumsum(nodes)
        node_piece = tf.searchsorted(node_ends, tf.range(tf.reduce_sum(nodes)), side="right")
        node_splits = tf.concat([[0], tf.cumsum(tf.math.unsorted_segment_sum(nodes, rows, num_rows))], 0)
        dense = tf.RaggedTensor.from_row_splits(tf.gather(score, node_piece), node_splits, validate=False).to_tensor()
        before = tf.cumsum(dense, axis=1, exclusive=True)
        row = tf.gather(rows, word_first_piece)
        at = tf.gather(node_ends - nodes, word_first_piece) - tf.gather(node_splits, row)
        return tf.gather_nd(before, tf.stack([row, at], 1))

    def _segment_any(self, chars, base=None):
        """`segment`, skipped for no rows (one text of a batch of one, most often, needs no search); `base` may be
        a function giving it, called only then."""
        empty = [tf.RaggedTensor.from_row_splits(tf.zeros([0], dtype), tf.zeros([1], tf.int64), validate=False)
                 for dtype in (tf.int32, tf.int64, tf.int64)]
        return tf.cond(chars.nrows() > 0, lambda: self.segment(chars, base() if callable(base) else base),
                       lambda: tuple(empty))

    def _gaps(self, chars):
        """Per row, searched from a score of 0 in float64: the smallest margin by which the best candidate at a
        position beats the next one (0 for a tie), and the largest magnitude of a position's best score."""
        order = tf.argsort(chars.row_lengths(), direction="DESCENDING", stable=True)
        chars = tf.gather(chars, order)
        row, start, length, _, score = self._candidates(chars)
        width = self.max_chars
        num_rows = chars.nrows()
        steps, active, offsets = _layout(chars.row_lengths())
        cell = ((tf.gather(offsets, start + tf.cast(length, tf.int64)) + row) * width
                + tf.cast(length - 1, tf.int64))[:, None]
        size = tf.reshape(offsets[-1] * width, [1])
        scores = tf.tensor_scatter_nd_update(tf.fill(size, np.float64(-np.inf)), cell, tf.cast(score, tf.float64))
        window = tf.concat([tf.zeros([num_rows, 1], tf.float64),
                            tf.fill(tf.stack([num_rows, width - 1]), np.float64(-np.inf))], 1)
        gaps, sizes = (tf.TensorArray(tf.float64, size=tf.cast(steps + 1, tf.int32), element_shape=[None],
                                      infer_shape=False).write(0, tf.fill(tf.stack([num_rows]), fill))
                       for fill in (np.float64(np.inf), np.float64(0.0)))

        def step(e, window, gaps, sizes):
            now = active[e]
            lo = offsets[e] * width
            candidate = window[:now] + tf.reshape(scores[lo : lo + now * width], [-1, width])
            best = tf.reduce_max(candidate, 1)
            first = tf.one_hot(tf.argmax(candidate, 1), width, on_value=True, off_value=False)
            second = tf.reduce_max(tf.where(first, tf.constant(-np.inf, tf.float64), candidate), 1)
            window = tf.reshape(tf.concat([best[:, None], window[:now, :-1]], 1), [-1, width])
            return e + 1, window, gaps.write(tf.cast(e, tf.int32), best - second), sizes.write(
                tf.cast(e, tf.int32), tf.abs(best))

        _, _, gaps, sizes = tf.while_loop(
            lambda e, *_: e <= steps,
            step,
            (tf.constant(1, tf.int64), window, gaps, sizes),
            shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, width]), *[tf.TensorShape(None)] * 2),
        )
        cells = tf.range(offsets[-1])
        cell_row = cells - tf.gather(offsets, tf.searchsorted(offsets, cells, side="right", out_type=tf.int64) - 1)
        gap = tf.math.unsorted_segment_min(gaps.concat(), cell_row, num_rows)
        magnitude = tf.maximum(tf.math.unsorted_segment_max(sizes.concat(), cell_row, num_rows), 0.0)
        back = tf.math.invert_permutation(order)
        return tf.gather(gap, back), tf.gather(magnitude, back)

    def _candidates(self, chars):
        """Every piece found in the texts: `(row, start, length, id, score)`, lengths in characters.

        Substrings grow one character at a time while they are the prefix of
        some piece, in a `tf.while_loop` that ends when none can grow.

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

    def segment(self, chars, base=None):
        """Best path of each text: ragged `(batch, pieces)` ids, and the pieces' start and end characters.

        Args:
            chars: ragged `(batch, chars)` string tensor of single characters
                (the normalised text, as `tf.strings.unicode_split` gives it).
            base: optional `(batch,)` best score at each row's start, a word
                of a text (`resegment`), whose text cannot reach the reset
                (not emulated then). 0 where not given.

        Returns:
            `(ids, starts, ends)`: int32 ids and int64 character positions,
            ragged `(batch, pieces)`, runs of unknown pieces merged.
        """
        # Rows longest first: at end position e the rows still searched are the first `active[e]`, which the loop's
        # state shrinks to.
        order = tf.argsort(chars.row_lengths(), direction="DESCENDING", stable=True)
        chars = tf.gather(chars, order)
        if base is not None:
            base = tf.gather(base, order)
        row, start, length, piece_id, score = self._candidates(chars)
        width = self.max_chars
        num_rows = chars.nrows()
        lengths = chars.row_lengths()
        steps, active, offsets = _layout(lengths)
        end = start + tf.cast(length, tf.int64)
        # Among equal scores the first start wins: the longest piece. Key: length, then id, in one integer.
        vocabulary = tf.constant(self._scores.shape[0], tf.int64)
        key = tf.cast(length, tf.int64) * vocabulary + tf.cast(piece_id, tf.int64)
        # The best scores of the last `width` positions of the rows still searched: window[:, k - 1] is at e - k.
        start_score = tf.zeros([num_rows, 1], self._dtype) if base is None else tf.reshape(base, [-1, 1])
        window = tf.concat([start_score, tf.fill(tf.stack([num_rows, width - 1]), self._dtype(-np.inf))], 1)
        best_key = tf.TensorArray(tf.int64, size=tf.cast(steps + 1, tf.int32), element_shape=[None], infer_shape=False)
        best_key = best_key.write(0, tf.zeros(tf.stack([num_rows]), tf.int64))

        def search():
            # The candidates in two flat tables, a cell per (position, row still searched there, length): a step
            # reads its rows' cells as a dense (rows, width) block (no sort, no segment reductions).
            cell = ((tf.gather(offsets, end) + row) * width + tf.cast(length - 1, tf.int64))[:, None]
            size = tf.reshape(offsets[-1] * width, [1])
            scores = tf.tensor_scatter_nd_update(tf.fill(size, self._dtype(-np.inf)), cell, score)
            keys = tf.tensor_scatter_nd_update(tf.zeros(size, tf.int64), cell, key)

            def step(e, window, best_key):
                now = active[e]
                lo = offsets[e] * width
                candidate = window[:now] + tf.reshape(scores[lo : lo + now * width], [-1, width])
                best = tf.reduce_max(candidate, 1)
                # The longest piece among the best: the last tied column.
                last = width - 1 - tf.argmax(tf.reverse(tf.equal(candidate, best[:, None]), [1]), 1)
                chosen = tf.gather(tf.reshape(keys[lo : lo + now * width], [-1, width]), last, batch_dims=1)
                window = tf.reshape(tf.concat([best[:, None], window[:now, :-1]], 1), [-1, width])
                return e + 1, window, best_key.write(tf.cast(e, tf.int32), chosen)

            return tf.while_loop(
                lambda e, *_: e <= steps,
                step,
                (tf.constant(1, tf.int64), window, best_key),
                shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, width]), tf.TensorShape(None)),
            )[-1]

        def search_with_resets():
            # Candidates grouped by end position, each reading its start's best from the window, flattened.
            order_by_end = tf.argsort(end, stable=True)
            rows_, length_, score_, end_, key_ = (tf.gather(x, order_by_end) for x in (row, length, score, end, key))
            bounds = tf.searchsorted(end_, tf.range(steps + 2, dtype=tf.int64), side="left", out_type=tf.int64)
            in_window = rows_ * width + tf.cast(length_ - 1, tf.int64)
            no_reset = tf.fill(tf.stack([num_rows]), tf.constant(-(2**62), tf.int64))

            def step(e, window, reset_at, reset_by, best_key):
                lo, hi = bounds[e], bounds[e + 1]
                now = active[e]
                window, reset_at, reset_by = window[:now], reset_at[:now], reset_by[:now]
                rows = rows_[lo:hi]
                candidate = tf.gather(tf.reshape(window, [-1]), in_window[lo:hi]) + score_[lo:hi]
                keys = key_[lo:hi]
                # A reset since these candidates' start: those starting before it were compared unshifted, then
                # their best was shifted (the library's order); only then come the later ones.
                before = tf.cast(length_[lo:hi], tf.int64) > e - tf.gather(reset_at, rows)
                best, chosen = tf.cond(tf.reduce_any(before),
                                       lambda: _best_across_reset(candidate, keys, rows, before, reset_by, now),
                                       lambda: _first_best(candidate, keys, rows, now))
                reset = (chosen > 0) & ((best < -_RESET_THRESHOLD) | (best > _RESET_THRESHOLD))
                reset_at, reset_by = tf.where(reset, e, reset_at), tf.where(reset, best, reset_by)
                best = tf.where(reset, tf.zeros_like(best), best)
                window = tf.concat([best[:, None], window[:, :-1]], 1)
                return e + 1, window, reset_at, reset_by, best_key.write(tf.cast(e, tf.int32), chosen)

            return tf.while_loop(
                lambda e, *_: e <= steps,
                step,
                (tf.constant(1, tf.int64), window, no_reset, tf.zeros(tf.stack([num_rows]), self._dtype), best_key),
                shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, width]), tf.TensorShape([None]),
                                  tf.TensorShape([None]), tf.TensorShape(None)),
            )[-1]

        if base is not None:
            best_key = search()
        else:
            # No path of `steps` pieces can reach 100,000 in score: the search without the library's reset.
            best_key = tf.cond(
                tf.cast(steps, tf.float32) * self._largest_score < 0.5 * _RESET_THRESHOLD, search, search_with_resets
            )
        best_key = best_key.concat()  # the positions' keys, row by row within each position
        ids, starts, ends = _backtrack(best_key // vocabulary, tf.cast(best_key % vocabulary, tf.int32), offsets,
                                       lengths, self.unk_id)
        back = tf.math.invert_permutation(order)
        return tf.gather(ids, back), tf.gather(starts, back), tf.gather(ends, back)


def _layout(lengths):
    """For rows sorted longest first: `(steps, active, offsets)`, the longest row's length, how many rows reach
    each position 0 to steps + 1, and where each position's entries start in a flat layout of one entry per (position,
    row reaching it): that of `(row, position)` is at `offsets[position] + row`."""
    steps = tf.reduce_max(tf.concat([[0], lengths], 0))
    positions = tf.range(steps + 2, dtype=tf.int64)
    active = tf.size(lengths, tf.int64) - tf.searchsorted(tf.reverse(lengths, [0]), positions, side="left",
                                                          out_type=tf.int64)
    return steps, active, tf.cumsum(active, exclusive=True)


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


def _backtrack(best_length, best_id, offsets, lengths, unk_id):
    """The best paths from the lengths and ids of the best piece ending at each `(row, position)`, flat: that of
    `(row, position)` at `offsets[position] + row` (`_layout`)."""
    rows = tf.range(tf.size(lengths, out_type=tf.int64))
    longest = tf.reduce_max(tf.concat([[0], lengths], 0))
    ends = tf.TensorArray(tf.int64, size=0, dynamic_size=True, element_shape=[None])

    def step(i, position, ends):
        size = tf.gather(best_length, tf.gather(offsets, position) + rows)
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
    index = tf.gather(offsets, ends.flat_values) + row_ids(ends)
    starts = ends.with_flat_values(ends.flat_values - tf.gather(best_length, index))
    ids = ends.with_flat_values(tf.gather(best_id, index))
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
    kept = (tf.boolean_mask(flat_ids, keep), tf.boolean_mask(starts.flat_values, keep), run_end)
    return tuple(tf.RaggedTensor.from_row_splits(values, splits, validate=False) for values in kept)
