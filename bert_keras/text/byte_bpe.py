"""RoBERTa's (GPT-2's) byte-level BPE tokenizer as a Keras layer, built from TensorFlow ops.

tensorflow-text has no BPE op. As keras-hub's `BytePairTokenizer`, the merges
run as a `tf.while_loop` over all the words of a batch at once; unlike it:

- GPT-2's pre-tokenization (`'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+|
  ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`) is computed exactly, lookahead included,
  from each code point's class (letter, number, whitespace, other: the
  reference's own classes, `_family_tables.py`) and its neighbours, rather
  than by RE2 splits that approximate the lookahead;
- symbols are token ids, and a pair is one int64 key (`left * V + right`)
  looked up in a static table that gives its rank and its merged token, so
  the loop does no string work;
- only distinct words are merged (`tf.unique` over the batch), and a word that
  is itself a token BPE leaves whole (most words of a trained vocabulary) is
  found in a static table, no loop at all.

The reference is Hugging Face's `RobertaTokenizerFast` on the same
`vocab.json` and `merges.txt`: its ids, and its character offsets
(`trim_offsets=True`: a piece's span leaves out its leading and trailing
spaces).
"""

import collections
import os

import keras
import numpy as np
import tensorflow as tf

from bert_keras.text import _family_tables as tables
from bert_keras.text._subword import byte_to_char_spans, in_ranges, next_in_row, previous_in_row, row_ids
from bert_keras.text.base import (Tokenizer, TokenizerFileError, TracedTokenization, check_bool, line_break,
                                  read_file_bytes, read_json_file)
from bert_keras.text.decoding import BYTE_CHARS as _BYTE_CHARS
from bert_keras.text.decoding import BytePairDecoding, bytes_to_unicode  # noqa: F401 (bytes_to_unicode: named here too)
from bert_keras.text.tokenizer_json import bpe_arguments

_do_not_convert = tf.autograph.experimental.do_not_convert

_LETTER, _NUMBER, _OTHER, _SPACE_CLASS = 0, 1, 2, 3
_NO_RANK = np.iinfo(np.int64).max
# Words (GPT-2 chunks) longer than this many bytes are merged as pieces of this many bytes, each on its own: the
# reference merges them whole, so ids may differ inside such a word (a run of 1,025 letters or symbols without a
# space; the longest chunk of 38,158 tweets is 465 bytes), but a word costs at most this many merge rounds.
MAX_MERGED_BYTES = 1024




def pretokenize(chars):
    """Where GPT-2's pre-tokenization starts a chunk, for a ragged `(batch, chars)` of int32 code points.

    Returns:
        A bool tensor over `chars.flat_values`.
    """
    cp, rows = chars.flat_values, row_ids(chars)
    kind = tf.where(in_ranges(cp, tables.GPT2_LETTER_RANGES), _LETTER, _OTHER)
    kind = tf.where(in_ranges(cp, tables.GPT2_NUMBER_RANGES), _NUMBER, kind)
    kind = tf.where(in_ranges(cp, tables.GPT2_WHITESPACE_RANGES), _SPACE_CLASS, kind)
    prev_kind, next_kind = previous_in_row(kind, rows, -1), next_in_row(kind, rows, -1)
    prev_cp = previous_in_row(cp, rows, -1)
    space = kind == _SPACE_CLASS
    # A run of one class starts a chunk; a space (U+0020 only) before a non-space joins that chunk (" ?\p{L}+").
    start = (kind != prev_kind) & ~(~space & (prev_cp == ord(" ")))
    # `\s+(?!\S)`: a whitespace run followed by a non-space leaves its last character to the next match.
    start |= space & (prev_kind == _SPACE_CLASS) & (next_kind != _SPACE_CLASS) & (next_kind != -1)
    # Contractions, tried first wherever a match starts on an apostrophe: "'s" in "it's", "'ll" in "we'll".
    next_cp, after_cp = next_in_row(cp, rows, -1), next_in_row(next_in_row(cp, rows, -1), rows, -1)
    two = (next_cp == ord("s")) | (next_cp == ord("t")) | (next_cp == ord("m")) | (next_cp == ord("d"))
    three = (
        ((next_cp == ord("r")) | (next_cp == ord("v"))) & (after_cp == ord("e"))
        | (next_cp == ord("l")) & (after_cp == ord("l"))
    )
    contraction = start & (cp == ord("'")) & (two | three)
    one_on, two_on = previous_in_row(contraction, rows, False), previous_in_row(contraction & three, rows, False)
    two_on = previous_in_row(two_on, rows, False)  # the third character of a three-character contraction
    inside = one_on | two_on
    # The character after a contraction starts a chunk ("'sa" is "'s", "a").
    after = previous_in_row(one_on, rows, False) & ~inside | previous_in_row(two_on, rows, False)
    return (start & ~inside) | after


def _utf8_lengths(cp):
    lengths = 1 + tf.cast(cp >= 0x80, tf.int32) + tf.cast(cp >= 0x800, tf.int32) + tf.cast(cp >= 0x10000, tf.int32)
    return tf.cast(lengths, tf.int64)


def load_bpe_files(vocabulary, merges):
    """The tokens (in id order) and the merges (`"left right"` strings, by rank) of RoBERTa's files or lists.

    Args:
        vocabulary: a `vocab.json` path, a dict token -> id, or a list of
            tokens in id order.
        merges: a `merges.txt` path (a `#version` first line is skipped) or a
            list of `"left right"` strings.

    Raises:
        TokenizerFileError: a file that is not what the tokenizer reads
            (invalid UTF-8 or JSON, an id that is not an integer, ids with
            gaps or repeats, a merge line that is not two tokens or that
            repeats an earlier one), naming the file.
        ValueError: a file that does not exist, or lists or dicts as above.
    """
    vocab_file = merges_file = None
    if isinstance(vocabulary, (str, os.PathLike)):
        vocab_file = os.fspath(vocabulary)
        if not tf.io.gfile.exists(vocab_file):
            raise ValueError(
                "Received an invalid value for argument `vocabulary`, expected a dict, a list of tokens or the "
                f"path of a vocab.json file that exists. Received: vocabulary={vocab_file!r}"
            )
        vocabulary = read_json_file(vocab_file)
    if isinstance(merges, (str, os.PathLike)):
        merges_file = os.fspath(merges)
        if not tf.io.gfile.exists(merges_file):
            raise ValueError(
                "Received an invalid value for argument `merges`, expected a list of str or the path of a "
                f"merges.txt file that exists. Received: merges={merges_file!r}"
            )
        merges = _read_merges(merges_file)
    else:
        merges = list(merges) if isinstance(merges, (list, tuple)) else merges
    return _vocabulary_tokens(vocabulary, vocab_file), _check_merges(merges, merges_file)


def _problem(argument, file, reason):
    """The error for a bad vocabulary or merges: naming the file it was read from, else the argument."""
    if file is not None:
        return TokenizerFileError(file, reason)
    return ValueError(f"Received an invalid value for argument `{argument}`: {reason}")


def _vocabulary_tokens(vocabulary, file):
    """The tokens in id order of a dict token -> id or a list of tokens (as `vocab.json` holds it)."""
    if isinstance(vocabulary, dict):
        for token, index in vocabulary.items():
            if isinstance(index, bool) or not isinstance(index, int):
                raise _problem("vocabulary", file, f"maps {token!r:.100} to {index!r:.100}; expected a JSON object of "
                               "token -> integer id.")
        counts = collections.Counter(vocabulary.values())
        wrong = next((i for i in range(len(vocabulary)) if counts[i] != 1), None)
        if wrong is not None:
            found = "is missing" if counts[wrong] == 0 else f"is given to {counts[wrong]} tokens"
            raise _problem("vocabulary", file, f"its ids must run from 0 to {len(vocabulary) - 1} without gaps or "
                           f"repeats; id {wrong} {found}.")
        vocabulary = sorted(vocabulary, key=vocabulary.get)
    if not isinstance(vocabulary, (list, tuple)) or not vocabulary or not all(isinstance(t, str) for t in vocabulary):
        if file is not None:
            found = "no token" if vocabulary == [] else f"a JSON {type(vocabulary).__name__}"
            raise TokenizerFileError(file, f"expected a JSON object of token -> id, found {found}.")
        raise ValueError(
            "Received an invalid value for argument `vocabulary`, expected a non-empty list of str, a dict "
            f"token -> id or a vocab.json path. Received: vocabulary of type {type(vocabulary).__name__}"
        )
    return list(vocabulary)


def _read_merges(path):
    """The merges of a `merges.txt` as `(line number, text)` pairs: blank lines and a `#version` line skipped."""
    data = read_file_bytes(path)  # a FIFO is refused, not waited on
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TokenizerFileError(path, f"is not UTF-8 text ({error}).") from error
    lines = [(number, line.rstrip("\r")) for number, line in enumerate(text.split("\n"), 1)]
    return [(number, line) for number, line in lines if line and not line.startswith("#version")]


def _check_merges(merges, file):
    """The merges as a list of `"left right"` strings, each once. `merges`: strings, or `(line, text)` of a file."""
    if not isinstance(merges, list):
        raise ValueError(
            "Received an invalid value for argument `merges`, expected a list of \"left right\" strings or a "
            "merges.txt path"
        )
    numbered = merges if file is not None else list(enumerate(merges, 1))
    where = "line" if file is not None else "merge"
    seen = {}
    for number, merge in numbered:
        if not isinstance(merge, str) or len(merge.split(" ")) != 2:
            if file is None:
                raise ValueError(
                    "Received an invalid value for argument `merges`, expected a list of \"left right\" strings or "
                    "a merges.txt path"
                )
            raise TokenizerFileError(file, f"line {number} is {merge!r:.100}; expected two tokens separated by one "
                                     "space (\"left right\").")
        if file is None and line_break(merge) is not None:  # merges.txt, where it is written, holds one a line
            raise ValueError(f"Received an invalid value for argument `merges`: merge {number} ({merge!r:.100}) holds "
                             f"{line_break(merge)!r}; merges.txt holds one merge a line, so every later rank would "
                             "shift.")
        if merge in seen:  # its pair would have two ranks
            raise _problem("merges", file, f"{where} {number} repeats {where} {seen[merge]} ({merge!r:.100}); each "
                           "pair of tokens is merged at one rank, so it may be listed once.")
        seen[merge] = number
    return [merge for _, merge in numbered]


def _merge_step(values, row_splits, pair_table, merged_ids, vocabulary_size):
    """One round of BPE on every word: each word merges all (non-overlapping) occurrences of its best pair.

    Returns:
        `(values, row_splits, merged)`: the words after the round, and a bool
        per word, whether it merged anything (a word that did not is final).
    """
    rows = row_ids(row_splits)
    num_rows = tf.size(row_splits) - 1
    same_word = rows[1:] == rows[:-1]
    keys = tf.cast(values[:-1], tf.int64) * vocabulary_size + tf.cast(values[1:], tf.int64)
    ranks = tf.where(same_word, pair_table.lookup(keys), _NO_RANK)  # (symbols - 1,)
    best = tf.gather(tf.math.unsorted_segment_min(ranks, rows[:-1], num_rows), rows[:-1])
    chosen = (ranks == best) & (ranks != _NO_RANK)
    # In a run of overlapping occurrences ("a a a" for the pair "a a"), the left one of each pair of them merges.
    positions = tf.range(tf.size(chosen, tf.int64))
    run = tf.cumsum(tf.cast(chosen & ~tf.concat([[False], chosen[:-1]], 0), tf.int64)) - 1
    num_runs = tf.maximum(tf.reduce_max(tf.concat([[0], run + 1], 0)), 1)
    run_first = tf.math.unsorted_segment_min(positions, tf.where(chosen, run, -1), num_runs)
    chosen &= (positions - tf.gather(run_first, tf.maximum(run, 0))) % 2 == 0
    merges_left = tf.concat([chosen, [False]], 0)  # (symbols,): merges with the symbol after it
    absorbed = tf.concat([[False], chosen], 0)  # (symbols,): merged into the symbol before it
    merged = tf.gather(merged_ids, tf.where(chosen, ranks, 0))
    values = tf.where(merges_left, tf.concat([merged, [0]], 0), values)
    kept = ~absorbed
    lengths = tf.math.unsorted_segment_sum(tf.cast(kept, row_splits.dtype), rows, num_rows)
    merged_any = tf.math.unsorted_segment_max(tf.cast(absorbed, tf.int32), rows, num_rows) > 0
    return tf.boolean_mask(values, kept), tf.concat([[0], tf.cumsum(lengths)], 0), merged_any


# From this many words up, the words that are final leave the merge loop (`apply_merges`); below it, keeping them costs
# less than the ops that take them out (one text per call).
MIN_WORDS_TO_SHRINK = 64


def apply_merges(symbols, pair_table, merged_ids, vocabulary_size):
    """Byte-level BPE on a ragged `(words, symbols)` of int32 token ids, in a `tf.while_loop`.

    From `MIN_WORDS_TO_SHRINK` words up, a word that merged nothing in a
    round is final and leaves the loop: a round costs the symbols of the
    words still merging, not of the batch (1,000 tweets: 51 -> 40 ms here).
    """
    return tf.cond(
        symbols.nrows() >= MIN_WORDS_TO_SHRINK,
        lambda: _merges_shrinking(symbols, pair_table, merged_ids, vocabulary_size),
        lambda: _merges_all(symbols, pair_table, merged_ids, vocabulary_size),
    )


def _merges_all(symbols, pair_table, merged_ids, vocabulary_size):
    """`apply_merges` with every word in every round, until no word merges."""

    def body(values, row_splits, _):
        values, row_splits, merged = _merge_step(values, row_splits, pair_table, merged_ids, vocabulary_size)
        return values, row_splits, tf.reduce_any(merged)

    values, row_splits, _ = tf.while_loop(
        lambda values, row_splits, again: again,
        body,
        (symbols.flat_values, symbols.row_splits, tf.size(symbols.flat_values) > tf.size(symbols.row_splits) - 1),
        shape_invariants=(tf.TensorShape([None]), tf.TensorShape([None]), tf.TensorShape([])),
    )
    return tf.RaggedTensor.from_row_splits(values, row_splits, validate=False)


def _merges_shrinking(symbols, pair_table, merged_ids, vocabulary_size):
    """`apply_merges` where the words that merged nothing in a round leave the loop."""
    splits_dtype = symbols.row_splits.dtype

    def body(values, row_splits, word, done_values, done_lengths, done_word, round_):
        values, row_splits, merged = _merge_step(values, row_splits, pair_table, merged_ids, vocabulary_size)
        rows = row_ids(row_splits)
        lengths = row_splits[1:] - row_splits[:-1]
        done_values = done_values.write(round_, tf.boolean_mask(values, ~tf.gather(merged, rows)))
        done_lengths = done_lengths.write(round_, tf.boolean_mask(lengths, ~merged))
        done_word = done_word.write(round_, tf.boolean_mask(word, ~merged))
        values = tf.boolean_mask(values, tf.gather(merged, rows))
        row_splits = tf.concat([[0], tf.cumsum(tf.boolean_mask(lengths, merged))], 0)
        return values, row_splits, tf.boolean_mask(word, merged), done_values, done_lengths, done_word, round_ + 1

    def ledger(dtype):
        return tf.TensorArray(dtype, size=0, dynamic_size=True, infer_shape=False, element_shape=[None])

    *_, done_values, done_lengths, done_word, _ = tf.while_loop(
        lambda values, row_splits, *_: tf.size(row_splits) > 1,
        body,
        (symbols.flat_values, symbols.row_splits, tf.range(symbols.nrows()), ledger(symbols.dtype),
         ledger(splits_dtype), ledger(splits_dtype), tf.constant(0)),
        shape_invariants=(tf.TensorShape([None]), tf.TensorShape([None]), tf.TensorShape([None]),
                          tf.TensorShape(None), tf.TensorShape(None), tf.TensorShape(None), tf.TensorShape([])),
    )
    # Words in the order they finished -> their own order.
    finished = tf.RaggedTensor.from_row_lengths(
        _concat(done_values, symbols.dtype), _concat(done_lengths, splits_dtype), validate=False
    )
    return tf.gather(finished, tf.math.invert_permutation(_concat(done_word, splits_dtype)))


def _concat(array, dtype):
    """A `TensorArray`'s elements concatenated; an empty vector when none was written."""
    return tf.cond(array.size() > 0, array.concat, lambda: tf.zeros([0], dtype))


@keras.saving.register_keras_serializable(package="bert_keras")
class BytePairTokenizer(Tokenizer):
    """RoBERTa's byte-level BPE tokenizer: strings to token ids, in the graph.

    Gives the ids and the character offsets of Hugging Face's
    `RobertaTokenizerFast` on the same `vocab.json` and `merges.txt`. Words
    are the chunks of GPT-2's pre-tokenization (" hello", "'s", "!!"). The
    reference's matching of literal special tokens such as `"<mask>"` in the
    text is not reproduced: they are tokenized as text. Pairs are packed
    RoBERTa's way (`packing = "roberta"`: `<s> A </s></s> B </s>`, type ids 0).
    A word (GPT-2 chunk) longer than `MAX_MERGED_BYTES` (1,024) bytes is
    merged in parts of that many bytes, which bounds its cost (the reference
    merges it whole: ids may differ inside such a word, never elsewhere).

    Character offsets count code points of the raw string: a piece spans the
    code points whose UTF-8 bytes it holds (the pieces of one character split
    across several share its span), without its leading and trailing spaces.

    Args:
        vocabulary: a `vocab.json` path, a dict token -> id, or a list of
            tokens in id order.
        merges: a `merges.txt` path or a list of `"left right"` strings.
        add_prefix_space: bool. Put a space before a text that does not
            start with one, so that its first word is cut as the others.
            Defaults to `False`, as RoBERTa.
        unknown_token, cls_token, sep_token, pad_token, mask_token: str.
            Default to `"<unk>"`, `"<s>"`, `"</s>"`, `"<pad>"`, `"<mask>"`.

    Call arguments:
        inputs: string tensor `(batch,)` (or a scalar, or `(batch, 1)`).

    Returns:
        An int32 `tf.RaggedTensor` `(batch, words, pieces)`.

    Example:
    >>> tokenizer = BytePairTokenizer(
    ...     ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "a", "b", "Ġ", "Ġb", "ab"], ["Ġ b", "a b"])
    >>> tokenizer(["ab b"]).to_list()
    [[[9], [8]]]
    """

    kind = "byte_bpe"
    files = {"vocab_file": "vocab.json", "merges_file": "merges.txt"}
    file_arguments = {"vocab_file": "vocabulary", "merges_file": "merges"}
    options = {"add_prefix_space": "add_prefix_space"}
    packing = "roberta"
    word_start_mark = _BYTE_CHARS[ord(" ")]  # "Ġ": a space's byte
    # RoBERTa's post-processor (`ByteLevel`, trim_offsets) leaves spaces out of a piece's span; a family whose
    # tokenizer.json has another post-processor (ModernBERT's TemplateProcessing) keeps them.
    trim_offsets = True
    tokenizer_json_model = "BPE"

    def __init__(
        self,
        vocabulary,
        merges,
        add_prefix_space=False,
        unknown_token="<unk>",
        cls_token="<s>",
        sep_token="</s>",
        pad_token="<pad>",
        mask_token="<mask>",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.add_prefix_space = check_bool("add_prefix_space", add_prefix_space)
        vocabulary, merges = load_bpe_files(vocabulary, merges)
        self._set_plain(merges=merges)
        self._set_vocabulary(
            vocabulary,
            unknown_token=unknown_token,
            cls_token=cls_token,
            sep_token=sep_token,
            pad_token=pad_token,
            mask_token=mask_token,
        )
        self._build_tables()
        self._traced = TracedTokenization(self._tokenize_rows, self._tokenize_rows_with_char_offsets)

    @classmethod
    def tokens_to_string(cls, tokens, suffix_indicator="##"):
        """Pieces as one string, as tokenizers' `ByteLevel` decoder joins them: the bytes of all tokens (a token's
        raw UTF-8 where a character is not a byte's) decoded together, an invalid UTF-8 sequence as U+FFFD.

        >>> BytePairTokenizer.tokens_to_string(["\u0120New", "\u0120York"])
        ' New York'
        """
        return BytePairDecoding.tokens_to_string(tokens, suffix_indicator)

    @classmethod
    def piece_text(cls, token):
        """The text of a piece: its bytes decoded as UTF-8 (`Ġ` is a space), without leading spaces; None for a
        piece holding part of a character only.

        >>> BytePairTokenizer.piece_text("\u0120the")
        'the'
        """
        return BytePairDecoding.piece_text(token)

    @classmethod
    def read_tokens(cls, files):
        """The tokens of `vocab.json` in id order, checked with `merges.txt` (`load_bpe_files`)."""
        return load_bpe_files(files["vocab_file"], files["merges_file"])[0]

    @classmethod
    def arguments_from_tokenizer_json(cls, tokenizer, path):
        """The arguments of a Hugging Face `tokenizer.json` with RoBERTa's byte-level BPE (transformers 5 saves no
        vocab.json or merges.txt): `bert_keras.text.tokenizer_json.bpe_arguments`."""
        return bpe_arguments(tokenizer, path)

    def _build_tables(self):
        size = len(self.vocabulary)
        self._size = size
        byte_chars = _BYTE_CHARS
        # Each byte's token (a byte-level vocabulary has all 256; a missing one is the unknown token).
        self._byte_ids = tf.constant(
            [self._token_to_id.get(byte_chars[b], self.unknown_id) for b in range(256)], tf.int32
        )
        keys, merged = [], []
        for left, right in (merge.split(" ") for merge in self.merges):
            if left in self._token_to_id and right in self._token_to_id and left + right in self._token_to_id:
                keys.append(self._token_to_id[left] * size + self._token_to_id[right])
            else:  # a merge whose tokens the vocabulary lacks can never apply
                keys.append(-1 - len(keys))
            merged.append(self._token_to_id.get(left + right, self.unknown_id))
        self._pair_table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(keys or [-1], tf.int64), tf.range(max(len(keys), 1), dtype=tf.int64)
            ),
            default_value=_NO_RANK,
        )
        self._merged_ids = tf.constant(merged or [0], tf.int32)
        self._piece_bytes = tf.constant([len(token) for token in self.vocabulary], tf.int64)
        # Words that are a token BPE leaves whole need no merging: keyed by their raw bytes.
        unbyte = {char: byte for byte, char in byte_chars.items()}
        special = {self.unknown_token, self.cls_token, self.sep_token, self.pad_token, self.mask_token}
        candidates = [
            (i, bytes(unbyte[c] for c in token))
            for i, token in enumerate(self.vocabulary)
            if token not in special and len(token) > 1 and all(c in unbyte for c in token)
        ]
        whole = []
        if candidates:
            ids = self._merge_words(tf.constant([raw for _, raw in candidates]))
            for (i, raw), pieces in zip(candidates, ids.to_list()):
                if pieces == [i]:
                    whole.append((raw, i))
        self._whole_words = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant([raw for raw, _ in whole] or [b""], tf.string),
                tf.constant([i for _, i in whole] or [-1], tf.int32),
            ),
            default_value=-1,
        )

    def _merge_words(self, words):
        """BPE of a vector of words (UTF-8 strings) -> int32 ragged `(words, pieces)`.

        A word longer than `MAX_MERGED_BYTES` is merged as pieces of that many
        bytes (see its comment): the loop runs one round per merge rank a word
        uses, over every symbol of the batch, so one long run of letters cost
        minutes.
        """
        raw = tf.strings.bytes_split(words)
        flat = tf.reshape(tf.io.decode_raw(raw.flat_values, tf.uint8), [-1])  # one byte per string
        ids = tf.gather(self._byte_ids, tf.cast(flat, tf.int32))
        word = row_ids(raw)  # (bytes,)
        at = tf.range(tf.size(word, tf.int64)) - tf.gather(raw.row_starts(), word)
        starts_part = at % MAX_MERGED_BYTES == 0
        part = tf.cumsum(tf.cast(starts_part, tf.int64)) - 1
        num_parts = tf.reduce_sum(tf.cast(starts_part, tf.int64))
        symbols = tf.RaggedTensor.from_value_rowids(ids, part, nrows=num_parts, validate=False)  # (parts, bytes)
        merged = apply_merges(symbols, self._pair_table, self._merged_ids, self._size)  # (parts, pieces)
        part_word = tf.boolean_mask(word, starts_part)
        return tf.RaggedTensor.from_value_rowids(
            merged.flat_values, tf.gather(part_word, row_ids(merged)), nrows=raw.nrows(), validate=False
        )

    def _chunks(self, strings):
        """Code points of the texts and the chunks of GPT-2's pre-tokenization.

        Returns:
            `(chars, starts_chunk, chunk_words, chunk_rows)`: the ragged code
            points (a space put first where `add_prefix_space` asks), a bool
            over them, the chunks' UTF-8 strings and each chunk's row.
        """
        chars = tf.strings.unicode_decode(strings, "UTF-8", errors="replace", replacement_char=0xFFFD)
        if self.add_prefix_space:
            starts_with_space = tf.strings.regex_full_match(strings, "(?s)( .*)?")
            prefix = tf.ragged.boolean_mask(
                tf.fill([chars.nrows(), 1], ord(" ")), tf.expand_dims(~starts_with_space, 1)
            )
            chars = tf.concat([tf.cast(prefix, chars.dtype), chars], axis=1)
        starts_chunk = pretokenize(chars)
        chunk = tf.cumsum(tf.cast(starts_chunk, tf.int64)) - 1
        chunk_chars = tf.RaggedTensor.from_value_rowids(
            chars.flat_values, chunk, nrows=tf.reduce_sum(tf.cast(starts_chunk, tf.int64)), validate=False
        )
        chunk_rows = tf.boolean_mask(row_ids(chars), starts_chunk)
        return chars, starts_chunk, tf.strings.unicode_encode(chunk_chars, "UTF-8"), chunk_rows

    def _word_pieces(self, words):
        """BPE of the chunks (UTF-8): ragged `(chunks, pieces)` of int32 ids; each distinct chunk merged once."""
        unique, index = tf.unique(words)
        whole = self._whole_words.lookup(unique)
        rows = tf.where(whole < 0)[:, 0]
        merged = self._merge_words(tf.gather(unique, rows))
        hits = tf.where(whole >= 0)[:, 0]
        order = tf.math.invert_permutation(tf.concat([hits, rows], 0))
        pieces = tf.concat([tf.RaggedTensor.from_tensor(tf.gather(whole, hits)[:, None]), merged], 0)
        return tf.gather(tf.gather(pieces, order), index).with_row_splits_dtype(tf.int64)

    def _tokenize_rows(self, strings):
        chars, starts_chunk, words, chunk_rows = self._chunks(strings)
        pieces = self._word_pieces(words)  # (chunks, pieces)
        # Byte offsets: each chunk's first byte in its text, then its pieces' bytes in turn.
        char_bytes = _utf8_lengths(chars.flat_values)
        text_base = tf.gather(tf.cumsum(char_bytes, exclusive=True), tf.gather(chars.row_starts(), row_ids(chars)))
        chunk_starts = tf.boolean_mask(tf.cumsum(char_bytes, exclusive=True) - text_base, starts_chunk)
        piece_bytes = tf.gather(self._piece_bytes, pieces.flat_values)
        within = tf.cumsum(piece_bytes, exclusive=True) - tf.gather(
            tf.cumsum(piece_bytes, exclusive=True), tf.gather(pieces.row_starts(), row_ids(pieces))
        )
        starts = tf.gather(chunk_starts, row_ids(pieces)) + within
        chunks_per_row = tf.math.unsorted_segment_sum(tf.ones_like(chunk_rows), chunk_rows, tf.size(strings, tf.int64))

        def nest(values):
            return tf.RaggedTensor.from_row_lengths(pieces.with_flat_values(values), chunks_per_row, validate=False)

        return nest(pieces.flat_values), nest(starts), nest(starts + piece_bytes)

    def _tokenize_rows_with_char_offsets(self, strings):
        ids, starts, ends = self._traced.tokenize_rows(strings)
        chars = tf.strings.unicode_decode(strings, "UTF-8", errors="replace", replacement_char=0xFFFD)
        cp = chars.flat_values
        piece_rows = tf.gather(row_ids(ids), row_ids(ids.values))
        if self.add_prefix_space:
            # The added space owns no code point of the text: offsets are taken as if it were one, then shifted.
            added = ~tf.strings.regex_full_match(strings, "(?s)( .*)?")
            prefix = tf.ragged.boolean_mask(tf.fill([chars.nrows(), 1], ord(" ")), tf.expand_dims(added, 1))
            chars = tf.concat([tf.cast(prefix, chars.dtype), chars], axis=1)
            cp = chars.flat_values
        first, end = byte_to_char_spans(
            _utf8_lengths(cp), row_ids(chars), chars.nrows(), piece_rows,
            starts.flat_values, ends.flat_values, blank=(cp == ord(" ")) if self.trim_offsets else None,
        )
        if self.add_prefix_space:
            shift = tf.cast(tf.gather(added, piece_rows), tf.int64)
            first, end = tf.maximum(first - shift, 0), tf.maximum(end - shift, 0)
        return ids, starts.with_flat_values(first), ends.with_flat_values(end)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary": list(self.vocabulary),
                "merges": list(self.merges),
                "add_prefix_space": self.add_prefix_space,
            }
        )
        return config
