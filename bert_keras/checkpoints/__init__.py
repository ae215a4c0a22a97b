"""Checkpoint converters: Hugging Face, original Google BERT (TF1) and keras-nlp.

`load_checkpoint(path)` detects the format and returns a `LoadedCheckpoint`
with the encoder, any heads, the vocabulary and a summary of the conversion.
Name tables are data (`tables.py`); every other project's names stay here.
"""

import os

from bert_keras.checkpoints._common import (
    CheckpointError,
    ConfigError,
    ConversionSummary,
    LoadedCheckpoint,
    read_json,
)
from bert_keras.checkpoints.google import load_google
from bert_keras.checkpoints.hub_module import is_hub_module, load_hub_module
from bert_keras.checkpoints.huggingface import load_huggingface
from bert_keras.checkpoints.keras_nlp import (
    from_keras_nlp,
    is_backbone,
    is_preset_config,
    load_keras_nlp_preset,
    to_keras_nlp,
)

FORMATS = ("huggingface", "google", "keras_nlp", "hub_module")


def detect_format(path):
    """Returns `"huggingface"`, `"google"`, `"keras_nlp"` or `"hub_module"` for a checkpoint.

    - `bert_config.json` (or a TF checkpoint prefix): original Google BERT.
    - `config.json` of a serialized Keras object (`class_name`, `registered_name`): keras-nlp.
    - any other `config.json`: Hugging Face.
    - `saved_model.pb` (or `encoder/saved_model.pb`), a `.tar.gz` or an http(s)
      handle: a TF Hub / Model Garden encoder module.
    """
    if is_backbone(path):
        return "keras_nlp"
    path = os.fspath(path)
    if is_hub_module(path):
        return "hub_module"
    if os.path.exists(path + ".index"):
        return "google"
    if not os.path.isdir(path):
        raise CheckpointError(path, None, "is not a checkpoint directory (it does not exist or is a file).")
    if os.path.exists(os.path.join(path, "bert_config.json")):
        return "google"
    config_file = os.path.join(path, "config.json")
    if os.path.exists(config_file):
        return "keras_nlp" if is_preset_config(read_json(config_file)) else "huggingface"
    raise CheckpointError(
        path,
        None,
        "holds no checkpoint this package knows: expected config.json (Hugging Face or a "
        "keras-nlp preset) or bert_config.json with bert_model.ckpt.* (Google BERT).",
    )


def load_checkpoint(path, *, format=None, with_heads=True, do_lower_case=None, dtype=None):
    """Converts a BERT checkpoint of any supported format.

    Args:
        path: str, a checkpoint directory (or TF checkpoint prefix), or a
            `keras_nlp.models.BertBackbone` object.
        format: optional str, one of `"huggingface"`, `"google"`, `"keras_nlp"`, `"hub_module"`.
            Detected when omitted (see `detect_format`).
        with_heads: bool. Convert pre-training heads when present. Defaults to `True`.
        do_lower_case: optional bool. Overrides what the checkpoint says.
        dtype: optional dtype policy of the built models.

    Returns:
        `LoadedCheckpoint` with `encoder`, `heads`, `pretrainer`, `vocab_file`,
        `do_lower_case` and `summary`.

    Raises:
        CheckpointError: naming the file and the tensor (or config field) at
            fault: a missing tensor, a wrong shape, a config of another model,
            a vocabulary that disagrees with the embeddings, a truncated file.

    Example:
    >>> from bert_keras.text.corpora import minilm_vocab_path  # the MiniLM checkpoint of the test extra
    >>> loaded = load_checkpoint(os.path.dirname(minilm_vocab_path()))
    >>> loaded.encoder.num_layers, loaded.do_lower_case
    (6, True)
    """
    if format is None:
        format = detect_format(path)
    if format not in FORMATS:
        raise ValueError(
            f"Received an invalid value for argument `format`, expected one of {list(FORMATS)}. "
            f"Received: format={format!r}"
        )
    if format == "huggingface":
        return load_huggingface(os.fspath(path), with_heads=with_heads, do_lower_case=do_lower_case, dtype=dtype)
    if format == "hub_module":
        return load_hub_module(os.fspath(path), with_heads=with_heads, do_lower_case=do_lower_case, dtype=dtype)
    if format == "google":
        return load_google(os.fspath(path), with_heads=with_heads, do_lower_case=do_lower_case, dtype=dtype)
    if is_backbone(path):
        return from_keras_nlp(path, do_lower_case=True if do_lower_case is None else do_lower_case, dtype=dtype)
    return load_keras_nlp_preset(os.fspath(path), do_lower_case=do_lower_case, dtype=dtype)


__all__ = [
    "CheckpointError",
    "ConfigError",
    "ConversionSummary",
    "LoadedCheckpoint",
    "detect_format",
    "from_keras_nlp",
    "load_checkpoint",
    "load_google",
    "load_hub_module",
    "load_huggingface",
    "load_keras_nlp_preset",
    "to_keras_nlp",
]
