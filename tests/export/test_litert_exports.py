"""Every classifier export the package writes converts to LiteRT, or is refused with what to do instead."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import BertEncoder, hub
from bert_keras.export import export_classifier, export_litert, export_module_pair, load_classifier, load_litert
from bert_keras.export.manifest import ExportError
from bert_keras.tasks import BertClassifier

pytest.importorskip("ai_edge_litert")

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "great", "fun", "bad", "movie", "the"] + [
    f"w{i}" for i in range(25)]
TEXTS = ["good movie", "the w1 w2 BAD", "fun " * 40, "", "Great, the movie!"]


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    """A module pair as `bert-keras convert` writes it (the demo fine-tunes MiniLM through such a pair)."""
    root = tmp_path_factory.mktemp("litert_exports")
    (root / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    keras.utils.set_random_seed(7)
    encoder = BertEncoder(vocab_size=len(VOCAB), num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16,
                          max_sequence_length=32)
    export_module_pair(str(root / "modules"), encoder, str(root / "vocab.txt"), do_lower_case=True, seq_length=16)
    return root


@pytest.mark.slow
def test_a_classifier_fine_tuned_through_hub_modules_converts_and_answers_as_its_export(modules):
    # The demo's and finetune_classifier's source: a pair of Hub handles (encoder, preprocess).
    pair = (str(modules / "modules" / "encoder"), str(modules / "modules" / "preprocess"))
    classifier = BertClassifier.from_checkpoint(pair, num_classes=3, seq_length=16)
    assert isinstance(classifier.encoder, hub.KerasLayer)
    rng = np.random.default_rng(1)
    for weight in classifier.weights:  # as fine-tuning moves them, far enough for texts to differ
        weight.assign(weight.numpy() + rng.normal(scale=1.0, size=weight.shape).astype("float32"))
    export_dir = export_classifier(classifier, str(modules / "hub_classifier"), ["neg", "neu", "pos"])
    path = export_litert(export_dir, str(modules / "hub_classifier.tflite"))
    expected = load_classifier(export_dir, warm_up=False).predict_proba(TEXTS)
    got = load_litert(path).predict_proba(TEXTS)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert np.ptp(expected[:, 0]) > 1e-3  # texts answered differently: the comparison says something


@pytest.mark.slow
def test_a_keras_model_export_is_refused_with_what_to_do(modules):
    classifier = BertClassifier.from_checkpoint(str(modules / "modules"), num_classes=3, seq_length=16)
    classifier.export(str(modules / "keras_export"), verbose=False)  # the README's Keras line
    with pytest.raises(ExportError, match=r"records no kind of export: it is a SavedModel such as Keras' "
                       r"`model.export\(\)` writes.*export_classifier\(model, DIR, label_names\).*litert --model DIR"):
        export_litert(str(modules / "keras_export"), str(modules / "k.tflite"))
    assert not (modules / "k.tflite").exists()


def _workflow_model(modules, head):
    """The README's TF Hub workflow: bert_keras.hub layers of a module pair in a keras.Model, `head` on pooled_output."""
    text = keras.layers.Input(shape=(), dtype=tf.string, name="text")
    pooled = hub.KerasLayer(str(modules / "modules" / "encoder"))(
        hub.KerasLayer(str(modules / "modules" / "preprocess"))(text))["pooled_output"]
    for layer in head:
        pooled = layer(pooled)
    model = keras.Model(text, pooled)
    rng = np.random.default_rng(2)
    for weight in model.weights:  # as fine-tuning moves them
        weight.assign(weight.numpy() + rng.normal(scale=1.0, size=weight.shape).astype("float32"))
    return model


@pytest.mark.slow
def test_the_hub_workflows_keras_model_exported_by_export_classifier_converts_and_answers_as_it_does(modules):
    model = _workflow_model(modules, [keras.layers.Dropout(0.1), keras.layers.Dense(3, activation="softmax")])
    export_dir = export_classifier(model, str(modules / "workflow"), ["neg", "neu", "pos"])
    path = export_litert(export_dir, str(modules / "workflow.tflite"))  # its export records the preprocess tokenizer
    expected = np.asarray(model(tf.constant(TEXTS)))
    np.testing.assert_allclose(load_classifier(export_dir, warm_up=False).predict_proba(TEXTS), expected, atol=1e-5)
    np.testing.assert_allclose(load_litert(path).predict_proba(TEXTS), expected, atol=1e-5)
    assert np.ptp(expected[:, 0]) > 1e-3
    # A head BertClassifier cannot hold (two Dense layers) is served as it is: its export records no tokenizer.
    other = _workflow_model(modules, [keras.layers.Dense(4), keras.layers.Dense(3, activation="softmax")])
    other_dir = export_classifier(other, str(modules / "other"), ["neg", "neu", "pos"])
    np.testing.assert_allclose(load_classifier(other_dir, warm_up=False).predict_proba(TEXTS),
                               np.asarray(other(tf.constant(TEXTS))), atol=1e-5)
    with pytest.raises(ExportError, match=r"records no tokenizer: .*more than one Dense layer.*"
                       r"BertClassifier.from_checkpoint\(MODULES_DIR"):
        export_litert(other_dir, str(modules / "other.tflite"))
    assert not (modules / "other.tflite").exists()
