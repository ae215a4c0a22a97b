"""BERT's WordPiece tokenizer as a Keras layer, in the TensorFlow graph.

The text is normalised with string ops in the order of the reference
(`BertTokenizerFast`): decode UTF-8 (invalid bytes become U+FFFD), clean (drop
NUL, U+FFFD and Cc/Cf/Co characters, map whitespace to a space), put spaces
around CJK ideographs and, when uncased, NFD, drop accents (Mn), lower-case.
The character classes are tables taken from the reference
(`_unicode_tables.py`), plus a patch for the 116 letters whose case mapping or
decomposition in TensorFlow's ICU differs. ASCII-only strings take a short
cut through the same steps.

Words and word pieces then come from tensorflow-text's end-to-end
`FastWordpieceTokenizer`; texts where its word splitting could differ from
the reference's (a run of more than `max_chars_per_word` non-space
characters, or a character of `SPLIT_DETOUR_RANGES`) are split by a regex
first and cut into pieces word by word.

tensorflow-text's own lower-casing (`lower_case_nfd_strip_accents`) applies
NFKC case folding, which changes characters that the reference keeps
(full-width letters, ligatures, superscripts...); it is not used.
"""

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from bert_keras.text import _unicode_tables as tables
# to_string_tensor: the name is imported from here too.
from bert_keras.text.base import Tokenizer, TracedTokenization, to_string_tensor  # noqa: F401
from bert_keras.text.decoding import WordPieceDecoding
from bert_keras.text.offsets import char_offsets
from bert_keras.text.tokenizer_json import MAX_CHARS_PER_WORD, wordpiece_arguments
# The vocabulary's reading and checks: their names are imported from here too.
from bert_keras.text.vocabulary import (  # noqa: F401
    MAX_TOKEN_BYTES, check_token_characters, check_token_lengths, check_unique_tokens, load_vocabulary,
    wordpiece_vocabulary)

# Plain TensorFlow ops without Python control flow: tracing them through
# AutoGraph only makes `tf.function` and `tf.data` tracing slower.
_do_not_convert = tf.autograph.experimental.do_not_convert

_REMOVED = tables.to_regex_class(tables.REMOVED_RANGES)
_WHITESPACE = tables.to_regex_class(tables.WHITESPACE_RANGES)
_CJK = tables.to_regex_class(tables.CJK_RANGES)
_ACCENTS = tables.to_regex_class(tables.ACCENT_RANGES)
_PUNCTUATION = tables.to_regex_class(tables.PUNCTUATION_RANGES)
_WORD_DELIMITERS = " +|" + _PUNCTUATION
_ASCII = r"[\x00-\x7f]*"


def _ascii_part(ranges):
    return tables.to_regex_class([(first, min(last, 0x7F)) for first, last in ranges if first < 0x80])


_ASCII_REMOVED = _ascii_part(tables.REMOVED_RANGES)
_ASCII_WHITESPACE = _ascii_part(tables.WHITESPACE_RANGES)
_SPLIT_DETOUR = tables.to_regex_class(tables.SPLIT_DETOUR_RANGES)
_CAPITAL_SIGMA = "\u03a3"
_SMALL_SIGMA = "\u03c3"
_PATCH_KEYS = [key for key, _ in tables.CASE_PATCH]
_PATCH_VALUES = [value for _, value in tables.CASE_PATCH]
_PATCH_MATCH = "(?s).*" + tables.to_regex_class([(key, key) for key in _PATCH_KEYS]) + ".*"
# Private-use code points stand in for the patched characters while the
# uncased steps run: the cleaning step has removed all private-use input.
_PLACEHOLDER_BASE = 0xF0000


def _uncase(x, strip_accents=True):
    if strip_accents:
        x = tf_text.normalize_utf8(x, "NFD")
        x = tf.strings.regex_replace(x, _ACCENTS, "")
    # ICU lower-cases a word-final capital sigma to the final form; the
    # reference maps every capital sigma to the plain small sigma.
    x = tf.strings.regex_replace(x, _CAPITAL_SIGMA, _SMALL_SIGMA)
    return tf.strings.lower(x, encoding="utf-8")


def _uncase_patched(x, strip_accents=True):
    """`_uncase` for the rare strings holding a `CASE_PATCH` character (whose value is the reference's lower case
    with or without accent stripping: the keys are letters TensorFlow's ICU lower-cases or decomposes otherwise)."""
    keys = tf.constant(_PATCH_KEYS, tf.int32)
    # chars: (strings, (code points))
    chars = tf.strings.unicode_decode(x, "UTF-8")
    flat = chars.flat_values
    index = tf.minimum(tf.searchsorted(keys, flat), len(_PATCH_KEYS) - 1)
    patched = tf.gather(keys, index) == flat
    flat = tf.where(patched, _PLACEHOLDER_BASE + tf.cast(index, tf.int32), flat)
    x = _uncase(tf.strings.unicode_encode(chars.with_flat_values(flat), "UTF-8"), strip_accents)
    chars = tf.strings.unicode_decode(x, "UTF-8")
    flat = chars.flat_values
    index = flat - _PLACEHOLDER_BASE
    placeholder = (index >= 0) & (index < len(_PATCH_KEYS))
    values = tf.gather(tf.constant(_PATCH_VALUES, tf.int32), tf.clip_by_value(index, 0, len(_PATCH_KEYS) - 1))
    flat = tf.where(placeholder, values, flat)
    return tf.strings.unicode_encode(chars.with_flat_values(flat), "UTF-8")


@_do_not_convert
def normalize_text(inputs, lower_case=True, strip_accents=None, tokenize_chinese_chars=True):
    """Normalises UTF-8 strings exactly as BERT's reference tokenizer does.

    Args:
        inputs: string tensor of any shape.
        lower_case: bool. Also apply NFD, drop accents and lower-case, as the
            uncased BERT models expect. Defaults to `True`.
        strip_accents: optional bool. `False` with `lower_case`: lower-case
            without NFD and accent removal (`BertNormalizer(strip_accents=False)`);
            None: as `lower_case`. Stripping accents without lower-casing is
            not done (`True` without `lower_case` is refused by the tokenizer).
        tokenize_chinese_chars: bool. Put spaces around CJK ideographs, so
            that each is a word. Defaults to `True`.

    Returns:
        A string tensor of the same shape, valid UTF-8. Bytes that are not
        valid UTF-8 are replaced by U+FFFD and then dropped, as the reference
        drops U+FFFD.

    Example:
    >>> normalize_text(tf.constant(["Héllo\\tWORLD 中文"])).numpy()
    array([b'hello world  \\xe4\\xb8\\xad  \\xe6\\x96\\x87 '], dtype=object)
    """
    inputs = to_string_tensor(inputs)
    shape = tf.shape(inputs)
    flat = tf.reshape(inputs, [-1])
    # ASCII text (most text) needs only the ASCII part of each step; the
    # other rows go through all of them.
    rows = tf.where(~tf.strings.regex_full_match(flat, _ASCII))  # (non-ASCII rows, 1)
    x = tf.strings.regex_replace(flat, _ASCII_REMOVED, "")
    x = tf.strings.regex_replace(x, _ASCII_WHITESPACE, " ")
    if lower_case:
        x = tf.strings.lower(x)
    x = tf.tensor_scatter_nd_update(
        x, rows, _normalize_any(tf.gather_nd(flat, rows), lower_case, strip_accents is not False, tokenize_chinese_chars)
    )
    return tf.reshape(x, shape)


def _normalize_any(x, lower_case, strip_accents=True, tokenize_chinese_chars=True):
    """`normalize_text` for a vector of any strings, valid UTF-8 or not."""
    x = tf.strings.unicode_transcode(x, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
    x = tf.strings.regex_replace(x, _REMOVED, "")
    x = tf.strings.regex_replace(x, _WHITESPACE, " ")
    if tokenize_chinese_chars:
        x = tf.strings.regex_replace(x, f"({_CJK})", r" \1 ")
    if lower_case:
        rows = tf.where(tf.strings.regex_full_match(x, _PATCH_MATCH))  # (rows to patch, 1)
        patched = _uncase_patched(tf.gather_nd(x, rows), strip_accents)
        x = tf.tensor_scatter_nd_update(_uncase(x, strip_accents), rows, patched)
    return x


@keras.saving.register_keras_serializable(package="bert_keras")
class WordPieceTokenizer(Tokenizer):
    """BERT's WordPiece tokenizer: strings to word-piece ids, in the graph.

    Gives the ids of Hugging Face's `BertTokenizerFast` built from the same
    `vocab.txt` (uncased: `do_lower_case=True`; cased: `do_lower_case=False`),
    checked on every Unicode code point and on 38,158 real tweets. The
    reference's special-token matching of literal strings such as `"[MASK]"`
    in the input is not reproduced: they are tokenized as text.

    Offsets: `tokenize_with_offsets` gives byte offsets into
    `normalize(inputs)` (the normalised text, which equals the input for
    clean ASCII text that is already lower-case). `tokenize_with_char_offsets`
    counts Unicode code points of the raw input, the unit of Python's `str`:
    `text[start:end]` is the piece as the user wrote it (before lower-casing,
    accent stripping, dropping of control characters), the
    `return_offsets_mapping=True` of `BertTokenizerFast` (equal on 38,158
    tweets and on every code point but the reordering noted in
    `offsets.char_offsets`). UTF-16 clients (Java, JavaScript) count
    characters beyond U+FFFF twice. An `[UNK]` spans its word; pieces of a
    character that normalises to several (a Hangul syllable) share its span.
    All in the graph, so exports serve it.

    Args:
        vocabulary: str, path-like, or list of str. A `vocab.txt` (one token
            per line, line `i` is id `i`) or the list of tokens. It is kept in
            the layer's config, so saved models carry it.
        lower_case: bool. `True` for uncased vocabularies (NFD, accents
            dropped, lower-cased), `False` for cased ones. Defaults to `True`.
        strip_accents: optional bool. `False` with `lower_case`: lower-cased,
            accents kept (`tokenizer_config.json`'s `strip_accents: false`).
            None: as `lower_case`. `True` without `lower_case` is refused.
            Defaults to None.
        tokenize_chinese_chars: bool. Each CJK ideograph is a word of its own;
            `False` keeps runs of them together as words (the
            `tokenize_chinese_chars` option). Defaults to `True`.
        unknown_token: str. Token for words that cannot be cut into pieces.
            Defaults to `"[UNK]"`.
        cls_token: str. Start-of-sequence token. Defaults to `"[CLS]"`.
        sep_token: str. End-of-segment token. Defaults to `"[SEP]"`.
        pad_token: str. Padding token. Defaults to `"[PAD]"`.
        mask_token: str. Masked-LM token. Defaults to `"[MASK]"`.
        suffix_indicator: str. Prefix of word pieces that continue a word.
            Defaults to `"##"`.
        max_chars_per_word: int. Longer words become `unknown_token`, as in
            the reference. Defaults to `100`.

    Call arguments:
        inputs: string tensor `(batch,)` (or a scalar, or `(batch, 1)`), or a
            Python str or list of str.

    Returns:
        An int32 `tf.RaggedTensor` `(batch, words, word_pieces)` (without the
        batch axis for a scalar input).

    Example:
    >>> tokenizer = WordPieceTokenizer(
    ...     ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "qu", "##ick", "!"])
    >>> tokenizer(["The quick!"]).to_list()
    [[[5], [6, 7], [8]]]
    >>> tokenizer = WordPieceTokenizer(
    ...     ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cafe", "qu", "##ick", "!"])
    >>> text = "\u200bCAFÉ\tQuick!"
    >>> ids, starts, ends = tokenizer.tokenize_with_char_offsets([text])
    >>> [text[s:e] for s, e in zip(starts.flat_values.numpy(), ends.flat_values.numpy())]
    ['CAFÉ', 'Qu', 'ick', '!']
    """

    kind = "wordpiece"
    files = {"vocab_file": "vocab.txt"}
    file_arguments = {"vocab_file": "vocabulary"}
    options = {"do_lower_case": "lower_case", "strip_accents": "strip_accents",
               "tokenize_chinese_chars": "tokenize_chinese_chars"}
    tokenizer_json_model = "WordPiece"

    def __init__(
        self,
        vocabulary,
        lower_case=True,
        unknown_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token="[MASK]",
        suffix_indicator="##",
        max_chars_per_word=100,
        strip_accents=None,
        tokenize_chinese_chars=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(lower_case, bool):
            raise ValueError(
                "Received an invalid value for argument `lower_case`, expected a bool. "
                f"Received: lower_case={lower_case!r}"
            )
        if strip_accents not in (None, False, True) or (strip_accents is True and not lower_case):
            raise ValueError(
                "Received an invalid value for argument `strip_accents`, expected None, or a bool that is not True "
                "without lower_case (accents are stripped only where text is lower-cased). "
                f"Received: strip_accents={strip_accents!r} with lower_case={lower_case!r}"
            )
        if not isinstance(tokenize_chinese_chars, bool):
            raise ValueError(
                "Received an invalid value for argument `tokenize_chinese_chars`, expected a bool. "
                f"Received: tokenize_chinese_chars={tokenize_chinese_chars!r}"
            )
        if (
            isinstance(max_chars_per_word, bool)
            or not isinstance(max_chars_per_word, int)
            or not 0 < max_chars_per_word <= MAX_CHARS_PER_WORD
        ):
            raise ValueError(
                "Received an invalid value for argument `max_chars_per_word`, expected a positive integer of at "
                f"most {MAX_CHARS_PER_WORD:,}. Received: max_chars_per_word={max_chars_per_word!r}"
            )
        if not isinstance(suffix_indicator, str) or not suffix_indicator:
            raise ValueError(
                "Received an invalid value for argument `suffix_indicator`, expected a "
                f"non-empty str. Received: suffix_indicator={suffix_indicator!r}"
            )
        tokens = load_vocabulary(vocabulary)
        if not tokens:
            raise ValueError(
                "Received an invalid value for argument `vocabulary`, expected at least one "
                "token. Received: an empty vocabulary"
            )
        # Tokens are unique (`load_vocabulary` checks it; tensorflow-text's WordPiece requires it).
        self._set_vocabulary(
            tokens,
            unknown_token=unknown_token,
            cls_token=cls_token,
            sep_token=sep_token,
            pad_token=pad_token,
            mask_token=mask_token,
        )
        self.lower_case = lower_case
        self.strip_accents = strip_accents
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.suffix_indicator = suffix_indicator
        self.max_chars_per_word = max_chars_per_word

        # Two paths give the reference's ids. The fast one splits words and
        # cuts pieces in one tensorflow-text op; it serves every text without
        # a run of more than `max_chars_per_word` non-space characters (words
        # longer than that are [UNK] in the reference, counted in characters,
        # not bytes) and without the characters of `SPLIT_DETOUR_RANGES`. The
        # exact one splits words with a regex first.
        # A token holding a space keeps its id but is never given, as in the reference (`wordpiece_vocabulary`).
        matched = wordpiece_vocabulary(self.vocabulary)
        self._matched_unknown_token = matched[self.unknown_id]
        wordpiece_args = dict(
            vocab=matched,
            suffix_indicator=suffix_indicator,
            # A UTF-8 character takes at most 4 bytes.
            max_bytes_per_word=4 * max_chars_per_word,
            token_out_type=tf.int32,
            unknown_token=self._matched_unknown_token,
        )
        self._wordpiece_text = tf_text.FastWordpieceTokenizer(**wordpiece_args)
        self._wordpiece = tf_text.FastWordpieceTokenizer(no_pretokenization=True, **wordpiece_args)
        self._starts_word = tf.constant([not t.startswith(suffix_indicator) for t in self.vocabulary])
        if max_chars_per_word < 1000:  # RE2's limit on counted repetition
            long_run = f"[^ ]{{{max_chars_per_word + 1},}}|"
        else:
            long_run = ""
        # Without CJK spacing, a run of ideographs is one word, which the fast path would cut apart.
        detour = _SPLIT_DETOUR if tokenize_chinese_chars else f"{_SPLIT_DETOUR}|{_CJK}"
        self._detour_pattern = f"(?s).*(?:{long_run}{detour}).*"
        self._traced = TracedTokenization(self._tokenize_rows, self._tokenize_rows_with_char_offsets)

    @classmethod
    def tokens_to_string(cls, tokens, suffix_indicator="##"):
        """Word pieces as one string, as transformers' `decoders.WordPiece(cleanup=True)` joins them.

        Continuing pieces are glued (`suffix_indicator` dropped), the others
        follow a space, and the spaces before `. ? ! ,` are dropped.

        >>> WordPieceTokenizer.tokens_to_string(["new", "york", "##er", ",", "hi"])
        'new yorker, hi'
        """
        return WordPieceDecoding.tokens_to_string(tokens, suffix_indicator)

    @classmethod
    def piece_starts_word(cls, token, text, start, end):
        """Whether a piece starts a word: WordPiece marks a continuing piece, so its token is longer than its text.

        transformers' pipeline rule for a model with a continuing-subword
        prefix (`##ing` against the `ing` it spans).
        """
        return WordPieceDecoding.piece_starts_word(token, text, start, end)

    @classmethod
    def piece_text(cls, token, suffix_indicator="##"):
        """The text of a piece: without the `##` of a continuation.

        >>> WordPieceTokenizer.piece_text("##ing")
        'ing'
        """
        return WordPieceDecoding.piece_text(token, suffix_indicator)

    def tokenizer_config(self):
        """The options as `tokenizer_config.json` records them; `strip_accents` only where set (None: as lower_case)."""
        config = super().tokenizer_config()
        if self.strip_accents is None:
            del config["strip_accents"]
        return config

    @classmethod
    def read_tokens(cls, files):
        """The tokens of `vocab.txt` (`files["vocab_file"]`), checked to be unique (`load_vocabulary`)."""
        return load_vocabulary(files["vocab_file"])

    @classmethod
    def arguments_from_tokenizer_json(cls, tokenizer, path):
        """`{vocabulary, lower_case, strip_accents, tokenize_chinese_chars}` of a Hugging Face `tokenizer.json`
        (transformers 5 saves no vocab.txt).

        Only BERT's own tokenizer is taken: a `BertNormalizer` that cleans
        text and strips accents only where it lower-cases (its
        `handle_chinese_chars` either way), the `BertPreTokenizer` and a
        WordPiece model with `##` pieces and ids 0..n-1
        (`bert_keras.text.tokenizer_json.wordpiece_arguments`).

        Args:
            tokenizer: the file's JSON value.
            path: str. The file, named in the error.

        Raises:
            TokenizerFileError: anything else, naming the file.
        """
        return wordpiece_arguments(tokenizer, path)

    @_do_not_convert
    def normalize(self, inputs):
        """The normalised text that words are split from; offsets refer to it."""
        return self._normalize(self._check_inputs(inputs))

    def _normalize(self, strings):
        return normalize_text(strings, self.lower_case, self.strip_accents, self.tokenize_chinese_chars)

    @_do_not_convert
    def split_words(self, inputs):
        """Normalises and splits into words (punctuation marks are words of their own).

        Returns:
            A tuple `(words, starts, ends)` of ragged tensors `(batch, words)`:
            the words (strings) and their byte offsets in `normalize(inputs)`.
        """
        text = self.normalize(inputs)
        return tf_text.regex_split_with_offsets(text, _WORD_DELIMITERS, _PUNCTUATION)

    def _exact_path(self, text):
        # text: (batch,) normalised -> ids, starts, ends (batch, words, pieces)
        words, word_starts, word_ends = tf_text.regex_split_with_offsets(
            text, _WORD_DELIMITERS, _PUNCTUATION
        )
        flat = words.flat_values
        too_long = tf.strings.length(flat, unit="UTF8_CHAR") > self.max_chars_per_word
        # The unknown token is a word of the vocabulary: one piece, the unknown id.
        flat = tf.where(too_long, self._matched_unknown_token, flat)
        ids, starts, ends = self._wordpiece.tokenize_with_offsets(flat)
        # starts, ends: (words, pieces) within the word -> within the text. Computed on the pieces' flat values
        # with each piece's word index: broadcasting a (words, 1) tensor against the ragged pieces instead traces
        # some fifty assertions and conditionals (seconds of tracing for every function that tokenizes).
        word = ids.value_rowids()
        word_starts = tf.gather(word_starts.flat_values, word)
        word_ends = tf.gather(word_ends.flat_values, word)
        piece_ends = tf.where(tf.gather(too_long, word), word_ends, ends.flat_values + word_starts)
        return tuple(
            words.with_flat_values(ids.with_flat_values(x))
            for x in (ids.flat_values, starts.flat_values + word_starts, piece_ends)
        )

    def _fast_path(self, text):
        # ids, starts, ends: (batch, (pieces)) -> (batch, words, pieces)
        ids, starts, ends = self._wordpiece_text.tokenize_with_offsets(text)
        starts_word = tf.cast(tf.gather(self._starts_word, ids.flat_values), tf.int64)
        word_index = tf.cumsum(starts_word) - 1
        num_words = tf.reduce_sum(starts_word)
        words_per_text = tf.reduce_sum(ids.with_flat_values(starts_word), axis=1)

        def nest(values):
            pieces = tf.RaggedTensor.from_value_rowids(values, word_index, nrows=num_words, validate=False)
            return tf.RaggedTensor.from_row_lengths(pieces, words_per_text, validate=False)

        return nest(ids.flat_values), nest(starts.flat_values), nest(ends.flat_values)

    def _tokenize_normalized(self, text):
        detour = tf.strings.regex_full_match(text, self._detour_pattern)
        fast = self._fast_path(text)

        def with_detour():
            rows, kept = tf.where(detour)[:, 0], tf.where(~detour)[:, 0]
            exact = self._exact_path(tf.gather(text, rows))
            order = tf.math.invert_permutation(tf.concat([kept, rows], 0))
            return tuple(
                tf.gather(tf.concat([tf.gather(f, kept), e], 0), order) for f, e in zip(fast, exact)
            )

        return tf.cond(tf.reduce_any(detour), with_detour, lambda: fast)

    def _tokenize_rows(self, strings):  # (batch,) -> ids, starts, ends, each (batch, words, pieces)
        return self._tokenize_normalized(self._normalize(strings))

    def _tokenize_rows_with_char_offsets(self, strings):
        ids, starts, ends = self._traced.tokenize_rows(strings)
        return (ids,) + char_offsets(strings, starts, ends, self._normalize)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary": list(self.vocabulary),
                "lower_case": self.lower_case,
                "strip_accents": self.strip_accents,
                "tokenize_chinese_chars": self.tokenize_chinese_chars,
                "suffix_indicator": self.suffix_indicator,
                "max_chars_per_word": self.max_chars_per_word,
            }
        )
        return config
