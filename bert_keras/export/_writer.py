"""The one export writer: archive, each variable once, endpoints, staging, manifest, warm-up, extra assets.

Every kind of export (classifier, tagger, reader, sentence encoder) is one
call of `write_export` with its own endpoints and settings; what differs
between kinds is only what they serve, never how a directory is written.
"""

import json
import os

import keras

from bert_keras._files import directory_under, staged_directory
from bert_keras._keras_compat import variables_once, write_archive
from bert_keras.export import warmup
from bert_keras.export.manifest import ASSETS_EXTRA, manifest, write_manifest


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
                 extra_assets=None, marker_info=None):
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

    Returns:
        `export_dir`.
    """
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
