"""What an export is, told without TensorFlow: its manifest, `assets.extra/export.json`.

Every export of the package (classifier, tagger, reader, sentence encoder)
records its kind and its settings in one file, written by the one writer
(`export._writer.write_export`). A command tells a tagger from a classifier
by reading it (no graph is loaded to find out), and every loader refuses the
export of another kind with the name of the loader and command that serve it.

Exports written before the manifest carry their kind in the files of their
kind (`labels.json`, `reader.json`, `sentence_encoder.json`); they are read
through the same function (`read_manifest`), so they still load.
"""

import json
import os

from bert_keras._checks import NotRegularFileError, open_regular_file

MANIFEST_FILE = "export.json"
ASSETS_EXTRA = "assets.extra"
FORMAT = "bert_keras export"
# 2: a LiteRT file's record (`litert_record`) is this manifest too, with `"engine": "litert"` and the file's size
#    and SHA-256; an export directory's manifest is as in version 1.
VERSION = 2

CLASSIFIER, TAGGER, READER, SENTENCE_ENCODER = "classifier", "tagger", "reader", "sentence_encoder"
KINDS = (CLASSIFIER, TAGGER, READER, SENTENCE_ENCODER)

# How a user serves each kind: the Python loader and the command.
SERVED_BY = {
    CLASSIFIER: ("bert_keras.export.load_classifier(DIR).predict(texts)", 'bert-keras predict --model DIR "a text"'),
    TAGGER: ("bert_keras.export.load_tagger(DIR).predict(texts)", 'bert-keras predict --model DIR "a text"'),
    READER: ("bert_keras.export.load_reader(DIR).predict(question, context)",
             'bert-keras predict --model DIR --question "..." --context "..."'),
    SENTENCE_ENCODER: ("bert_keras.export.load_sentence_encoder(DIR).encode(texts)", 'bert-keras embed --model DIR "a text"'),
}

# The files in which exports written before the manifest record their kind and settings.
_LEGACY_FILES = {"labels.json": None, "reader.json": READER, "sentence_encoder.json": SENTENCE_ENCODER}
# A JSON file of an export is small; a larger one is not ours (and is not read into memory).
_MAX_BYTES = 1 << 20


class ExportError(ValueError):
    """An export's manifest that cannot be read, or an export of another kind than the caller serves."""


def _read_json(path):
    """The JSON value of `path`, a regular file of the export, or an `ExportError` naming it."""
    try:
        with open_regular_file(path, "r", encoding="utf-8") as f:
            text = f.read(_MAX_BYTES + 1)
        if len(text) > _MAX_BYTES:
            raise ExportError(f"{path} is larger than {_MAX_BYTES} characters: not a file bert_keras wrote.")
        return json.loads(text)
    except (ExportError, NotRegularFileError):  # a FIFO or device: its own message (a ValueError too)
        raise
    except (OSError, ValueError, RecursionError) as error:  # RecursionError: JSON nested too deep
        reason = "nested too deep" if isinstance(error, RecursionError) else str(error)
        raise ExportError(f"{path} cannot be read ({reason}): the export is damaged; export the model again.") from None


def manifest_path(export_dir):
    return os.path.join(os.fspath(export_dir), ASSETS_EXTRA, MANIFEST_FILE)


def read_manifest(export_dir):
    """The export's manifest: a dict with at least `kind`; None for a directory that records no kind.

    A directory without a manifest is read as an export written before it:
    `labels.json` with `"task": "tagger"` is a tagger, without it a
    classifier; `reader.json` a reader; `sentence_encoder.json` a sentence
    encoder. A SavedModel of `model.export()` records nothing (None).

    Raises:
        ExportError: a manifest (or an older export's file) that cannot be
            read, is not a JSON object, or names an unknown kind.
    """
    extra = os.path.join(os.fspath(export_dir), ASSETS_EXTRA)
    path = os.path.join(extra, MANIFEST_FILE)
    if os.path.lexists(path):
        manifest = _read_json(path)
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise ExportError(f"{path} is not a bert_keras export manifest (no \"format\": \"{FORMAT}\").")
        _check_kind(path, manifest.get("kind"))
        return manifest
    for name, kind in _LEGACY_FILES.items():
        legacy = os.path.join(extra, name)
        if not os.path.lexists(legacy):
            continue
        values = _read_json(legacy)
        if not isinstance(values, dict):
            raise ExportError(f"{legacy} holds a JSON {type(values).__name__}, not an object: the export is damaged.")
        if kind is None:  # labels.json: a tagger says so, a classifier's records only its labels
            kind = TAGGER if values.get("task") == TAGGER else CLASSIFIER
        return {"format": FORMAT, "version": 0, **values, "kind": kind}
    return None


def _check_kind(path, kind):
    if kind not in KINDS:
        raise ExportError(f"{path} names the kind {kind!r}; this version of bert_keras serves "
                          f"{', '.join(KINDS)}. Export the model again with it.")


def export_kind(export_dir):
    """The kind of the export at `export_dir` (one of `KINDS`), or None; read without TensorFlow.

    Raises:
        ExportError: as `read_manifest`.
    """
    manifest = read_manifest(export_dir)
    return None if manifest is None else manifest["kind"]


def wrong_kind(export_dir, kind, expected):
    """The `ExportError` for an export of `kind` given where one of `expected` is served: what it is, what to use."""
    loader, command = SERVED_BY[kind]
    article = "an" if kind[0] in "aeiou" else "a"
    return ExportError(
        f"{os.fspath(export_dir)!r} is {article} {kind.replace('_', ' ')} export, not a {expected.replace('_', ' ')} "
        f"one. Serve it with {loader.replace('DIR', repr(os.fspath(export_dir)))}, or on the command line: "
        f"{command.replace('DIR', os.fspath(export_dir))}."
    )


def manifest(kind, **settings):
    """The manifest of a new export of `kind` with `settings` (JSON values)."""
    _check_kind("the manifest", kind)
    return {"format": FORMAT, "version": VERSION, "kind": kind, **settings}


def write_manifest(directory, value):
    """Writes `value` as the manifest of the export being written in `directory` (its `assets.extra/` exists)."""
    with open(manifest_path(directory), "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)
