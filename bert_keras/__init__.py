"""bert_keras: BERT for Keras 3 and TensorFlow, from raw text to an exported SavedModel."""

import keras as _keras

if _keras.backend.backend() != "tensorflow":
    raise ImportError(
        "bert_keras runs on the Keras 3 TensorFlow backend only. "
        f"Received: keras.backend.backend()={_keras.backend.backend()!r}. "
        "Set the environment variable KERAS_BACKEND=tensorflow before importing keras."
    )

from bert_keras.encoder import BertEncoder  # noqa: E402
from bert_keras.presets import PRESETS, preset_names  # noqa: E402

__version__ = "0.1.0"

__all__ = ["BertEncoder", "PRESETS", "preset_names", "__version__"]
