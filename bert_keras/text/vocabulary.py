"""A WordPiece vocabulary: read from `vocab.txt` or a list, checked token by token, and as tensorflow-text's
WordPiece takes it (`wordpiece_vocabulary`). `bert_keras.text.tokenizer` re-exports every name."""

import os

import tensorflow as tf

from bert_keras._checks import quoted
from bert_keras.text.base import TokenizerFileError, line_break, read_file_bytes


def load_vocabulary(vocabulary):
    """Returns the list of tokens of a `vocab.txt` path or of a list of tokens, checked to be unique.

    Args:
        vocabulary: str, path-like, or list of str. A file with one token per
            line (line `i` is the token of id `i`), or the tokens themselves.

    Returns:
        A list of str.

    Raises:
        ValueError: the file does not exist, or a token appears twice (the
            message names the file, the token and both of its lines, or for
            a list, both of its ids), or is longer than `MAX_TOKEN_BYTES`.
        TokenizerFileError: the file is not a regular file (a FIFO is
            refused without waiting), is a directory, or is not UTF-8 (the
            message names the file, and the line).

    Example:
    >>> load_vocabulary(["[PAD]", "[UNK]", "the", "the"])
    Traceback (most recent call last):
    ...
    ValueError: Received an invalid value for argument `vocabulary`: the token 'the' appears twice, at ids 2 and 3. ...
    """
    if isinstance(vocabulary, (str, os.PathLike)):
        path = os.fspath(vocabulary)
        if not tf.io.gfile.exists(path):
            raise ValueError(
                "Received an invalid value for argument `vocabulary`, expected a list of "
                f"tokens or the path of a vocab.txt file that exists. Received: vocabulary={path!r}"
            )
        tokens = _read_lines(path).split("\n")
        if tokens and tokens[-1] == "":
            tokens.pop()
        tokens = [token.rstrip("\r") for token in tokens]
        check_token_characters(tokens, path)
        check_token_lengths(tokens, path)
        check_unique_tokens(tokens, path)
        return tokens
    if isinstance(vocabulary, (list, tuple)) and all(isinstance(t, str) for t in vocabulary):
        tokens = list(vocabulary)
        check_token_characters(tokens)
        check_token_lengths(tokens)
        check_unique_tokens(tokens)
        return tokens
    raise ValueError(
        "Received an invalid value for argument `vocabulary`, expected a list of str or "
        f"the path of a vocab.txt file. Received: vocabulary of type {type(vocabulary).__name__}"
    )


def _read_lines(path):
    """The text of a vocabulary file; a `TokenizerFileError` naming it where it is not a regular file (a FIFO is
    refused without waiting), a directory, or not UTF-8 (naming the line)."""
    data = read_file_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise TokenizerFileError(path, f"line {line} is not valid UTF-8 (byte {data[error.start]:#04x}); a vocabulary "
                                 "file is UTF-8 text, one token a line.") from None


# The longest token tensorflow-text's FastWordpieceTokenizer builds, in UTF-8 bytes without the suffix indicator; a
# longer one fails inside it with a message that quotes the whole token. Real vocabularies' longest are ~100 bytes.
MAX_TOKEN_BYTES = 256


def check_token_characters(tokens, path=None):
    """Raises a `ValueError` naming the first token that a `vocab.txt` cannot carry or tensorflow-text's WordPiece
    cannot build: one holding a line break (`base.LINE_BREAKS`: written one token a line, it would shift every later
    id), a NUL, or a lone surrogate (not UTF-8 text). No text reaches such a token: BERT's normalizer makes line
    breaks spaces and drops NULs.
    """
    for index, token in enumerate(tokens):
        found = line_break(token) or ("\0" if "\0" in token else None)
        if found is None:
            try:
                token.encode("utf-8")
                continue
            except UnicodeEncodeError:
                found = "a lone surrogate"
        where = f"the token of id {index}" if path is None else f"{path}, line {index + 1},"
        raise ValueError(
            f"Received an invalid value for argument `vocabulary`: {where} ({quoted(token)}) holds "
            f"{found if found == 'a lone surrogate' else repr(found)}. A vocab.txt holds one token a line, as "
            "tensorflow-text's lookup and transformers read it, and tensorflow-text's WordPiece takes UTF-8 text "
            "without NULs."
        )


def check_token_lengths(tokens, path=None):
    """Raises a `ValueError` naming the first token longer than `MAX_TOKEN_BYTES` UTF-8 bytes (after a `"##"`)."""
    for index, token in enumerate(tokens):
        size = len(token.encode("utf-8", "surrogatepass")) - (2 if token.startswith("##") else 0)
        if size <= MAX_TOKEN_BYTES:
            continue
        where = f"the token of id {index}" if path is None else f"{path}, line {index + 1},"
        raise ValueError(
            f"Received an invalid value for argument `vocabulary`: {where} is {size:,} UTF-8 bytes long "
            f"({quoted(token)}); WordPiece takes tokens of at most {MAX_TOKEN_BYTES} bytes after the '##' suffix "
            "indicator."
        )


def check_unique_tokens(tokens, path=None):
    """Raises a `ValueError` naming the first token that appears twice (tensorflow-text's WordPiece needs unique ones).

    Args:
        tokens: list of str, token `i` having id `i`.
        path: optional str. The file they were read from (line `i + 1` holds
            token `i`); the message then names the file and both lines.
    """
    seen = {}
    for index, token in enumerate(tokens):
        first = seen.setdefault(token, index)
        if first == index:
            continue
        if path is None:
            where = f"the token {quoted(token)} appears twice, at ids {first} and {index}"
        else:
            where = f"{path} lists the token {quoted(token)} twice, on lines {first + 1} and {index + 1}"
        raise ValueError(
            f"Received an invalid value for argument `vocabulary`: {where}. Every token of a vocabulary must be "
            "unique (line i is the token of id i)."
        )


# What stands in tensorflow-text's vocabulary for a token no text can reach: U+FFFD, which normalisation drops.
_NEVER_MATCHED = "\ufffd"


def wordpiece_vocabulary(tokens):
    """The vocabulary given to tensorflow-text's WordPiece: `tokens` with each one holding a space (U+0020) replaced
    by a placeholder no normalised text holds (U+FFFD and its id), every id in place.

    The reference's pre-tokenizer splits words on whitespace before WordPiece,
    so it never gives such a token (it keeps its id); tensorflow-text's
    end-to-end WordPiece matches a token across the space ("a b" gave one id
    where the reference gives those of "a" and "b"). Other whitespace (tab,
    U+00A0, U+3000...) needs nothing: the normaliser makes it a space first,
    so no text reaches a token holding it on either side.

    >>> wordpiece_vocabulary(["[UNK]", "a", "a b", "##b"])
    ['[UNK]', 'a', '\ufffd2', '##b']
    """
    taken = set(tokens)
    out = list(tokens)
    for index, token in enumerate(tokens):
        if " " in token:
            placeholder = f"{_NEVER_MATCHED}{index}"
            while placeholder in taken:  # a vocabulary may hold the placeholder's text itself
                placeholder = _NEVER_MATCHED + placeholder
            taken.add(placeholder)
            out[index] = placeholder
    return out
