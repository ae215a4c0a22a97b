"""Inspector and the attention statistics on tiny models: shapes, sums, errors, hand-computed values."""

import doctest

import keras
import numpy as np
import pytest

from bert_keras.encoder import BertEncoder
from bert_keras.inspection import AttentionStatistics, Inspector, inspector, is_punctuation, statistics
from tests.inspection.conftest import VOCAB, tiny_encoder


@pytest.mark.parametrize("module", [inspector, statistics], ids=lambda m: m.__name__)
def test_docstring_examples(module):
    results = doctest.testmod(module, globs=dict(vars(module), np=np), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert results.failed == 0 and results.attempted >= 2


def test_inspect_matches_the_encoder_and_keeps_real_positions():
    encoder = tiny_encoder(pack_tokens=True)
    results = Inspector(encoder, VOCAB, seq_length=32).inspect(["the cat sat on the mat .", "hello"], ["a dog", "world"])
    assert [r.tokens for r in results] == [
        ["[CLS]", "the", "cat", "sat", "on", "the", "mat", ".", "[SEP]", "a", "dog", "[SEP]"],
        ["[CLS]", "hello", "[SEP]", "world", "[SEP]"],
    ]
    assert results[1].attention.shape == (2, 2, 5, 5) and results[1].hidden_states.shape == (3, 5, 16)
    np.testing.assert_allclose(results[0].attention.sum(-1), 1.0, atol=1e-6)
    ids = np.array([[2, 5, 6, 7, 8, 5, 9, 13, 3, 10, 11, 3]], np.int32)
    direct = encoder({"input_word_ids": ids, "input_mask": np.ones_like(ids),
                      "input_type_ids": np.array([[0] * 9 + [1] * 3], np.int32)})
    np.testing.assert_allclose(results[0].hidden_states[-1], np.asarray(direct["sequence_output"])[0], atol=1e-5)
    assert not any(r.truncated for r in results)


def test_errors():
    encoder = tiny_encoder()
    with pytest.raises(TypeError, match="Cannot read attention probabilities from a Sequential"):
        Inspector(keras.Sequential([keras.layers.Dense(2)]), VOCAB)
    with pytest.raises(ValueError, match=r"seq_length.*max_sequence_length=64. Received: seq_length=65"):
        Inspector(encoder, VOCAB, seq_length=65)
    with pytest.raises(ValueError, match="has 3 tokens but the encoder's vocab_size is 35"):
        Inspector(encoder, VOCAB[:3], seq_length=16)
    inspect = Inspector(encoder, VOCAB, seq_length=16)
    with pytest.raises(ValueError, match=r"empty text in `texts` \(item 1\)"):
        inspect.inspect(["the cat", "  "])
    with pytest.raises(ValueError, match="one text pair per text"):
        inspect.inspect(["the cat", "a dog"], ["hello"])


def test_statistics_by_hand():
    # One layer, two heads, tokens [CLS] the . [SEP] and a padded fifth position.
    probs = np.zeros((1, 1, 2, 5, 5))
    probs[0, 0, 0, :4, :4] = np.eye(4)  # head 1: every token attends to itself
    probs[0, 0, 1, :4, :4] = [[0, 1, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0.5, 0.5]]  # head 2: mostly previous
    stats = AttentionStatistics(1, 2, cls_id=2, sep_id=3, punctuation_ids=[13])
    stats.update(probs, np.array([[2, 5, 13, 3, 0]]), np.array([[1, 1, 1, 1, 0]]))
    result = stats.result()
    head = {name: np.array(values)[0] for name, values in result["per_head"].items()}
    np.testing.assert_allclose(head["self"], [1.0, 0.125])
    np.testing.assert_allclose(head["cls"], [0.25, 0.25])
    np.testing.assert_allclose(head["sep"], [0.25, 0.125])
    np.testing.assert_allclose(head["punctuation"], [0.25, 0.125])
    np.testing.assert_allclose(head["previous"], [0.0, (1 + 1 + 0.5) / 3])
    np.testing.assert_allclose(head["next"], [0.0, 1 / 3])
    np.testing.assert_allclose(head["entropy"], [0.0, np.log(2) / 4])
    assert result["num_tokens"] == 4 and result["per_layer"]["self"] == [pytest.approx(0.5625)]


@pytest.mark.parametrize("token, expected", [(".", True), ("##!", True), ("...", True), ("'", True),
                                             ("cat", False), ("##s", False), ("[SEP]", False), ("$", False)])
def test_is_punctuation(token, expected):
    assert is_punctuation(token) is expected
