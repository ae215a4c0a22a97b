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
    # The workflow of bert_keras.hub layers in a keras.Model, exported by export_classifier: its tokenizer is inside.
    text = keras.layers.Input(shape=(), dtype=tf.string, name="text")
    pooled = hub.KerasLayer(str(modules / "modules" / "encoder"))(
        hub.KerasLayer(str(modules / "modules" / "preprocess"))(text))
    model = keras.Model(text, keras.layers.Dense(3, activation="softmax")(pooled["pooled_output"]))
    export_dir = export_classifier(model, str(modules / "workflow"), ["neg", "neu", "pos"])
    with pytest.raises(ExportError, match=r"records no tokenizer: .*BertClassifier.from_checkpoint\(MODULES_DIR"):
        export_litert(export_dir, str(modules / "w.tflite"))
    assert not (modules / "k.tflite").exists() and not (modules / "w.tflite").exists()
