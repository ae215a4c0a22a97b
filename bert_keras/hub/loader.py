"""Resolving Hub handles and loading SavedModels, with tensorflow-text ops registered first."""

import logging
import os
import re
import urllib.error
import warnings

import keras
import tensorflow as tf
from keras.src.saving import serialization_lib  # in_safe_mode() has no public name in Keras 3

logger = logging.getLogger(__name__)

CACHE_VARIABLE = "TFHUB_CACHE_DIR"
_SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")


def register_text_ops():
    """Imports tensorflow-text so that its ops (WordPiece, normalisation, ...) are registered."""
    import tensorflow_text  # noqa: F401


def _is_url(handle):
    return handle.startswith(("http://", "https://"))


def resolve(handle):
    """Returns a local directory for a handle: a path, `file://` path or http(s) URL.

    URLs must point to compressed (`.tar.gz`) modules; they are downloaded once
    into the cache directory (`$TFHUB_CACHE_DIR`, else the system's temp
    directory) and reused from there.
    """
    handle = os.fspath(handle)
    if handle.startswith("file://"):
        handle = handle[len("file://") :]
    if not _is_url(handle):
        if not os.path.exists(handle):
            raise FileNotFoundError(
                f"No SavedModel at {handle!r}: the path does not exist. Pass a directory "
                "that holds saved_model.pb, or an http(s) URL of a compressed module."
            )
        return handle
    with warnings.catch_warnings():
        # tensorflow-hub imports the deprecated pkg_resources at import time.
        warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
        import tensorflow_hub

    try:
        path = tensorflow_hub.resolve(handle)
    except (urllib.error.URLError, OSError, tf.errors.OpError) as error:
        raise OSError(
            f"Could not fetch the module at {handle}: {error}. If this machine is offline, "
            f"copy the module to a local directory and pass that path, or set {CACHE_VARIABLE} "
            "to a cache directory that already holds it."
        ) from error
    logger.info("Resolved %s to %s", handle, path)
    return path


def _check_saved_model_dir(path):
    if not os.path.isdir(path):
        raise ValueError(f"Expected a SavedModel directory, but {path!r} is a file.")
    if not any(os.path.exists(os.path.join(path, name)) for name in _SAVED_MODEL_FILES):
        contents = sorted(os.listdir(path))[:10]
        raise ValueError(
            f"The directory {path!r} is not a SavedModel: it holds no saved_model.pb. "
            f"Found: {contents}. Point the handle at the folder that contains saved_model.pb."
        )


def load(handle, tags=None, options=None):
    """Loads a SavedModel from a handle, after registering tensorflow-text's ops.

    Args:
        handle: a local directory, a `file://` path or an http(s) URL of a
            compressed module.
        tags: optional set of MetaGraph tags, as in `tf.saved_model.load`.
        options: optional `tf.saved_model.LoadOptions`.

    Returns:
        The restored object, as `tf.saved_model.load` returns it.
    """
    register_text_ops()
    path = resolve(handle)
    _check_saved_model_dir(path)
    try:
        return tf.saved_model.load(path, tags=tags, options=options)
    except (tf.errors.OpError, RuntimeError, ValueError, KeyError) as error:
        missing = re.findall(r"Op type not registered '([^']+)'", str(error))
        if not missing:
            raise
        raise RuntimeError(
            f"The SavedModel at {path!r} needs the op(s) {sorted(set(missing))}, which are not "
            "registered in this TensorFlow. Ops from tensorflow-text are registered by "
            "bert_keras already; for other ops, import the library that defines them "
            "(the same version the module was written with) before loading."
        ) from error


def describe(obj):
    """A short text listing a restored object's signatures and callable attributes."""
    signatures = sorted(getattr(obj, "signatures", {}) or {})
    endpoints = sorted(
        name
        for name in dir(obj)
        if not name.startswith("_") and isinstance(getattr(obj, name, None), tf.types.experimental.GenericFunction)
    )
    return f"signatures: {signatures}; callable attributes: {endpoints}"


def check_safe_mode(cls, config, safe_mode=None):
    """Refuses to rebuild a layer that loads a SavedModel while Keras' safe mode is on.

    A SavedModel is a program: its functions run when the layer is built, and
    a `.keras` file names the module by path or URL. As Keras' own
    `TFSMLayer` does, deserializing such a layer needs `safe_mode=False` (or
    `keras.config.enable_unsafe_deserialization()`) from whoever trusts it.
    """
    safe = safe_mode if safe_mode is not None else serialization_lib.in_safe_mode()
    if safe:
        raise ValueError(
            f"Refusing to deserialize `{cls.__name__}` with handle={config.get('handle')!r} in safe mode: "
            "rebuilding it loads and runs that SavedModel, which may run arbitrary code. If you trust the "
            "file and the module it names, load with `safe_mode=False` (e.g. "
            "`keras.saving.load_model(path, safe_mode=False)`) or call "
            "`keras.config.enable_unsafe_deserialization()`."
        )
