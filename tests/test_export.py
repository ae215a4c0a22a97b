"""bert_keras.export: every export in one package, its names where the README shows them, and what it reads of a
model (its last layer's activation, its own serving computation)."""

import subprocess
import sys

import keras
import pytest

from bert_keras import BertEncoder, export
from bert_keras.tasks import BertClassifier

TINY = dict(vocab_size=40, num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16, max_sequence_length=16)


def test_the_names_the_readme_shows_in_saved_model_are_those_of_bert_keras_export():
    from bert_keras import saved_model

    for name in ("export_classifier", "load_classifier", "outputs_probabilities", "TextClassifier", "LABELS_FILE"):
        assert getattr(saved_model, name) is getattr(export, name), name


def test_dtype_helpers_import_no_tensorflow():
    code = "import sys, bert_keras.dtypes as d; d.check_compute_dtype('float32'); print('tensorflow' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


@pytest.mark.parametrize("activation, expected", [(None, False), ("softmax", True)])
def test_outputs_probabilities_of_a_classifier_is_its_activation(activation, expected):
    classifier = BertClassifier(BertEncoder(**TINY), num_classes=3, activation=activation)
    assert export.outputs_probabilities(classifier) is expected


def test_a_model_without_its_own_serving_computation_is_called_as_it_is():
    text = keras.Input(shape=(4,))
    plain = keras.Model(text, keras.layers.Dense(3)(text))
    assert export.classifier._on_native_encoder(plain, "float32") is plain
    assert not export.classifier._serves_its_own_outputs(plain)
    classifier = BertClassifier(BertEncoder(**TINY), num_classes=3)  # no preprocessor: its own graph serves
    assert export.classifier._on_native_encoder(classifier, "float32") is classifier
    assert not export.classifier._serves_its_own_outputs(classifier)


class _Measured(keras.layers.Layer):
    """A preprocessor seen only through its calls: no `tokenizer`, no `seq_length`."""

    def __init__(self, preprocessor):
        super().__init__()
        self.inner = preprocessor

    def call(self, inputs):
        return self.inner(inputs)


SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.mark.parametrize("tokens, pairs, expected", [
    (SPECIAL + ["the", "x", "##y"], False, ("a", 1, 24)),  # "a" is [UNK]: one word piece too
    (SPECIAL + ["1", "a"], True, ("a", 1, 24)),
])
def test_the_warm_up_word_read_from_the_vocabulary_is_the_one_the_preprocessor_measures(tokens, pairs, expected):
    from bert_keras.export import warmup
    from bert_keras.text import BertPreprocessor

    preprocessor = BertPreprocessor(tokens, seq_length=24)
    read = warmup._repeated_word(preprocessor, pairs)
    assert read == warmup._repeated_word(_Measured(preprocessor), pairs) == expected


def test_encode_in_batches_runs_two_calls_at_once_and_puts_rows_back_in_order():
    import threading
    import time

    import numpy as np

    from bert_keras.export import sentence_encoder

    lock, state = threading.Lock(), {"running": 0, "most": 0, "calls": []}

    def embed(batch):  # (batch,) strings -> (batch, 2): the text's length and its first letter's code
        texts = [t.decode() for t in batch.numpy()]
        with lock:
            state["running"] += 1
            state["most"] = max(state["most"], state["running"])
            state["calls"].append(texts)
        time.sleep(0.05)
        with lock:
            state["running"] -= 1
        if any(t.startswith("boom") for t in texts):
            raise ValueError("a bad batch")
        return np.array([[len(t), ord(t[0]) if t else 0] for t in texts], dtype="float32")

    texts = [f"{chr(97 + i % 26)}{'x' * (i % 7)}" for i in range(23)]
    vectors = sentence_encoder.encode_in_batches(texts, 4, 2, embed)
    assert vectors.tolist() == [[len(t), ord(t[0])] for t in texts]
    assert state["most"] == sentence_encoder.BATCHES_IN_FLIGHT == 2
    assert sorted(len(call) for call in state["calls"]) == [3, 4, 4, 4, 4, 4]
    # The first error is raised; what was queued after it does not run.
    state["calls"].clear()
    with pytest.raises(ValueError, match="a bad batch"):
        sentence_encoder.encode_in_batches(["boom" + "x" * 40] + ["a"] * 99, 2, 2, embed)
    assert len(state["calls"]) <= 1 + 2 * sentence_encoder.BATCHES_IN_FLIGHT
