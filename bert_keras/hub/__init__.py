"""TF Hub modules in Keras 3: `KerasLayer`, `load`, and the exporters.

`from bert_keras import hub` is a drop-in for `import tensorflow_hub as hub`
in the BERT workflow.
"""

from bert_keras.hub.export import export_encoder, export_module_pair, export_preprocessor, read_module_pair
from bert_keras.hub.keras_layer import KerasLayer
from bert_keras.hub.loader import load, register_text_ops, resolve
from bert_keras.hub.preprocess_layer import PreprocessLayer

__all__ = [
    "KerasLayer",
    "PreprocessLayer",
    "export_encoder",
    "export_module_pair",
    "export_preprocessor",
    "load",
    "read_module_pair",
    "register_text_ops",
    "resolve",
]
