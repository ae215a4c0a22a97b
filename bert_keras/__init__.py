"""bert_keras: BERT for Keras 3 and TensorFlow, from raw text to an exported SavedModel."""

import keras as _keras

from bert_keras._backend import check_backend as _check_backend

_check_backend(_keras.backend.backend())

from bert_keras.encoder import BertEncoder  # noqa: E402
from bert_keras.presets import PRESETS, preset_names  # noqa: E402

__version__ = "0.1.0"

__all__ = ["BertEncoder", "PRESETS", "preset_names", "__version__"]
