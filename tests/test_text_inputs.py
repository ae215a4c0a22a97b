"""Tasks take texts as users have them: Python lists and numpy string arrays in fit, evaluate, predict and calls."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import BertEncoder
from bert_keras.tasks import BertClassifier, BertSpanLabeler, BertTokenClassifier
from bert_keras.text import BertPreprocessor

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "movie", "day", "a", "what", "great", "plot"]
TEXTS = ["what a great day", "bad movie", "good plot", "a bad day"]
PAIRS = ["good", "bad", "a movie", "what"]
LABELS = [1, 0, 1, 0]


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n")
    return str(path)


def _encoder():
    keras.utils.set_random_seed(1)
    return BertEncoder(vocab_size=len(VOCAB), num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16,
                       max_sequence_length=16)


def _classifier(vocab_file, text_pairs=False):
    model = BertClassifier(_encoder(), num_classes=2, preprocessor=BertPreprocessor(vocab_file, seq_length=8),
                           text_pairs=text_pairs)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["list", "numpy"])
def test_a_classifier_takes_lists_and_numpy_strings(vocab_file, kind):
    model = _classifier(vocab_file)
    texts, labels = (TEXTS, LABELS) if kind == "list" else (np.array(TEXTS), np.array(LABELS))
    expected = np.asarray(model.predict(tf.constant(TEXTS), verbose=0))
    np.testing.assert_array_equal(model.predict(texts, verbose=0), expected)
    # A call runs eagerly, predict a traced graph: equal up to float rounding.
    np.testing.assert_allclose(np.asarray(model(texts)), expected, atol=1e-6)
    np.testing.assert_allclose(np.asarray(model(texts[:1])), expected[:1], atol=1e-6)  # one text in a list
    loss, accuracy = model.evaluate(texts, labels, verbose=0)
    assert (loss, accuracy) == tuple(model.evaluate(tf.constant(TEXTS), tf.constant(LABELS), verbose=0))
    history = model.fit(texts, labels, batch_size=2, epochs=2, validation_data=(texts, labels), verbose=0)
    assert len(history.history["loss"]) == 2 and len(history.history["val_loss"]) == 2
    assert not np.array_equal(model.predict(texts, verbose=0), expected)  # it trained


@pytest.mark.slow
def test_object_arrays_and_bytes(vocab_file):
    model = _classifier(vocab_file)
    expected = model.predict(tf.constant(TEXTS), verbose=0)
    np.testing.assert_array_equal(model.predict(np.array(TEXTS, dtype=object), verbose=0), expected)
    np.testing.assert_array_equal(model.predict([t.encode() for t in TEXTS], verbose=0), expected)


@pytest.mark.slow
def test_a_pair_classifier_takes_a_pair_of_lists(vocab_file):
    model = _classifier(vocab_file, text_pairs=True)
    expected = model.predict([tf.constant(TEXTS), tf.constant(PAIRS)], verbose=0)
    np.testing.assert_array_equal(model.predict([TEXTS, PAIRS], verbose=0), expected)
    np.testing.assert_array_equal(model.predict((np.array(TEXTS), np.array(PAIRS)), verbose=0), expected)
    assert len(model.fit([TEXTS, PAIRS], LABELS, batch_size=2, verbose=0).history["loss"]) == 1


@pytest.mark.slow
def test_other_text_tasks_take_lists(vocab_file):
    preprocessor = BertPreprocessor(vocab_file, seq_length=8)
    tagger = BertTokenClassifier(_encoder(), num_classes=3, preprocessor=preprocessor)
    np.testing.assert_array_equal(tagger.predict(TEXTS, verbose=0), tagger.predict(tf.constant(TEXTS), verbose=0))
    spans = BertSpanLabeler(_encoder(), preprocessor=BertPreprocessor(vocab_file, seq_length=8))
    outputs, reference = spans.predict([TEXTS, PAIRS], verbose=0), spans.predict([tf.constant(TEXTS), tf.constant(PAIRS)], verbose=0)
    for key in reference:
        np.testing.assert_array_equal(outputs[key], reference[key])


def test_a_task_without_preprocessor_is_left_as_it_was():
    model = BertClassifier(_encoder(), num_classes=2)
    inputs = {"input_word_ids": np.array([[2, 5, 3]], "int32"), "input_mask": np.ones((1, 3), "int32"),
              "input_type_ids": np.zeros((1, 3), "int32")}
    assert model.predict(inputs, verbose=0).shape == (1, 2)
