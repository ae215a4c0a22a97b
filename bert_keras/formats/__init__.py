"""Checkpoint formats: Hugging Face, Google TF1 (BERT, ALBERT, ELECTRA), keras-nlp and TF Hub / Model Garden modules.

`read_checkpoint(path)` detects the format and returns `CheckpointWeights`:
our encoder's arguments, the weights under our names (in our layout), the
vocabulary and a summary. Readers import no model: `BertEncoder.from_checkpoint`
builds itself from what they return, and `bert_keras.checkpoints` adds the
heads (`build_and_load`). Name tables are data (`tables.py`); every other
project's names stay here. `sentence_transformers` reads what a
sentence-transformers folder says about embedding a text (its modules,
pooling and lengths), also as data.
"""

import logging
import os

from bert_keras.formats._common import (
    Candidates,
    CheckpointError,
    CheckpointWeights,
    ConfigError,
    ConversionSummary,
    ModuleRefusedError,
    assign_arrays,
    build_and_load,
    read_json,
)
from bert_keras.formats.deberta import is_deberta, read_deberta
from bert_keras.formats.google import holds_tf_checkpoint, read_google
from bert_keras.formats.hub_module import is_hub_module, read_hub_module
from bert_keras.formats.huggingface import read_huggingface
from bert_keras.formats.modernbert import is_modernbert, read_modernbert
from bert_keras.formats.keras_nlp import (
    is_backbone,
    is_preset_config,
    read_keras_nlp,
    read_keras_nlp_preset,
    to_keras_nlp,
)
from bert_keras.presets import checkpoint_name_hint

logger = logging.getLogger("bert_keras.checkpoints")

FORMATS = ("huggingface", "google", "keras_nlp", "hub_module")


# What a folder of weights holds: configs, and weight files of the formats read here. Any of them makes a folder
# one of weights, never a module to load (`detect_format`); `lexists`, so that a dangling link (a Hugging Face
# cache snapshot whose blob is missing) counts too. A TF checkpoint of its own (`*.index`) does too.
CONFIG_FILES = ("bert_config.json", "config.json")
# The configs of Google's TF1 checkpoints (BERT's, ALBERT's): a folder holding one is read as a Google checkpoint.
GOOGLE_CONFIG_FILES = ("bert_config.json", "albert_config.json")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json",
                "model.weights.h5", "model.weights.json", "bert_model.ckpt.index")


def holds_weights(path):
    """Whether `path` is a checkpoint of weights (read without running any code), not a module.

    Google TF1 (`bert_config.json`, `bert_model.ckpt.*`, any TF checkpoint
    in the folder such as ALBERT's `model.ckpt-best.*` or ELECTRA's, or a TF
    checkpoint prefix), a keras-nlp preset or a Hugging Face folder
    (`config.json`, `model.safetensors`, `pytorch_model.bin`, ...).
    """
    path = os.fspath(path)
    if os.path.exists(path + ".index"):
        return True
    return os.path.isdir(path) and (
        any(os.path.lexists(os.path.join(path, name)) for name in CONFIG_FILES + GOOGLE_CONFIG_FILES + WEIGHT_FILES)
        or holds_tf_checkpoint(path))


def detect_format(path):
    """Returns `"huggingface"`, `"google"`, `"keras_nlp"` or `"hub_module"` for a checkpoint.

    - `bert_config.json`, `albert_config.json`, a TF checkpoint prefix, or a
      folder with a TF checkpoint (`*.index`) and no `config.json`: Google's
      TF1 format; BERT, ALBERT or ELECTRA by its variable names (`read_google`).
    - `config.json` of a serialized Keras object (`class_name`, `registered_name`): keras-nlp.
    - any other `config.json`: Hugging Face.
    - only when none of those is there: `saved_model.pb` (or
      `encoder/saved_model.pb`), a `.tar.gz` or an http(s) handle: a TF Hub /
      Model Garden encoder module.

    Weights are asked for first: reading them never runs code, while loading
    a SavedModel runs its graph. A folder that holds weights and also a
    `saved_model.pb` is read as weights (the SavedModel is ignored, with a
    warning); a module is loaded only where the path is a module and nothing else.
    """
    if is_backbone(path):
        return "keras_nlp"
    path = os.fspath(path)
    if holds_weights(path):
        google = os.path.exists(path + ".index") or any(
            os.path.exists(os.path.join(path, name)) for name in GOOGLE_CONFIG_FILES)
        if os.path.isdir(path) and not google and not os.path.isfile(os.path.join(path, "config.json")):
            # ELECTRA's TF1 releases carry no config: its sizes are read from the checkpoint (`google_family`).
            google = holds_tf_checkpoint(path)
        if os.path.isdir(path) and not google and not any(
                os.path.isfile(os.path.join(path, name)) for name in CONFIG_FILES):
            present = sorted(name for name in WEIGHT_FILES + CONFIG_FILES if os.path.lexists(os.path.join(path, name)))
            raise CheckpointError(path, None, f"holds weights ({', '.join(present)}) but no readable config.json or "
                                  "bert_config.json; add the checkpoint's config. (A SavedModel in a folder of weights "
                                  "is never loaded: pass it with --modules / format=\"hub_module\" if you trust it.)")
        if google:
            found = "google"
        else:
            found = "keras_nlp" if is_preset_config(read_json(os.path.join(path, "config.json"))) else "huggingface"
        if os.path.isdir(path) and is_hub_module(path):
            logger.warning("%s holds a %s checkpoint and a SavedModel; reading the weights, not running the SavedModel "
                           "(pass format=\"hub_module\" or --modules to load the module).", path, found)
        return found
    if is_hub_module(path):
        return "hub_module"
    if not os.path.isdir(path):
        raise CheckpointError(path, None, "is not a checkpoint directory (it does not exist or is a file)." + checkpoint_name_hint(path))
    raise CheckpointError(
        path,
        None,
        "holds no checkpoint this package knows: expected config.json (Hugging Face or a "
        "keras-nlp preset), or a Google TF1 checkpoint (*.index + .data-*: BERT with bert_config.json, ALBERT with "
        "albert_config.json, or ELECTRA).",
    )


def read_checkpoint(path, *, format=None, with_heads=True, do_lower_case=None, allow_modules=True):
    """Reads a BERT checkpoint of any supported format, without building a model.

    Args:
        path: str, a checkpoint directory (or TF checkpoint prefix), or a
            `keras_nlp.models.BertBackbone` object.
        format: optional str, one of `"huggingface"`, `"google"`, `"keras_nlp"`, `"hub_module"`.
            Detected when omitted (see `detect_format`).
        with_heads: bool, or a list of head names. `True`: read the
            pre-training heads when present; a list: the heads named (a Hugging
            Face checkpoint's task heads too: see `read_huggingface`). Defaults to `True`.
        do_lower_case: optional bool. Overrides what the checkpoint says.
        allow_modules: bool. Whether `path` may be a TF Hub / Model Garden
            module, whose graph runs when it is loaded. Pass `False` for a
            path that came from data (an index's record, a file), not from
            the user: then only weights are read, and a module is refused
            before anything of it is loaded. Defaults to `True`.

    Returns:
        `CheckpointWeights`.

    Raises:
        CheckpointError: naming the file and the tensor (or config field) at
            fault: a missing tensor, a wrong shape, a config of another model,
            a vocabulary that disagrees with the embeddings, a truncated file.
        ModuleRefusedError: with `allow_modules=False`, `path` is a module.

    Example:
    >>> from bert_keras.text.corpora import minilm_vocab_path  # the MiniLM checkpoint of the test extra
    >>> weights = read_checkpoint(os.path.dirname(minilm_vocab_path()))
    >>> weights.encoder_config["num_layers"], weights.arrays["encoder.pooler.kernel"].shape
    (6, (384, 384))
    """
    if not (is_backbone(path) or isinstance(path, (str, os.PathLike))):
        raise ValueError("Received an invalid value for argument `path`, expected a checkpoint path or a "
                         f"keras_nlp.models.BertBackbone. Received: path={type(path).__name__}")
    if format is None:
        format = detect_format(path)
    if format not in FORMATS:
        raise ValueError(
            f"Received an invalid value for argument `format`, expected one of {list(FORMATS)}. "
            f"Received: format={format!r}"
        )
    if format == "hub_module" and not allow_modules:
        # The one place that decides whether a path is loaded as a module: every reader of a path given as data
        # (`allow_modules=False`) comes through here, so what is data can never load a graph.
        raise ModuleRefusedError(path, None, "is a TF Hub / Model Garden module (a SavedModel), and loading one runs "
                                 "its graph; it was given as data (allow_modules=False), from which only weights are "
                                 "read. Pass it yourself as a module if you trust it.")
    if format == "huggingface":
        if is_modernbert(os.fspath(path)):  # its own encoder class: `ModernBertEncoder`
            return read_modernbert(os.fspath(path), with_heads=with_heads)
        if is_deberta(os.fspath(path)):  # its own encoder class: `models.DebertaV3Encoder`
            return read_deberta(os.fspath(path), with_heads=with_heads)
        return read_huggingface(os.fspath(path), with_heads=with_heads, do_lower_case=do_lower_case)
    if format == "hub_module":
        return read_hub_module(os.fspath(path), do_lower_case=do_lower_case)
    if format == "google":
        return read_google(os.fspath(path), with_heads=with_heads, do_lower_case=do_lower_case)
    if is_backbone(path):
        return read_keras_nlp(path, do_lower_case=True if do_lower_case is None else do_lower_case)
    return read_keras_nlp_preset(os.fspath(path), do_lower_case=do_lower_case)


__all__ = [
    "FORMATS",
    "Candidates",
    "CheckpointError",
    "CheckpointWeights",
    "ConfigError",
    "ConversionSummary",
    "ModuleRefusedError",
    "assign_arrays",
    "build_and_load",
    "detect_format",
    "holds_weights",
    "read_checkpoint",
    "read_deberta",
    "read_google",
    "read_hub_module",
    "read_huggingface",
    "read_keras_nlp",
    "read_keras_nlp_preset",
    "read_modernbert",
    "to_keras_nlp",
]
