"""The WordPiece graph a LiteRT file is converted from (`export._litert_graph._Pieces`), run by TensorFlow: ids as the
package's `WordPieceTokenizer` gives them, where the vocabulary holds what tensorflow-text would match otherwise."""

import pytest
import tensorflow as tf

from bert_keras.export._litert_graph import _Pieces
from bert_keras.text.tokenizer import WordPieceTokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "a b", "##b", "good", "day"]
SETTINGS = {"lower_case": True, "seq_length": 16, "cls_id": 2, "sep_id": 3, "pad_id": 0, "unknown_token": "[UNK]"}


@pytest.mark.slow  # 7 s in the full run of 450d6b9
def test_a_vocabulary_token_holding_a_space_is_never_given_as_the_tokenizer_never_gives_it():
    # "a b" (id 7) matched across the space in tensorflow-text's end-to-end WordPiece; the reference gives a, b.
    texts = ["a b", "good day a b", "ab"]
    ids, _, _ = _Pieces(SETTINGS, VOCAB, offsets=True).tokenize(tf.constant(texts))
    expected = WordPieceTokenizer(VOCAB, lower_case=True).tokenize(texts)
    assert ids.to_list() == [[5, 6], [9, 10, 5, 6], [5, 8]]
    assert ids.to_list() == [list(row) for row in expected.merge_dims(1, 2).to_list()]
