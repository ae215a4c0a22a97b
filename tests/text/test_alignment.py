"""Word labels onto word pieces: first-piece labels, windows of long sentences, offsets kept, and back to words."""

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.text import WordPieceTokenizer
from bert_keras.text.alignment import IGNORE_LABEL, align_word_labels, join_words, merge_windows, window_sentences


def test_join_words_gives_each_word_its_span():
    text, starts, ends = join_words(np.array(["Hi", "Zoë", "😀", "!"]))
    assert (text, starts, ends) == ("Hi Zoë 😀 !", [0, 3, 7, 9], [2, 6, 8, 10])
    assert join_words([]) == ("", [], [])
    with pytest.raises(TypeError, match="argument `words`, expected a list of str"):
        join_words("Hi there")


def test_first_piece_carries_the_label(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    text, starts, ends = join_words(["The", "quick", "fox!"])
    packed = align_word_labels(tokenizer, [text], [starts], [ends], labels=[[1, 2, 3]], seq_length=8)
    assert packed["input_word_ids"].numpy().tolist() == [[2, 5, 6, 7, 9, 10, 3, 0]]
    assert packed["input_mask"].numpy().tolist() == [[1, 1, 1, 1, 1, 1, 1, 0]]
    assert packed["labels"].numpy().tolist() == [[-100, 1, 2, -100, 3, -100, -100, -100]]
    assert packed["word_index"].numpy().tolist() == [[-1, 0, 1, 1, 2, 2, -1, -1]]
    assert packed["char_starts"].numpy().tolist() == [[-1, 0, 4, 6, 10, 13, -1, -1]]
    assert packed["char_ends"].numpy().tolist() == [[-1, 3, 6, 9, 13, 14, -1, -1]]
    assert packed["labels"].dtype == tf.int32 and packed["char_starts"].dtype == tf.int64


def test_unlabelled_text_truncation_and_numpy_inputs(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    # Only "quick" is labelled; "the" and "fox" lie outside every span. The second text is cut after 3 pieces.
    packed = align_word_labels(
        tokenizer,
        np.array(["the quick fox", "abc abc"]),
        np.array([np.array([4]), np.array([0, 4])], dtype=object),
        [[9], [3, 7]],
        labels=np.array([[5], [6, 7]], dtype=object),
        seq_length=5,
        ignore_label=-1,
    )
    assert packed["word_index"].numpy().tolist() == [[-1, -1, 0, 0, -1], [-1, 0, 0, 0, -1]]
    assert packed["labels"].numpy().tolist() == [[-1, -1, 5, -1, -1], [-1, 6, -1, -1, -1]]
    assert packed["input_word_ids"].numpy().tolist() == [[2, 5, 6, 7, 3], [2, 13, 16, 17, 3]]


def test_long_sentences_become_windows_at_word_boundaries(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    # Pieces: a 1, abc 3, the 1, fox 1, quick 2; seq_length 5 leaves 3 for pieces.
    sentences = [["a", "abc", "the", "fox", "quick"], [], ["fox"]]
    windows = window_sentences(tokenizer, sentences, seq_length=5, labels=[[1, 2, 3, 4, 5], [], [6]])
    assert windows["text"] == ["a", "abc", "the fox", "quick", "", "fox"]
    assert windows["sentence"] == [0, 0, 0, 0, 1, 2]
    assert windows["window"] == [0, 1, 2, 3, 0, 0]
    assert windows["first_word"] == [0, 1, 2, 4, 0, 0]
    assert windows["num_words"] == [1, 1, 2, 1, 0, 1]
    assert windows["labels"] == [[1], [2], [3, 4], [5], [], [6]]
    assert windows["word_starts"][2] == [0, 4] and windows["word_ends"][2] == [3, 7]

    # In the graph, batched in tf.data; then the windows' predictions back into sentences.
    dataset = tf.data.Dataset.from_tensor_slices({
        key: tf.ragged.constant(windows[key], dtype=tf.int64) for key in ("word_starts", "word_ends", "labels")
    } | {"text": windows["text"]}).batch(6)
    packed = next(iter(dataset.map(lambda x: align_word_labels(
        tokenizer, x["text"], x["word_starts"], x["word_ends"], labels=x["labels"], seq_length=5))))
    assert packed["labels"].numpy().tolist() == [
        [-100, 1, -100, -100, -100],
        [-100, 2, -100, -100, -100],
        [-100, 3, 4, -100, -100],
        [-100, 5, -100, -100, -100],
        [-100, -100, -100, -100, -100],
        [-100, 6, -100, -100, -100],
    ]
    assert packed["input_word_ids"].numpy().tolist()[4] == [2, 3, 0, 0, 0]  # the empty sentence is kept
    merged = merge_windows(windows, packed["word_index"].numpy(), packed["labels"].numpy())
    assert merged == [[1, 2, 3, 4, 5], [], [6]]


def test_merge_windows_takes_the_first_piece_and_marks_words_without_pieces():
    windows = {"sentence": [0, 1], "first_word": [0, 0], "num_words": [2, 2]}
    word_index = [[-1, 0, 0, -1], [-1, 1, -1, -1]]  # sentence 1's word 0 had no piece (e.g. a zero-width space)
    scores = np.arange(16, dtype=np.float32).reshape(2, 4, 2) / 10
    assert merge_windows(windows, word_index, scores) == [
        [pytest.approx([0.2, 0.3]), None],
        [None, pytest.approx([1.0, 1.1])],
    ]


def test_word_without_pieces_gets_no_label(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    text, starts, ends = join_words(["the", "\u200b", "fox"])
    packed = align_word_labels(tokenizer, [text], [starts], [ends], labels=[[1, 2, 3]], seq_length=6)
    assert packed["labels"].numpy().tolist() == [[IGNORE_LABEL, 1, 3, IGNORE_LABEL, IGNORE_LABEL, IGNORE_LABEL]]
    assert packed["word_index"].numpy().tolist() == [[-1, 0, 2, -1, -1, -1]]


def test_bad_arguments_are_named(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    with pytest.raises(ValueError, match="sentence 1 has 2 words and 1 labels"):
        window_sentences(tokenizer, [["a"], ["a", "b"]], seq_length=8, labels=[[0], [0]])
    with pytest.raises(ValueError, match="argument `seq_length`, expected an integer >= 3. Received: seq_length=2"):
        window_sentences(tokenizer, [["a"]], seq_length=2)
    with pytest.raises(TypeError, match=r"argument `sentences\[1\]`, expected a list of str"):
        window_sentences(tokenizer, [["a"], "a b"], seq_length=8)
    with pytest.raises(TypeError, match="argument `word_starts`, expected one list of int per text"):
        align_word_labels(tokenizer, ["a"], [["x"]], [[1]])
