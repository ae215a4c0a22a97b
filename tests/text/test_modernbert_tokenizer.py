"""ModernBertTokenizer (ModernBERT's byte-level BPE with NFC, in the graph) against the `tokenizers` library on the
same `tokenizer.json` (one of ModernBERT's kind trained here on tweets, saved by transformers)."""

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.text import BertPreprocessor
from bert_keras.text.folders import tokenizer_from_folder
from bert_keras.text.modernbert_tokenizer import ModernBertTokenizer
from tests.checkpoints.test_modernbert import save_modernbert_tokenizer
from tests.helpers import ids_per_row

tokenizers = pytest.importorskip("tokenizers")

# Composed and decomposed accents (NFC makes them one), emoji, CJK, whitespace runs, control characters, the empty
# string, GPT-2's contractions, literal special tokens (tokenized as text, the reference's split_special_tokens).
EDGE_CASES = ["", " ", "   ", "héllo café naïve", "e\u0301te\u0300 Zu\u0308rich", "\u212b \u2126 \ufb01",
              "😀 👨\u200d👩\u200d👧 🇫🇷", "中文字符 日本語", "x\x00y\x7f", "a  b\t\tc \n", "don't we'll I'm",
              "x" * 2000, "Hello  world"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("modernbert_tokenizer")
    save_modernbert_tokenizer(path)
    return path


@pytest.fixture(scope="module")
def tokenizer(folder):
    return tokenizer_from_folder(str(folder), "modernbert_bpe")


@pytest.fixture(scope="module")
def reference(folder):
    return tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))


def _ids(tokenizer, texts):
    """Our ids without special tokens, one flat list per text."""
    return ids_per_row(tokenizer(tf.constant(texts)))


def test_the_folder_gives_modernberts_specials_normalizer_and_packing(tokenizer, reference):
    assert isinstance(tokenizer, ModernBertTokenizer) and tokenizer.normalization == "NFC"
    assert (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, tokenizer.mask_id) == tuple(
        reference.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]"))
    assert tokenizer.packing == "bert" and tokenizer.num_special_tokens(2) == 3


@pytest.mark.slow
def test_edge_cases_and_pairs_equal_the_reference(tokenizer, reference):
    expected = [e.ids for e in reference.encode_batch(EDGE_CASES, add_special_tokens=False)]
    assert _ids(tokenizer, EDGE_CASES) == expected
    preprocessor = BertPreprocessor(tokenizer=tokenizer, seq_length=20)
    out = preprocessor([tf.constant(["Hello there", "e\u0301te\u0301"]), tf.constant(["General Kenobi!", "a"])])
    reference.enable_padding(pad_id=tokenizer.pad_id, length=20)
    pairs = reference.encode_batch([("Hello there", "General Kenobi!"), ("e\u0301te\u0301", "a")])
    reference.no_padding()
    assert out["input_word_ids"].numpy().tolist() == [e.ids for e in pairs]  # [CLS] A [SEP] B [SEP]
    assert out["input_mask"].numpy().tolist() == [e.attention_mask for e in pairs]


@pytest.mark.slow
def test_without_normalization_a_decomposed_accent_stays_two_characters(tokenizer):
    plain = ModernBertTokenizer(tokenizer.vocabulary, tokenizer.merges, normalization=None)
    assert _ids(plain, ["e\u0301"]) != _ids(tokenizer, ["e\u0301"]) == _ids(tokenizer, ["\u00e9"])
    with pytest.raises(ValueError, match="`normalization`"):
        ModernBertTokenizer(tokenizer.vocabulary, tokenizer.merges, normalization="NFKC")


def test_config_round_trip(tokenizer):
    restored = ModernBertTokenizer.from_config(tokenizer.get_config())
    texts = tf.constant(["Round trip, cafe\u0301 😀"])
    assert restored.get_config()["normalization"] == "NFC"
    assert restored.tokenize(texts).to_list() == tokenizer.tokenize(texts).to_list()


@pytest.mark.slow
def test_ids_equal_the_reference_on_20000_tweets(tokenizer, reference, tweets):
    texts = tweets[-20_000:]
    expected = [e.ids for e in reference.encode_batch(texts, add_special_tokens=False)]
    ours = []
    for start in range(0, len(texts), 2000):
        ours += _ids(tokenizer, texts[start:start + 2000])
    bad = [i for i, (a, b) in enumerate(zip(ours, expected)) if a != b]
    assert bad == [], [texts[i] for i in bad[:3]]
    assert np.mean([len(ids) for ids in ours]) > 10
