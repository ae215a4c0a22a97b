"""XLM-RoBERTa's tokenizer as a Keras layer, in the TensorFlow graph: a SentencePiece Unigram model as the `tokenizers`
library runs it from a `tokenizer.json`.

transformers 5 saves XLM-RoBERTa's tokenizer as a `tokenizer.json` only: no
normalizer (or SentencePiece's `Precompiled` one, where the model came from a
`sentencepiece.bpe.model`), `WhitespaceSplit` then `Metaspace` (a "▁" before
every word), a `Unigram` model whose pieces are listed in the model's own id
order (fairseq's: `<s> <pad> </s> <unk>`, the pieces, `<mask>` last), and
RoBERTa's packing (`<s> A </s></s> B </s>`). None of ALBERT's preprocessing
applies (no quote replacement, accents and case kept), and words are cut at
Unicode's White_Space, as Rust's `char::is_whitespace`.

`UnigramTokenizer` is ALBERT's `SentencePieceTokenizer` (tensorflow-text's
SentencePiece op, then the pieces segmented again with the reference's
tie-breaking, `unigram.UnigramSegmenter`, scores added in float64 as
`tokenizers` does) with that preprocessing and that packing.
"""

import keras
import tensorflow as tf

from bert_keras.text import _family_tables as tables
from bert_keras.text._subword import in_ranges, previous_in_row, row_ids
from bert_keras.text._unicode_tables import to_regex_class
from bert_keras.text.sentencepiece import _NUL_STAND_IN, SentencePieceTokenizer
from bert_keras.text.tokenizer_json import xlm_roberta_unigram_arguments

_do_not_convert = tf.autograph.experimental.do_not_convert

_WHITE_SPACE = to_regex_class(tables.WHITE_SPACE_RANGES)


def preprocess_metaspace_text(inputs):
    """The text that SentencePiece encodes for `tokenizers`' `WhitespaceSplit` + `Metaspace`: runs of whitespace
    (Unicode's White_Space) as one space, none at the ends; invalid UTF-8 as U+FFFD, NUL as a private-use stand-in
    (tensorflow-text's op reads a text up to a NUL; both are one unknown character).

    >>> preprocess_metaspace_text(tf.constant(["  Héllo\\t ``World''\\u3000x "])).numpy()[0].decode()
    "Héllo ``World'' x"
    """
    x = tf.strings.unicode_transcode(inputs, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
    x = tf.strings.regex_replace(x, "\\x00", _NUL_STAND_IN)
    x = tf.strings.regex_replace(x, f"{_WHITE_SPACE}+", " ")
    return tf.strings.regex_replace(x, "^ | $", "")


@keras.saving.register_keras_serializable(package="bert_keras")
class UnigramTokenizer(SentencePieceTokenizer):
    """XLM-RoBERTa's SentencePiece Unigram tokenizer: strings to piece ids, in the graph.

    Gives the ids of the `tokenizers` library on the same `tokenizer.json`
    (see the module docstring). Pieces are grouped into words, a word
    starting at a piece that begins with "▁"; character offsets map each
    piece back to the raw string as `SentencePieceTokenizer`'s do. Literal
    special tokens (`"<mask>"`) in the text are tokenized as text.

    Args:
        proto: bytes or str. The serialized SentencePiece model (pieces in
            the model's id order), or the path of one (`unigram.model`, what
            a module pair carries). Kept in the layer's config.
        unknown_token, cls_token, sep_token, pad_token, mask_token: str. The
            special pieces. Default to XLM-RoBERTa's `"<unk>"`, `"<s>"`,
            `"</s>"`, `"<pad>"`, `"<mask>"`.
        float64_scores: bool. Add the scores in float64 as `tokenizers` does.
            Defaults to `True`.

    Call arguments:
        inputs: string tensor `(batch,)` (or a scalar, or `(batch, 1)`).

    Returns:
        An int32 `tf.RaggedTensor` `(batch, words, pieces)`.
    """

    kind = "unigram"
    files = {"unigram_model_file": "unigram.model"}
    file_arguments = {"unigram_model_file": "proto"}
    other_names = {}
    options = {}
    packing = "roberta"
    _words_alone = True

    def __init__(self, proto, unknown_token="<unk>", cls_token="<s>", sep_token="</s>", pad_token="<pad>",
                 mask_token="<mask>", float64_scores=True, **kwargs):
        # ALBERT's options, which this tokenizer has not: what a config of the base class holds.
        kwargs.pop("lower_case", None)
        kwargs.pop("keep_accents", None)
        super().__init__(proto, lower_case=False, keep_accents=True, unknown_token=unknown_token,
                         cls_token=cls_token, sep_token=sep_token, pad_token=pad_token, mask_token=mask_token,
                         float64_scores=float64_scores, **kwargs)

    @classmethod
    def arguments_from_tokenizer_json(cls, tokenizer, path):
        """The arguments of a Hugging Face `tokenizer.json` with XLM-RoBERTa's Unigram model
        (`bert_keras.text.tokenizer_json.xlm_roberta_unigram_arguments`)."""
        return xlm_roberta_unigram_arguments(tokenizer, path)

    @_do_not_convert
    def preprocess(self, inputs):
        """The text SentencePiece encodes (`preprocess_metaspace_text`); byte offsets refer to it."""
        return preprocess_metaspace_text(inputs)

    def _char_output_bytes(self, chars):
        """Bytes of `preprocess`'s output that each raw code point gives: a run of whitespace one space (none at a
        text's ends), NUL its 4-byte stand-in, every other code point its UTF-8."""
        flat, rows = chars.flat_values, row_ids(chars)
        whitespace = in_ranges(flat, tables.WHITE_SPACE_RANGES)
        solid = tf.cast(~whitespace, tf.int64)
        solid_before = tf.cumsum(solid) - tf.gather(tf.cumsum(solid, exclusive=True),
                                                    tf.gather(chars.row_starts(), rows))
        solid_total = tf.gather(tf.math.unsorted_segment_sum(solid, rows, chars.nrows()), rows)
        run_start = whitespace & ~previous_in_row(whitespace, rows, False)
        kept_space = run_start & (solid_before > 0) & (solid_before < solid_total)
        utf8 = 1 + tf.cast(flat >= 0x80, tf.int64) + tf.cast(flat >= 0x800, tf.int64) + tf.cast(flat >= 0x10000,
                                                                                                  tf.int64)
        utf8 = tf.where(flat == 0, tf.constant(4, tf.int64), utf8)
        return tf.where(whitespace, tf.cast(kept_space, tf.int64), utf8)

    def get_config(self):
        config = super().get_config()
        for name in ("lower_case", "keep_accents"):
            config.pop(name)
        return config
