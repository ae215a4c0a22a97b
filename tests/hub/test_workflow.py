"""The TF Hub BERT workflow of DESIGN.md, end to end, on modules exported from a tiny encoder."""

import json
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import hub

TEXTS = [
    "the movie was great", "i loved it", "good fun", "great fun !", "i loved the movie",
    "the movie was terrible", "i hated it", "boring", "bad bad movie", "i hated the boring movie",
    "it was good", "it was bad", "fun fun fun", "terrible .", "the good movie", "the bad movie",
]
LABELS = [1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0]


def _dataset():
    return tf.data.Dataset.from_tensor_slices((tf.constant(TEXTS), tf.constant(LABELS)))


@pytest.mark.slow
def test_reference_workflow(preprocess_dir, encoder_dir, tmp_path):
    preprocess = hub.KerasLayer(preprocess_dir)
    encoder = hub.KerasLayer(encoder_dir, trainable=False)

    inputs = keras.layers.Input(shape=(), dtype=tf.string, name="text")
    outputs = encoder(preprocess(inputs))["pooled_output"]
    probabilities = keras.layers.Dense(2, activation="softmax", name="head")(outputs)
    model = keras.Model(inputs, probabilities)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])

    encoder_variables = list(encoder.resolved_object.variables)
    frozen = [v.numpy().copy() for v in encoder_variables]
    head_before = [w.numpy().copy() for w in model.get_layer("head").weights]
    model.fit(_dataset().batch(8), epochs=2, validation_data=_dataset().batch(8), verbose=0)
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(frozen, encoder_variables))
    assert not np.array_equal(head_before[0], model.get_layer("head").kernel.numpy())

    encoder.trainable = True
    model.compile(optimizer=keras.optimizers.Adam(2e-5), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(_dataset().batch(8), epochs=1, verbose=0)
    changed = sum(not np.array_equal(a, v.numpy()) for a, v in zip(frozen, encoder_variables))
    assert changed == len(encoder_variables) == 39

    export_dir = str(tmp_path / "classifier")
    model.export(export_dir, verbose=False)
    expected = model.predict(tf.constant(TEXTS), verbose=0)

    script = textwrap.dedent(
        """
        import json, os, sys
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
        import tensorflow as tf
        from bert_keras import hub  # registers tensorflow-text's ops
        hub.register_text_ops()
        model = tf.saved_model.load(sys.argv[1])
        texts = json.loads(sys.argv[2])
        print(json.dumps(model.serve(tf.constant(texts)).numpy().tolist()))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script, export_dir, json.dumps(TEXTS)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    reloaded = np.array(json.loads(result.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(reloaded, expected, atol=1e-6)
    assert reloaded.shape == (16, 2)
