"""Question + context windows: transformers' only_second overflow with a stride, offsets and answer positions."""


import numpy as np
import pytest
import tensorflow as tf

from bert_keras.data.squad import SquadExamples
from bert_keras.text.windows import (answer_positions, check_window_arguments, max_context, piece_windows, qa_features,
                                     qa_windows)

QUESTIONS = ["Who wrote the first program?", "Où est le café?", "什么 是 🙂?", "", "why"]
CONTEXTS = [
    "Ada Lovelace wrote the first program in 1843, for Babbage's Analytical Engine. " * 6,
    "Le  café\tde Flore est à Saint-Germain-des-Prés, près du métro; on y boit un crème. 🙂☕ " * 4,
    "北京是中国的首都。The capital of China is Beijing, 人口很多 — naïve CAFÉ façade. " * 5,
    "short",
    " \t ",  # blank: no context piece ("" is not a pair for transformers: see test_an_empty_context_...)
]


def _reference_windows(reference, question, context, seq_length, stride):
    encoding = reference(question, context, truncation="only_second", max_length=seq_length, stride=stride,
                         return_overflowing_tokens=True, return_offsets_mapping=True)
    return [encoding[i] for i in range(len(encoding["input_ids"]))], encoding


@pytest.mark.parametrize("seq_length,stride", [(32, 8), (48, 16), (64, 0), (384, 128)])
def test_windows_equal_transformers_overflowing_tokens(uncased_tokenizer, hf_uncased, seq_length, stride):
    windows = qa_windows(uncased_tokenizer, tf.constant(QUESTIONS), tf.constant(CONTEXTS), seq_length, stride,
                         max_question_length=12)
    windows = {key: value.numpy() for key, value in windows.items()}
    row = 0
    for example, (question, context) in enumerate(zip(QUESTIONS, CONTEXTS)):
        reference, _ = _reference_windows(hf_uncased, question, context, seq_length, stride)
        for encoding in reference:
            length = len(encoding.ids)
            assert windows["example_index"][row] == example
            np.testing.assert_array_equal(windows["input_word_ids"][row, :length], encoding.ids)
            np.testing.assert_array_equal(windows["input_type_ids"][row, :length], encoding.type_ids)
            assert windows["input_mask"][row].sum() == length and windows["input_word_ids"][row, length:].sum() == 0
            offsets = np.array(encoding.offsets).reshape(-1, 2)
            np.testing.assert_array_equal(windows["char_starts"][row, :length], offsets[:, 0])
            np.testing.assert_array_equal(windows["char_ends"][row, :length], offsets[:, 1])
            np.testing.assert_array_equal(windows["word_ids"][row, :length],
                                          [-1 if w is None else w for w in encoding.word_ids])
            in_context = np.array([s == 1 for s in encoding.sequence_ids])
            np.testing.assert_array_equal(windows["context_mask"][row, :length], in_context)
            for position in np.flatnonzero(in_context):  # align_to_words: the word's span inside this window
                word = encoding.token_to_word(position)
                span = encoding.word_to_chars(word, sequence_index=1)
                assert (windows["word_starts"][row, position], windows["word_ends"][row, position]) == tuple(span)
            row += 1
    assert row == len(windows["example_index"])


def test_an_empty_context_gives_one_window_without_context_pieces(uncased_tokenizer):
    windows = qa_windows(uncased_tokenizer, tf.constant(["why"]), tf.constant([""]), 8, 1, 3)
    # [CLS] why [SEP] [SEP]: transformers reads an empty text_pair as no pair at all ([CLS] why [SEP]).
    assert windows["input_word_ids"].numpy().tolist() == [[101, 2339, 102, 102, 0, 0, 0, 0]]
    assert windows["input_type_ids"].numpy().tolist() == [[0, 0, 0, 1, 0, 0, 0, 0]]
    assert not windows["context_mask"].numpy().any()


def test_long_contexts_give_the_number_of_windows_of_the_stride(uncased_tokenizer, hf_uncased):
    context = " ".join(f"word{i}" for i in range(500))  # 'word', '##N': about 1,000 pieces
    windows = qa_windows(uncased_tokenizer, tf.constant(["what"]), tf.constant([context]), 64, 20, 8)
    reference, _ = _reference_windows(hf_uncased, "what", context, 64, 20)
    assert len(windows["example_index"]) == len(reference) > 20
    # Consecutive windows share exactly `stride` context pieces.
    mask = windows["context_mask"].numpy()
    starts = windows["char_starts"].numpy()
    first, second = starts[0][mask[0]], starts[1][mask[1]]
    assert list(first[-20:]) == list(second[:20])


def test_window_arguments_are_checked():
    with pytest.raises(ValueError, match=r"`doc_stride`, expected fewer than the 317 context pieces .* Received: "
                                         r"doc_stride=317"):
        check_window_arguments(384, 317, 64)
    with pytest.raises(ValueError, match="seq_length"):
        check_window_arguments(3, 0, 1)


def test_answer_positions_label_the_pieces_or_cls(uncased_tokenizer, hf_uncased):
    context = "Ada Lovelace wrote the first program in 1843 for Babbage's Analytical Engine. " * 3
    answer = "Analytical Engine"
    answer_start = context.index(answer, 100)  # the second occurrence
    examples = SquadExamples.from_lists(["Which engine?", "Who?"], [context, context],
                                        [[{"text": answer, "answer_start": answer_start}], []])
    features = qa_features(uncased_tokenizer, examples, seq_length=32, doc_stride=8, max_question_length=8)
    answer_end = answer_start + len(answer)
    labelled = 0
    for row, example in enumerate(features["example_index"]):
        start, end = features["start_positions"][row], features["end_positions"][row]
        if example == 1 or start == 0:
            assert start == end == 0
            continue
        labelled += 1
        assert features["char_starts"][row, start] == answer_start and features["char_ends"][row, end] == answer_end
    # The reference: run_qa.py's rule on transformers' windows.
    _, encoding = _reference_windows(hf_uncased, "Which engine?", context, 32, 8)
    expected = 0
    for i in range(len(encoding["input_ids"])):
        offsets, sequence = encoding["offset_mapping"][i], encoding.sequence_ids(i)
        inside = [k for k, s in enumerate(sequence) if s == 1]
        expected += offsets[inside[0]][0] <= answer_start and offsets[inside[-1]][1] >= answer_end
    assert labelled == expected >= 1


def test_answer_positions_of_an_answer_inside_a_word():
    windows = {"example_index": np.array([0]), "context_mask": np.array([[False, True, True, True, False]]),
               "char_starts": np.array([[0, 0, 4, 9, 0]]), "char_ends": np.array([[0, 3, 9, 12, 0]])}
    # "abc defgh ijk": the answer "fg" lies inside the second piece; "ijk" ends the window.
    assert answer_positions(windows, [6], [8]) == (np.array([2]), np.array([2]))
    assert answer_positions(windows, [9], [12]) == (np.array([3]), np.array([3]))
    assert answer_positions(windows, [-1], [-1]) == (np.array([0]), np.array([0]))


def test_features_of_thousands_of_examples(uncased_tokenizer):
    # How long it takes is measured in benchmarks/, not asserted here.
    contexts = [CONTEXTS[i % 3] + f" number {i}" for i in range(2000)]
    examples = SquadExamples.from_lists(["Who wrote the first program?"] * 2000, contexts)
    features = qa_features(uncased_tokenizer, examples)
    assert features["input_word_ids"].shape == (len(features["example_index"]), 384)
    assert sorted(set(features["example_index"].tolist())) == list(range(2000))


def test_windows_and_primary_copies_in_the_graph():
    # Texts of 0, 5, 6, 7 and 15 pieces; windows of 5 pieces every 3 (stride 2), as tokenizers' overflow cuts them.
    text, index, first, last = (x.numpy().tolist() for x in piece_windows(tf.constant([0, 5, 6, 7, 15], tf.int64), 5, 3))
    assert text == [0, 1, 2, 2, 3, 3, 4, 4, 4, 4, 4]
    assert list(zip(first, last)) == [(0, 0), (0, 5), (0, 5), (3, 6), (0, 5), (3, 7), (0, 5), (3, 8), (6, 11),
                                      (9, 14), (12, 15)]
    assert index == [0, 0, 0, 1, 0, 1, 0, 1, 2, 3, 4]
    # One text of 7 pieces in windows [0, 5) and [3, 7): pieces 3 and 4 appear twice.
    piece = tf.constant([0, 1, 2, 3, 4, 3, 4, 5, 6], tf.int64)
    window = tf.constant([0, 0, 0, 0, 0, 1, 1, 1, 1], tf.int64)
    primary = max_context(piece, piece, window, tf.constant([0, 3], tf.int64), tf.constant([5, 7], tf.int64), 7)
    # Piece 3: 1 piece right of it in window 0, 1 left in window 1: a tie, the earlier window. Piece 4: window 1.
    assert primary.numpy().tolist() == [True, True, True, True, False, False, True, True, True]
    # The same text after one of 4 pieces: flat pieces 4-10, the same choice (its windows count from its start).
    shifted = max_context(piece + 4, piece, window, tf.constant([0, 3], tf.int64), tf.constant([5, 7], tf.int64), 11)
    assert shifted.numpy().tolist() == primary.numpy().tolist()

