"""The character tables and the normaliser, checked on every Unicode code point against the reference."""

import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from bert_keras.text import _unicode_tables as tables
from bert_keras.text import normalize_text

normalizers = pytest.importorskip("tokenizers.normalizers")
pre_tokenizers = pytest.importorskip("tokenizers.pre_tokenizers")

CODE_POINTS = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]  # 1,112,064 scalar values


def _ranges(code_points):
    ranges = []
    for cp in code_points:
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1] = (ranges[-1][0], cp)
        else:
            ranges.append((cp, cp))
    return tuple(ranges)


def _probe(normalizer, expected):
    return _ranges(cp for cp in CODE_POINTS if normalizer.normalize_str(chr(cp)) == expected(chr(cp)))


@pytest.mark.slow
def test_tables_equal_the_reference_on_every_code_point():
    Bert = normalizers.BertNormalizer
    clean = Bert(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
    assert _probe(clean, lambda c: "") == tables.REMOVED_RANGES
    assert _probe(clean, lambda c: " " if c != " " else None) == tables.WHITESPACE_RANGES
    cjk = Bert(clean_text=False, handle_chinese_chars=True, strip_accents=False, lowercase=False)
    assert _probe(cjk, lambda c: f" {c} ") == tables.CJK_RANGES
    strip = Bert(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)
    assert _probe(strip, lambda c: "") == tables.ACCENT_RANGES
    pre = pre_tokenizers.BertPreTokenizer()
    punctuation = [cp for cp in CODE_POINTS if len(pre.pre_tokenize_str(f"a{chr(cp)}b")) == 3]
    assert _ranges(punctuation) == tables.PUNCTUATION_RANGES
    assert len(punctuation) == 726


@pytest.mark.parametrize("lower_case", [True, False], ids=["uncased", "cased"])
def test_normalize_text_equals_the_reference_on_every_code_point(lower_case):
    reference = normalizers.BertNormalizer(lowercase=lower_case)
    chars = [chr(cp) for cp in CODE_POINTS]
    ours = normalize_text(tf.constant(chars), lower_case=lower_case).numpy()
    differ = [hex(cp) for cp, c, out in zip(CODE_POINTS, chars, ours) if out != reference.normalize_str(c).encode()]
    # No residual: the 116 characters that TensorFlow's ICU lower-cases or
    # decomposes differently go through `CASE_PATCH`.
    assert differ == []


def test_case_patch_is_needed_and_sufficient():
    keys = [key for key, _ in tables.CASE_PATCH]
    assert len(keys) == 116 and keys == sorted(keys)
    reference = normalizers.BertNormalizer(lowercase=True)
    chars = [chr(key) for key in keys]
    assert [ord(reference.normalize_str(c)) for c in chars] == [v for _, v in tables.CASE_PATCH]
    # TensorFlow's own NFD and lower-casing get every one of them wrong.
    plain = tf.strings.lower(tf_text.normalize_utf8(tf.constant(chars), "NFD"), encoding="utf-8")
    assert not any(p.decode() == chr(v) for p, (_, v) in zip(plain.numpy(), tables.CASE_PATCH))
    # The patch also holds inside words.
    texts = [f"x{c}Y{c}" for c in chars]
    ours = normalize_text(tf.constant(texts)).numpy()
    assert [o.decode() for o in ours] == [reference.normalize_str(t) for t in texts]


def test_sigma_is_lower_cased_per_character_as_the_reference():
    reference = normalizers.BertNormalizer(lowercase=True)
    text = "ΟΔΟΣ ΣΑΣ Σ"
    assert normalize_text(tf.constant(text)).numpy().decode() == reference.normalize_str(text) == "οδοσ σασ σ"


def test_to_regex_class():
    assert tables.to_regex_class(((0x41, 0x5A), (0x5F, 0x5F))) == r"[\x{41}-\x{5A}\x{5F}]"
