"""LiteRT (TensorFlow Lite) from an export of this package: raw strings in, what the export serves out.

`export_litert(export_dir, path)` converts a classifier, tagger or sentence
encoder export into one `.tflite` file with three signatures:

- `serve`: `(batch,)` strings -> what the export serves (a classifier's
  `probabilities`, a sentence encoder's `embeddings`; a tagger's per-piece
  outputs, one text per call). Hugging Face's BERT normalisation runs in
  tensorflow-text's `FastBertNormalize` kernel from a table built for every
  code point (`_litert_table`), WordPiece in `FastWordpieceTokenize`, the
  100-character word rule with `ByteSplit` and builtin ops; packing, windows
  and the model are builtin ops, with dynamic batch and length.
- `serve_ids`: the three packed int32 `(batch, seq)` inputs -> the model's
  outputs, builtin ops only (for a runtime without tensorflow-text's
  kernels; the export's `serve_ids_padded`, its model in the padded layout,
  or for an export written before that endpoint its packed `serve_ids`).
- `preprocess`: strings -> the three packed inputs.

An export whose tokenizer is not WordPiece (SentencePiece, byte-level BPE:
their exact tokenizers are TensorFlow ops that LiteRT cannot run) gets
`serve_ids` only: raw strings need WordPiece.

What the file is (the export's kind and settings) is recorded beside it, in
`PATH.json`; a file is replaced only when that record says this package
wrote it. `load_litert(path)` reads both and answers as the matching loader
does (`ExportedClassifier.predict`, `ExportedTagger.predict`,
`ExportedSentenceEncoder.encode`) without importing TensorFlow: the
interpreter is `ai-edge-litert`'s, with tensorflow-text's kernels
registered from their shared library.
"""

import contextlib
import ctypes
import hashlib
import importlib.util
import json
import logging
import os
import re
import stat
import struct
import tempfile

import numpy as np

from bert_keras._checks import NotRegularFileError, check_choice, check_int, open_regular_file
from bert_keras._faults import fault_point
from bert_keras._locks import output_lock
from bert_keras._native_log import NativeLogFilter
from bert_keras.export.entity_groups import (check_aggregation, check_tokenizer_kind,  # no TensorFlow (text.decoding)
                                             text_entities)
from bert_keras.export.manifest import (ASSETS_EXTRA, CLASSIFIER, READER, SENTENCE_ENCODER, TAGGER, ExportError,
                                        manifest_path, read_manifest)
from bert_keras.predictions import as_probabilities, blank_prediction, check_top_k, labelled_predictions, text_list

logger = logging.getLogger(__name__)

SERVED_KINDS = (CLASSIFIER, TAGGER, SENTENCE_ENCODER)
QUANTIZATIONS = (None, "int8")
FORMAT = "bert_keras litert"
# 2: the record holds the file's SHA-256 (`sha256`), checked before LiteRT reads a byte of the file.
VERSION = 2
SIDECAR_SUFFIX = ".json"
# A record of ours is a few KB (a tagger's or classifier's names); a larger file is not one, and is not read whole.
_MAX_RECORD_BYTES = 1 << 20
# The longest `seq_length` a manifest may record: no encoder family of the package holds more positions
# (ModernBERT's 8,192); a longer one is an edited manifest, refused before TensorFlow loads.
MAX_SEQ_LENGTH = 8192
# A vocabulary larger than any tokenizer's of the package (XLM-RoBERTa's 250,002 pieces) by far.
_MAX_VOCABULARY_SIZE = 1 << 22
# The staged file of a write (`tempfile.mkstemp`'s 8 characters: `_files`' staging names), and the staged records
# `_files.write_json_atomically` leaves when killed: a later write of the same file removes them.
_TEMP_SUFFIX = r"[a-z0-9_]{8}"
# The custom ops a raw-string file may hold: tensorflow-text's kernels, nothing else.
TEXT_OPS = frozenset({"FastBertNormalize", "FastWordpieceTokenizeWithOffsets", "TFText>ByteSplitWithOffsets"})
# tensorflow-text's registerers of those kernels, C symbols of its pybinds library.
_REGISTERERS = ("AddFastBertNormalize", "AddFastWordpieceTokenize", "AddByteSplit")
# The converted file holds at least this share of the variables' bytes (int8: a quarter, less what stays float);
# a file without its weights (variables left as uninitialised resources: a few hundred KB, NaN outputs) holds none.
_MIN_WEIGHT_SHARE = {None: 0.9, "int8": 0.2}
# Ops of variables that the conversion did not freeze.
_VARIABLE_OPS = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"})
TAGGER_OUTPUTS = ("tag_ids", "scores", "char_starts", "char_ends", "tokens", "token_ids", "window", "piece_index",
                  "primary", "lengths")


# ----------------------------------------------------------------------------------------------------------------
# Checks done before TensorFlow loads.


def check_quantize(quantize):
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"Received an invalid value for argument `quantize`, expected None (float32) or \"int8\" "
                         f"(dynamic-range int8 weights). Received: quantize={quantize!r}")
    return quantize


def served_manifest(export_dir):
    """The manifest of `export_dir` if LiteRT serves it; an `ExportError` saying what it is and what is served.

    Every value the conversion reads is checked here, before TensorFlow loads
    (`check_manifest`); what can only be checked against the graph (the label
    table, how it tokenizes) is checked by `export_litert` after it loads.
    """
    export_dir = os.fspath(export_dir)
    if not os.path.isfile(os.path.join(export_dir, "saved_model.pb")):
        raise ExportError(f"{export_dir!r} is not an export: it holds no saved_model.pb. Expected a directory written "
                          "by bert_keras' export_classifier, export_tagger or export_sentence_encoder.")
    manifest = read_manifest(export_dir)
    kind = None if manifest is None else manifest["kind"]
    if kind == READER:
        raise ExportError(f"{export_dir!r} is a reader export; LiteRT serves classifier, tagger and sentence encoder "
                          "exports. Serve a reader with bert_keras.export.load_reader or bert-keras predict.")
    if kind not in SERVED_KINDS:
        raise ExportError(f"{export_dir!r} records no kind of export (a `model.export()` directory?); LiteRT converts "
                          "the exports of bert_keras' export_classifier, export_tagger or export_sentence_encoder.")
    if not isinstance(manifest.get("tokenizer"), dict):
        raise ExportError(f"{export_dir!r} records no tokenizer (an export written by an earlier version of "
                          "bert_keras, or of a model on a Hub preprocess module): export the model again with this "
                          "version to convert it to LiteRT.")
    inputs = manifest.get("inputs", ["text"])
    if kind == CLASSIFIER and isinstance(inputs, list) and len(inputs) == 2:
        raise ExportError(f"{export_dir!r} is a classifier of text pairs; LiteRT serves classifiers of single texts.")
    check_manifest(export_dir, manifest)
    return manifest


def _damaged(where, error):
    return ExportError(f"{where} is damaged: {error}. Restore the file, or export the model again.")


def _check_names(name, value):
    if not (isinstance(value, list) and value and all(isinstance(item, str) for item in value)):
        raise ValueError(f"Received an invalid value for argument `{name}`, expected a non-empty list of str. "
                         f"Received: {name}={value!r}")
    return value


def check_manifest(export_dir, manifest):
    """Refuses, with an `ExportError` naming the value, a manifest value that the conversion reads and that no
    export of this package writes (a manifest edited by hand); no TensorFlow."""
    where = f"The manifest {manifest_path(export_dir)}"
    kind, tokenizer = manifest["kind"], manifest["tokenizer"]
    try:
        inputs = manifest.get("inputs", ["text"])
        if inputs != ["text"] and kind != CLASSIFIER or kind == CLASSIFIER and (
                not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], str)):
            raise ValueError(f"Received an invalid value for argument `inputs`, expected one text input "
                             f"([\"text\"]). Received: inputs={inputs!r}")
        for name, owner in (("label_names", CLASSIFIER), ("tag_names", TAGGER)):
            if kind == owner and name in manifest:  # the graph's own table is read after it loads
                _check_names(name, manifest[name])
            check_aggregation(_expect("aggregation", manifest.get("aggregation", "simple"),
                                      isinstance(manifest.get("aggregation", "simple"), str), "a str"))
        tokenizer_kind = _tokenizer_kind(tokenizer.get("kind"))
        seq_length = check_int("tokenizer.seq_length", tokenizer.get("seq_length"), minimum=3,
                               maximum=MAX_SEQ_LENGTH)
        size = check_int("tokenizer.vocabulary_size", tokenizer.get("vocabulary_size"), minimum=1,
                         maximum=_MAX_VOCABULARY_SIZE)
        for name in ("cls_id", "sep_id", "pad_id"):
            check_int(f"tokenizer.{name}", tokenizer.get(name), minimum=0, maximum=size - 1)
        if not isinstance(tokenizer.get("unknown_token"), str) or not tokenizer["unknown_token"]:
            raise ValueError("Received an invalid value for argument `tokenizer.unknown_token`, expected a non-empty "
                             f"str. Received: tokenizer.unknown_token={tokenizer.get('unknown_token')!r}")
        if kind == TAGGER:
            if manifest.get("seq_length", seq_length) != seq_length:
                raise ValueError(f"Received an invalid value for argument `seq_length`, expected the tokenizer's "
                                 f"{seq_length}. Received: seq_length={manifest.get('seq_length')!r}")
            check_int("stride", manifest.get("stride"), minimum=0, maximum=seq_length - 3)
        if tokenizer_kind == "wordpiece":
            for name in ("lower_case",):
                if not isinstance(tokenizer.get(name, True), bool):
                    raise ValueError(f"Received an invalid value for argument `tokenizer.{name}`, expected a bool. "
                                     f"Received: tokenizer.{name}={tokenizer.get(name)!r}")
            for name in ("suffix_indicator", "vocabulary_file"):
                value = tokenizer.get(name, "##" if name == "suffix_indicator" else "vocab.txt")
                if not isinstance(value, str) or not value:
                    raise ValueError(f"Received an invalid value for argument `tokenizer.{name}`, expected a "
                                     f"non-empty str. Received: tokenizer.{name}={value!r}")
            check_int("tokenizer.max_chars_per_word", tokenizer.get("max_chars_per_word", 100), minimum=1,
                      maximum=1 << 16)
    except ValueError as error:
        raise _damaged(where, error) from None
    return manifest


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
    return record if isinstance(record, dict) and record.get("format") == FORMAT else None


# Digests already computed in this process: (path, device, inode, size, mtime) -> SHA-256, so that `predict`, which
# reads the kind (`litert_kind`) and then loads the file, reads it once.
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
            raise FileExistsError(f"{path!r} ({argument}) already exists; pass overwrite=True (--force) to replace it.")
    return path


def is_litert(path):
    """Whether `path` names a LiteRT file (`.tflite`) rather than an export directory."""
    return os.fspath(path).endswith(".tflite") and not os.path.isdir(path)


def litert_kind(path, served=(CLASSIFIER, TAGGER)):
    """The kind the `.tflite` file `path` serves, if `served` and from raw strings; else an `ExportError` saying why.

    A file of token ids only (an export whose tokenizer is not WordPiece) is refused here, before a command reads
    its input: every caller of this passes texts.
    """
    record = file_record(path)
    if record.get("kind") not in served:
        names = " or ".join(kind.replace("_", " ") for kind in served)
        raise ExportError(f"{os.fspath(path)!r} is a LiteRT {str(record.get('kind')).replace('_', ' ')}; this serves "
                          f"a {names}. In Python: bert_keras.export.load_litert(path).")
    if record.get("strings") is not True:
        raise ExportError(_ids_only(path, record))
    return record["kind"]


def _ids_only(path, record):
    tokenizer = record.get("tokenizer") if isinstance(record.get("tokenizer"), dict) else {}
    return (f"{os.fspath(path)!r} serves token ids only (its export's tokenizer is {tokenizer.get('kind')!r}; raw "
            "strings in LiteRT need WordPiece): serve texts with the export itself (bert-keras predict --model "
            "EXPORT_DIR), or call the file's `serve_ids(input_word_ids=..., input_mask=..., input_type_ids=...)` in "
            "Python with ids packed by the export's preprocessor.")


# ----------------------------------------------------------------------------------------------------------------
# Conversion (TensorFlow).


def export_litert(export_dir, path, quantize=None, overwrite=False):
    """Converts an export of this package into a LiteRT `.tflite` file serving raw strings (see the module).

    The export's manifest is checked before anything is converted: its values
    before TensorFlow loads (`check_manifest`), then against the graph: the
    label or tag table by the export's own loader (`load_classifier`,
    `load_tagger`, `load_sentence_encoder`), how it tokenizes by serving probe
    texts through the file's graph and the export's (`check_tokenizes_as_export`).
    The file's record carries the graph's names, never the manifest's copy.

    Args:
        export_dir: str. A directory written by `export_classifier` (single
            texts), `export_tagger` or `export_sentence_encoder` of this
            version (its manifest records how it tokenizes).
        path: str. The `.tflite` file, written whole or not at all, with
            `PATH.json` beside it (the export's kind and settings, the file's
            size and SHA-256); the pair is replaced so that an interrupted
            write leaves the old pair or the new one (`_write_pair`). A second
            writer of `path` is refused while one runs (`.NAME.lock`).
        quantize: None (float32) or `"int8"` (dynamic-range int8 weights:
            about a quarter of the size, faster on CPUs; validate its
            accuracy on your data).
        overwrite: bool. Replace a file this package wrote. Defaults to `False`.

    Returns:
        `path`.

    Raises:
        ExportError: not an export, a reader, an export that records no
            tokenizer, or a manifest edited after the export was written.
            FileExistsError: `path` exists (see `overwrite`), or is not this
            package's. OutputLockedError: another process writes `path`.
            ValueError: the conversion left ops that LiteRT cannot run, or lost
            the weights.
    """
    export_dir, path = os.fspath(export_dir), os.fspath(path)
    check_quantize(quantize)
    manifest = served_manifest(export_dir)
    check_litert_target(path, overwrite)
    with output_lock(path):  # from the start: a second writer is refused at once, not after its conversion
        _remove_leftovers(path)
        check_litert_target(path, overwrite)  # again, under the lock
        tokenizer = manifest["tokenizer"]
        strings = tokenizer["kind"] == "wordpiece"
        vocabulary = _read_vocabulary(export_dir, tokenizer) if strings else None
        loaded, names = _checked_by_loader(export_dir, manifest)
        from bert_keras.hub.loader import load  # TensorFlow: this module serves files without it

        saved = load(export_dir)
        _check_positions(export_dir, saved, tokenizer["seq_length"])
        from bert_keras.export._litert_graph import litert_module, check_tokenizes_as_export

        module = litert_module(saved, manifest, vocabulary)
        if strings:
            check_tokenizes_as_export(module, loaded, manifest, vocabulary)
        del loaded
        data = _convert(module, quantize, strings)
        check_converted(data, _variable_bytes(saved), quantize, strings)
        settings = {key: value for key, value in manifest.items() if key not in ("format", "version")}
        record = {"format": FORMAT, "version": VERSION, "writer": "bert_keras", "source": os.path.abspath(export_dir),
                  **settings, **names, "quantize": quantize, "strings": strings, "size": len(data),
                  "sha256": hashlib.sha256(data).hexdigest()}
        _write_pair(path, data, record)
    logger.info("Wrote the LiteRT model %s (%.1f MB)", path, len(data) / 1e6)
    return path


def _checked_by_loader(export_dir, manifest):
    """The export loaded by its own loader (which refuses a manifest that disagrees with the graph: a reordered
    label table, other tag names, another decoding), and the names its graph serves, for the record."""
    import bert_keras.export as exports  # TensorFlow: the loaders

    loader = {CLASSIFIER: exports.load_classifier, TAGGER: exports.load_tagger,
              SENTENCE_ENCODER: exports.load_sentence_encoder}[manifest["kind"]]
    try:
        loaded = loader(export_dir, warm_up=False)
    except ValueError as error:  # ExportError included
        raise ExportError(f"{export_dir!r} cannot be converted: {error}") from None
    if manifest["kind"] == CLASSIFIER:
        return loaded, {"label_names": list(loaded.label_names)}
    if manifest["kind"] == TAGGER:
        return loaded, {"tag_names": list(loaded.tag_names)}
    return loaded, {"dimension": int(loaded.embedding_dim)}


def _check_positions(export_dir, saved, seq_length):
    """Refuses a `seq_length` beyond the encoder's position table (an edited manifest), before anything runs at it.
    An encoder without one (rotary or relative positions) is bounded by `MAX_SEQ_LENGTH` alone."""
    tables = [int(variable.shape[0]) for variable in getattr(saved, "variables", ())
              if "position_embedding" in variable.name and len(variable.shape) == 2]
    if tables and seq_length > min(tables):
        raise ExportError(f"The manifest {manifest_path(export_dir)} records tokenizer.seq_length={seq_length}, but "
                          f"the export's encoder holds {min(tables)} positions: the manifest was edited. Restore the "
                          "file, or export the model again.")


def _read_vocabulary(export_dir, tokenizer):
    name = tokenizer.get("vocabulary_file") or "vocab.txt"
    vocab_path = os.path.join(export_dir, ASSETS_EXTRA, os.path.basename(name))
    try:
        with open(vocab_path, encoding="utf-8") as f:
            vocabulary = f.read().split("\n")
    except (OSError, UnicodeDecodeError) as error:
        raise ExportError(f"{vocab_path} cannot be read ({error}): the export is damaged; export the model again.") \
            from None
    if vocabulary and vocabulary[-1] == "":
        vocabulary.pop()
    if len(vocabulary) != tokenizer.get("vocabulary_size", len(vocabulary)):
        raise ExportError(f"{vocab_path} holds {len(vocabulary)} tokens, but the manifest records "
                          f"{tokenizer.get('vocabulary_size')}: the export is damaged; export the model again.")
    if tokenizer["unknown_token"] not in vocabulary:
        raise ExportError(f"The manifest {manifest_path(export_dir)} records tokenizer.unknown_token="
                          f"{tokenizer['unknown_token']!r}, which {vocab_path} does not hold: the export is damaged; "
                          "export the model again.")
    return vocabulary



def _variable_bytes(saved):
    seen, total = set(), 0
    for variable in getattr(saved, "variables", ()):
        if id(variable) not in seen:
            seen.add(id(variable))
            total += int(np.prod(variable.shape)) * variable.dtype.size
    return total


def _schema():
    """The TFLite flatbuffer schema's Python module: LiteRT's, else TensorFlow's (a conversion needs no LiteRT)."""
    try:
        from ai_edge_litert import schema_py_generated
    except ImportError:
        from tensorflow.lite.python import schema_py_generated
    return schema_py_generated


def op_names(data):
    """The names of the ops of a `.tflite` flatbuffer: builtin ones as `ADD`, custom ones by their custom code."""
    schema = _schema()
    builtins = {value: name for name, value in vars(schema.BuiltinOperator).items() if not name.startswith("_")}
    model = schema.Model.GetRootAs(data, 0)
    names = set()
    for index in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(index)
        custom = code.CustomCode()
        if custom:
            names.add(custom.decode("utf-8"))
        else:
            names.add(builtins.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), "UNKNOWN"))
    return names


# The token packing's branches (`layers.packing._skip_if_all_packed`): `reshaped` when a batch has no padding,
# else `gathered`, which is right for every batch.
_PACKING_BRANCH = re.compile(r"_(pack_tokens|unpack_tokens|attention)(_\d+)?_cond_(true|false)_\d+")


def gathered_branches(data):
    """`data` with each of the token packing's conditions (`IF`) taking its gather branch whatever the batch.

    LiteRT prepares both branches of an `IF` for the shapes of each call; the
    reshape branch (valid only for a batch without padding) then fails to
    prepare on any batch with padding ("num_input_elements !=
    num_output_elements"). The gather branch gives the same numbers for every
    batch, so its subgraph becomes the `then` branch too: the indices are
    rewritten in place (the flatbuffer's size and every other byte unchanged).
    """
    schema = _schema()
    data = bytearray(data)
    model = schema.Model.GetRootAs(data, 0)
    names = [(model.Subgraphs(i).Name() or b"").decode("utf-8", "replace") for i in range(model.SubgraphsLength())]
    codes = [max(model.OperatorCodes(i).BuiltinCode(), model.OperatorCodes(i).DeprecatedBuiltinCode())
             for i in range(model.OperatorCodesLength())]
    for graph in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(graph)
        for index in range(subgraph.OperatorsLength()):
            operator = subgraph.Operators(index)
            if codes[operator.OpcodeIndex()] != schema.BuiltinOperator.IF:
                continue
            options = schema.IfOptions()
            table = operator.BuiltinOptions()
            options.Init(table.Bytes, table.Pos)
            then_index, else_index = options.ThenSubgraphIndex(), options.ElseSubgraphIndex()
            then_name, else_name = _PACKING_BRANCH.search(names[then_index]), _PACKING_BRANCH.search(names[else_index])
            if not (then_name and else_name and then_name.group(3) == "true" and else_name.group(3) == "false"):
                continue
            field = table.Offset(4)  # then_subgraph_index (the options' table is `table`, a flatbuffers Table)
            struct.pack_into("<i", data, table.Pos + field, else_index)
    return bytes(data)


def check_converted(data, variable_bytes, quantize=None, strings=True):
    """Refuses a converted model that LiteRT cannot run from strings or that lost its weights."""
    ops = op_names(data)
    builtin = {name for name in ops if name.isupper() and ">" not in name and name != "CUSTOM"}
    custom = ops - builtin
    unexpected = sorted(custom - (TEXT_OPS if strings else frozenset()))
    if unexpected:
        raise ValueError(f"The LiteRT conversion left ops that no LiteRT runtime resolves: {unexpected} (expected "
                         f"only tensorflow-text's {sorted(TEXT_OPS)}). Export the model again with this version of "
                         "bert_keras (its layers convert to builtin ops), then convert it.")
    floor = _MIN_WEIGHT_SHARE[quantize] * variable_bytes
    if ops & _VARIABLE_OPS or len(data) < floor:
        raise ValueError(f"The LiteRT conversion lost the model's weights: the file holds {len(data):,} bytes for "
                         f"{variable_bytes:,} bytes of variables (at least {int(floor):,} expected), ops "
                         f"{sorted(ops & _VARIABLE_OPS)}. Nothing was written.")


def _convert(module, quantize, strings):
    import tensorflow as tf

    functions = [module.serve_ids.get_concrete_function(), module.version.get_concrete_function()]
    if strings:
        functions = [module.serve.get_concrete_function(), functions[0], module.preprocess.get_concrete_function()]
    converter = tf.lite.TFLiteConverter.from_concrete_functions(functions, module)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.allow_custom_ops = strings  # tensorflow-text's kernels; check_converted refuses any other
    if quantize == "int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    return gathered_branches(converter.convert())


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


# ----------------------------------------------------------------------------------------------------------------
# Serving (no TensorFlow).


def _text_kernels():
    """tensorflow-text's LiteRT kernels, registered by name from its shared library, without importing TensorFlow
    (the library links TensorFlow's framework library, loaded first); the registrar module's functions otherwise."""
    # Python's OpenSSL modules first: TensorFlow's libraries, loaded globally below, carry BoringSSL's symbols, which
    # `_hashlib` and `_ssl` would bind to if loaded after them (a segmentation fault at `import hashlib`, which
    # `import tensorflow` does).
    for name in ("hashlib", "ssl"):
        try:
            importlib.import_module(name)
        except ImportError:  # a Python built without OpenSSL: nothing to bind
            pass
    try:
        tf_spec, text_spec = importlib.util.find_spec("tensorflow"), importlib.util.find_spec("tensorflow_text")
        framework = os.path.join(tf_spec.submodule_search_locations[0], "libtensorflow_framework.so.2")
        kernels = os.path.join(text_spec.submodule_search_locations[0], "core", "pybinds",
                               "libpybinds_library_common.so")
        with NativeLogFilter():  # the libraries' start-up lines in absl's format ("oneDNN custom operations are on")
            ctypes.CDLL(framework, mode=ctypes.RTLD_GLOBAL)
            ctypes.CDLL(kernels, mode=ctypes.RTLD_GLOBAL)
        return list(_REGISTERERS)
    except (AttributeError, TypeError, IndexError, OSError) as error:
        logger.info("Registering tensorflow-text's kernels through its module (%s)", error)
        from tensorflow_text import tflite_registrar

        return list(tflite_registrar.SELECT_TFTEXT_OPS)


def check_num_threads(num_threads):
    """The interpreter's threads: `num_threads`, an int in [1, os.cpu_count()] (None: every core); a `ValueError`
    naming it otherwise. More threads than cores only wait on each other, and LiteRT ends the process (a
    segmentation fault) on a count of thousands."""
    cores = os.cpu_count() or 1
    return cores if num_threads is None else check_int("num_threads", num_threads, minimum=1, maximum=cores)


def _interpreter(path, strings, num_threads, xnnpack=True):
    """LiteRT's interpreter of `path`: with tensorflow-text's kernels for a file from strings; with LiteRT's default
    delegate (XNNPACK) unless `xnnpack` is False."""
    try:
        from ai_edge_litert import interpreter as litert
    except ImportError:
        raise ImportError("Serving a .tflite file needs the LiteRT interpreter: pip install ai-edge-litert "
                          "(or bert-keras[litert]).") from None
    threads = check_num_threads(num_threads)
    options = {} if xnnpack else {"experimental_op_resolver_type": litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
    if not strings:
        return litert.Interpreter(model_path=path, num_threads=threads, **options)
    return litert.InterpreterWithCustomOps(model_path=path, num_threads=threads,
                                           custom_op_registerers=_text_kernels(), **options)


# The output of `serve_ids` whose last dimension the record's names count, per kind.
_OUTPUT_OF = {CLASSIFIER: "probabilities", TAGGER: "scores", SENTENCE_ENCODER: "embeddings"}


def _recorded(path, name, value, check):
    """`check(value)` for the record's `name`; its `ValueError` as an `ExportError` naming the record."""
    try:
        return check(value)
    except ValueError as error:
        raise ExportError(f"{os.path.basename(sidecar_path(path))} (beside {os.fspath(path)!r}) is damaged: {error}. "
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


def _output_width(runner, output):
    """The last dimension of the signature runner's `output` (what the model was converted with)."""
    details = runner.get_output_details()
    return int(details[output]["shape_signature"][-1]) if output in details else None


def _recorded_names(path, record, name, width):
    """The record's list of `width` names `name` (a classifier's labels, a tagger's tags), checked."""
    def check(value):
        _check_names(name, value)
        if width is not None and len(value) != width:
            raise ValueError(f"Received an invalid value for argument `{name}`, expected {width} names (the "
                             f"model's outputs). Received: {name}={value!r}")
        return list(value)

    return _recorded(path, name, record.get(name), check)


class LiteRTModel:
    """A `.tflite` file of `export_litert`, loaded: `predict` / `encode` as the export's own loader answers.

    Attributes:
        path: str. kind: str (classifier, tagger, sentence_encoder).
        record: dict. What `PATH.json` records (the export's settings).
        serves_strings: bool. Whether the file tokenizes (WordPiece) or
            serves token ids only (`serve_ids`).
    """

    def __init__(self, path, num_threads=None):
        self.path = os.fspath(path)
        self._num_threads = check_num_threads(num_threads)
        record = file_record(self.path)  # the size and SHA-256 recorded, before LiteRT reads the file
        self.record, self.kind = record, record.get("kind")
        self.serves_strings = record.get("strings") is True
        tokenizer = _record_tokenizer(self.path, record)
        self._start(xnnpack=True)
        width = _output_width(self.serve_ids, _OUTPUT_OF.get(self.kind))
        self.label_names = _recorded_names(self.path, record, "label_names", width) if self.kind == CLASSIFIER else None
        self.num_classes = len(self.label_names or ())
        self.inputs = ["text"]
        self.tag_names = _recorded_names(self.path, record, "tag_names", width) if self.kind == TAGGER else None
        self.aggregation = _recorded(self.path, "aggregation", record.get("aggregation", "simple"), lambda value: (
            check_aggregation(_expect("aggregation", value, isinstance(value, str), "a str"))))
        self.embedding_dim = None
        if self.kind == SENTENCE_ENCODER:
            self.embedding_dim = _recorded(self.path, "dimension", record.get("dimension"),
                                           lambda value: check_int("dimension", value, minimum=width, maximum=width))
        self._unknown_token = tokenizer.get("unknown_token", "[UNK]")
        self._suffix_indicator = tokenizer.get("suffix_indicator", "")
        self.tokenizer_kind = tokenizer["kind"]

    def _start(self, xnnpack):
        self._interpreter = _interpreter(self.path, self.serves_strings, self._num_threads, xnnpack=xnnpack)
        self.xnnpack = xnnpack
        self.serve_ids = self._interpreter.get_signature_runner("serve_ids")
        self._serve = self._interpreter.get_signature_runner("serve") if self.serves_strings else None
        self._prepared = False  # LiteRT applies its delegate on the first call

    def _strings(self, texts):
        if not self.serves_strings:
            raise ExportError(_ids_only(self.path, self.record))
        return text_list(texts)

    def _run(self, texts):
        text = np.array([text.encode("utf-8") for text in texts], dtype=object)
        if self._prepared:
            return self._serve(text=text)
        try:
            with NativeLogFilter():  # the delegate's "INFO: Created TensorFlow Lite XNNPACK delegate for CPU."
                outputs = self._serve(text=text)
            self._prepared = True
            return outputs
        except RuntimeError as error:
            # XNNPACK refuses to prepare the dynamic-range int8 graph of the token-packed encoder ("failed to create
            # XNNPACK Value for tensor -1"), which files converted from exports without `serve_ids_padded` hold (the
            # float32 graph, and int8 in the padded layout, it takes): LiteRT's own kernels then answer, slower.
            if not self.xnnpack or "XNNPACK" not in str(error):
                raise
            logger.info("%s: XNNPACK cannot prepare this graph (%s); serving with LiteRT's builtin kernels.",
                        self.path, str(error).splitlines()[0][:120])
            self._start(xnnpack=False)
            return self._serve(text=text)

    def _check_kind(self, *kinds):
        if self.kind not in kinds:
            method = {CLASSIFIER: "predict", TAGGER: "predict", SENTENCE_ENCODER: "encode"}[self.kind]
            raise ExportError(f"{self.path!r} is a LiteRT {self.kind.replace('_', ' ')}; call its `{method}`.")

    def predict_proba(self, texts, batch_size=64):
        """A classifier's probabilities, float32 `(n, num_classes)`, in `label_names` order."""
        self._check_kind(CLASSIFIER)
        texts, _ = self._strings(texts)
        batch_size = check_int("batch_size", batch_size, minimum=1)
        batches = [as_probabilities(self._run(texts[start : start + batch_size])["probabilities"])
                   for start in range(0, len(texts), batch_size)]
        return np.concatenate(batches) if batches else np.zeros((0, len(self.label_names)), "float32")

    def predict(self, texts, aggregation=None, *, top_k=None, batch_size=None):
        """A classifier's labels (`ExportedClassifier.predict`) or a tagger's entities (`ExportedTagger.predict`)."""
        self._check_kind(CLASSIFIER, TAGGER)
        if self.kind == TAGGER:
            return self._entities(texts, aggregation)
        if aggregation is not None:
            raise TypeError("`aggregation` is a tagger's argument; this file is a classifier.")
        texts, single = self._strings(texts)
        check_top_k(top_k, len(self.label_names))
        blank = [not text.strip() for text in texts]
        kept = [text for text, is_blank in zip(texts, blank) if not is_blank]
        results = iter(labelled_predictions(self.predict_proba(kept, batch_size or 64), self.label_names, top_k))
        results = [blank_prediction() if is_blank else next(results) for is_blank in blank]
        return results[0] if single else results

    def tag_pieces(self, texts):
        """A tagger's per-piece outputs, one dict per text (as `ExportedTagger.tag_pieces`), one text per call."""
        self._check_kind(TAGGER)
        texts, _ = self._strings(texts)
        rows = []
        for text in texts:
            outputs = self._run([text])
            length = int(outputs.pop("lengths")[0])
            piece = {name: np.asarray(value)[0, :length] for name, value in outputs.items()}
            piece["tokens"] = [token.decode("utf-8") for token in piece["tokens"]]
            rows.append(piece)
        return rows

    def _entities(self, texts, aggregation):
        aggregation = check_aggregation(self.aggregation if aggregation is None else aggregation)
        texts, single = self._strings(texts)
        results = [text_entities(text, piece, self.tag_names, aggregation, self._unknown_token,
                                 self._suffix_indicator, self.tokenizer_kind)
                   for text, piece in zip(texts, self.tag_pieces(texts))]
        return results[0] if single else results

    def encode(self, texts, batch_size=32):
        """A sentence encoder's embeddings, float32 `(len(texts), dim)` in input order (`(dim,)` for a str)."""
        self._check_kind(SENTENCE_ENCODER)
        texts, single = self._strings(texts)
        batch_size = check_int("batch_size", batch_size, minimum=1)
        output = np.zeros((len(texts), self.embedding_dim), dtype="float32")
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # less padding per batch, as encode_in_batches
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            output[rows] = self._run([texts[i] for i in rows])["embeddings"]
        return output[0] if single else output

    def __repr__(self):
        return f"LiteRTModel({self.path!r}, kind={self.kind!r})"


def load_litert(path, num_threads=None):
    """Loads a `.tflite` file of `export_litert` (see `LiteRTModel`) without importing TensorFlow.

    Args:
        path: str. The file; `PATH.json` beside it says what it serves, and
            the file's size and SHA-256, checked before LiteRT reads it.
        num_threads: optional int in [1, os.cpu_count()]. The interpreter's
            threads. Defaults to the machine's cores.

    Raises:
        ExportError: the file is not this package's, differs from its record
            (damaged, changed, cut), or its record is damaged.
        ValueError: `num_threads` is not an int in [1, os.cpu_count()].
    """
    return LiteRTModel(path, num_threads=num_threads)
