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
import importlib.util
import json
import logging
import os
import re
import struct
import tempfile

import numpy as np

from bert_keras._checks import check_int
from bert_keras._native_log import NativeLogFilter
from bert_keras.export.entity_groups import check_aggregation, text_entities  # no TensorFlow (text.decoding)
from bert_keras.export.manifest import (ASSETS_EXTRA, CLASSIFIER, READER, SENTENCE_ENCODER, TAGGER, ExportError,
                                        read_manifest)
from bert_keras.predictions import as_probabilities, blank_prediction, check_top_k, labelled_predictions, text_list

logger = logging.getLogger(__name__)

SERVED_KINDS = (CLASSIFIER, TAGGER, SENTENCE_ENCODER)
QUANTIZATIONS = (None, "int8")
FORMAT = "bert_keras litert"
VERSION = 1
SIDECAR_SUFFIX = ".json"
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
    """The manifest of `export_dir` if LiteRT serves it; an `ExportError` saying what it is and what is served."""
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
    tokenizer = manifest.get("tokenizer")
    if not isinstance(tokenizer, dict) or not isinstance(tokenizer.get("seq_length"), int):
        raise ExportError(f"{export_dir!r} records no tokenizer (an export written by an earlier version of "
                          "bert_keras, or of a model on a Hub preprocess module): export the model again with this "
                          "version to convert it to LiteRT.")
    if kind == CLASSIFIER and len(manifest.get("inputs") or ["text"]) != 1:
        raise ExportError(f"{export_dir!r} is a classifier of text pairs; LiteRT serves classifiers of single texts.")
    return manifest


def sidecar_path(path):
    return os.fspath(path) + SIDECAR_SUFFIX


def read_sidecar(path):
    """The record beside `path` (`PATH.json`), or None when there is none or it is not this package's."""
    try:
        with open(sidecar_path(path), encoding="utf-8") as f:
            record = json.loads(f.read(1 << 20))
    except (OSError, ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) and record.get("format") == FORMAT else None


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
    """The kind `PATH.json` records for the `.tflite` file `path`, if `served`; else an `ExportError` saying why."""
    record = read_sidecar(path)
    if record is None:
        raise ExportError(f"{os.fspath(path)!r} is not a LiteRT file written by bert_keras: "
                          f"{os.path.basename(sidecar_path(path))}, which records what it serves, is missing or not "
                          "ours. Convert an export with bert-keras litert --model EXPORT --out FILE.tflite.")
    if record.get("kind") not in served:
        names = " or ".join(kind.replace("_", " ") for kind in served)
        raise ExportError(f"{os.fspath(path)!r} is a LiteRT {str(record.get('kind')).replace('_', ' ')}; this serves "
                          f"a {names}. In Python: bert_keras.export.load_litert(path).")
    return record["kind"]


# ----------------------------------------------------------------------------------------------------------------
# Conversion (TensorFlow).


def export_litert(export_dir, path, quantize=None, overwrite=False):
    """Converts an export of this package into a LiteRT `.tflite` file serving raw strings (see the module).

    Args:
        export_dir: str. A directory written by `export_classifier` (single
            texts), `export_tagger` or `export_sentence_encoder` of this
            version (its manifest records how it tokenizes).
        path: str. The `.tflite` file, written whole or not at all, with
            `PATH.json` beside it (the export's kind and settings).
        quantize: None (float32) or `"int8"` (dynamic-range int8 weights:
            about a quarter of the size, faster on CPUs; validate its
            accuracy on your data).
        overwrite: bool. Replace a file this package wrote. Defaults to `False`.

    Returns:
        `path`.

    Raises:
        ExportError: not an export, a reader, or an export that records no
            tokenizer. FileExistsError: `path` exists (see `overwrite`), or
            is not this package's. ValueError: the conversion left ops that
            LiteRT cannot run, or lost the weights.
    """
    export_dir, path = os.fspath(export_dir), os.fspath(path)
    check_quantize(quantize)
    manifest = served_manifest(export_dir)
    check_litert_target(path, overwrite)
    tokenizer = manifest["tokenizer"]
    strings = tokenizer.get("kind") == "wordpiece"
    vocabulary = _read_vocabulary(export_dir, tokenizer) if strings else None
    from bert_keras.hub.loader import load

    saved = load(export_dir)
    from bert_keras.export._litert_graph import litert_module

    module = litert_module(saved, manifest, vocabulary)
    data = _convert(module, quantize, strings)
    check_converted(data, _variable_bytes(saved), quantize, strings)
    settings = {key: value for key, value in manifest.items() if key not in ("format", "version")}
    record = {"format": FORMAT, "version": VERSION, "writer": "bert_keras", "source": os.path.abspath(export_dir),
              "quantize": quantize, "strings": strings, "size": len(data), **settings}
    _write_file(path, data, record)
    logger.info("Wrote the LiteRT model %s (%.1f MB)", path, len(data) / 1e6)
    return path


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


def _write_file(path, data, record):
    """`record` to `PATH.json`, then `data` to `path` through a staged sibling and one rename."""
    from bert_keras._files import write_json_atomically

    fd, staged = tempfile.mkstemp(prefix=f"{os.path.basename(path)}.partial-", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        write_json_atomically(sidecar_path(path), record)
        os.replace(staged, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(staged)
        raise


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


def _interpreter(path, strings, num_threads, xnnpack=True):
    """LiteRT's interpreter of `path`: with tensorflow-text's kernels for a file from strings; with LiteRT's default
    delegate (XNNPACK) unless `xnnpack` is False."""
    try:
        from ai_edge_litert import interpreter as litert
    except ImportError:
        raise ImportError("Serving a .tflite file needs the LiteRT interpreter: pip install ai-edge-litert "
                          "(or bert-keras[litert]).") from None
    threads = (os.cpu_count() or 1) if num_threads is None else check_int("num_threads", num_threads, minimum=1)
    options = {} if xnnpack else {"experimental_op_resolver_type": litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
    if not strings:
        return litert.Interpreter(model_path=path, num_threads=threads, **options)
    return litert.InterpreterWithCustomOps(model_path=path, num_threads=threads,
                                           custom_op_registerers=_text_kernels(), **options)


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
        if not os.path.isfile(self.path):
            raise ExportError(f"{self.path!r} is not a file; expected a .tflite file written by "
                              "bert_keras.export.export_litert (bert-keras litert).")
        record = read_sidecar(self.path)
        if record is None or record.get("kind") not in SERVED_KINDS:
            raise ExportError(f"{self.path!r} is not a LiteRT file written by bert_keras: "
                              f"{os.path.basename(sidecar_path(self.path))}, which records what it serves, is missing "
                              "or not ours. Convert the export with bert_keras.export.export_litert (bert-keras litert).")
        if record.get("size") != os.path.getsize(self.path):
            raise ExportError(f"{self.path!r} holds {os.path.getsize(self.path):,} bytes, but "
                              f"{os.path.basename(sidecar_path(self.path))} records {record.get('size')!r}: the file "
                              "and its record are of different conversions. Convert the export again.")
        self.record, self.kind = record, record["kind"]
        self.serves_strings = bool(record.get("strings"))
        self._num_threads = num_threads
        self._start(xnnpack=True)
        self.label_names = record.get("label_names")
        self.num_classes = len(self.label_names or ())
        self.inputs = record.get("inputs") or ["text"]
        self.tag_names = record.get("tag_names")
        self.aggregation = record.get("aggregation", "simple")
        self.embedding_dim = record.get("dimension")
        tokenizer = record.get("tokenizer") or {}
        self._unknown_token = tokenizer.get("unknown_token", "[UNK]")
        self._suffix_indicator = tokenizer.get("suffix_indicator", "")
        self.tokenizer_kind = tokenizer.get("kind")

    def _start(self, xnnpack):
        self._interpreter = _interpreter(self.path, self.serves_strings, self._num_threads, xnnpack=xnnpack)
        self.xnnpack = xnnpack
        self.serve_ids = self._interpreter.get_signature_runner("serve_ids")
        self._serve = self._interpreter.get_signature_runner("serve") if self.serves_strings else None
        self._prepared = False  # LiteRT applies its delegate on the first call

    def _strings(self, texts):
        if not self.serves_strings:
            raise ValueError(f"{self.path!r} serves token ids only (its export's tokenizer is "
                             f"{self.tokenizer_kind!r}; raw strings in LiteRT need WordPiece): call "
                             "`serve_ids(input_word_ids=..., input_mask=..., input_type_ids=...)` with ids packed "
                             "by the export's preprocessor.")
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
        path: str. The file; `PATH.json` beside it says what it serves.
        num_threads: optional int. The interpreter's threads. Defaults to
            the machine's cores.
    """
    return LiteRTModel(path, num_threads=num_threads)
