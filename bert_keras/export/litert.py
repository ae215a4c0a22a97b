"""LiteRT (TensorFlow Lite) from an export of this package: raw strings in, what the export serves out.

`export_litert(export_dir, path)` converts a classifier, tagger, reader or
sentence encoder export into one `.tflite` file with these signatures:

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
- `windows` (a tagger's): one text -> its windows' packed inputs and its
  entries without their scores (`window`, `column`: where each is in
  `serve_ids`' output), so that a caller runs `serve_ids` a few windows at a
  time and one long text holds one call's activations (`LiteRTModel`).

- A reader's file has `pieces` (`(batch,)` strings -> their flat pieces,
  character offsets and word starts) and `serve_ids` (packed windows -> start
  and end logits) instead: `LiteRTReader` cuts the windows between the two as
  the export's graph cuts them (`litert_windows`).

- `record` (every file's): the canonical JSON of what `PATH.json` says the
  file serves (`litert_record.carried_values`), compared with `PATH.json` at
  load, so that a record edited after conversion is refused.

An export whose tokenizer is not WordPiece (SentencePiece, byte-level BPE:
their exact tokenizers are TensorFlow ops that LiteRT cannot run) gets
`serve_ids` only: raw strings need WordPiece.

What the file is (the export's kind and settings) is recorded beside it, in
`PATH.json`: the export's manifest with `"engine": "litert"`, the file's
size and SHA-256; a file is replaced only when that record says this
package wrote it. `load_litert(path)` reads both and answers as the matching loader
does (`ExportedClassifier.predict`, `ExportedTagger.predict`,
`ExportedReader.predict`, `ExportedSentenceEncoder.encode`) without importing TensorFlow: the
interpreter is `ai-edge-litert`'s, with tensorflow-text's kernels
registered from their shared library.

The record and the file's integrity live in `litert_record`, the interpreter
and `LiteRTModel` in `litert_engine`; their public names are importable from
here too.
"""

import hashlib
import logging
import os

import numpy as np

from bert_keras._checks import check_int
from bert_keras._locks import output_lock
from bert_keras._platform.tflite_file import gathered_branches, op_names
from bert_keras.export.entity_groups import check_aggregation  # no TensorFlow (text.decoding)
from bert_keras.export.litert_engine import (TAGGER_OUTPUTS, LiteRTModel, check_num_threads,  # noqa: F401
                                             load_litert)
from bert_keras.export.litert_record import (SERVED_KINDS, SIDECAR_SUFFIX,  # noqa: F401
                                             _check_names, _expect, _remove_leftovers, carried_values, _tokenizer_kind, _write_pair,
                                             check_litert_target, file_record, file_sha256, is_litert, new_record,
                                             read_sidecar, sidecar_path)
from bert_keras.export.litert_windows import reader_settings  # no TensorFlow
from bert_keras.export.manifest import (ASSETS_EXTRA, CLASSIFIER, READER, SENTENCE_ENCODER, TAGGER, ExportError,
                                        manifest_path, read_manifest)

logger = logging.getLogger(__name__)

QUANTIZATIONS = (None, "int8")
# The longest `seq_length` a manifest may record: no encoder family of the package holds more positions
# (ModernBERT's 8,192); a longer one is an edited manifest, refused before TensorFlow loads.
MAX_SEQ_LENGTH = 8192
# A vocabulary larger than any tokenizer's of the package (XLM-RoBERTa's 250,002 pieces) by far.
_MAX_VOCABULARY_SIZE = 1 << 22
# The custom ops a raw-string file may hold: tensorflow-text's kernels, nothing else.
TEXT_OPS = frozenset({"FastBertNormalize", "FastWordpieceTokenizeWithOffsets", "TFText>ByteSplitWithOffsets"})
# The converted file holds at least this share of the variables' bytes (int8: a quarter, less what stays float);
# a file without its weights (variables left as uninitialised resources: a few hundred KB, NaN outputs) holds none.
_MIN_WEIGHT_SHARE = {None: 0.9, "int8": 0.2}
# Ops of variables that the conversion did not freeze.
_VARIABLE_OPS = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"})


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
                          "by bert_keras' export_classifier, export_tagger, export_reader or export_sentence_encoder.")
    manifest = read_manifest(export_dir)
    kind = None if manifest is None else manifest["kind"]
    if kind not in SERVED_KINDS:
        raise ExportError(f"{export_dir!r} records no kind of export: it is a SavedModel such as Keras' "
                          "`model.export()` writes, with neither the tokenizer's settings nor a token-ids endpoint, "
                          "which LiteRT needs. Export the model with bert_keras.export.export_classifier(model, DIR, "
                          "label_names) (the TF Hub workflow's keras.Model too: Hub preprocess and encoder layers, a "
                          "Dense head; export_tagger, export_reader, export_sentence_encoder for the other kinds; "
                          "bert-keras finetune and demo write such exports), then run bert-keras litert --model DIR.")
    if not isinstance(manifest.get("tokenizer"), dict):
        raise ExportError(f"{export_dir!r} records no tokenizer: its model tokenizes inside a Hub preprocess layer of "
                          "its own graph (a keras.Model of bert_keras.hub layers with more than one Dense layer on "
                          "pooled_output, or modules bert_keras did not write), or it was exported by an earlier "
                          "version of bert_keras. LiteRT needs the tokenizer's settings: build the classifier with "
                          "BertClassifier.from_checkpoint(MODULES_DIR, num_classes=N) (or a tuple (ENCODER, "
                          "PREPROCESS) of a module pair bert_keras wrote: bert-keras convert), fine-tune it, export "
                          "it with export_classifier (bert-keras finetune does all of this), then run bert-keras "
                          "litert on that export.")
    inputs = manifest.get("inputs", ["text"])
    if kind == CLASSIFIER and isinstance(inputs, list) and len(inputs) == 2:
        raise ExportError(f"{export_dir!r} is a classifier of text pairs; LiteRT serves classifiers of single texts.")
    check_manifest(export_dir, manifest)
    return manifest


def _damaged(where, error):
    return ExportError(f"{where} is damaged: {error}. Restore the file, or export the model again.")



def check_manifest(export_dir, manifest):
    """Refuses, with an `ExportError` naming the value, a manifest value that the conversion reads and that no
    export of this package writes (a manifest edited by hand); no TensorFlow."""
    where = f"The manifest {manifest_path(export_dir)}"
    kind, tokenizer = manifest["kind"], manifest["tokenizer"]
    try:
        inputs = manifest.get("inputs", ["text"])
        if kind == READER:
            if inputs != ["question", "context"]:
                raise ValueError(f"Received an invalid value for argument `inputs`, expected [\"question\", "
                                 f"\"context\"]. Received: inputs={inputs!r}")
            reader_settings(manifest)
        elif inputs != ["text"] and kind != CLASSIFIER or kind == CLASSIFIER and (
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
            texts), `export_tagger`, `export_reader` or `export_sentence_encoder` of this
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
        ExportError: not an export, an export that records no
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
        _check_positions(export_dir, saved, max(tokenizer["seq_length"], manifest["seq_length"]) if
                         manifest["kind"] == READER else tokenizer["seq_length"])  # a reader's windows: its own
        from bert_keras.export._litert_graph import litert_module, check_tokenizes_as_export

        record = new_record(manifest, export_dir, **names, quantize=quantize, strings=strings)
        module = litert_module(saved, manifest, vocabulary, carried_values(record))  # the file carries its record
        if strings:
            check_tokenizes_as_export(module, loaded, manifest, vocabulary)
        del loaded
        data = _convert(module, quantize, strings)
        check_converted(data, _variable_bytes(saved), quantize, strings)
        record.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
        _write_pair(path, data, record)
    logger.info("Wrote the LiteRT model %s (%.1f MB)", path, len(data) / 1e6)
    return path


def _checked_by_loader(export_dir, manifest):
    """The export loaded by its own loader (which refuses a manifest that disagrees with the graph: a reordered
    label table, other tag names, another decoding), and the names its graph serves, for the record."""
    import bert_keras.export as exports  # TensorFlow: the loaders

    loader = {CLASSIFIER: exports.load_classifier, TAGGER: exports.load_tagger, READER: exports.load_reader,
              SENTENCE_ENCODER: exports.load_sentence_encoder}[manifest["kind"]]
    try:
        # No warm-up where the loader has one (the classifier's and tagger's): the probe texts are all it serves.
        loaded = loader(export_dir) if manifest["kind"] == SENTENCE_ENCODER else loader(export_dir, warm_up=False)
    except ValueError as error:  # ExportError included
        raise ExportError(f"{export_dir!r} cannot be converted: {error}") from None
    if manifest["kind"] == CLASSIFIER:
        return loaded, {"label_names": list(loaded.label_names)}
    if manifest["kind"] == TAGGER:
        return loaded, {"tag_names": list(loaded.tag_names)}
    if manifest["kind"] == READER:
        return loaded, {}
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

    functions = [getattr(module, name).get_concrete_function() for name in module.signature_names]
    converter = tf.lite.TFLiteConverter.from_concrete_functions(functions, module)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.allow_custom_ops = strings  # tensorflow-text's kernels; check_converted refuses any other
    if quantize == "int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    return gathered_branches(converter.convert())

