"""Fixtures of the text tests: a tiny vocabulary, the real MiniLM vocabulary, the tweets, the reference."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402

from bert_keras.text import WordPieceTokenizer  # noqa: E402
from bert_keras.text.corpora import load_tweets, minilm_vocab_path  # noqa: E402

# ids: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, then words and pieces.
TINY_VOCAB = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "the", "qu", "##ick", "brown", "fox", "!", ",", "cafe", "a", "b", "c", "##b", "##c",
    "hello", "world", "中", "文", "Hello", "é",
]


@pytest.fixture
def tiny_vocab():
    return list(TINY_VOCAB)


def _data_file(locate):
    try:
        return locate()
    except FileNotFoundError as error:  # the test extra installs them
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def vocab_path():
    return _data_file(minilm_vocab_path)


@pytest.fixture(scope="session")
def uncased_tokenizer(vocab_path):
    return WordPieceTokenizer(vocab_path, lower_case=True)


@pytest.fixture(scope="session")
def cased_tokenizer(vocab_path):
    return WordPieceTokenizer(vocab_path, lower_case=False)


@pytest.fixture(scope="session")
def raw_tweets():
    """The tweets as the file's bytes (4,934 of them are not valid UTF-8)."""
    return _data_file(lambda: load_tweets(raw=True)[0])


@pytest.fixture(scope="session")
def tweets(raw_tweets):
    """The tweets as str, invalid UTF-8 bytes replaced by U+FFFD (what Python gives the reference)."""
    return [text.decode("utf-8", errors="replace") for text in raw_tweets]


def _reference(vocab_path, lower_case):
    transformers = pytest.importorskip("transformers")
    return transformers.BertTokenizerFast(vocab=vocab_path, do_lower_case=lower_case)


@pytest.fixture(scope="session")
def hf_uncased(vocab_path):
    return _reference(vocab_path, True)


@pytest.fixture(scope="session")
def hf_cased(vocab_path):
    """The cased reference setting: no lower-casing, no accent stripping."""
    reference = _reference(vocab_path, False)
    normalizer = reference.backend_tokenizer.normalizer
    assert not normalizer.lowercase and not normalizer.strip_accents
    return reference
