"""The one export writer: archive, each variable once, endpoints, staging, manifest, warm-up, extra assets.

Every kind of export (classifier, tagger, reader, sentence encoder) is one
call of `write_export` with its own endpoints and settings; what differs
between kinds is only what they serve, never how a directory is written.
"""

import json
import os

import keras
import tensorflow as tf

from bert_keras._contract import INPUT_KEYS
from bert_keras._files import directory_under, staged_directory
from bert_keras._platform.keras_private import variables_once, write_archive
from bert_keras.export import warmup
from bert_keras.export.manifest import ASSETS_EXTRA, manifest, write_manifest
from bert_keras.text.base import Tokenizer
from bert_keras.text.tokenizer import WordPieceTokenizer

# The endpoint every export of a model with a preprocessor carries besides its strings: the packed inputs (int32
# `(batch, seq)` each) to the model's outputs, what a runtime without tensorflow-text's ops serves (LiteRT's
# token-ids signature is converted from it).
IDS_ENDPOINT = "serve_ids"
# The same outputs from the padded layout (no token packing): fewer ops, what LiteRT converts (an engine that spends
# per op: measured in benchmarks/results/serving_engines.md). TensorFlow serves batches faster packed, so `serve_ids`
# stays packed.
PADDED_IDS_ENDPOINT = "serve_ids_padded"
IDS_SIGNATURE = [tf.TensorSpec([None, None], tf.int32, name=key) for key in INPUT_KEYS]
VOCABULARY_FILE = "vocab.txt"


def tokenizer_kind(tokenizer):
    """What an export records of `tokenizer`: its kind (`text.kinds.TOKENIZER_KINDS`); a `ValueError` for another."""
    if not isinstance(tokenizer, Tokenizer):
        raise ValueError(f"Received a model whose tokenizer is a {type(tokenizer).__name__}; the export takes the "
                         "package's WordPieceTokenizer, SentencePieceTokenizer or BytePairTokenizer.")
    return tokenizer.kind


def tokenizer_settings(preprocessor):
    """`(settings, files)`: how the model's preprocessor tokenizes and packs, for the manifest's `tokenizer`, and
    the files of `assets.extra/` a runtime rebuilds it from (WordPiece's `vocab.txt`). `({}, {})` for a
    preprocessor of another kind (a Hub preprocess module's)."""
    tokenizer = getattr(preprocessor, "tokenizer", None)
    seq_length = getattr(preprocessor, "seq_length", None)
    if not isinstance(tokenizer, Tokenizer) or not isinstance(seq_length, int):
        return {}, {}
    settings = {"kind": tokenizer_kind(tokenizer), "seq_length": seq_length, "cls_id": tokenizer.cls_id,
                "sep_id": tokenizer.sep_id, "pad_id": tokenizer.pad_id, "unknown_token": tokenizer.unknown_token,
                "vocabulary_size": len(tokenizer.vocabulary)}
    if not isinstance(tokenizer, WordPieceTokenizer):
        return settings, {}
    settings.update(lower_case=tokenizer.lower_case, suffix_indicator=tokenizer.suffix_indicator,
                    max_chars_per_word=tokenizer.max_chars_per_word, vocabulary_file=VOCABULARY_FILE)
    return settings, {VOCABULARY_FILE: "".join(token + "\n" for token in tokenizer.vocabulary).encode("utf-8")}


def output_names(model, names, argument, what, example):
    """The names of the model's outputs as str: `names`, or the model's own `label_names` (a task built or fine-tuned
    with them); a `ValueError` saying what to pass where neither is given."""
    if names is None:
        names = getattr(model, "label_names", None)
        if names is None:
            raise ValueError(f"Received no `{argument}`, and the model carries none: pass {what} in the order of its "
                             f"outputs, e.g. {example}.")
    return [str(name) for name in names]


def ids_endpoints(outputs, padded_outputs=None):
    """The `serve_ids` endpoint of `outputs` and the `serve_ids_padded` one of `padded_outputs` (where given), each
    a function of the packed dict: a list of `(name, function, signature)`."""
    def endpoint(name, function):
        def serve_ids(input_word_ids, input_mask, input_type_ids):
            return function({"input_word_ids": input_word_ids, "input_mask": input_mask,
                             "input_type_ids": input_type_ids})

        return name, serve_ids, IDS_SIGNATURE

    endpoints = [endpoint(IDS_ENDPOINT, outputs)]
    if padded_outputs is not None:
        endpoints.append(endpoint(PADDED_IDS_ENDPOINT, padded_outputs))
    return endpoints


def write_extra_assets(directory, extra_assets):
    """Writes each `name -> value` of `extra_assets` into `directory`: `bytes` as they are, anything else as JSON."""
    for name, value in (extra_assets or {}).items():
        path = os.path.join(directory, name)
        if isinstance(value, bytes):
            with open(path, "wb") as f:
                f.write(value)
        else:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(value, f, indent=2)


def write_export(model, export_dir, *, kind, endpoints, settings, overwrite=False, warmup_requests=None,
                 extra_assets=None, marker_info=None, preprocessor=None):
    """Writes `model`'s endpoints as a SavedModel export of `kind`, whole or not at all.

    Args:
        model: the Keras model whose variables the endpoints read (tracked once each).
        export_dir: str. Written to a temporary sibling and moved into place
            (`_files.staged_directory`).
        kind: str. One of `manifest.KINDS`: recorded in the manifest and in
            the output's marker.
        endpoints: list of `(name, function, input_signature)`. The first
            with a signature is also `serving_default`, as Keras'
            `ExportArchive` makes it.
        settings: dict of JSON values. The manifest's settings of this kind
            (label names, lengths, dtype...).
        overwrite: bool. Replace an earlier export of this kind.
        warmup_requests: optional list of dicts input name -> list of str:
            TF Serving's warm-up file (`export.warmup`).
        extra_assets: optional dict of file name -> JSON value or `bytes`,
            written to `assets.extra/`.
        marker_info: optional dict, recorded in the output's marker.
        preprocessor: optional. The model's preprocessor: how it tokenizes
            and packs is recorded (`tokenizer_settings`) as the manifest's
            `tokenizer`, with the vocabulary beside it.

    Returns:
        `export_dir`.
    """
    tokenizer, files = tokenizer_settings(preprocessor)
    if tokenizer:
        settings = dict(settings, tokenizer=tokenizer)
        extra_assets = {**(extra_assets or {}), **files}
    archive = keras.export.ExportArchive()
    archive.track(model)
    variables_once(archive)  # each weight saved once (Keras lists it twice)
    for name, function, signature in endpoints:
        archive.add_endpoint(name, function, input_signature=signature)
    with staged_directory(export_dir, overwrite, kind=kind, info=marker_info) as staging:
        write_archive(archive, staging)  # each endpoint traced once
        extra = directory_under(staging, ASSETS_EXTRA, argument="export_dir")  # made now: a planted link is refused
        write_manifest(staging, manifest(kind, **settings))
        if warmup_requests:
            warmup.write_warmup_requests(os.path.join(extra, warmup.WARMUP_FILE), warmup_requests)
        write_extra_assets(extra, extra_assets)
    return export_dir
