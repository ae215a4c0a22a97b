"""DeBERTa-v3's tokenizer as a Keras layer, in the TensorFlow graph: its SentencePiece Unigram model as the `tokenizers`
library runs it from the `tokenizer.json` transformers 5 writes for `DebertaV2Tokenizer`.

That file (converted from the checkpoint's `spm.model`) holds: a normalizer
`Sequence` of SentencePiece's `Precompiled` charsmap (`nmt_nfkc`), `Strip`
(right only) and `Replace(" {2,}", " ")`; a `Metaspace` pre-tokenizer (a "▁"
before every word, words cut at spaces only, `prepend_scheme` "always"); a
`Unigram` model whose pieces start `[PAD] [CLS] [SEP] [UNK]` (ids 0-3);
`[MASK]` as a special added token past the model's pieces (128000 in the
real checkpoints); and BERT's packing (`[CLS] A [SEP] B [SEP]`, its
`TemplateProcessing`).

`DebertaV3Tokenizer` is XLM-RoBERTa's `UnigramTokenizer` (tensorflow-text's
SentencePiece op normalising with the same charsmap, then each word searched
alone with the scores added in float64, as `tokenizers` does) with DeBERTa's
preprocessing, special tokens and packing. The charsmap makes every
whitespace character but U+0085 a space and drops control characters, so no
whitespace is cut before it (XLM-RoBERTa's `WhitespaceSplit` would make a
vertical tab a word boundary, which the charsmap deletes); only the right
`Strip` is done first, on the raw text, where it gives the same text.

One rule of the reference's `Precompiled` normalizer is kept too: it maps a
text grapheme by grapheme, and a grapheme of fewer than 6 bytes whose start
the charsmap maps becomes that start's mapping whole, so U+FFFD (which the
charsmap makes a space) followed by one combining mark of two bytes loses the
mark, where SentencePiece keeps it (mojibake: 1.1% of 20,000 tweets). The
rule for other mapped characters (fullwidth forms, ligatures followed by a
combining mark) is not reproduced.
"""

import struct
import unicodedata


import keras
import tensorflow as tf

from bert_keras.text import _family_tables as tables
from bert_keras.text._model_proto import _CONTROL, read_pieces
from bert_keras.text._subword import in_ranges, next_in_row, previous_in_row, row_ids
from bert_keras.text._unicode_tables import to_regex_class
from bert_keras.text.sentencepiece import _NUL_STAND_IN
from bert_keras.text.base import read_file_bytes
from bert_keras.text.tokenizer_json import (
    _bytes_field, _object, _varint, _precompiled, _refuse, _type, _unigram_model, unigram_scores, write_model_proto)
from bert_keras.text.unigram_tokenizer import UnigramTokenizer

_do_not_convert = tf.autograph.experimental.do_not_convert


def merge_ranges(code_points):
    """Sorted code points as `(first, last)` ranges of consecutive ones.

    >>> merge_ranges([1, 2, 3, 7, 9, 10])
    ((1, 3), (7, 7), (9, 10))
    """
    ranges = []
    for c in code_points:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return tuple((first, last) for first, last in ranges)


_WHITE_SPACE = to_regex_class(tables.WHITE_SPACE_RANGES)
# Combining marks of two bytes in UTF-8 (Mn, Me below U+0800): what U+FFFD drops as its grapheme's one extender.
_SMALL_MARK_RANGES = merge_ranges(c for c in range(0x300, 0x800) if unicodedata.category(chr(c)) in ("Mn", "Me"))
_SMALL_MARK = to_regex_class(_SMALL_MARK_RANGES)
# What extends a grapheme (approximately Unicode's Extend and SpacingMark): marks, ZWJ, emoji skin tones.
_EXTENDER = "[\\p{M}\\x{200D}\\x{1F3FB}-\\x{1F3FF}]"
# What nmt_nfkc's charsmap makes a space besides White_Space: U+FFFD, zero-width space and non-joiner, BOM.
_SPACED = ((0x200B, 0x200C), (0xFEFF, 0xFEFF), (0xFFFD, 0xFFFD))
_EXPECTED_NORMALIZER = "Precompiled, Strip (right), Replace ' {2,}' by ' '"


def _with_mask(proto, mask_token):
    """`proto` (bytes, or the path of `spm.model`) with `mask_token` as a control piece after its pieces where it has
    none, as transformers adds `[MASK]` to DeBERTa-v3's model (id 128000); as given where it cannot be read (the
    tokenizer refuses it, naming the file)."""
    try:
        data = bytes(proto) if isinstance(proto, (bytes, bytearray)) else read_file_bytes(proto)
        pieces = read_pieces(data)
    except (ValueError, TypeError, OSError, tf.errors.OpError):
        return proto
    if any(piece == mask_token for piece, _, _ in pieces):
        return data
    # A repeated field's entries may follow the message's other fields: one more `pieces` entry appended.
    body = _bytes_field(1, mask_token.encode("utf-8")) + _varint(2 << 3 | 5) + struct.pack("<f", 0.0)
    return data + _bytes_field(1, body + _varint(3 << 3) + _varint(_CONTROL))


def preprocess_deberta_text(inputs):
    """What DeBERTa-v3's normalizer does before its charsmap would, on a string tensor: whitespace (Unicode's
    White_Space) at the end stripped; invalid UTF-8 as U+FFFD, NUL as a private-use stand-in (tensorflow-text's op
    reads a text up to a NUL; both are one unknown character). Everything else is left to SentencePiece's
    normalisation, which collapses and trims spaces as the file's `Replace` and `Metaspace` do.

    >>> preprocess_deberta_text(tf.constant(["  Héllo\\x0bwörld \\x85\\t"])).numpy()[0].decode()
    '  Héllo\\x0bwörld'
    """
    x = tf.strings.unicode_transcode(inputs, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
    x = tf.strings.regex_replace(x, "\\x00", _NUL_STAND_IN)
    # U+FFFD and one small mark, the grapheme's last character: the mark dropped. A match takes the character after
    # it: twice, so that one starting there is found too.
    for _ in range(2):
        x = tf.strings.regex_replace(x, f"\\x{{FFFD}}{_SMALL_MARK}([^{_EXTENDER[1:-1]}]|$)", "\ufffd\\1")
    return tf.strings.regex_replace(x, f"{_WHITE_SPACE}+$", "")


def _deberta_normalizer(tokenizer, path):
    """The charsmap of DeBERTa-v3's normalizer: `Precompiled`, `Strip` of the right end, `Replace(" {2,}", " ")`,
    in that order (transformers 5's `DebertaV2Tokenizer` from a SentencePiece model)."""
    normalizer = tokenizer.get("normalizer")
    _type(normalizer, path, "normalizer", ("Sequence",))
    steps = normalizer.get("normalizers")
    if not isinstance(steps, list) or len(steps) != 3:
        found = [step.get("type") if isinstance(step, dict) else step for step in steps or []][:6]
        hint = " (do_lower_case: a cased model only)" if "Lowercase" in found else ""
        raise _refuse(path, "normalizer.normalizers", f"expected DeBERTa-v3's normalizer ({_EXPECTED_NORMALIZER}), "
                      f"found {found!r:.200}{hint}: the in-graph tokenizer cannot reproduce another.")
    strip, replace = steps[1], steps[2]
    if not (isinstance(steps[0], dict) and steps[0].get("type") == "Precompiled"):
        raise _refuse(path, "normalizer.normalizers[0]", f"expected DeBERTa-v3's normalizer ({_EXPECTED_NORMALIZER}).")
    if not (isinstance(strip, dict) and strip.get("type") == "Strip" and strip.get("strip_left") is False
            and strip.get("strip_right") is True):
        raise _refuse(path, "normalizer.normalizers[1]", "expected Strip of the right end only.")
    if replace != {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}:
        raise _refuse(path, "normalizer.normalizers[2]", "expected Replace of ' {2,}' by ' '.")
    return _precompiled(steps[0], path, "normalizer.normalizers[0]")


def _deberta_pre_tokenizer(tokenizer, path):
    """A `Metaspace` ("▁", prepend_scheme "always", split), alone or as the one step of a `Sequence`; a
    `Punctuation` step (`split_by_punct`) is refused."""
    pre = tokenizer.get("pre_tokenizer")
    part = "pre_tokenizer"
    if isinstance(pre, dict) and pre.get("type") == "Sequence":
        steps = pre.get("pretokenizers")
        if not isinstance(steps, list) or len(steps) != 1:
            raise _refuse(path, "pre_tokenizer.pretokenizers", "expected a Metaspace alone (split_by_punct false): "
                          "the in-graph tokenizer cannot reproduce another step.")
        pre, part = steps[0], "pre_tokenizer.pretokenizers[0]"
    _type(pre, path, part, ("Metaspace",))
    if pre.get("replacement") != "\u2581" or pre.get("prepend_scheme", "always") != "always" or pre.get(
            "split", True) is not True:
        raise _refuse(path, part, "expected replacement '\u2581', prepend_scheme 'always' and split true.")


def deberta_unigram_arguments(tokenizer, path):
    """`DebertaV3Tokenizer`'s arguments (`proto`, `scores` and the special tokens) of DeBERTa-v3's `tokenizer.json`.

    Taken: DeBERTa-v3's normalizer (`_deberta_normalizer`), its `Metaspace`
    pre-tokenizer, a `Unigram` model without byte fallback, and special added
    tokens that are its pieces or follow them (`[MASK]`, written as a control
    piece: never found in text, as the reference's model has no such piece).
    Literal special tokens in the text are read as text (the reference's
    `encode_special_tokens`).

    Raises:
        TokenizerFileError: anything else, naming the file and the part.
    """
    tokenizer = _object(tokenizer, path, "the file")
    _type(tokenizer.get("model"), path, "model", ("Unigram",))
    charsmap = _deberta_normalizer(tokenizer, path)
    _deberta_pre_tokenizer(tokenizer, path)
    vocab = tokenizer["model"].get("vocab")
    size = len(vocab) if isinstance(vocab, list) else 0
    added = tokenizer.get("added_tokens") if isinstance(tokenizer.get("added_tokens"), list) else []
    after = sorted((entry for entry in added if isinstance(entry, dict) and isinstance(entry.get("id"), int)
                    and entry["id"] >= size), key=lambda entry: entry["id"])
    if [entry["id"] for entry in after] != list(range(size, size + len(after))):
        raise _refuse(path, "added_tokens", f"expected the tokens added past the model's {size} pieces to follow them "
                      f"(ids {size}, {size + 1}, ...), found ids {[entry.get('id') for entry in after]!r:.200}.")
    if any(entry.get("special") is not True or not isinstance(entry.get("content"), str) for entry in after):
        raise _refuse(path, "added_tokens", "a token added past the model's pieces is not special: the reference "
                      "matches it in the raw text, which the in-graph tokenizer does not reproduce.")
    extra = [entry["content"] for entry in after]
    model = dict(tokenizer["model"], vocab=list(vocab) + [[token, 0.0] for token in extra])
    arguments = _unigram_model(dict(tokenizer, model=model), path, charsmap, control_specials=False)
    # The added tokens past the pieces become control pieces: the reference's model never finds them in text.
    pieces = [(piece, score, _CONTROL if i >= size else kind)
              for i, (piece, score, kind) in enumerate(read_pieces(arguments["proto"]))]
    arguments["proto"] = write_model_proto(pieces, charsmap)
    scores = unigram_scores(vocab) + [0.0] * len(extra)
    return dict(arguments, scores=scores)


@keras.saving.register_keras_serializable(package="bert_keras")
class DebertaV3Tokenizer(UnigramTokenizer):
    """DeBERTa-v3's SentencePiece Unigram tokenizer: strings to piece ids, in the graph.

    Gives the ids of the `tokenizers` library on the `tokenizer.json`
    transformers 5 writes for `DebertaV2Tokenizer` (see the module
    docstring), literal special tokens read as text. Pieces are grouped into
    words, a word starting at a piece that begins with "▁"; character offsets
    map each piece back to the raw string.

    Args:
        proto: bytes or str. The serialized SentencePiece model (`[MASK]` a
            control piece after the model's own), or the path of one.
        unknown_token, cls_token, sep_token, pad_token, mask_token: str.
            Default to `"[UNK]"`, `"[CLS]"`, `"[SEP]"`, `"[PAD]"`, `"[MASK]"`.
        **kwargs: `UnigramTokenizer`'s other arguments (`scores`, `name`).

    Call arguments:
        inputs: string tensor `(batch,)` (or a scalar, or `(batch, 1)`).

    Returns:
        An int32 `tf.RaggedTensor` `(batch, words, pieces)`.
    """

    kind = "deberta_unigram"
    # The checkpoint's own SentencePiece model (read where the folder has no tokenizer.json's source before it).
    files = {"spm_model_file": "spm.model"}
    file_arguments = {"spm_model_file": "proto"}
    packing = "bert"

    def __init__(self, proto, unknown_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                 mask_token="[MASK]", **kwargs):
        super().__init__(_with_mask(proto, mask_token), unknown_token=unknown_token, cls_token=cls_token,
                         sep_token=sep_token, pad_token=pad_token, mask_token=mask_token, **kwargs)

    @classmethod
    def read_tokens(cls, files):
        """The pieces of `spm.model`, and `[MASK]` after them where it lacks one (as transformers adds it)."""
        tokens = super().read_tokens(files)
        return tokens if "[MASK]" in tokens else tokens + ["[MASK]"]

    @classmethod
    def arguments_from_tokenizer_json(cls, tokenizer, path):
        """The arguments of DeBERTa-v3's `tokenizer.json` (`deberta_unigram_arguments`)."""
        return deberta_unigram_arguments(tokenizer, path)

    @_do_not_convert
    def preprocess(self, inputs):
        """The text SentencePiece encodes (`preprocess_deberta_text`); byte offsets refer to it."""
        return preprocess_deberta_text(inputs)

    def _tokenize_rows_with_char_offsets(self, strings):
        """As `UnigramTokenizer`'s, with the `tokenizers` library's offsets: a piece starting a word after spaces (a
        "▁" the text's space became) starts at the last character of the run that became that space (what
        transformers' pipelines give as an entity's start), and a "▁" alone put before a text spans its first
        character."""
        ids, starts, ends = super()._tokenize_rows_with_char_offsets(strings)
        chars = tf.strings.unicode_decode(strings, "UTF-8", errors="replace", replacement_char=0xFFFD)
        flat = chars.flat_values
        spaced = in_ranges(flat, tables.WHITE_SPACE_RANGES) | in_ranges(flat, _SPACED)
        solid_at = tf.where(~spaced)[:, 0]  # flat positions of the characters that do not become a space
        rows = tf.gather(row_ids(ids), row_ids(ids.values))
        row_start, row_end = tf.gather(chars.row_starts(), rows), tf.gather(chars.row_limits(), rows)
        first, end = starts.flat_values + row_start, ends.flat_values + row_start
        # The piece's first character that is not a space (its end where it has none), and the one before it.
        solid = tf.gather(tf.concat([solid_at, [tf.size(flat, tf.int64)]], 0),
                          tf.searchsorted(solid_at, first, side="left", out_type=tf.int64))
        solid = tf.minimum(solid, end)
        before = solid - 1
        is_space = (before >= row_start) & tf.gather(tf.concat([spaced, [False]], 0),
                                                     tf.clip_by_value(before, 0, tf.size(flat, tf.int64)))
        word = tf.gather(self._starts_word, ids.flat_values)
        moved = tf.where(word & is_space, before, first)
        # A "▁" alone before the text: the reference gives it the first character's span.
        alone = word & tf.equal(tf.gather(tf.constant(self.vocabulary), ids.flat_values), "\u2581") & (end == first)
        end = tf.where(alone & ~is_space, tf.minimum(end + 1, row_end), end)
        return ids, starts.with_flat_values(moved - row_start), ends.with_flat_values(end - row_start)

    def _char_output_bytes(self, chars):
        """Bytes of `preprocess`'s output that each raw code point gives: whitespace at a text's end none, NUL its
        4-byte stand-in, every other code point its UTF-8."""
        flat, rows = chars.flat_values, row_ids(chars)
        whitespace = in_ranges(flat, tables.WHITE_SPACE_RANGES)
        solid = tf.cast(~whitespace, tf.int64)
        solid_after = tf.gather(tf.math.unsorted_segment_sum(solid, rows, chars.nrows()), rows) - (
            tf.cumsum(solid) - tf.gather(tf.cumsum(solid, exclusive=True), tf.gather(chars.row_starts(), rows)))
        utf8 = 1 + tf.cast(flat >= 0x80, tf.int64) + tf.cast(flat >= 0x800, tf.int64) + tf.cast(flat >= 0x10000,
                                                                                                  tf.int64)
        utf8 = tf.where(flat == 0, tf.constant(4, tf.int64), utf8)
        following = tf.strings.unicode_encode(next_in_row(flat, rows, 0x20)[:, None], "UTF-8")
        dropped = (in_ranges(flat, _SMALL_MARK_RANGES) & (previous_in_row(flat, rows, 0) == 0xFFFD)
                   & ~tf.strings.regex_full_match(following, _EXTENDER))
        return tf.where((whitespace & (solid_after == 0)) | dropped, tf.constant(0, tf.int64), utf8)
