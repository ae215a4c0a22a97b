import keras
import pytest
import tensorflow as tf

from bert_keras.text import BertPacker, pack_inputs

CLS, SEP = 2, 3


def _pack(segments, seq_length, **kwargs):
    packed = pack_inputs(segments, seq_length, start_of_sequence_id=CLS, end_of_segment_id=SEP, **kwargs)
    return {key: value.numpy().tolist() for key, value in packed.items()}


def test_one_segment_values():
    packed = _pack([tf.ragged.constant([[7, 8, 9], [5]])], 6)
    assert packed == {
        "input_word_ids": [[2, 7, 8, 9, 3, 0], [2, 5, 3, 0, 0, 0]],
        "input_mask": [[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]],
        "input_type_ids": [[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]],
    }


def test_two_segments_round_robin_trim_to_seq_length_minus_three():
    a = tf.ragged.constant([[10, 11, 12, 13, 14], [10]])
    b = tf.ragged.constant([[20, 21, 22, 23], [20, 21, 22, 23, 24, 25]])
    packed = _pack([a, b], 8)  # 5 tokens left: A 3, B 2 / A 1, B 4
    assert packed["input_word_ids"] == [[2, 10, 11, 12, 3, 20, 21, 3], [2, 10, 3, 20, 21, 22, 23, 3]]
    assert packed["input_type_ids"] == [[0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1, 1]]
    assert packed["input_mask"] == [[1] * 8, [1] * 8]


def test_waterfall_keeps_the_first_segment():
    a = tf.ragged.constant([[10, 11, 12, 13, 14]])
    b = tf.ragged.constant([[20, 21, 22, 23]])
    packed = _pack([a, b], 8, truncation="waterfall")
    assert packed["input_word_ids"] == [[2, 10, 11, 12, 13, 14, 3, 3]]
    assert packed["input_type_ids"] == [[0, 0, 0, 0, 0, 0, 0, 1]]


def test_ragged_rank_2_dense_and_three_segments():
    words = tf.ragged.constant([[[7, 8], [9]]], ragged_rank=2)  # (batch, words, word_pieces)
    dense = tf.constant([[5, 6]])
    packed = _pack([words, dense, tf.ragged.constant([[4]])], 10, padding_id=1)
    assert packed["input_word_ids"] == [[2, 7, 8, 9, 3, 5, 6, 3, 4, 3]]
    assert packed["input_type_ids"] == [[0, 0, 0, 0, 0, 1, 1, 1, 2, 2]]
    packed = _pack(words, 7, padding_id=1)
    assert packed["input_word_ids"] == [[2, 7, 8, 9, 3, 1, 1]]
    assert packed["input_mask"] == [[1, 1, 1, 1, 1, 0, 0]]


def test_outputs_are_int32_and_traced_for_ragged_rank_1_and_2():
    spec1 = tf.RaggedTensorSpec([None, None], tf.int32, ragged_rank=1)
    spec2 = tf.RaggedTensorSpec([None, None, None], tf.int32, ragged_rank=2)
    for spec, value in [(spec1, tf.ragged.constant([[7]])), (spec2, tf.ragged.constant([[[7]]], ragged_rank=2))]:
        traced = tf.function(lambda a, b: pack_inputs([a, b], 5, CLS, SEP), input_signature=[spec, spec])
        packed = traced(value, value)
        assert {k: v.dtype for k, v in packed.items()} == dict.fromkeys(packed, tf.int32)
        assert packed["input_word_ids"].numpy().tolist() == [[2, 7, 3, 7, 3]]


def test_empty_batch_and_empty_segments():
    empty = tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int32), tf.zeros([0], tf.int64))
    packed = pack_inputs([empty], 4, CLS, SEP)
    assert packed["input_word_ids"].shape == (0, 4)
    assert _pack([tf.ragged.constant([[]], dtype=tf.int32)] * 2, 4)["input_word_ids"] == [[2, 3, 3, 0]]


def test_errors():
    a = tf.ragged.constant([[7]])
    with pytest.raises(ValueError, match=r"`seq_length`, expected an integer >= 3. Received: seq_length=2"):
        pack_inputs([a, a], 2, CLS, SEP)
    with pytest.raises(ValueError, match=r"`truncation`.*Received: truncation='longest_first'"):
        pack_inputs([a], 8, CLS, SEP, truncation="longest_first")
    with pytest.raises(TypeError, match=r"`segments\[0\]`, expected integer token ids. Received: dtype=string"):
        pack_inputs([tf.ragged.constant([["a"]])], 8, CLS, SEP)
    with pytest.raises(ValueError, match=r"`segments`, expected a non-empty list"):
        pack_inputs([], 8, CLS, SEP)
    with pytest.raises(ValueError, match=r"`segments\[0\]`.*Received: shape=\(3,\)"):
        pack_inputs([tf.constant([1, 2, 3])], 8, CLS, SEP)


def test_layer_config_round_trip_and_seq_length_override():
    packer = BertPacker(start_of_sequence_id=101, end_of_segment_id=102, seq_length=6, truncation="waterfall")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(packer))
    assert restored.get_config() == packer.get_config()
    assert restored.get_config()["truncation"] == "waterfall"
    out = restored(tf.ragged.constant([[7, 8, 9, 10, 11]]))
    assert out["input_word_ids"].numpy().tolist() == [[101, 7, 8, 9, 10, 102]]
    out = restored(tf.ragged.constant([[7]]), seq_length=4)
    assert out["input_word_ids"].numpy().tolist() == [[101, 7, 102, 0]]
    with pytest.raises(ValueError, match=r"`seq_length`.*Received: seq_length=1"):
        BertPacker(101, 102, seq_length=1)


# --- pairs against BertTokenizerFast(text, text_pair, truncation="longest_first") ---


def _reference_pairs(hf, a, b, seq_length):
    return hf(a, b, truncation="longest_first", max_length=seq_length, padding="max_length")


def _ours_pairs(tokenizer, a, b, seq_length):
    segments = [tokenizer(tf.constant(a)), tokenizer(tf.constant(b))]
    special = tokenizer.get_special_tokens_dict()
    packed = pack_inputs(
        segments, seq_length, special["start_of_sequence_id"], special["end_of_segment_id"], special["padding_id"]
    )
    return {key: value.numpy().tolist() for key, value in packed.items()}


def test_pairs_equal_the_reference_when_the_budget_is_even(uncased_tokenizer, hf_uncased, tweets):
    # seq_length 33 leaves 30 tokens: round-robin and longest_first then
    # always keep the same tokens.
    a, b = tweets[0:6000:2], tweets[1:6000:2]
    expected = _reference_pairs(hf_uncased, a, b, 33)
    ours = _ours_pairs(uncased_tokenizer, a, b, 33)
    assert ours["input_word_ids"] == expected["input_ids"]
    assert ours["input_type_ids"] == expected["token_type_ids"]
    assert ours["input_mask"] == expected["attention_mask"]
    assert sum(row[-1] != 0 for row in ours["input_word_ids"]) > 1000  # many pairs were trimmed


def test_pairs_differ_from_the_reference_only_by_the_odd_token(uncased_tokenizer, hf_uncased, tweets):
    # seq_length 32 leaves 29 tokens. When both segments are longer than 14,
    # round-robin (TF Hub) gives the odd token to A (A 15, B 14); longest_first
    # gives it to the longer segment, to B on a tie (A 14, B 15 when A <= B).
    a, b = tweets[0:6000:2], tweets[1:6000:2]
    expected = _reference_pairs(hf_uncased, a, b, 32)
    ours = _ours_pairs(uncased_tokenizer, a, b, 32)
    lengths_a = [len(ids) for ids in hf_uncased(a, add_special_tokens=False)["input_ids"]]
    lengths_b = [len(ids) for ids in hf_uncased(b, add_special_tokens=False)["input_ids"]]
    differ = [i for i in range(len(a)) if ours["input_word_ids"][i] != expected["input_ids"][i]]
    rule = [i for i in range(len(a)) if 14 < lengths_a[i] <= lengths_b[i]]
    assert differ == rule and len(differ) > 100
    for i in differ:
        assert ours["input_type_ids"][i] == [0] * 17 + [1] * 15
        assert expected["token_type_ids"][i] == [0] * 16 + [1] * 16
        assert ours["input_mask"][i] == expected["attention_mask"][i] == [1] * 32


def test_empty_second_text_is_a_segment_as_in_the_reference_batch_call(uncased_tokenizer, hf_uncased):
    # The Hub contract packs an empty B as an empty segment with its own [SEP],
    # as the reference does in a batch call. (Documented difference: called on
    # one pair, transformers drops an empty `text_pair` altogether.)
    assert _reference_pairs(hf_uncased, ["hello"], [""], 6)["input_ids"] == [[101, 7592, 102, 102, 0, 0]]
    assert _ours_pairs(uncased_tokenizer, ["hello"], [""], 6)["input_word_ids"] == [[101, 7592, 102, 102, 0, 0]]
    assert _reference_pairs(hf_uncased, "hello", "", 6)["input_ids"] == [101, 7592, 102, 0, 0, 0]


def test_pieces_of_words_equal_merge_dims_and_put_no_checks_in_a_graph():
    from bert_keras.text.packer import pieces_of_words

    words = tf.ragged.constant([[[1, 2], [], [3]], [], [[4]], [[], []], [[5, 6, 7], [8]]], dtype=tf.int64)
    for case in (words, words.with_row_splits_dtype(tf.int32), words[:0]):
        merged = pieces_of_words(case)
        assert merged.to_list() == case.merge_dims(1, 2).to_list()
        assert merged.row_splits.dtype == case.row_splits.dtype
    assert pieces_of_words(tf.ragged.constant([[[[1]], [[2, 3]]]])).to_list() == [[[1], [2, 3]]]  # deeper: merge_dims
    graph = tf.function(pieces_of_words).get_concrete_function(
        tf.RaggedTensorSpec([None, None, None], tf.int64, ragged_rank=2)).graph
    assert not [op.name for op in graph.get_operations() if op.type in ("Assert", "If", "StatelessIf")]
