"""kinds.sentence_encoder: the batching both engines' `encode` share (length batches, input order, checks)."""

import numpy as np
import pytest

from bert_keras.export.engine import Engine
from bert_keras.export.kinds._batches import length_batches
from bert_keras.export.kinds.sentence_encoder import SentenceEncoderAnswers


class _Recording(SentenceEncoderAnswers, Engine):
    """An engine embedding a text as (its length, its first character's code point), recording its batches."""

    embedding_dim = 2

    def __init__(self):
        self.batches, self.answers = [], 0

    def _embed_batches(self, batches):
        for texts in batches:
            self.batches.append(list(texts))
            yield np.array([[len(text), ord(text[0]) if text else 0] for text in texts], "float32")

    def answered(self):
        self.answers += 1


def test_batches_are_of_similar_lengths_longest_first_and_rows_come_back_in_input_order():
    texts = ["bb", "a", "dddd", "", "ccc"]
    assert length_batches([len(text) for text in texts], 2, sort_short=True) == [[2, 4], [0, 1], [3]]
    engine = _Recording()
    out = engine.encode(np.array(texts), batch_size=2)
    assert engine.batches == [["dddd", "ccc"], ["bb", "a"], [""]] and engine.answers == 1
    np.testing.assert_array_equal(out, [[2, 98], [1, 97], [4, 100], [0, 0], [3, 99]])
    assert out.dtype == np.float32
    np.testing.assert_array_equal(engine.encode("ccc"), [3, 99])  # one str: one vector
    assert engine.encode([]).shape == (0, 2)


def test_a_long_document_is_batched_only_beside_texts_of_more_than_half_its_length():
    # One 8,000-character document among short texts: were it batched with them, every row would cost its length.
    texts = ["short one", "x" * 8000, "mid " * 1100, "tiny", "y" * 3000, "z" * 2500]
    engine = _Recording()
    out = engine.encode(texts, batch_size=4)
    assert [[len(text) for text in batch] for batch in engine.batches] == [[8000, 4400], [3000, 2500], [9, 4]]
    np.testing.assert_array_equal(out[:, 0], [len(text) for text in texts])  # rows back in input order
    for batch in engine.batches:
        assert max(map(len, batch)) < 2 * min(map(len, batch)) or max(map(len, batch)) <= 2048


def test_what_is_not_texts_is_refused_with_the_argument_named():
    engine = _Recording()
    with pytest.raises(TypeError, match="Expected `texts` to hold strings. Received an item of type int"):
        engine.encode(["a", 3])
    with pytest.raises(ValueError, match="`batch_size`, expected an integer >= 1. Received: batch_size=0"):
        engine.encode(["a"], batch_size=0)
    assert engine.batches == []
