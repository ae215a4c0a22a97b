"""The classifier export under the name the README documents; it lives in `bert_keras.export.classifier`."""

from bert_keras.export.classifier import (
    LABELS_FILE,
    TextClassifier,
    export_classifier,
    load_classifier,
    outputs_probabilities,
)

__all__ = ["LABELS_FILE", "TextClassifier", "export_classifier", "load_classifier", "outputs_probabilities"]
