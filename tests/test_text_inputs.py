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


@pytest.mark.slow  # 7 s in the full run of 450d6b9
def test_label_names_name_the_predictions_and_survive_saving(vocab_file, tmp_path):
    model = BertClassifier(_encoder(), num_classes=2, preprocessor=BertPreprocessor(vocab_file, seq_length=8),
                           label_names=["negative", "positive"])
    probabilities = keras.ops.convert_to_numpy(keras.ops.softmax(model.predict(np.array(TEXTS), verbose=0)))
    one = model.predict_labels(TEXTS[0])
    assert one == model.predict_labels([TEXTS[0]])[0]
    assert one["scores"] == pytest.approx({"negative": probabilities[0, 0], "positive": probabilities[0, 1]}, abs=1e-6)
    assert one["label"] == ["negative", "positive"][int(probabilities[0].argmax())] and one["score"] == max(one["scores"].values())
    many = model.predict_labels(np.array([TEXTS[1], "  ", TEXTS[2]]), top_k=1)
    assert [len(p["scores"]) for p in many] == [1, 0, 1] and many[1] == {"label": None, "score": None, "scores": {}}
    assert model.predict_labels([]) == []
    with pytest.raises(ValueError, match=r"`top_k`, expected an integer from 1 to 2"):
        model.predict_labels(TEXTS, top_k=3)
    model.save(tmp_path / "clf.keras")
    loaded = keras.saving.load_model(tmp_path / "clf.keras")
    again = loaded.predict_labels(TEXTS[0])
    assert loaded.label_names == ["negative", "positive"] and again["label"] == one["label"]
    assert again["scores"] == pytest.approx(one["scores"], abs=1e-6)
    unnamed = BertClassifier(_encoder(), num_classes=2, preprocessor=BertPreprocessor(vocab_file, seq_length=8))
    assert unnamed.label_names is None and set(unnamed.predict_labels(TEXTS[0])["scores"]) == {"0", "1"}


@pytest.mark.slow
def test_pair_classifiers_name_pairs_and_bad_label_names_are_refused(vocab_file):
    model = BertClassifier(_encoder(), num_classes=2, preprocessor=BertPreprocessor(vocab_file, seq_length=8),
                           text_pairs=True, label_names=["different", "same"])
    expected = keras.ops.convert_to_numpy(keras.ops.softmax(model.predict([np.array(TEXTS), np.array(PAIRS)], verbose=0)))
    got = model.predict_labels(list(zip(TEXTS, PAIRS)))
    np.testing.assert_allclose([[p["scores"]["different"], p["scores"]["same"]] for p in got], expected, atol=1e-6)
    assert model.predict_labels((TEXTS[0], PAIRS[0]))["scores"] == pytest.approx(got[0]["scores"], abs=1e-6)
    for bad, message in [("ab", "expected a list of 2 str"), (["a"], "expected 2 distinct names"), (["a", "a"], "2 distinct")]:
        with pytest.raises(ValueError, match=message):
            BertClassifier(_encoder(), num_classes=2, label_names=bad)
    with pytest.raises(ValueError, match="no preprocessor"):
        BertClassifier(_encoder(), num_classes=2).predict_labels(["a text"])


@pytest.mark.slow  # over 3 s: the whole suite runs it, the fast loop does not
def test_one_text_is_a_batch_of_one(vocab_file):
    model = _classifier(vocab_file)
    expected = np.asarray(model.predict(tf.constant(TEXTS[:1]), verbose=0))
    assert expected.shape == (1, 2)
    np.testing.assert_array_equal(model.predict(TEXTS[0], verbose=0), expected)
    np.testing.assert_array_equal(model.predict(TEXTS[0].encode(), verbose=0), expected)
    pairs = _classifier(vocab_file, text_pairs=True)
    np.testing.assert_array_equal(pairs.predict((TEXTS[0], PAIRS[0]), verbose=0),
                                  pairs.predict([tf.constant(TEXTS[:1]), tf.constant(PAIRS[:1])], verbose=0))
