"""Property-based fuzzing of the tokenizer and the preprocessor, against the reference.

Any text (Unicode or raw bytes) is tokenized without an error into ids of the
vocabulary and packed into int32 `(batch, seq_length)` inputs whose mask is a
prefix of ones; on the MiniLM vocabulary the ids equal `BertTokenizerFast`'s.

CI runs `BERT_KERAS_FUZZ_EXAMPLES` (default 200) examples per property; set it
higher for a longer local run, e.g. `BERT_KERAS_FUZZ_EXAMPLES=5000 pytest -m fuzz`.
"""

import functools

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import assume, given
from hypothesis import strategies as st

from bert_keras.text import BertPreprocessor
from tests.helpers import fuzz_settings

pytestmark = pytest.mark.fuzz

FUZZ = fuzz_settings()
SEQ_LENGTH = 12
# Pieces that steer random text into the normaliser's and the splitter's corners:
# accents and combining marks, CJK, case-patch letters, sigma, control and
# format characters, whitespace of all kinds, detour punctuation, long runs.
PIECES = st.sampled_from(
    ["hello", "Héllo", "WORLD", "中文", "naïve", "don't", "ﬁne", "Ⅻ", "\u0301", "İ", "ß", "ΣΑΣ", "ǅ",
     "\x00", "\u200b", "\ufeff", "\ufffd", "\ue000", "\t", "\r\n", "\u3000", "\u00a0", "\u2e43", "!!",
     "[MASK]", "##", "a" * 101, "é" * 99, "x²", "Ｈｅｌｌｏ", "🙂", "\U0001f1eb\U0001f1f7", "\u0600"]
)
TEXT = st.one_of(
    st.text(max_size=60),
    st.lists(st.one_of(PIECES, st.text(max_size=4)), max_size=12).map(" ".join),
    st.lists(st.one_of(PIECES, st.text(max_size=3)), max_size=12).map("".join),
)
BYTES = st.one_of(st.binary(max_size=60), TEXT.map(lambda text: text.encode("utf-8")), st.lists(
    st.one_of(st.binary(max_size=3), TEXT.map(lambda text: text.encode("utf-8"))), max_size=6).map(b"".join))
BATCH = st.lists(TEXT, min_size=1, max_size=4)
BYTES_BATCH = st.lists(BYTES, min_size=1, max_size=4)


@functools.lru_cache(maxsize=None)
def _preprocessor(vocabulary, lower_case=True):
    return BertPreprocessor(list(vocabulary) if isinstance(vocabulary, tuple) else vocabulary,
                            lower_case=lower_case, seq_length=SEQ_LENGTH)


def _check_packed(outputs, batch, vocab_size, cls_id, sep_id, segments=1):
    assert sorted(outputs) == ["input_mask", "input_type_ids", "input_word_ids"]
    values = {}
    for key, value in outputs.items():
        assert value.dtype == tf.int32 and tuple(value.shape) == (batch, SEQ_LENGTH)
        values[key] = value.numpy()
    ids, mask, types = values["input_word_ids"], values["input_mask"], values["input_type_ids"]
    assert ids.min() >= 0 and ids.max() < vocab_size
    lengths = mask.sum(axis=1)
    assert np.array_equal(mask, (np.arange(SEQ_LENGTH) < lengths[:, None]).astype("int32"))  # prefix of ones
    assert (lengths >= segments + 1).all()  # [CLS] and one [SEP] per segment at least
    assert (ids[:, 0] == cls_id).all() and (ids[np.arange(batch), lengths - 1] == sep_id).all()
    assert (types[mask == 0] == 0).all() and set(np.unique(types)) <= set(range(segments))


def _check_tokens(ragged, batch, vocab_size):
    assert ragged.dtype == tf.int32 and ragged.ragged_rank == 2 and ragged.nrows() == batch
    flat = ragged.flat_values.numpy()
    assert flat.size == 0 or (flat.min() >= 0 and flat.max() < vocab_size)


# --- a tiny vocabulary: arbitrary text and bytes never raise ---


@pytest.mark.slow
@FUZZ
@given(texts=BATCH, lower_case=st.booleans())
def test_any_text_tiny_vocab(tiny_vocab, texts, lower_case):
    preprocessor = _preprocessor(tuple(tiny_vocab), lower_case)
    special = preprocessor.get_special_tokens_dict()
    _check_tokens(preprocessor.tokenize(tf.constant(texts)), len(texts), len(tiny_vocab))
    outputs = preprocessor(tf.constant(texts))
    _check_packed(outputs, len(texts), len(tiny_vocab), special["start_of_sequence_id"], special["end_of_segment_id"])


@pytest.mark.slow
@FUZZ
@given(data=BYTES_BATCH, second=BYTES_BATCH)
def test_any_bytes_and_pairs_tiny_vocab(tiny_vocab, data, second):
    preprocessor = _preprocessor(tuple(tiny_vocab))
    special = preprocessor.get_special_tokens_dict()
    second = (second * len(data))[: len(data)]
    outputs = preprocessor([tf.constant(data), tf.constant(second)])
    _check_packed(outputs, len(data), len(tiny_vocab), special["start_of_sequence_id"], special["end_of_segment_id"], 2)


# --- the MiniLM vocabulary: ids equal the reference's ---


def _flat(ragged):
    return ragged.merge_dims(1, 2).to_list()


def _reference_ids(reference, texts):
    return reference(texts, add_special_tokens=False)["input_ids"]


SPECIAL_STRINGS = ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")


@pytest.mark.slow
@FUZZ
@given(texts=BATCH)
def test_uncased_ids_equal_the_reference(uncased_tokenizer, hf_uncased, texts):
    # Documented difference: the reference matches literal special-token strings.
    assume(not any(s in t for t in texts for s in SPECIAL_STRINGS))
    ids = uncased_tokenizer(tf.constant(texts))
    _check_tokens(ids, len(texts), 30522)
    assert _flat(ids) == _reference_ids(hf_uncased, texts)


@pytest.mark.slow
@FUZZ
@given(texts=BATCH)
def test_cased_ids_equal_the_reference(cased_tokenizer, hf_cased, texts):
    assume(not any(s in t for t in texts for s in SPECIAL_STRINGS))
    assert _flat(cased_tokenizer(tf.constant(texts))) == _reference_ids(hf_cased, texts)


@pytest.mark.slow
@FUZZ
@given(data=BYTES_BATCH)
def test_bytes_ids_equal_the_reference_on_the_replaced_text(uncased_tokenizer, hf_uncased, data):
    # Documented: invalid UTF-8 gives the reference's ids on the text Python
    # decodes with errors="replace" (U+FFFD, which BERT drops).
    texts = [d.decode("utf-8", errors="replace") for d in data]
    assume(not any(s in t for t in texts for s in SPECIAL_STRINGS))
    assert _flat(uncased_tokenizer(tf.constant(data))) == _reference_ids(hf_uncased, texts)


def _round_robin(first, second, budget):
    """TF Hub's trimming (`tf_text.RoundRobinTrimmer`): one token to each segment in turn."""
    taken = [0, 0]
    while sum(taken) < budget and (taken[0] < len(first) or taken[1] < len(second)):
        for i, segment in enumerate((first, second)):
            if taken[i] < len(segment) and sum(taken) < budget:
                taken[i] += 1
    return first[: taken[0]], second[: taken[1]]


@pytest.mark.slow
@FUZZ
@given(texts=BATCH, pairs=BATCH)
def test_minilm_preprocessor_packs_the_reference_ids(vocab_path, hf_uncased, texts, pairs):
    assume(not any(s in t for t in texts + pairs for s in SPECIAL_STRINGS))
    pairs = (pairs * len(texts))[: len(texts)]
    outputs = _preprocessor(vocab_path)([tf.constant(texts), tf.constant(pairs)])
    _check_packed(outputs, len(texts), 30522, 101, 102, segments=2)
    # The segments are the reference's ids, trimmed round-robin as TF Hub does
    # (the reference's own "longest_first" breaks ties the other way).
    expected = []
    for first, second in zip(_reference_ids(hf_uncased, texts), _reference_ids(hf_uncased, pairs)):
        first, second = _round_robin(first, second, SEQ_LENGTH - 3)
        row = [101, *first, 102, *second, 102]
        expected.append(row + [0] * (SEQ_LENGTH - len(row)))
    assert outputs["input_word_ids"].numpy().tolist() == expected
