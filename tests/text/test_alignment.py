"""Word labels onto word pieces: first-piece labels in the windows the tagger export serves, offsets kept."""

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.text import WordPieceTokenizer
from bert_keras.text.alignment import IGNORE_LABEL, join_words
from bert_keras.text.windows import tagging_windows


def test_join_words_gives_each_word_its_span():
    text, starts, ends = join_words(np.array(["Hi", "Zoë", "😀", "!"]))
    assert (text, starts, ends) == ("Hi Zoë 😀 !", [0, 3, 7, 9], [2, 6, 8, 10])
    assert join_words([]) == ("", [], [])
    with pytest.raises(TypeError, match="argument `words`, expected a list of str"):
        join_words("Hi there")


def test_first_piece_carries_the_label(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    text, starts, ends = join_words(["The", "quick", "fox!"])
    packed = tagging_windows(tokenizer, [text], [starts], [ends], [[1, 2, 3]], seq_length=8)
    assert packed["input_word_ids"].numpy().tolist() == [[2, 5, 6, 7, 9, 10, 3, 0]]
    assert packed["input_mask"].numpy().tolist() == [[1, 1, 1, 1, 1, 1, 1, 0]]
    assert packed["labels"].numpy().tolist() == [[-100, 1, 2, -100, 3, -100, -100, -100]]
    assert packed["text_index"].numpy().tolist() == [0]
    assert packed["labels"].dtype == tf.int32


def test_unlabelled_text_and_numpy_inputs(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    # Only "quick" is labelled; "the" and "fox" lie outside every span.
    packed = tagging_windows(
        tokenizer,
        np.array(["the quick fox", "abc"]),
        np.array([np.array([4]), np.array([0])], dtype=object),
        [[9], [3]],
        np.array([[5], [6]], dtype=object),
        seq_length=8,
        ignore_label=-1,
    )
    assert packed["labels"].numpy().tolist() == [[-1, -1, 5, -1, -1, -1, -1, -1], [-1, 6, -1, -1, -1, -1, -1, -1]]
    assert packed["input_word_ids"].numpy().tolist() == [[2, 5, 6, 7, 9, 3, 0, 0], [2, 13, 16, 17, 3, 0, 0, 0]]


def test_long_texts_are_cut_into_the_exports_windows_none_dropped(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    # Pieces: a 1, abc 3, the 1, fox 1, quick 2 = 8 pieces; seq_length 5 leaves windows of 3, stride 1: step 2.
    sentences = [["a", "abc", "the", "fox", "quick"], [], ["fox"]]
    joined = [join_words(words) for words in sentences]
    packed = tagging_windows(tokenizer, [t for t, _, _ in joined], [s for _, s, _ in joined],
                             [e for _, _, e in joined], [[1, 2, 3, 4, 5], [], [6]], seq_length=5, stride=1)
    # Pieces: a, a ##b ##c, the, fox, qu ##ick: windows [0, 3), [2, 5), [4, 7), [6, 8), the last reaching the end.
    assert packed["text_index"].numpy().tolist() == [0, 0, 0, 0, 1, 2]
    assert packed["input_word_ids"].numpy().tolist()[:4] == [[2, 13, 13, 16, 3], [2, 16, 17, 5, 3], [2, 5, 9, 6, 3],
                                                             [2, 6, 7, 3, 0]]
    assert packed["labels"].numpy().tolist() == [
        [-100, 1, 2, -100, -100],  # a, abc's first piece
        [-100, -100, -100, 3, -100],  # the
        [-100, 3, 4, 5, -100],  # the again, in the overlap; fox; quick's first piece
        [-100, 5, -100, -100, -100],  # quick again
        [-100, -100, -100, -100, -100],  # the empty sentence is kept: [CLS] [SEP]
        [-100, 6, -100, -100, -100],
    ]
    assert packed["input_word_ids"].numpy().tolist()[4] == [2, 3, 0, 0, 0]


def test_word_without_pieces_gets_no_label(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    text, starts, ends = join_words(["the", "\u200b", "fox"])
    packed = tagging_windows(tokenizer, [text], [starts], [ends], [[1, 2, 3]], seq_length=6)
    assert packed["labels"].numpy().tolist() == [[IGNORE_LABEL, 1, 3, IGNORE_LABEL, IGNORE_LABEL, IGNORE_LABEL]]


def test_bad_arguments_are_named(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    with pytest.raises(ValueError, match="argument `seq_length`, expected an integer >= 3. Received: seq_length=2"):
        tagging_windows(tokenizer, ["a"], [[0]], [[1]], [[0]], seq_length=2)
    with pytest.raises(ValueError, match=r"argument `stride`, expected fewer pieces than a window holds \(3: "
                                         r"seq_length 5 less \[CLS\] and \[SEP\]\). Received: stride=3"):
        tagging_windows(tokenizer, ["a"], [[0]], [[1]], [[0]], seq_length=5, stride=3)
    with pytest.raises(TypeError, match="argument `word_starts`, expected one list of int per text"):
        tagging_windows(tokenizer, ["a"], [["x"]], [[1]], [[0]])
