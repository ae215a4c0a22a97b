"""Every export of the package, one file per kind, and the readers of what they write.

- `hub_modules`: TF Hub encoder and preprocess modules (Model Garden's
  format) and module pairs: `export_encoder`, `export_preprocessor`,
  `export_module_pair`, `read_module_pair`.
- `classifier`: a text classifier as a SavedModel serving raw strings
  (`export_classifier`) and its loader (`load_classifier`).
- `tagger`: a tagger (named entities) as a SavedModel from raw strings to
  per-piece tags and character offsets (`export_tagger`), and its loader
  (`load_tagger`), whose entities follow transformers' token-classification
  pipeline (`entity_groups`).
- `reader`: an extractive question-answering model as a SavedModel from a
  raw question and context to the answer's span (`export_reader`) and its
  loader (`load_reader`), decoding as transformers 4's pipeline.
- `sentence_encoder`: a sentence encoder as a SavedModel from raw strings to
  embeddings (`export_sentence_encoder`) and its loader (`load_sentence_encoder`).

This package ranks below `bert_keras.checkpoints` (whose `to_hub.convert_to_hub`
reads a checkpoint and writes a pair through `export_module_pair`) and below
`bert_keras.tasks` (which reads pairs with `read_module_pair`), so it imports
no checkpoint reader and no task class: a model is served through its own
`serving_outputs` and rebuilt on a native encoder by its own
`with_native_encoder` where it has them (`BertClassifier` does).
`bert_keras.saved_model` keeps the classifier's names where the README
shows them.
"""

from bert_keras.export.classifier import (
    LABELS_FILE,
    TextClassifier,
    export_classifier,
    load_classifier,
    outputs_probabilities,
)
from bert_keras.export.hub_modules import (
    ENCODER_DIR,
    PREPROCESS_DIR,
    build_encoder_module,
    export_encoder,
    export_module_pair,
    export_preprocessor,
    read_module_pair,
)
from bert_keras.export.reader import ExportedReader, export_reader, load_reader
from bert_keras.export.sentence_encoder import ExportedSentenceEncoder, export_sentence_encoder, load_sentence_encoder
from bert_keras.export.tagger import TextTagger, export_tagger, load_tagger

__all__ = [
    "ENCODER_DIR",
    "ExportedReader",
    "ExportedSentenceEncoder",
    "LABELS_FILE",
    "PREPROCESS_DIR",
    "TextClassifier",
    "TextTagger",
    "build_encoder_module",
    "export_classifier",
    "export_encoder",
    "export_module_pair",
    "export_preprocessor",
    "export_reader",
    "export_sentence_encoder",
    "export_tagger",
    "load_classifier",
    "load_reader",
    "load_sentence_encoder",
    "load_tagger",
    "outputs_probabilities",
    "read_module_pair",
]
