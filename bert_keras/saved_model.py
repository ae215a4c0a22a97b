"""Whole-model export for serving raw strings, and a loader that registers tensorflow-text's ops."""

import json
import logging
import os

import keras
import numpy as np
import tensorflow as tf

from bert_keras._files import staged_directory
from bert_keras.tasks import BertClassifier

logger = logging.getLogger(__name__)

LABELS_FILE = "labels.json"


def outputs_probabilities(model):
    """Whether a classifier's output is probabilities (a softmax) rather than logits.

    A `BertClassifier` says so by its `activation`; for another Keras model,
    the activation of its last layer tells (e.g. `Dense(3, activation="softmax")`).

    >>> text = keras.Input(shape=(4,))
    >>> outputs_probabilities(keras.Model(text, keras.layers.Dense(3, activation="softmax")(text)))
    True
    >>> outputs_probabilities(keras.Model(text, keras.layers.Dense(3)(text)))
    False
    """
    if isinstance(model, BertClassifier):
        return model.activation == "softmax"
    activation = getattr(model.layers[-1], "activation", None) if model.layers else None
    return activation is keras.activations.softmax or getattr(activation, "__name__", None) == "softmax"


def export_classifier(model, export_dir, label_names, overwrite=False, extra_assets=None):
    """Exports a text classifier as a SavedModel that serves raw strings.

    The `serve` endpoint (also the `serving_default` signature) takes a
    `(batch,)` string tensor `text` (and `text_pair` for two-input models)
    and returns `probabilities` `(batch, num_classes)` and `label` (the name
    of the most probable class). `label_names()` returns the class names.
    A model that outputs logits (see `outputs_probabilities`) gets a softmax
    in the export.

    Args:
        model: a `keras.Model` from strings to class logits or probabilities.
        export_dir: str. Written to a temporary sibling and moved into place.
        label_names: list of str, in the order of the model's outputs.
        overwrite: bool. Replace an existing `export_dir`. Defaults to `False`.
        extra_assets: optional dict of file name -> JSON-serialisable value,
            written to `assets.extra/` (e.g. training metrics).
    """
    export_dir = os.fspath(export_dir)
    label_names = [str(name) for name in label_names]
    num_outputs = model.outputs[0].shape[-1]
    if num_outputs != len(label_names):
        raise ValueError(
            f"The model has {num_outputs} outputs but {len(label_names)} label names were given: {label_names}."
        )
    names = tf.constant(label_names)
    input_names = ["text", "text_pair"][: len(model.inputs)]

    archive = keras.export.ExportArchive()
    archive.track(model)

    softmax = not outputs_probabilities(model)

    def serve(*texts):
        outputs = model(list(texts) if len(texts) > 1 else texts[0], training=False)
        probabilities = tf.nn.softmax(tf.cast(outputs, tf.float32), axis=-1) if softmax else outputs
        return {"probabilities": probabilities, "label": tf.gather(names, tf.argmax(probabilities, axis=-1))}

    archive.add_endpoint(
        "serve", serve, input_signature=[tf.TensorSpec([None], tf.string, name=name) for name in input_names]
    )
    archive.add_endpoint("label_names", lambda: names, input_signature=[])

    with staged_directory(export_dir, overwrite, kind="classifier") as staging:
        archive.write_out(staging, verbose=False)
        os.makedirs(os.path.join(staging, "assets.extra"), exist_ok=True)
        with open(os.path.join(staging, "assets.extra", LABELS_FILE), "w") as f:
            json.dump({"label_names": label_names, "inputs": input_names}, f)
        for name, value in (extra_assets or {}).items():
            with open(os.path.join(staging, "assets.extra", name), "w") as f:
                json.dump(value, f, indent=2)
    logger.info("Exported the classifier to %s", export_dir)
    return export_dir


class TextClassifier:
    """A loaded classifier export: `predict(texts)` -> probabilities and label names."""

    def __init__(self, export_dir):
        from bert_keras.hub.loader import load

        self.export_dir = os.fspath(export_dir)
        self._saved = load(self.export_dir)
        if not hasattr(self._saved, "serve"):
            raise ValueError(
                f"{self.export_dir!r} is not a classifier exported by bert_keras (it has no `serve` endpoint)."
            )
        self.label_names = [name.decode() for name in self._saved.label_names().numpy()]
        # The inputs come from the endpoint's own signature: `text`, and `text_pair` for pairs.
        _, keywords = self._saved.signatures["serving_default"].structured_input_signature
        self.inputs = sorted(keywords, key=["text", "text_pair"].index) if set(keywords) <= {"text", "text_pair"} else sorted(keywords)

    def predict(self, texts, text_pairs=None, batch_size=64):
        """Returns `(probabilities, labels)`: a `(n, num_classes)` array and a list of label names."""
        if len(self.inputs) == 2 and text_pairs is None:
            raise ValueError("This classifier takes text pairs; pass `text_pairs`.")
        probabilities = []
        for start in range(0, len(texts), batch_size):
            args = [tf.constant(list(texts[start : start + batch_size]))]
            if len(self.inputs) == 2:
                args.append(tf.constant(list(text_pairs[start : start + batch_size])))
            probabilities.append(self._saved.serve(*args)["probabilities"].numpy())
        probabilities = np.concatenate(probabilities) if probabilities else np.zeros((0, len(self.label_names)))
        return probabilities, [self.label_names[i] for i in probabilities.argmax(axis=-1)]


def load_classifier(export_dir):
    """Loads a classifier written by `export_classifier`, registering tensorflow-text's ops first."""
    return TextClassifier(export_dir)
