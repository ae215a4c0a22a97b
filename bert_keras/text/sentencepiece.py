"""ALBERT's SentencePiece tokenizer as a Keras layer, in the TensorFlow graph.

ALBERT's own definition (google-research/albert `tokenization.py`, and
transformers' `AlbertTokenizer`): the text is preprocessed in Python — runs of
whitespace collapsed to one space and the ends stripped
(`" ".join(text.split())`), "``" and "''" replaced by '"', then unless
`keep_accents` NFKD with the combining characters dropped, then lower-cased
when `do_lower_case` — and encoded by the `sentencepiece` library with the
checkpoint's `spiece.model`. Here the same preprocessing is done with string
ops and the encoding by tensorflow-text's `SentencepieceTokenizer` (the
`sentencepiece` library's own code, normalisation included).

ALBERT's original `encode_pieces` (and transformers' slow tokenizer up to
v4) also split a piece ending in "<digit>," into the digits and ",". That rule
is not applied: transformers' `AlbertTokenizer` (v5, `tokenizers`-backed, the
`AlbertTokenizerFast` of v4), TF Hub's `albert_en_preprocess` and keras-hub's
`AlbertTokenizer` all encode without it, so it is not what the models are
used with today.
"""

import base64
import os

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_keras.text import _family_tables as tables
from bert_keras.text._subword import byte_to_char_spans, in_ranges, nest_words, previous_in_row, row_ids
from bert_keras.text.base import Tokenizer, TokenizerFileError, TracedTokenization, check_bool, read_file_bytes
from bert_keras.text._unicode_tables import to_regex_class
from bert_keras.text.decoding import WORD_START, SentencePieceDecoding
from bert_keras.text.tokenizer_json import unigram_arguments
from bert_keras.text._model_proto import check_charsmap, model_charsmaps, read_pieces
from bert_keras.text.unigram import UnigramSegmenter

_do_not_convert = tf.autograph.experimental.do_not_convert

_WHITESPACE = to_regex_class(tables.PY_WHITESPACE_RANGES)
_COMBINING = to_regex_class(tables.COMBINING_RANGES)
_WORD_START = WORD_START
_NUL_STAND_IN = "\U0010fffd"


def preprocess_albert_text(inputs, lower_case=True, keep_accents=False):
    """ALBERT's text preprocessing on a string tensor, as its Python `preprocess_text` does it.

    Args:
        inputs: string tensor `(batch,)`. Invalid UTF-8 becomes U+FFFD.
        lower_case: bool. Lower-case (`do_lower_case`). Defaults to `True`.
        keep_accents: bool. Skip NFKD and the dropping of combining
            characters. Defaults to `False`.

    Returns:
        A string tensor of the same shape.

    Example:
    >>> preprocess_albert_text(tf.constant(["  Héllo\\t ``World''  "])).numpy()[0].decode()
    'hello "world"'
    """
    x = tf.strings.unicode_transcode(inputs, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
    # NFKD and tensorflow-text's SentencePiece op read a text only up to a NUL, which the `sentencepiece` library
    # encodes as an unknown character: a private-use one (in no vocabulary, left alone by NFKD and SentencePiece's
    # normalisation) stands in for it.
    x = tf.strings.regex_replace(x, "\\x00", _NUL_STAND_IN)
    x = tf.strings.regex_replace(x, f"{_WHITESPACE}+", " ")
    x = tf.strings.regex_replace(x, "^ | $", "")
    x = tf.strings.regex_replace(x, "``|''", '"')
    if not keep_accents:
        x = tf_text.normalize_utf8(x, "NFKD")
        x = tf.strings.regex_replace(x, _COMBINING, "")
    if lower_case:
        x = tf.strings.lower(x, encoding="utf-8")
    return x


def _char_output_bytes(chars, lower_case, keep_accents):
    """Bytes of the preprocessed text that each raw code point gives, for a ragged `(batch, chars)` of code points.

    Whitespace and the quote pairs depend on their neighbours (a run gives one
    space, or none at the ends; "``" gives one '"', owned by its first
    quote); every other code point gives what it gives alone.
    """
    flat, rows = chars.flat_values, row_ids(chars)
    whitespace = in_ranges(flat, tables.PY_WHITESPACE_RANGES)
    # A run of whitespace gives one space, unless it is at the start or the end of its text.
    solid = tf.cast(~whitespace, tf.int64)
    solid_before = tf.cumsum(solid) - tf.gather(tf.cumsum(solid, exclusive=True), tf.gather(chars.row_starts(), rows))
    solid_total = tf.gather(tf.math.unsorted_segment_sum(solid, rows, chars.nrows()), rows)
    run_start = whitespace & ~previous_in_row(whitespace, rows, False)
    kept_space = run_start & (solid_before > 0) & (solid_before < solid_total)
    # In a run of backquotes (or of quotes), every second one is merged into the '"' of the one before.
    quote = (flat == ord("`")) | (flat == ord("'"))
    starts_run = quote & (previous_in_row(flat, rows, -1) != flat)
    run = tf.cumsum(tf.cast(starts_run, tf.int64)) - 1
    positions = tf.range(tf.size(flat, tf.int64))
    num_runs = tf.maximum(tf.reduce_max(tf.concat([[0], run + 1], 0)), 1)
    run_first = tf.math.unsorted_segment_min(positions, tf.where(quote, run, -1), num_runs)
    merged = quote & ((positions - tf.gather(run_first, tf.maximum(run, 0))) % 2 == 1)
    # Every other code point: its own preprocessing, computed once per distinct code point.
    unique, index = tf.unique(flat)
    alone = preprocess_albert_text(tf.strings.unicode_encode(unique[:, None], "UTF-8"), lower_case, keep_accents)
    alone_bytes = tf.cast(tf.gather(tf.strings.length(alone), index), tf.int64)
    return tf.where(whitespace, tf.cast(kept_space, tf.int64), tf.where(merged, tf.constant(0, tf.int64), alone_bytes))


def _ends_with(text, rows, end, body, body_bytes):
    """Whether each `body` is the `body_bytes` bytes of `text[rows]` that end at byte `end`.

    `tf.strings.substr(tf.gather(text, rows), end - body_bytes, body_bytes) == body`, compared byte for byte in one
    flat array of the texts' bytes: gathering a copy of its text for every piece made memory grow with the square of
    a text's length (a line of 62,500 characters took 4.3 GB).
    """
    text_bytes = tf.cast(tf.strings.length(text), tf.int64)
    # (bytes of all texts + 1,): the byte added keeps every index clipped below valid, texts empty or not.
    all_text = tf.io.decode_raw(tf.strings.reduce_join(tf.concat([text, ["\0"]], 0)), tf.uint8)
    all_body = tf.io.decode_raw(tf.strings.reduce_join(body), tf.uint8)  # (bytes of all bodies,)
    begin = tf.maximum(end - body_bytes, 0)
    fits = begin + body_bytes <= tf.gather(text_bytes, rows)
    begin += tf.gather(tf.cumsum(text_bytes, exclusive=True), rows)  # in the flat array
    at = tf.ragged.range(begin, begin + body_bytes)  # (pieces, body bytes)
    equal = tf.gather(all_text, tf.clip_by_value(at.flat_values, 0, tf.size(all_text, tf.int64) - 1)) == all_body
    return fits & tf.reduce_all(at.with_flat_values(equal), axis=1)


def _input_bytes(text, pieces, starts, ends, chars, first_char, end_char):
    """Byte offsets in `text` of pieces given as character positions in the normalised text.

    tensorflow-text's pieces map the normalised text to `text` at their
    boundaries. Inside one of them, a position maps byte for byte (counted
    from its end) where the piece's characters, "▁" left out, are the last
    bytes of its span; where normalisation changed them, a piece starting
    (ending) inside takes that piece's start (end).
    """
    char_bytes = tf.cast(tf.strings.length(chars.flat_values), tf.int64)
    char_rows = row_ids(chars)
    # Normalised byte position of every character start, and of each row's end, in one flat space.
    before = tf.cumsum(char_bytes, exclusive=True)
    row_end = tf.cumsum(tf.math.unsorted_segment_sum(char_bytes, char_rows, chars.nrows()))

    def normalised(position_rows, position):
        at = tf.gather(chars.row_starts(), position_rows) + position
        inside = at < tf.gather(chars.row_limits(), position_rows)
        return tf.where(inside, tf.gather(before, tf.minimum(at, tf.size(before, tf.int64) - 1)), tf.gather(row_end, position_rows))

    new_rows = row_ids(first_char)
    new_first = normalised(new_rows, first_char.flat_values)
    new_end = normalised(new_rows, end_char.flat_values)
    # tensorflow-text's pieces, in the same flat space.
    piece_rows = row_ids(pieces)
    piece_bytes = tf.cast(tf.strings.length(pieces.flat_values), tf.int64)
    piece_end = tf.cumsum(piece_bytes)
    piece_first = piece_end - piece_bytes
    old_start = tf.cast(starts.flat_values, tf.int64)
    old_end = tf.cast(ends.flat_values, tf.int64)

    first_piece = tf.searchsorted(piece_first, new_first, side="right", out_type=tf.int64) - 1
    first_piece = tf.clip_by_value(first_piece, 0, tf.size(piece_first, tf.int64) - 1)
    inside_first = new_first != tf.gather(piece_first, first_piece)
    last_piece = tf.searchsorted(piece_end, new_end, side="left", out_type=tf.int64)
    last_piece = tf.clip_by_value(last_piece, 0, tf.size(piece_end, tf.int64) - 1)
    inside_last = new_end != tf.gather(piece_end, last_piece)
    # Whether a piece's characters are its span's last bytes, asked only of the pieces a position falls inside
    # (none where the pieces are tensorflow-text's own, as in most texts).
    asked = tf.concat([tf.boolean_mask(first_piece, inside_first), tf.boolean_mask(last_piece, inside_last)], 0)
    body = tf.strings.regex_replace(tf.gather(pieces.flat_values, asked), "^" + _WORD_START, "")
    body_bytes = tf.cast(tf.strings.length(body), tf.int64)
    asked_end = tf.gather(old_end, asked)
    answer = (asked_end - tf.gather(old_start, asked) >= body_bytes) & _ends_with(
        text, tf.gather(piece_rows, asked), asked_end, body, body_bytes
    )
    same = tf.tensor_scatter_nd_update(tf.zeros_like(old_end, tf.bool), asked[:, None], answer)

    mapped = tf.gather(old_end, first_piece) - (tf.gather(piece_end, first_piece) - new_first)
    byte_start = tf.where(inside_first & tf.gather(same, first_piece), mapped, tf.gather(old_start, first_piece))
    mapped = tf.gather(old_end, last_piece) - (tf.gather(piece_end, last_piece) - new_end)
    byte_end = tf.where(inside_last & tf.gather(same, last_piece), mapped, tf.gather(old_end, last_piece))
    return byte_start, byte_end


def _read_proto(proto):
    if isinstance(proto, (bytes, bytearray)):
        return bytes(proto)
    if isinstance(proto, (str, os.PathLike)) and tf.io.gfile.exists(os.fspath(proto)):
        return read_file_bytes(proto)
    raise ValueError(
        "Received an invalid value for argument `proto`, expected the bytes of a SentencePiece model or the "
        f"path of a spiece.model file that exists. Received: proto={proto!r:.80}"
    )


def _read_scores(scores):
    """`scores` as a list of float (None stays None): a list of numbers, or their float64 bytes in base64."""
    if scores is None:
        return None
    if isinstance(scores, str):
        return np.frombuffer(base64.b64decode(scores), "<f8").tolist()
    return [float(score) for score in scores]


def _refused(file, reason):
    """The error for a model that cannot be read: naming its file where it came from one, else the argument."""
    if file is not None:
        return TokenizerFileError(file, f"{reason}.")
    return ValueError(f"Received an invalid value for argument `proto`: it {reason}")


@keras.saving.register_keras_serializable(package="bert_keras")
class SentencePieceTokenizer(Tokenizer):
    """ALBERT's SentencePiece tokenizer: strings to piece ids, in the graph.

    Gives the ids of ALBERT's definition (its text preprocessing, then the
    `sentencepiece` library's `encode` with the same `spiece.model`); see the
    module docstring for the one rule of ALBERT's original code left out.
    Pieces are grouped into words: a word starts at a piece beginning with
    "▁". The reference's matching of literal special tokens such as
    `"[MASK]"` in the text is not reproduced: they are tokenized as text.

    Character offsets (`tokenize_with_char_offsets`) map each piece back to
    the raw string through the preprocessing, code point by code point: a
    piece spans the raw code points whose preprocessed bytes it holds, the
    code points that give nothing right after it (a combining accent), and
    no whitespace or invisible (Cc, Cf) code point at either end. Pieces
    of one raw character that NFKD expands ("ﬁ" -> "f", "i") share its span.
    Limits: where NFKD reorders combining marks under `keep_accents`, or
    lower-casing is context dependent (a final capital sigma), the bytes
    are counted per code point, so a span may be off by one code point
    inside such a sequence.

    Args:
        proto: bytes or str. The serialized SentencePiece model, or the path
            of a `spiece.model`. Kept in the layer's config (base64), so
            saved models carry it. A model whose pieces are not UTF-8, repeat,
            or run past `unigram.MAX_PIECE_CHARS` (64) characters is refused,
            naming the file (`TokenizerFileError`) where a path is given.
        lower_case: bool. `do_lower_case`. Defaults to `True`.
        keep_accents: bool. Skip NFKD and accent stripping. Defaults to `False`.
        unknown_token, cls_token, sep_token, pad_token, mask_token: str. The
            special pieces, as in ALBERT's vocabulary. Default to `"<unk>"`,
            `"[CLS]"`, `"[SEP]"`, `"<pad>"`, `"[MASK]"`.
        float64_scores: bool. Add the pieces' scores in float64 as Hugging
            Face's `tokenizers` does (a model read from a `tokenizer.json`)
            rather than in float32 as the `sentencepiece` library does; they
            break a few ties apart. Defaults to `False`.
        scores: optional list of float (or their float64 bytes, base64). The
            pieces' scores where they are finer than the model's float32 (a
            `tokenizer.json` of a model trained by `tokenizers`). Defaults to
            the model's.

    Call arguments:
        inputs: string tensor `(batch,)` (or a scalar, or `(batch, 1)`).

    Returns:
        An int32 `tf.RaggedTensor` `(batch, words, pieces)`.
    """

    kind = "sentencepiece"
    files = {"sp_model_file": "spiece.model"}
    file_arguments = {"sp_model_file": "proto"}
    # google-research/albert's tars name the model `30k-clean.model`.
    other_names = {"spiece.model": ("30k-clean.model",)}
    options = {"do_lower_case": "lower_case", "keep_accents": "keep_accents"}
    word_start_mark = _WORD_START
    tokenizer_json_model = "Unigram"
    # Whether words are segmented alone (`unigram.UnigramSegmenter`'s `words_alone`): the sentencepiece library's
    # whole text here, the `tokenizers` library's words in `UnigramTokenizer`.
    _words_alone = False

    def __init__(
        self,
        proto,
        lower_case=True,
        keep_accents=False,
        unknown_token="<unk>",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="<pad>",
        mask_token="[MASK]",
        float64_scores=False,
        scores=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.lower_case = check_bool("lower_case", lower_case)
        self.keep_accents = check_bool("keep_accents", keep_accents)
        self.float64_scores = check_bool("float64_scores", float64_scores)
        file = os.fspath(proto) if isinstance(proto, (str, os.PathLike)) else None
        self.proto = _read_proto(proto)
        self._set_plain(_scores=_read_scores(scores))
        try:
            vocabulary = [piece for piece, _, _ in read_pieces(self.proto)]
            for charsmap in model_charsmaps(self.proto):  # before the op, which trusts it
                check_charsmap(charsmap)
            tf_text.SentencepieceTokenizer(model=self.proto, out_type=tf.int32).vocab_size()
        except (ValueError, tf.errors.InvalidArgumentError, tf.errors.InternalError) as error:
            raise _refused(file, f"is not a SentencePiece model ({str(error).splitlines()[0][:300]})") from error
        try:
            self._segmenter = UnigramSegmenter(self.proto, float64=self.float64_scores, scores=self._scores,
                                               words_alone=self._words_alone)
        except ValueError as error:
            raise _refused(file, f"is not an ALBERT SentencePiece model ({error})") from error
        self._set_vocabulary(
            vocabulary,
            unknown_token=unknown_token,
            cls_token=cls_token,
            sep_token=sep_token,
            pad_token=pad_token,
            mask_token=mask_token,
        )
        self._starts_word = tf.constant([piece.startswith(_WORD_START) for piece in self.vocabulary])
        self._traced = TracedTokenization(self._tokenize_rows, self._tokenize_rows_with_char_offsets)

    @classmethod
    def tokens_to_string(cls, tokens, suffix_indicator="##"):
        """Pieces as one string, as transformers' SentencePiece decoder joins them: "▁" read as a space, the first
        one dropped.

        >>> SentencePieceTokenizer.tokens_to_string(["\u2581new", "\u2581york", "er"])
        'new yorker'
        """
        return SentencePieceDecoding.tokens_to_string(tokens, suffix_indicator)

    @classmethod
    def piece_text(cls, token):
        """The text of a piece: without the "▁" (U+2581) that starts a word.

        >>> SentencePieceTokenizer.piece_text("\u2581the")
        'the'
        """
        return SentencePieceDecoding.piece_text(token)

    @classmethod
    def read_tokens(cls, files):
        """The pieces of `spiece.model` (`files["sp_model_file"]`), read without building the tokenizer.

        Raises:
            TokenizerFileError: a truncated or foreign file, a piece not UTF-8
                or too long, naming the file.
        """
        path = files[next(iter(cls.files))]
        proto = read_file_bytes(path)
        try:
            return [piece for piece, _, _ in read_pieces(proto)]
        except ValueError as error:
            raise TokenizerFileError(path, f"is not a SentencePiece model ({error}).") from error

    @classmethod
    def arguments_from_tokenizer_json(cls, tokenizer, path):
        """The arguments of a Hugging Face `tokenizer.json` with ALBERT's Unigram model (transformers 5 saves no
        spiece.model): a SentencePiece model written from its pieces, scores and charsmap
        (`bert_keras.text.tokenizer_json.unigram_arguments`)."""
        return unigram_arguments(tokenizer, path)

    @_do_not_convert
    def preprocess(self, inputs):
        """ALBERT's preprocessing of `inputs`: the text SentencePiece encodes; byte offsets refer to it."""
        return preprocess_albert_text(inputs, self.lower_case, self.keep_accents)

    def _tokenize_rows(self, strings):
        # The model is made inside the traced function: tensorflow-text's model is a resource owned by its op's
        # kernel, and an eager one is destroyed whenever the eager kernel cache is cleared (`tf.random.set_seed`,
        # `keras.utils.set_random_seed`), after which every call failed with "Resource ... does not exist".
        model = tf_text.SentencepieceTokenizer(model=self.proto, out_type=tf.string)
        text = self.preprocess(strings)
        # tensorflow-text's pieces (as strings: an unknown piece is its normalised characters) spell the
        # normalised text; it is segmented again with the `sentencepiece` library's tie-breaking (`unigram.py`).
        pieces, starts, ends = model.tokenize_with_offsets(text)
        ids, first_char, end_char, chars = self._segmenter.resegment(pieces)
        byte_starts, byte_ends = _input_bytes(text, pieces, starts, ends, chars, first_char, end_char)
        flat_ids = ids.flat_values
        row_first = tf.concat([[True], row_ids(ids)[1:] != row_ids(ids)[:-1]], 0)
        starts_word = tf.gather(self._starts_word, flat_ids) | row_first
        return tuple(nest_words(starts_word, ids.row_lengths(), [flat_ids, byte_starts, byte_ends]))

    def _tokenize_rows_with_char_offsets(self, strings):
        ids, starts, ends = self._traced.tokenize_rows(strings)
        chars = tf.strings.unicode_decode(strings, "UTF-8", errors="replace", replacement_char=0xFFFD)
        char_bytes = self._char_output_bytes(chars)
        blank = in_ranges(chars.flat_values, tables.BLANK_RANGES)
        piece_rows = tf.gather(row_ids(ids), row_ids(ids.values))
        first, end = byte_to_char_spans(
            char_bytes, row_ids(chars), chars.nrows(), piece_rows, starts.flat_values, ends.flat_values, blank
        )
        return ids, starts.with_flat_values(first), ends.with_flat_values(end)

    def _char_output_bytes(self, chars):
        """Bytes of `preprocess`'s output that each raw code point gives (`chars`: a ragged `(batch, chars)`)."""
        return _char_output_bytes(chars, self.lower_case, self.keep_accents)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "proto": base64.b64encode(self.proto).decode("ascii"),
                "lower_case": self.lower_case,
                "keep_accents": self.keep_accents,
                "float64_scores": self.float64_scores,
            }
        )
        if self._scores is not None:  # float64, exactly: as little-endian bytes
            config["scores"] = base64.b64encode(np.asarray(self._scores, "<f8").tobytes()).decode("ascii")
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("proto"), str):
            config["proto"] = base64.b64decode(config["proto"])
        return cls(**config)
