"""The one registry of the family's tokenizers: kind -> class.

A kind is the name an export's manifest, a checkpoint reader and a Hub
module's assets record (`"wordpiece"`, `"sentencepiece"`, `"byte_bpe"`,
`"unigram"`, `"modernbert_bpe"`, `"deberta_unigram"`);
`tokenizer_class(kind)` turns it back into the class, which answers
everything else about the kind (`bert_keras.text.base.Tokenizer`). A new
tokenizer is one class here.
"""

from bert_keras.text.byte_bpe import BytePairTokenizer
from bert_keras.text.deberta_tokenizer import DebertaV3Tokenizer
from bert_keras.text.modernbert_tokenizer import ModernBertTokenizer
from bert_keras.text.sentencepiece import SentencePieceTokenizer
from bert_keras.text.tokenizer import WordPieceTokenizer
from bert_keras.text.unigram_tokenizer import UnigramTokenizer

# The classes, in the order their kinds are listed (WordPiece first: the kind of a record that names none).
TOKENIZER_CLASSES = (WordPieceTokenizer, SentencePieceTokenizer, BytePairTokenizer, UnigramTokenizer,
                     ModernBertTokenizer, DebertaV3Tokenizer)
TOKENIZER_KINDS = tuple(cls.kind for cls in TOKENIZER_CLASSES)
_BY_KIND = {cls.kind: cls for cls in TOKENIZER_CLASSES}


def tokenizer_class(kind):
    """The tokenizer class of `kind`.

    Raises:
        ValueError: `kind` is none of `TOKENIZER_KINDS`, Keras-style.

    >>> tokenizer_class("byte_bpe").__name__, tokenizer_class("byte_bpe").num_special_tokens(2)
    ('BytePairTokenizer', 4)
    """
    if not isinstance(kind, str) or kind not in _BY_KIND:
        raise ValueError(f"Received an invalid value for argument `kind`, expected one of {list(TOKENIZER_KINDS)}. "
                         f"Received: kind={kind!r}")
    return _BY_KIND[kind]


def kind_of_assets(attributes):
    """The kind whose Hub module attributes (`files`) are all among `attributes`, the one with the most where
    several are (RoBERTa's `vocab_file` and `merges_file` over WordPiece's `vocab_file`); None where no kind's are."""
    kinds = [cls for cls in TOKENIZER_CLASSES if set(cls.files) <= set(attributes)]
    return max(kinds, key=lambda cls: len(cls.files)).kind if kinds else None


def kind_of_pieces(tokens):
    """The kind whose vocabulary spells `tokens`: the one whose `word_start_mark` ("▁", "Ġ") starts one of them,
    else WordPiece (which marks the pieces that continue a word instead)."""
    for cls in TOKENIZER_CLASSES:
        if cls.word_start_mark is not None and any(token.startswith(cls.word_start_mark) for token in tokens):
            return cls.kind
    return WordPieceTokenizer.kind
