"""Our exported modules in the legacy stack: tf_keras + the real tensorflow_hub.KerasLayer."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from bert_keras import hub
from tests.hub.conftest import encoder_inputs

LEGACY_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import warnings; warnings.filterwarnings("ignore")
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the preprocessing ops)
    import tensorflow_hub as hub

    preprocess_dir, encoder_dir, inputs_file, out_file = sys.argv[1:]
    preprocess = hub.KerasLayer(preprocess_dir)
    encoder = hub.KerasLayer(encoder_dir, trainable=True)

    text = tf.keras.layers.Input(shape=(), dtype=tf.string)
    pooled = encoder(preprocess(text))["pooled_output"]
    logits = tf.keras.layers.Dense(2)(pooled)
    model = tf.keras.Model(text, logits)
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-3),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    ids = {k: tf.constant(v, tf.int32) for k, v in json.load(open(inputs_file)).items()}
    before = encoder(ids)
    texts = tf.constant(["the movie was great", "i hated it", "good fun", "boring"])
    history = model.fit(texts, tf.constant([1, 0, 1, 0]), epochs=1, batch_size=4, verbose=0)
    after = encoder(ids)["pooled_output"]
    json.dump({
        "keras": type(model).__module__,
        "layer": type(encoder).__module__,
        "trainable_weights": len(encoder.trainable_weights),
        "loss": history.history["loss"],
        "pooled_output": before["pooled_output"].numpy().tolist(),
        "sequence_output": before["sequence_output"].numpy().tolist(),
        "pooled_changed": float(np.max(np.abs(after.numpy() - before["pooled_output"].numpy()))),
    }, open(out_file, "w"))
    """
)


@pytest.mark.slow
def test_tensorflow_hub_keras_layer_in_tf_keras(preprocess_dir, encoder_dir, tmp_path):
    pytest.importorskip("tf_keras")
    inputs = encoder_inputs()
    inputs_file, out_file, script = tmp_path / "inputs.json", tmp_path / "out.json", tmp_path / "legacy.py"
    inputs_file.write_text(json.dumps({k: v.tolist() for k, v in inputs.items()}))
    script.write_text(LEGACY_SCRIPT)
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1")
    result = subprocess.run(
        [sys.executable, str(script), preprocess_dir, encoder_dir, str(inputs_file), str(out_file)],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    legacy = json.loads(out_file.read_text())
    assert legacy["keras"].startswith("tf_keras")
    assert legacy["layer"].startswith("tensorflow_hub")
    assert legacy["trainable_weights"] == 39
    assert np.isfinite(legacy["loss"][0])
    assert legacy["pooled_changed"] > 0

    ours = hub.KerasLayer(encoder_dir)({k: tf.constant(v) for k, v in inputs.items()})
    np.testing.assert_allclose(legacy["pooled_output"], ours["pooled_output"].numpy(), atol=1e-5)
    np.testing.assert_allclose(legacy["sequence_output"], ours["sequence_output"].numpy(), atol=1e-5)
