"""BertEncoder's layout per call: padded for a batch with little padding or few positions, packed otherwise."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import BertEncoder
from bert_keras.export import export_classifier, load_classifier
from bert_keras.layers import packing
from bert_keras.layers.packing import prefers_padded
from bert_keras.tasks import BertClassifier, BertTokenClassifier
from bert_keras.text import BertPreprocessor

WORDS = ["good", "great", "fun", "bad", "awful", "boring", "movie", "the", "was", "plot"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + [f"w{i}" for i in range(25)]
TINY = dict(vocab_size=len(VOCAB), num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32,
            max_sequence_length=128, dropout=0.0, attention_dropout=0.0)
# An empty text, a long one cut at SEQ, short ones: 4 rows of SEQ positions, 3/4 of them padding.
TEXTS = ["good movie", "", "fun " * 200, "the plot was awful"]
SEQ = 32
# The tests' batches are small: they run packed from this many positions on (in place of PADDED_MAX_POSITIONS).
SMALL = 16
ALWAYS_PADDED = (10**9, 1.0)
ALWAYS_PACKED = (-1, -1.0)


def force(monkeypatch, thresholds):
    monkeypatch.setattr(packing, "PADDED_MAX_POSITIONS", thresholds[0])
    monkeypatch.setattr(packing, "PADDED_MAX_PADDING_SHARE", thresholds[1])


def test_which_batches_run_padded():
    assert bool(prefers_padded([[1] * 40]))  # one text: no padding at all
    assert bool(prefers_padded([[1] * 30 + [0] * 10, [1] * 40]))  # few positions
    many_short = [[1] * 100] + [[1] * 10 + [0] * 90] * 7  # 800 positions, 630 of them padding
    assert not bool(prefers_padded(many_short))
    similar = [[1] * 100] + [[1] * 90 + [0] * 10] * 7  # 800 positions, 70 of them padding
    assert bool(prefers_padded(similar))
    assert bool(tf.function(prefers_padded, jit_compile=True)(tf.constant(many_short)))  # XLA: always padded


@pytest.fixture(scope="module")
def encoder():
    keras.utils.set_random_seed(5)
    return BertEncoder(**TINY, return_attention_probs=True)


def _inputs(texts, seq_length=SEQ):
    return BertPreprocessor(VOCAB, seq_length=seq_length)(tf.constant(texts))


@pytest.mark.parametrize("in_graph", [False, True], ids=["eager", "graph"])
def test_both_layouts_give_every_output_with_zeros_at_padding(encoder, monkeypatch, in_graph):
    inputs = _inputs(TEXTS)
    outputs = {}
    for name, thresholds in (("padded", ALWAYS_PADDED), ("packed", ALWAYS_PACKED)):
        force(monkeypatch, thresholds)
        call = tf.function(lambda x: encoder(x, training=False)) if in_graph else encoder
        outputs[name] = call(inputs)
    padded, packed = outputs["padded"], outputs["packed"]
    assert sorted(padded) == sorted(packed) == ["attention_probs", "default", "encoder_outputs", "pooled_output",
                                                "sequence_output"]
    for key in ("sequence_output", "pooled_output", "default"):
        np.testing.assert_allclose(padded[key], packed[key], atol=1e-5)
    for padded_layer, packed_layer in zip(padded["encoder_outputs"], packed["encoder_outputs"], strict=True):
        np.testing.assert_allclose(padded_layer, packed_layer, atol=1e-5)
    computed = (inputs["input_mask"].numpy() > 0) | (np.arange(SEQ) == 0)  # real tokens and each row's first
    for padded_probs, packed_probs in zip(padded["attention_probs"], packed["attention_probs"], strict=True):
        queries = np.broadcast_to(computed[:, None, :], padded_probs.shape[:3])  # a padding query's row means nothing
        np.testing.assert_allclose(padded_probs.numpy()[queries], packed_probs.numpy()[queries], atol=1e-5)
    assert not np.any(padded["sequence_output"].numpy()[~computed])
    assert np.all(np.any(padded["sequence_output"].numpy()[computed] != 0, axis=-1))


def test_each_call_takes_the_layout_of_its_batch(encoder, monkeypatch):
    monkeypatch.setattr(packing, "PADDED_MAX_POSITIONS", SMALL)
    taken = []
    padded_outputs = BertEncoder._padded_graph_outputs
    monkeypatch.setattr(BertEncoder, "_padded_graph_outputs", lambda self, x: taken.append("padded") or padded_outputs(self, x))
    encoder(_inputs(["good movie"], seq_length=8), training=False)  # one text without padding
    encoder(_inputs(["good"] + ["fun " * 200] * 3), training=False)  # 128 positions, 29 of them padding
    assert taken == ["padded", "padded"]
    encoder(_inputs(TEXTS), training=False)  # 128 positions, 84 of them padding: packed
    encoder(_inputs(["good movie"], seq_length=8), training=True)  # training: always the functional graph
    assert taken == ["padded", "padded"]


def test_a_classifier_export_serves_both_layouts_with_the_models_outputs(monkeypatch, tmp_path):
    keras.utils.set_random_seed(7)
    classifier = BertClassifier(BertEncoder(**TINY), num_classes=3,
                                preprocessor=BertPreprocessor(VOCAB, seq_length=SEQ), dropout=0.0)
    force(monkeypatch, ALWAYS_PACKED)
    expected = tf.nn.softmax(classifier(tf.constant(TEXTS))).numpy()
    monkeypatch.undo()
    monkeypatch.setattr(packing, "PADDED_MAX_POSITIONS", SMALL)  # read when the export traces its serving function
    loaded = load_classifier(export_classifier(classifier, str(tmp_path / "classifier"), ["a", "b", "c"]),
                             warm_up=False)
    one_at_a_time = np.concatenate([loaded.predict_proba([text]) for text in TEXTS])  # padded, one text each
    np.testing.assert_allclose(one_at_a_time, expected, atol=1e-5)
    np.testing.assert_allclose(loaded.predict_proba(TEXTS), expected, atol=1e-5)  # 84 of 128 positions padding: packed
    np.testing.assert_allclose(loaded.predict_proba(np.array(TEXTS[::-1], dtype=object)), expected[::-1], atol=1e-5)


def test_a_tagger_gives_the_same_logits_in_both_layouts(monkeypatch):
    keras.utils.set_random_seed(9)
    tagger = BertTokenClassifier(BertEncoder(**TINY), num_classes=3, preprocessor=BertPreprocessor(VOCAB, seq_length=SEQ))
    logits = {}
    for name, thresholds in (("padded", ALWAYS_PADDED), ("packed", ALWAYS_PACKED)):
        force(monkeypatch, thresholds)
        logits[name] = tf.function(lambda texts: tagger(texts, training=False))(tf.constant(TEXTS)).numpy()
    mask = _inputs(TEXTS)["input_mask"].numpy() > 0
    np.testing.assert_allclose(logits["padded"][mask], logits["packed"][mask], atol=1e-5)


@pytest.mark.parametrize("thresholds", [ALWAYS_PADDED, ALWAYS_PACKED], ids=["padded", "packed"])
def test_the_served_pooled_output_is_the_encoders(encoder, monkeypatch, thresholds):
    force(monkeypatch, thresholds)
    inputs = _inputs(TEXTS)
    served = tf.function(encoder.served_pooled_output)(inputs)  # padded: the last block for [CLS] only
    np.testing.assert_allclose(served, encoder(inputs, training=False)["pooled_output"], atol=1e-5)
