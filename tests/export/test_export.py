"""bert_keras.export: every export in one package, its names where the README shows them, and what it reads of a
model (its last layer's activation, its own serving computation)."""

import subprocess
import sys

import keras
import pytest

from bert_keras import BertEncoder, export
from bert_keras.tasks import BertClassifier

TINY = dict(vocab_size=40, num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16, max_sequence_length=16)


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


def test_encode_in_batches_embeds_two_batches_per_call_and_puts_rows_back_in_order():
    import tensorflow as tf

    from bert_keras.embedder import BatchEmbedder, encode_in_batches

    calls = []

    def embed(batch):  # (batch,) strings -> (batch, 2): the text's length in bytes, its first byte
        calls.append(tf.executing_eagerly())
        first = tf.strings.unicode_decode(tf.strings.substr(batch, 0, 1), "UTF-8").to_tensor(shape=[None, 1])
        return tf.stack([tf.cast(tf.strings.length(batch), tf.float32), tf.cast(first[:, 0], tf.float32)], axis=1)

    embedder = BatchEmbedder(embed)
    texts = [f"{chr(97 + i % 26)}{'x' * (i % 7)}" for i in range(23)]
    expected = [[len(t), ord(t[0])] for t in texts]
    assert encode_in_batches(texts, 4, 2, embedder).tolist() == expected  # 6 batches: 3 calls of two
    assert encode_in_batches(texts, 5, 2, embedder).tolist() == expected  # 5: two pairs and one alone
    assert encode_in_batches("abc", 4, 2, embedder).tolist() == [3, 97]
    assert encode_in_batches([], 4, 2, embedder).shape == (0, 2)
    # One trace of a batch (graph mode), shared by the one-batch and the two-batch functions.
    assert calls == [False]
    assert len(embedder.two.get_concrete_function().graph.get_operations()) < 10  # two calls of `one`, not two copies


@pytest.mark.slow  # 5 s in the full run of 450d6b9
def test_an_export_serves_token_ids_too_and_records_how_it_tokenizes(tmp_path):
    import numpy as np
    import tensorflow as tf

    from bert_keras.export.manifest import read_manifest
    from bert_keras.text import BertPreprocessor

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "day"] + [f"w{i}" for i in range(32)]
    classifier = BertClassifier(BertEncoder(**TINY), num_classes=3, preprocessor=BertPreprocessor(vocab, seq_length=12))
    directory = export.export_classifier(classifier, str(tmp_path / "clf"), ["a", "b", "c"])
    texts = ["good day", "bad w3 w4 day"]
    loaded = tf.saved_model.load(directory)
    packed = classifier.preprocessor(tf.constant(texts))
    from_ids = loaded.serve_ids(**packed)["probabilities"].numpy()
    np.testing.assert_allclose(from_ids, loaded.serve(tf.constant(texts))["probabilities"].numpy(), atol=1e-6)
    tokenizer = read_manifest(directory)["tokenizer"]
    assert tokenizer == {"kind": "wordpiece", "seq_length": 12, "cls_id": 2, "sep_id": 3, "pad_id": 0,
                         "unknown_token": "[UNK]", "vocabulary_size": 40, "lower_case": True, "suffix_indicator": "##",
                         "max_chars_per_word": 100, "vocabulary_file": "vocab.txt"}
    with open(f"{directory}/assets.extra/vocab.txt", encoding="utf-8") as f:
        assert f.read().split("\n")[:-1] == vocab
