"""How each tokenizer kind's pieces read as text, in plain Python (no TensorFlow).

What transformers' decoders and its token-classification pipeline do with a
kind's pieces: join them into a string (`tokens_to_string`), tell whether a
piece starts a word (`piece_starts_word`) and give a piece's own text
(`piece_text`). The tokenizer classes (`text.kinds`) answer these through
here; `export.entity_groups` reads it directly, so that grouping a LiteRT
tagger's entities imports no TensorFlow.
"""

WORD_START = "\u2581"  # "▁", SentencePiece's mark of a piece that begins a word
# The WordPiece decoder's clean-up (tokenizers' `decoders.WordPiece(cleanup=True)`), token by token.
_CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
            (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


def bytes_to_unicode():
    """GPT-2's map from each byte to a printable character (the alphabet of byte-level BPE tokens)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    mapping, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return mapping


BYTE_CHARS = bytes_to_unicode()
BYTES_OF = {char: byte for byte, char in BYTE_CHARS.items()}  # the way back from a token's characters to its bytes


def starts_word_at_a_space(text, start):
    """transformers' pipeline rule for a tokenizer without a continuing-subword prefix (SentencePiece, byte-level
    BPE): a piece starts a word at the text's start, or where a space (U+0020) is just before or at its first
    character."""
    return start == 0 or " " in text[start - 1 : start + 1]


class WordPieceDecoding:
    """WordPiece: continuing pieces carry `suffix_indicator` ("##")."""

    kind = "wordpiece"

    @staticmethod
    def tokens_to_string(tokens, suffix_indicator="##"):
        """Continuing pieces glued (`suffix_indicator` dropped), the others after a space, and the spaces before
        `. ? ! ,` dropped, as `decoders.WordPiece(cleanup=True)` joins them."""
        words = []
        for i, token in enumerate(tokens):
            if i:
                token = token[len(suffix_indicator):] if token.startswith(suffix_indicator) else " " + token
            for dirty, clean in _CLEANUP:
                token = token.replace(dirty, clean)
            words.append(token)
        return "".join(words)

    @staticmethod
    def piece_starts_word(token, text, start, end):
        """A continuing piece's token is longer than its text (`##ing` against the `ing` it spans)."""
        return len(token) == len(text[start:end])

    @staticmethod
    def piece_text(token, suffix_indicator="##"):
        """The text of a piece: without the `##` of a continuation."""
        return token[len(suffix_indicator):] if token.startswith(suffix_indicator) and len(token) > 2 else token


class SentencePieceDecoding:
    """SentencePiece: a piece that begins a word starts with "▁" (U+2581)."""

    kind = "sentencepiece"

    @staticmethod
    def tokens_to_string(tokens, suffix_indicator="##"):
        """"▁" read as a space, the first one dropped, as transformers' SentencePiece decoder joins them."""
        del suffix_indicator  # WordPiece's
        words = [token.replace(WORD_START, " ") for token in tokens]
        if words and words[0].startswith(" "):
            words[0] = words[0][1:]
        return "".join(words)

    @staticmethod
    def piece_starts_word(token, text, start, end):
        del token, end
        return starts_word_at_a_space(text, start)

    @staticmethod
    def piece_text(token):
        """The text of a piece: without the "▁" that starts a word."""
        return token.lstrip(WORD_START)


class BytePairDecoding:
    """Byte-level BPE: a token's characters stand for bytes (`BYTE_CHARS`; "Ġ" is a space)."""

    kind = "byte_bpe"

    @staticmethod
    def tokens_to_string(tokens, suffix_indicator="##"):
        """The bytes of all tokens (a token's raw UTF-8 where a character is not a byte's) decoded together, an
        invalid UTF-8 sequence as U+FFFD, as tokenizers' `ByteLevel` decoder joins them."""
        del suffix_indicator  # WordPiece's
        data = bytearray()
        for token in tokens:
            if all(char in BYTES_OF for char in token):
                data.extend(BYTES_OF[char] for char in token)
            else:
                data.extend(token.encode("utf-8"))
        return data.decode("utf-8", errors="replace")

    @staticmethod
    def piece_starts_word(token, text, start, end):
        del token, end
        return starts_word_at_a_space(text, start)

    @staticmethod
    def piece_text(token):
        """The text of a piece: its bytes decoded as UTF-8, without leading spaces; None for a piece holding part of
        a character only."""
        if not all(char in BYTES_OF for char in token):
            return token  # a token added outside the byte table, spelled as its text
        try:
            return bytes(BYTES_OF[char] for char in token).decode("utf-8").lstrip(" ")
        except UnicodeDecodeError:
            return None


DECODINGS = {cls.kind: cls for cls in (WordPieceDecoding, SentencePieceDecoding, BytePairDecoding)}
# XLM-RoBERTa's Unigram pieces spell text as ALBERT's (tokenizers' Metaspace decoder).
DECODINGS["unigram"] = SentencePieceDecoding
# ModernBERT's byte-level BPE pieces spell text as RoBERTa's (tokenizers' ByteLevel decoder).
DECODINGS["modernbert_bpe"] = BytePairDecoding
# DeBERTa-v3's Unigram pieces spell text as ALBERT's (tokenizers' Metaspace decoder).
DECODINGS["deberta_unigram"] = SentencePieceDecoding


def decoding_of(kind):
    """The decoding of tokenizer `kind` (one of `DECODINGS`, the kinds of `text.kinds.TOKENIZER_KINDS`).

    Raises:
        ValueError: another kind, Keras-style.

    >>> decoding_of("sentencepiece").tokens_to_string(["\u2581new", "\u2581york", "er"])
    'new yorker'
    """
    if not isinstance(kind, str) or kind not in DECODINGS:
        raise ValueError(f"Received an invalid value for argument `kind`, expected one of {list(DECODINGS)}. "
                         f"Received: kind={kind!r}")
    return DECODINGS[kind]
