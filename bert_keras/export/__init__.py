"""Every export of the package and its loader, on one floor above the tasks.

One writer (`_writer.write_export`: archive, variables once, endpoints,
staging, manifest, warm-up, extra assets), one manifest read without
TensorFlow (`manifest`: `export_kind`, `read_manifest`). Serving is kind x
engine (`engine`): two engines run a named signature on a batch
(`loaded.LoadedExport`, a SavedModel: load, check, refuse with the right
hint, warm up; `litert_engine.LiteRTModel`, a `.tflite` file: interpreter,
text kernels, XNNPACK, its record checked), and one answering class per kind
(`kinds.classifier`, `kinds.tagger`, `kinds.reader`:
blanks, top-k, entities, answers, batching) is mixed with either, so that
`load_litert(path).predict` and `load_classifier(dir).predict` are the same
code. One door opens either (`opening`): `load(path)` gives the loaded model
of the kind and engine a directory's manifest or a `.tflite` file's record
says, and `describe(path)` reads that record in the manifest's form, without
TensorFlow. The kinds' writers and SavedModel loaders:

- `classifier`: a text classifier as a SavedModel serving raw strings
  (`export_classifier`) and its loader (`load_classifier`, an
  `ExportedClassifier`).
- `tagger`: a tagger (named entities) as a SavedModel from raw strings to
  per-piece tags and character offsets (`export_tagger`), and its loader
  (`load_tagger`, an `ExportedTagger`), whose entities follow transformers'
  token-classification pipeline (`entity_groups`).
- `reader`: an extractive question-answering model as a SavedModel from a
  raw question and context to the answer's span (`export_reader`) and its
  loader (`load_reader`, an `ExportedReader`), decoding as transformers 4's
  pipeline.
- `sentence_encoder`: a sentence encoder as a SavedModel from raw strings to
  embeddings (`export_sentence_encoder`) and its loader
  (`load_sentence_encoder`, an `ExportedSentenceEncoder`).
- `hub_modules` and `to_hub`: TF Hub encoder and preprocess modules (Model
  Garden's format) and module pairs: `export_encoder`,
  `export_preprocessor`, `export_module_pair`, and `convert_to_hub` (a
  checkpoint -> a pair, what `bert-keras convert` runs).

The names are loaded on first use: a command that only asks what an export
is (`export_kind`) or loads one does not pay for the writers' imports
(Keras), and `import bert_keras.export` imports no TensorFlow.
"""

import importlib

# name -> the module of this package that defines it.
_NAMES = {
    "ExportedClassifier": "classifier",
    "LABELS_FILE": "classifier",
    "TextClassifier": "classifier",
    "export_classifier": "classifier",
    "load_classifier": "classifier",
    "LiteRTModel": "litert",
    "LiteRTClassifier": "litert_engine",
    "LiteRTSentenceEncoder": "litert_engine",
    "LiteRTTagger": "litert_engine",
    "Engine": "engine",
    "describe": "opening",
    "load": "opening",
    "export_litert": "litert",
    "load_litert": "litert",
    "outputs_probabilities": "classifier",
    "ENCODER_DIR": "hub_modules",
    "PREPROCESS_DIR": "hub_modules",
    "read_module_pair": "hub_modules",
    "build_encoder_module": "hub_modules",
    "export_encoder": "hub_modules",
    "export_module_pair": "hub_modules",
    "export_preprocessor": "hub_modules",
    "convert_to_hub": "to_hub",
    "LoadedExport": "loaded",
    "KINDS": "manifest",
    "ExportError": "manifest",
    "export_kind": "manifest",
    "read_manifest": "manifest",
    "ExportedReader": "reader",
    "export_reader": "reader",
    "load_reader": "reader",
    "ExportedSentenceEncoder": "sentence_encoder",
    "export_sentence_encoder": "sentence_encoder",
    "load_sentence_encoder": "sentence_encoder",
    "ExportedTagger": "tagger",
    "TextTagger": "tagger",
    "export_tagger": "tagger",
    "load_tagger": "tagger",
}

__all__ = sorted(_NAMES)


_MODULES = ("classifier", "engine", "entity_groups", "hub_modules", "kinds", "loaded", "manifest", "opening", "reader",
            "sentence_encoder", "tagger", "to_hub", "warmup")


def __getattr__(name):
    if name in _MODULES:  # `bert_keras.export.tagger`, as a plain package would give it
        return importlib.import_module(f"bert_keras.export.{name}")
    if name not in _NAMES:
        raise AttributeError(f"module 'bert_keras.export' has no attribute {name!r}")
    return getattr(importlib.import_module(f"bert_keras.export.{_NAMES[name]}"), name)


def __dir__():
    return sorted(set(globals()) | set(_NAMES))
