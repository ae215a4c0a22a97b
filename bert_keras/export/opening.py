"""One door to what the package exported: a SavedModel directory or a `.tflite` file, read and loaded the same way.

`describe(path)` reads what `path` serves without TensorFlow or LiteRT: an
export directory's manifest (`manifest.read_manifest`), or a LiteRT file's
record (`litert_record.file_record`: the file's size and SHA-256 checked
first) in the manifest's own form. Both are one dict, `{"format": "bert_keras
export", "version", "kind", <the kind's settings>..., "engine"}`, with
`engine` `"saved_model"` or `"litert"`; a record's bookkeeping (its writer,
size, SHA-256) is left out, what it adds (`quantize`, `strings`, the names the
file serves) is kept.

`served_kind(path, kinds)` is what a command asks before it reads its input:
the kind, or an `ExportError` saying what `path` is and what serves it (a
LiteRT file of token ids only, to a command that passes texts, too).

`load(path)` gives the loaded model of the kind and engine `path` records:
an `ExportedClassifier`, `ExportedTagger`, `ExportedReader` or
`ExportedSentenceEncoder` for a directory, a `LiteRTClassifier`,
`LiteRTTagger`, `LiteRTReader` or `LiteRTSentenceEncoder` for a file; each
kind answers with one code on both engines (`export.kinds`), so the caller
does not need to know which it got.

This module imports neither TensorFlow nor LiteRT; `load` imports the engine
it loads.
"""

import os

from bert_keras.export import manifest as manifests
from bert_keras.export.litert_record import _FILE_FIELDS, _ids_only, file_record, is_litert
from bert_keras.export.manifest import CLASSIFIER, KINDS, SENTENCE_ENCODER, ExportError

SAVED_MODEL, LITERT = "saved_model", "litert"
ENGINES = (SAVED_MODEL, LITERT)

# The loader of each kind's SavedModel, in `bert_keras.export`.
_LOADERS = {manifests.CLASSIFIER: "load_classifier", manifests.TAGGER: "load_tagger",
            manifests.READER: "load_reader", manifests.SENTENCE_ENCODER: "load_sentence_encoder"}


def describe(path):
    """What the export `path` serves, as its manifest: a dict with `kind` and `engine`; None for a directory that
    records no kind (Keras' `model.export()`: served as a classifier).

    Read without TensorFlow or LiteRT. A `.tflite` file's size and SHA-256
    are checked against its record first.

    Args:
        path: str or path. An export directory, or a `.tflite` file of
            `export_litert`.

    Raises:
        ExportError: a manifest or record that cannot be read, is not this
            package's, or (a `.tflite` file) does not describe the file.
    """
    path = os.fspath(path)
    if is_litert(path):
        record = file_record(path)
        served = {key: value for key, value in record.items() if key not in _FILE_FIELDS}
        return {"format": manifests.FORMAT, "version": manifests.VERSION, **served, "engine": LITERT}
    found = manifests.read_manifest(path)
    return None if found is None else {**found, "engine": SAVED_MODEL}


def _kinds(kind):
    """`kind` (a str, a sequence of them, or None for every kind) as a tuple of known kinds."""
    kinds = KINDS if kind is None else (kind,) if isinstance(kind, str) else tuple(kind)
    unknown = [name for name in kinds if name not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"Received an invalid value for argument `kind`, expected one of {', '.join(KINDS)} (or "
                         f"several of them, or None for any). Received: kind={kind!r}")
    return kinds


def _wrong_kind(path, found, engine, kinds):
    """The `ExportError` for `path`, an export of `found` on `engine`, given where one of `kinds` is served."""
    if engine == SAVED_MODEL:
        return manifests.wrong_kind(path, found, " or ".join(kinds))
    expected = " or ".join(name.replace("_", " ") for name in kinds)
    call = "encode(texts)" if found == SENTENCE_ENCODER else "predict(...)"
    return ExportError(f"{path!r} is a LiteRT {found.replace('_', ' ')}; this serves a {expected}. In Python: "
                       f"bert_keras.export.load(path).{call}.")


def served_kind(path, kind=None, texts=True):
    """The kind `path` serves, if it is one of `kind`; else an `ExportError` that says what it is and what serves it.

    Read as `describe` reads it, without TensorFlow: a command asks this
    before it reads its input.

    Args:
        path: str or path. An export directory or a `.tflite` file.
        kind: str, a sequence of str, or None. The kinds the caller serves
            (`manifest.KINDS`); None for any.
        texts: bool. Whether the caller passes raw strings: a LiteRT file of
            token ids only (an export whose tokenizer has no LiteRT kernel)
            is then refused, with what serves its texts instead.
    """
    found, engine, served = _served(path, kind)
    if texts and engine == LITERT and found.get("strings") is not True:
        raise ExportError(_ids_only(path, found))
    return served


def _served(path, kind):
    """`(manifest, engine, kind)` of `path` (`describe`), once its kind is one of `kind`."""
    kinds = _kinds(kind)
    found = describe(path)
    engine = SAVED_MODEL if found is None else found["engine"]
    served = CLASSIFIER if found is None else found["kind"]
    if served not in kinds:
        raise _wrong_kind(os.fspath(path), served, engine, kinds)
    return found, engine, served


def load(path, kind=None, warm_up="background", num_threads=None, windows_per_call=None):
    """The export at `path` loaded on its engine, as the class of its kind; one call for every export of the package.

    A directory loads as its kind's loader loads it (`load_classifier`,
    `load_tagger`, `load_reader`, `load_sentence_encoder`: TensorFlow); a
    `.tflite` file as `load_litert` loads it (LiteRT, no TensorFlow). Either
    answers with its kind's one code: `predict`, `predict_proba`,
    `encode`, ... give the same answers on both engines.

    Args:
        path: str or path. An export directory, or a `.tflite` file of
            `export_litert`.
        kind: optional str or sequence of str. The kinds the caller
            accepts; an export of another kind is refused with what serves
            it. Defaults to any.
        warm_up: a SavedModel's warm-up (`load_classifier`'s `warm_up`:
            "background", True or False; a sentence encoder compiles on its
            first call). A LiteRT file has none: its interpreter is ready
            when loaded.
        num_threads: optional int. A LiteRT file's interpreter threads
            (`load_litert`); a SavedModel runs on TensorFlow's threads, so
            it is refused for a directory.
        windows_per_call: optional int. A LiteRT tagger's or reader's
            windows per call of its model (`load_litert`); refused for a
            directory.

    Raises:
        ExportError: `path` records another kind than `kind`, or its
            manifest or record cannot be read or does not describe it.
        ValueError: `kind` names no kind, or a LiteRT setting was given for
            a directory.
    """
    path = os.fspath(path)
    _, engine, served = _served(path, kind)
    if engine == LITERT:
        from bert_keras.export.litert_engine import WINDOWS_PER_CALL, LiteRTModel

        return LiteRTModel(path, num_threads=num_threads,
                           windows_per_call=WINDOWS_PER_CALL if windows_per_call is None else windows_per_call)
    for name, value in (("num_threads", num_threads), ("windows_per_call", windows_per_call)):
        if value is not None:
            raise ValueError(f"Received an invalid value for argument `{name}`: it sets a LiteRT file's interpreter, "
                             f"and {path!r} is a SavedModel directory (TensorFlow's threads: tf.config.threading). "
                             f"Received: {name}={value!r}")
    import bert_keras.export as exports  # TensorFlow: the SavedModel loaders

    loader = getattr(exports, _LOADERS[served])
    return loader(path) if served == SENTENCE_ENCODER else loader(path, warm_up=warm_up)
