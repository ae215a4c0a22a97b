"""bert_keras: BERT for Keras 3 and TensorFlow, from raw text to an exported SavedModel."""

from bert_keras._backend import check_backend as _check_backend
from bert_keras._backend import configured_backend as _configured_backend
from bert_keras._platform.native_log import quiet_tensorflow_import as _quiet_tensorflow_import

_check_backend(_configured_backend())
# TensorFlow's C++ start-up lines (CUDA, oneDNN, absl) stay off a Python user's terminal, as off the command
# line's, unless TF_CPP_MIN_LOG_LEVEL is set: the first import of TensorFlow (ours or the user's) runs quietly.
_quiet_tensorflow_import()

__version__ = "0.1.0"

__all__ = ["BertEncoder", "DebertaV3Encoder", "ModernBertEncoder", "PRESETS", "preset_names", "__version__"]


def __getattr__(name):
    # Loaded on first use, so that `import bert_keras` (and `bert-keras --help`) does not import TensorFlow.
    if name == "BertEncoder":
        from bert_keras.encoder import BertEncoder

        return BertEncoder
    if name == "DebertaV3Encoder":
        from bert_keras.models import DebertaV3Encoder

        return DebertaV3Encoder
    if name == "ModernBertEncoder":
        from bert_keras.models.modernbert import ModernBertEncoder

        return ModernBertEncoder
    if name in ("PRESETS", "preset_names"):
        from bert_keras import presets

        return getattr(presets, name)
    raise AttributeError(f"module 'bert_keras' has no attribute {name!r}")
