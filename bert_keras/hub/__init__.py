"""TF Hub modules in Keras 3: `KerasLayer`, `PreprocessLayer`, `load`.

`from bert_keras import hub` is a drop-in for `import tensorflow_hub as hub`
in the BERT workflow. The module writers (`export_encoder`,
`export_preprocessor`, `export_module_pair`, `read_module_pair`) are in
`bert_keras.export`, with every other export.
"""

from bert_keras.hub.keras_layer import KerasLayer
from bert_keras.hub.loader import load, register_text_ops, resolve
from bert_keras.hub.preprocess_layer import PreprocessLayer

__all__ = [
    "KerasLayer",
    "PreprocessLayer",
    "load",
    "register_text_ops",
    "resolve",
]
