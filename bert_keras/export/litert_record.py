"""The record beside a LiteRT file of this package (`X.tflite.json`): what the file serves, its size and SHA-256.

The record is the export's manifest (`manifest.py`: `"format": "bert_keras
export"`, its version, `kind` and the kind's settings) with `"engine":
"litert"`, what the file adds (the names its graph serves, `quantize`,
`strings`) and the file's bookkeeping (`writer`, `converted_from`, `size`,
`sha256`, and `previous` during a write): one format for an export directory and a
`.tflite` file. Records written before (`"format": "bert_keras litert"`,
version 3) are read as they are.

Read without TensorFlow (`read_sidecar`, `file_record`: the file's SHA-256
checked before LiteRT reads a byte of it), checked value by value (`_recorded`:
a damaged record is an `ExportError` naming the value), and written with its
file so that an interrupted write leaves the old pair or the new one
(`_write_pair`). `check_litert_target` says whether a path may be written;
`opening.served_kind` reads what a file serves from it, before a command
reads its input.
"""

import contextlib
import hashlib
import json
import logging
import os
import re
import stat
import tempfile

from bert_keras._checks import NotRegularFileError, check_choice, open_regular_file, replace_hint
from bert_keras._faults import fault_point
from bert_keras.export.entity_groups import check_tokenizer_kind  # no TensorFlow (text.decoding)
from bert_keras.export import manifest as manifests
from bert_keras.export.manifest import CLASSIFIER, READER, SENTENCE_ENCODER, TAGGER, ExportError

logger = logging.getLogger(__name__)

SERVED_KINDS = (CLASSIFIER, TAGGER, READER, SENTENCE_ENCODER)
# A record is the manifest's format with this engine (`manifest.VERSION` 2 and later).
FORMAT, ENGINE = manifests.FORMAT, "litert"
# The records of earlier versions had a format of their own:
# 2: the record holds the file's SHA-256 (`sha256`), checked before LiteRT reads a byte of the file.
# 3: the file carries what its record serves (`carried_values`, in its `record` signature), compared at load: an
#    edited record is refused. A file of an earlier version is refused too (`file_record`): its record's values could
#    be edited unseen. A record of version 3 holds what a manifest record holds, so it is still served.
LEGACY_FORMAT, LEGACY_VERSION = "bert_keras litert", 3
# What a record says of the file itself rather than of what it serves; everything else is carried in the file.
# (`source` is the export a record of version 3 was converted from; a record of the manifest's format names it
# `converted_from`, and its `source` is the export's own setting, a sentence encoder's model, as it was in version 3.)
_FILE_FIELDS = ("format", "version", "engine", "writer", "source", "converted_from", "size", "sha256", "previous")
SIDECAR_SUFFIX = ".json"
# A record of ours is a few KB (a tagger's or classifier's names); a larger file is not one, and is not read whole.
_MAX_RECORD_BYTES = 1 << 20
# The staged file of a write (`tempfile.mkstemp`'s 8 characters: `_files`' staging names), and the staged records
# `_files.write_json_atomically` leaves when killed: a later write of the same file removes them.
_TEMP_SUFFIX = r"[a-z0-9_]{8}"


def _check_names(name, value):
    if not (isinstance(value, list) and value and all(isinstance(item, str) for item in value)):
        raise ValueError(f"Received an invalid value for argument `{name}`, expected a non-empty list of str. "
                         f"Received: {name}={value!r}")
    return value


def carried_values(record):
    """The values of `record` that the file itself carries (everything a reader trusts: kind, names, tokenizer,
    aggregation, stride...), as canonical JSON: the `record` signature's output, written at conversion."""
    values = {key: value for key, value in record.items() if key not in _FILE_FIELDS}
    return json.dumps(values, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def check_carried(path, record, carried):
    """Refuses, with an `ExportError` naming the first field that differs, a `record` whose values differ from
    `carried` (the JSON the file was converted with, read from the file after its SHA-256 was checked)."""
    ours, theirs = _flat(json.loads(carried_values(record))), _flat(json.loads(carried))
    for field in sorted(set(ours) | set(theirs)):
        if ours.get(field, _ABSENT) != theirs.get(field, _ABSENT):
            raise ExportError(
                f"{os.path.basename(sidecar_path(path))}'s `{field}` ({_shown(ours.get(field, _ABSENT))}) differs "
                f"from what {os.fspath(path)!r} was converted with ({_shown(theirs.get(field, _ABSENT))}): the record "
                "was edited after the conversion, and the file would answer with its own values. Restore the record, "
                "or convert the export again (bert-keras litert --force).")


_ABSENT = object()


def _flat(values):
    """`values` with each JSON object's fields one level down as `name.field` (`tokenizer.suffix_indicator`)."""
    flat = {}
    for name, value in values.items():
        if isinstance(value, dict) and value:
            flat.update({f"{name}.{field}": item for field, item in value.items()})
        else:
            flat[name] = value
    return flat


def _shown(value, limit=200, missing="null"):
    text = "absent" if value is _ABSENT else missing if value is None else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def sidecar_path(path):
    return os.fspath(path) + SIDECAR_SUFFIX


def read_sidecar(path):
    """The record beside `path` (`PATH.json`), or None when there is none or it is not this package's.

    Read as a regular file of at most `_MAX_RECORD_BYTES` (`open_regular_file`): a FIFO or a device there is
    refused at once (a `NotRegularFileError`, an `ExportError`'s kin: a `ValueError`), never waited on.
    """
    try:
        with open_regular_file(sidecar_path(path), "r", encoding="utf-8") as f:
            text = f.read(_MAX_RECORD_BYTES + 1)
        record = None if len(text) > _MAX_RECORD_BYTES else json.loads(text)
    except NotRegularFileError:
        raise
    except (OSError, ValueError, RecursionError):
        return None
    return record if _is_record(record) else None


def _is_record(value):
    """Whether `value` is a record of this package: a manifest of the LiteRT engine, or an earlier version's record."""
    if not isinstance(value, dict):
        return False
    return (value.get("format") == FORMAT and value.get("engine") == ENGINE) or value.get("format") == LEGACY_FORMAT


def new_record(export_manifest, source, **served):
    """The record of a file converted from the export `source` whose manifest is `export_manifest`: the manifest
    (this version's) with the LiteRT engine, the writer and source, and `served` (names, `quantize`, `strings`);
    the file's `size` and `sha256` are added once it is converted."""
    settings = {key: value for key, value in export_manifest.items() if key not in ("format", "version", "engine")}
    return {"format": FORMAT, "version": manifests.VERSION, "engine": ENGINE, "writer": "bert_keras",
            "converted_from": os.path.abspath(source), **settings, **served}


def _current_version(record):
    """Whether `record` is of a version this one serves: a manifest record, or an earlier record of version 3."""
    if record.get("format") == LEGACY_FORMAT:
        return record.get("version") == LEGACY_VERSION
    return isinstance(record.get("version"), int) and record["version"] >= 2


# Digests already computed in this process: (path, device, inode, size, mtime) -> SHA-256, so that `predict`, which
# reads the kind (`opening.served_kind`) and then loads the file, reads it once.
_DIGESTS = {}


def file_sha256(path):
    """The SHA-256 of the file `path` (hex), read in blocks."""
    info = os.stat(path)
    key = (os.path.abspath(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with open_regular_file(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        _DIGESTS.clear()  # one file at a time is enough for a process that serves one
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def file_record(path):
    """The record of the `.tflite` file `path`, once its size and SHA-256 are the ones recorded; else an
    `ExportError` saying what differs. Nothing of the file is given to LiteRT before this (a file damaged at the
    same size made LiteRT end the process, with no message).

    A write interrupted between its steps leaves the record of the new file with the old one's as `previous`
    (`_write_pair`): the record whose hash the file has is the file's.
    """
    path = os.fspath(path)
    name = os.path.basename(sidecar_path(path))
    if not os.path.isfile(path):
        raise ExportError(f"{path!r} is not a file; expected a .tflite file written by "
                          "bert_keras.export.export_litert (bert-keras litert).")
    record = read_sidecar(path)
    if record is None:
        raise ExportError(f"{path!r} is not a LiteRT file written by bert_keras: {name}, which records what it "
                          "serves, is missing or not ours. Convert an export with bert-keras litert --model EXPORT "
                          "--out FILE.tflite.")
    if not isinstance(record.get("sha256"), str):
        raise ExportError(f"{name} records no SHA-256 of {path!r} (written by an earlier version of bert_keras, "
                          "which recorded only its size): its integrity cannot be checked. Convert the export again.")
    if not _current_version(record):
        raise ExportError(f"{path!r} was converted by an earlier version of bert_keras ({name} version "
                          f"{record.get('version')!r}, this one reads {LEGACY_VERSION} and later): the file does not "
                          "carry what its record says it serves, so an edited record could not be told apart. Convert "
                          "the export again (bert-keras litert --force).")
    size = os.path.getsize(path)
    candidates = [record] + ([record["previous"]] if isinstance(record.get("previous"), dict) else [])
    sized = [candidate for candidate in candidates if candidate.get("size") == size]
    if not sized:
        raise ExportError(f"{path!r} holds {size:,} bytes, but {name} records {record.get('size')!r}: the file and "
                          "its record are of different conversions, or the file was cut. Convert the export again.")
    digest = file_sha256(path)
    for candidate in sized:
        if candidate.get("sha256") == digest:
            return {key: value for key, value in candidate.items() if key != "previous"}
    raise ExportError(f"{path!r} is not the file {name} describes: its SHA-256 is {digest}, the record's "
                      f"{record.get('sha256')} (the file was damaged or changed after it was written). Convert the "
                      "export again.")


def check_litert_target(path, overwrite=False, argument="path"):
    """Raises before any work if `path` cannot be written: a directory, a link, a file this package did not write
    (no `PATH.json` of ours beside it), or one it wrote without `overwrite`."""
    path = os.fspath(path)
    if not path or os.path.basename(path) in ("", ".", ".."):
        raise ValueError(f"Received an invalid value for `{argument}`: {path!r} names no file.")
    for name in (path, sidecar_path(path)):
        if os.path.islink(name):
            raise FileExistsError(f"{name!r} ({argument}) is a symbolic link; bert_keras follows no link it did not "
                                  "create. Pass a real file path.")
        if os.path.lexists(name) and not os.path.isfile(name):
            raise FileExistsError(f"{name!r} ({argument}) exists and is not a regular file. Pick a file path.")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"Cannot write {path!r} ({argument}): {parent!r} is not a writable directory.")
    ours = read_sidecar(path) is not None
    if os.path.lexists(sidecar_path(path)) and not ours:
        raise FileExistsError(f"{sidecar_path(path)!r} exists and was not written by bert_keras; it is never "
                              "replaced. Pick another path, or remove it yourself.")
    if os.path.lexists(path):
        if not ours:
            raise FileExistsError(f"{path!r} ({argument}) exists and was not written by bert_keras (no "
                                  f"{os.path.basename(sidecar_path(path))} of ours beside it); it is never replaced, "
                                  "even when overwriting is asked for. Pick another path, or remove it yourself.")
        if not overwrite:
            raise FileExistsError(f"{path!r} ({argument}) already exists; {replace_hint(argument)} to replace it.")
    return path


def is_litert(path):
    """Whether `path` names a LiteRT file (`.tflite`) rather than an export directory."""
    return os.fspath(path).endswith(".tflite") and not os.path.isdir(path)


def _ids_only(path, record):
    tokenizer = record.get("tokenizer") if isinstance(record.get("tokenizer"), dict) else {}
    return (f"{os.fspath(path)!r} serves token ids only (its export's tokenizer is {tokenizer.get('kind')!r}; raw "
            "strings in LiteRT need WordPiece): serve texts with the export itself (bert-keras predict --model "
            "EXPORT_DIR), or call the file's `serve_ids(input_word_ids=..., input_mask=..., input_type_ids=...)` in "
            "Python with ids packed by the export's preprocessor.")



def _write_pair(path, data, record):
    """`data` to `path` and `record` to `PATH.json`, so that a kill at any point leaves the old pair or the new one.

    1. `data` is written whole into a staged sibling `.partial-NAME-XXXXXXXX`.
    2. The record is replaced (one rename) by the new one holding the old as
       `previous`: it describes the old file and the new (`file_record` takes
       the one whose SHA-256 the file has).
    3. The staged file replaces `path` (one rename).
    4. The record is replaced by the new one alone.

    Without an old pair, the record comes first: a kill before the file leaves
    a record without a file, which the next write replaces. Called under
    `path`'s lock; `_remove_leftovers` removes what a killed write staged.
    """
    from bert_keras._files import write_json_atomically  # TensorFlow (the package's writer module imports it)

    parent, name = os.path.split(os.path.abspath(path))
    fd, staged = tempfile.mkstemp(prefix=f".partial-{name}-", dir=parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        old = _current_record(path)
        write_json_atomically(sidecar_path(path), record if old is None else {**record, "previous": old})
        fault_point(f"litert-record:{name}")
        os.replace(staged, path)
        fault_point(f"litert-file:{name}")
        if old is not None:
            write_json_atomically(sidecar_path(path), record)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(staged)
        raise


def _current_record(path):
    """The record of the pair now at `path`, when the file is there and whole (what an interrupted write keeps)."""
    try:
        return file_record(path)
    except (ExportError, OSError):
        return None


def _remove_leftovers(path):
    """Under `path`'s lock: removes what killed writes of `path` staged, and nothing else.

    Exactly the names they make (`.partial-NAME-XXXXXXXX`: the staged file;
    `NAME.partial-XXXXXXXX`: an earlier version's; `NAME.json.partial-XXXXXXXX`:
    a staged record), regular files that hold what they stage (a LiteRT
    flatbuffer, JSON) or nothing yet.
    """
    parent, name = os.path.split(os.path.abspath(path))
    staged_file = re.compile(f"(\\.partial-{re.escape(name)}-|{re.escape(name)}\\.partial-){_TEMP_SUFFIX}")
    staged_record = re.compile(f"{re.escape(name + SIDECAR_SUFFIX)}\\.partial-{_TEMP_SUFFIX}")
    for entry in sorted(os.listdir(parent)):
        is_file, is_record = staged_file.fullmatch(entry), staged_record.fullmatch(entry)
        if not (is_file or is_record):
            continue
        leftover = os.path.join(parent, entry)
        info = os.lstat(leftover)
        if not stat.S_ISREG(info.st_mode):
            continue
        with open(leftover, "rb") as f:
            head = f.read(8)
        if head and not (head[4:8] == b"TFL3" if is_file else head.lstrip()[:1] == b"{"):
            continue
        logger.info("Removing %s, left by an interrupted write", leftover)
        with contextlib.suppress(FileNotFoundError):
            os.remove(leftover)


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask

class _RecordValueError(ValueError):
    """A record's value refused in the record's words (`_recorded` shows it as it is)."""


def _recorded(path, name, value, check):
    """`check(value)` for the record's field `name`; its `ValueError` as an `ExportError` naming the record and the
    field (what was expected is taken from the check's own message: ", expected X. Received: ...")."""
    try:
        return check(value)
    except ValueError as error:
        if isinstance(error, _RecordValueError):
            what = str(error)
        else:
            expected = re.search(r"expected (.+?)\. Received:", str(error), re.S)
            shown = _shown(value, missing="null or nothing")
            what = f"`{name}` holds {shown}; expected {expected.group(1) if expected else error}"
        raise ExportError(f"{os.path.basename(sidecar_path(path))} (beside {os.fspath(path)!r}) is damaged: {what}. "
                          "Restore it, or convert the export again.") from None


def _record_tokenizer(path, record):
    """The record's `tokenizer`, checked: a kind of the package, and WordPiece where the file serves strings."""
    _recorded(path, "kind", record.get("kind"), lambda value: check_choice("kind", value, SERVED_KINDS))
    tokenizer = _recorded(path, "tokenizer", record.get("tokenizer"), lambda value: _expect(
        "tokenizer", value, isinstance(value, dict), "a JSON object"))
    kind = _recorded(path, "tokenizer.kind", tokenizer.get("kind"), _tokenizer_kind)
    _recorded(path, "strings", record.get("strings"), lambda value: check_choice(
        "strings", value, (True, False) if kind == "wordpiece" else (False,)))
    for name in ("unknown_token", "suffix_indicator"):
        _recorded(path, f"tokenizer.{name}", tokenizer.get(name, ""), lambda value: _expect(
            f"tokenizer.{name}", value, isinstance(value, str), "a str"))
    return tokenizer


def _tokenizer_kind(value):
    check_tokenizer_kind(_expect("tokenizer.kind", value, isinstance(value, str), "a str"))
    return value


def _expect(name, value, holds, expected):
    if not holds:
        raise ValueError(f"Received an invalid value for argument `{name}`, expected {expected}. "
                         f"Received: {name}={value!r}")
    return value


def _recorded_names(path, record, name, width):
    """The record's list of `width` names `name` (a classifier's labels, a tagger's tags), checked."""
    def check(value):
        _check_names(name, value)
        if width is not None and len(value) != width:
            raise _RecordValueError(f"`{name}` holds {len(value)} names for the file's {width} outputs")
        return list(value)

    return _recorded(path, name, record.get(name), check)

