"""keras-nlp (keras-hub) `BertBackbone`, objects or preset directories -> our encoder config and weights, and back."""

import os
import re

import numpy as np

from bert_keras._checks import quoted
from bert_keras.formats import tables
from bert_keras.formats._common import (
    CheckpointError,
    ConfigError,
    check_vocabulary,
    encoder_kwargs,
    expand_table,
    guess_do_lower_case,
    logger,
    read_json,
    read_vocabulary,
    resolve_target,
)
from bert_keras.formats._read import check_config, plan_parts, read_weights
from bert_keras.formats.sources import ArraySource, _Source, check_weight_file

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
SHARDED_WEIGHTS_FILE = "model.weights.json"
TOKENIZER_CONFIG_FILE = "tokenizer.json"
PART_PREFIXES = {tables.POOLER: "pooled_dense/"}

# Where `BertBackbone.save_to_preset` puts each variable in `model.weights.h5`: Keras' saving names
# the layers of a functional model by class (`transformer_encoder`, `transformer_encoder_1`, ...) and
# the layers inside them by attribute, and stores a layer's variables as `vars/0`, `vars/1`, ... in
# the order below. Read to check a preset's config against its shapes before keras-hub builds it.
_H5_LAYERS = {  # HDF5 group -> (variable path prefix, variable names in `vars/` order)
    "layers/reversible_embedding": ("token_embedding", ("embeddings",)),
    "layers/position_embedding": ("position_embedding", ("embeddings",)),
    "layers/embedding": ("segment_embedding", ("embeddings",)),
    "layers/layer_normalization": ("embeddings_layer_norm", ("gamma", "beta")),
    "layers/dense": ("pooled_dense", ("kernel", "bias")),
}
_KERNEL_BIAS, _GAMMA_BETA = ("kernel", "bias"), ("gamma", "beta")
_H5_BLOCK = {  # HDF5 group inside `layers/transformer_encoder[_<i>]` -> the same, inside `transformer_layer_<i>`
    "_self_attention_layer/query_dense": ("self_attention_layer/query", _KERNEL_BIAS),
    "_self_attention_layer/key_dense": ("self_attention_layer/key", _KERNEL_BIAS),
    "_self_attention_layer/value_dense": ("self_attention_layer/value", _KERNEL_BIAS),
    "_self_attention_layer/output_dense": ("self_attention_layer/attention_output", _KERNEL_BIAS),
    "_self_attention_layer_norm": ("self_attention_layer_norm", _GAMMA_BETA),
    "_feedforward_intermediate_dense": ("feedforward_intermediate_dense", _KERNEL_BIAS),
    "_feedforward_output_dense": ("feedforward_output_dense", _KERNEL_BIAS),
    "_feedforward_layer_norm": ("feedforward_layer_norm", _GAMMA_BETA),
}
_H5_DATASET = re.compile(r"(?P<group>.+)/vars/(?P<index>\d+)")
_H5_BLOCK_GROUP = re.compile(r"layers/transformer_encoder(?:_(?P<block>\d+))?/(?P<inner>.+)")


def h5_variable_path(dataset):
    """The `BertBackbone` variable path of an HDF5 dataset of `model.weights.h5`, or None if it is none of them.

    >>> h5_variable_path("layers/transformer_encoder_1/_feedforward_output_dense/vars/0")
    'transformer_layer_1/feedforward_output_dense/kernel'
    """
    match = _H5_DATASET.fullmatch(dataset)
    if match is None:
        return None
    group, index = match["group"], int(match["index"])
    block = _H5_BLOCK_GROUP.fullmatch(group)
    if group in _H5_LAYERS:
        prefix, names = _H5_LAYERS[group]
    elif block is not None and block["inner"] in _H5_BLOCK:
        inner_prefix, names = _H5_BLOCK[block["inner"]]
        prefix = f"transformer_layer_{int(block['block'] or 0)}/{inner_prefix}"
    else:
        return None
    return f"{prefix}/{names[index]}" if index < len(names) else None


def _h5_name(dataset):
    return h5_variable_path(dataset) or dataset


def _h5_files(path):
    """The HDF5 files of a preset's weights: `model.weights.h5`, or the shards `model.weights.json` lists."""
    if not path.endswith(".json"):
        return [path]
    directory = os.path.dirname(path)
    weight_map = read_json(path).get("weight_map")
    if not isinstance(weight_map, dict):
        raise CheckpointError(path, None, 'expected "weight_map" to be an object of variable group -> shard file name.')
    files = set()
    for group, shards in weight_map.items():
        for shard in shards if isinstance(shards, list) else [shards]:
            if not isinstance(shard, str) or shard in ("", ".", "..") or os.path.basename(shard) != shard:
                raise CheckpointError(
                    path, group, f"maps to {quoted(shard, limit=500)}, which is not a plain file name in "
                    f"{directory}; a shard map may only name files in its own folder."
                )
            files.add(os.path.join(directory, shard))
    return sorted(files)


class H5Source(_Source):
    """The variables of a keras-nlp preset's `model.weights.h5` (or its shards), by `BertBackbone` variable path.

    Opening reads the dataset shapes only; `get` reads one array. Datasets
    that are no `BertBackbone` variable keep their HDF5 path as their name.
    """

    def __init__(self, path):
        import h5py  # a dependency of Keras; only presets need it here

        super().__init__({}, {})
        self.file = path
        self.files = _h5_files(path)
        for file in self.files:
            if not os.path.exists(file):
                raise CheckpointError(path, None, f"lists the shard {file}, which does not exist.")
            check_weight_file(file)
            datasets = {}

            def visit(name, item):
                if isinstance(item, h5py.Dataset):
                    datasets[name] = item.shape

            try:
                with h5py.File(file, "r") as f:
                    f.visititems(visit)
            except (OSError, ValueError) as error:
                raise CheckpointError(file, None, f"cannot be read as HDF5 ({error}).") from error
            for dataset, shape in datasets.items():
                self._add(dataset, file, dataset, shape or (), _h5_name)

    def get(self, name):
        import h5py

        file, dataset = self._index[name]
        with h5py.File(file, "r") as f:
            return np.asarray(f[dataset][()])


def _keras_hub():
    try:
        import keras_hub

        return keras_hub
    except ImportError:
        import keras_nlp

        return keras_nlp


def is_backbone(obj):
    return type(obj).__name__ in tables.KERAS_NLP_CLASS_NAMES and hasattr(obj, "get_config")


def is_preset_config(config):
    """True for a keras-nlp / keras-hub `config.json` (a serialized Keras object)."""
    return ("class_name" in config and "config" in config) or "registered_name" in config


def backbone_config_to_kwargs(config, file):
    """Translates `BertBackbone` arguments to `BertEncoder` arguments."""
    kwargs = encoder_kwargs(config, tables.KERAS_NLP_CONFIG, file)
    kwargs["attention_dropout"] = kwargs["dropout"]
    kwargs["activation"] = tables.KERAS_NLP_FIXED["activation"]
    kwargs["layer_norm_epsilon"] = tables.KERAS_NLP_FIXED["layer_norm_epsilon"]
    return kwargs


def read_keras_nlp_preset(path, *, do_lower_case=None):
    """Reads a keras-nlp / keras-hub `BertBackbone` preset directory: our encoder config and its weights.

    Args:
        path: str. Directory with `config.json`, `model.weights.h5` and
            `assets/tokenizer/vocabulary.txt` (as written by
            `BertBackbone.save_to_preset` and `BertTokenizer.save_to_preset`).
        do_lower_case: optional bool. Defaults to the tokenizer's `lowercase`.

    Returns:
        `CheckpointWeights` (no heads).
    """
    config_file = os.path.join(path, CONFIG_FILE)
    config = read_json(config_file)
    class_name = config.get("class_name") or ""
    registered = config.get("registered_name") or ""
    if not (class_name in tables.KERAS_NLP_CLASS_NAMES or registered.endswith(">BertBackbone")):
        raise ConfigError(
            config_file,
            "class_name",
            f"this preset holds a {quoted(class_name or registered)}, not a BertBackbone.",
        )
    weights_file = os.path.join(path, WEIGHTS_FILE)
    sharded_file = os.path.join(path, SHARDED_WEIGHTS_FILE)
    if not os.path.exists(weights_file) and not os.path.exists(sharded_file):
        raise CheckpointError(path, None, f"has no {WEIGHTS_FILE}.")
    kwargs = backbone_config_to_kwargs(config.get("config", {}), config_file)
    # keras-hub builds the backbone from the config before it reads a weight: every size of the config
    # is checked against the stored shapes first (a 2-billion-wide layer is refused, not allocated).
    source = H5Source(weights_file if os.path.exists(weights_file) else sharded_file)
    parts, _, _ = plan_parts(source, PART_PREFIXES, with_heads=False)
    check_config(source, tables.KERAS_NLP_WEIGHTS, parts, kwargs, tables.KERAS_NLP_CONFIG,
                 hint=f" Check {config_file}.")

    vocab_file = os.path.join(path, tables.KERAS_NLP_VOCABULARY)
    tokens = None
    if os.path.exists(vocab_file):
        tokens = read_vocabulary(vocab_file)
        check_vocabulary(vocab_file, tokens, config_file, "token_embedding/embeddings", kwargs["vocab_size"])
    else:
        vocab_file = None
    if do_lower_case is None:
        do_lower_case = _read_lowercase(path, tokens)

    try:
        backbone = _keras_hub().models.BertBackbone.from_preset(path)
    except Exception as error:
        raise CheckpointError(weights_file, _tensor_in_message(error), f"cannot be loaded into a BertBackbone ({error}).") from error
    return read_keras_nlp(backbone, vocab_file=vocab_file, do_lower_case=do_lower_case, file=weights_file)


def read_keras_nlp(backbone, *, vocab_file=None, do_lower_case=True, file=None):
    """Reads a `keras_nlp.models.BertBackbone` object: our encoder config and its weights.

    The config says `activation="gelu_approximate"`, the GELU of `BertBackbone`.

    Returns:
        `CheckpointWeights` (no heads).
    """
    if not is_backbone(backbone):
        raise ValueError(
            "Received an invalid value for argument `backbone`, expected a "
            f"keras_nlp.models.BertBackbone. Received: backbone={type(backbone).__name__}"
        )
    file = file or f"<BertBackbone {backbone.name}>"
    kwargs = backbone_config_to_kwargs(backbone.get_config(), file)
    source = ArraySource({variable.path: variable.numpy() for variable in backbone.weights}, file)
    return read_weights(
        format="keras_nlp",
        source=source,
        table=tables.KERAS_NLP_WEIGHTS,
        part_prefixes=PART_PREFIXES,
        encoder_config=kwargs,
        mlm_activation=kwargs["activation"],
        with_heads=False,
        ignored=lambda name: False,
        vocab_file=vocab_file,
        do_lower_case=do_lower_case,
    )


def to_keras_nlp(encoder, *, preset_dir=None, vocab_file=None, do_lower_case=True, allow_activation_change=False):
    """Converts a `BertEncoder` to a `keras_nlp.models.BertBackbone`.

    `BertBackbone` always uses the tanh GELU, LayerNorm epsilon 1e-12, learned
    positions and post-LayerNorm blocks; the encoder must match. It has none
    of the family's options: an encoder with an embedding projection, shared
    layers, a position offset, no token types or no pooler (ALBERT, ELECTRA,
    RoBERTa, DistilBERT) is refused, naming the option.

    Args:
        encoder: `BertEncoder`.
        preset_dir: optional str. Also save the backbone there with
            `save_to_preset`, and with `vocab_file` a `BertTokenizer`
            (`assets/tokenizer/vocabulary.txt`).
        vocab_file: optional str. WordPiece vocabulary of the encoder.
        do_lower_case: bool. The tokenizer's `lowercase`. Defaults to `True`.
        allow_activation_change: bool. Export an encoder whose activation is not
            `"gelu_approximate"` anyway (outputs then differ slightly), with a
            warning. Defaults to `False`.

    Returns:
        The `BertBackbone`, with the encoder's weights.

    Raises:
        ValueError: the encoder has an option `BertBackbone` cannot hold.
    """
    _check_family_options(encoder)
    for name, fixed in tables.KERAS_NLP_FIXED.items():
        value = getattr(encoder, name)
        if value == fixed:
            continue
        if name == "activation" and allow_activation_change:
            logger.warning("BertBackbone uses activation %r; the encoder's %r is replaced.", fixed, value)
            continue
        raise ValueError(
            f"BertBackbone cannot hold this encoder: it requires {name}={fixed!r}. Received: "
            f"{name}={value!r}" + (" (pass allow_activation_change=True to export anyway)." if name == "activation" else ".")
        )
    if encoder.attention_dropout != encoder.dropout:
        logger.warning(
            "BertBackbone has a single dropout rate; using dropout=%s (attention_dropout was %s).",
            encoder.dropout, encoder.attention_dropout,
        )
    theirs = {value: getattr(encoder, key) for key, value in tables.KERAS_NLP_CONFIG.items()}
    backbone = _keras_hub().models.BertBackbone(**theirs, dtype=encoder.dtype_policy)
    variables = {variable.path: variable for variable in backbone.weights}
    entries = expand_table(
        tables.KERAS_NLP_WEIGHTS, (tables.EMBEDDINGS, tables.LAYER, tables.POOLER), encoder.num_layers
    )
    for target, name, _ in entries:
        ours = resolve_target({"encoder": encoder}, target)
        theirs_variable = variables[name]
        theirs_variable.assign(ours.numpy().reshape(tuple(theirs_variable.shape)))
    if preset_dir is not None:
        backbone.save_to_preset(preset_dir)
        if vocab_file is not None:
            tokenizer = _keras_hub().models.BertTokenizer(vocabulary=vocab_file, lowercase=do_lower_case)
            tokenizer.save_to_preset(preset_dir)
    return backbone


def _check_family_options(encoder):
    """Refuses an encoder of the family that BertBackbone would hold wrongly (it has no argument for the option)."""
    for name, (bert, family) in tables.KERAS_NLP_NO_FAMILY_OPTIONS.items():
        value = getattr(encoder, name, bert)
        if value != bert:
            raise ValueError(
                f"BertBackbone cannot hold this encoder: it has no {family}, and requires {name}={bert!r}. "
                f"Received: {name}={value!r}"
            )
    types = getattr(encoder, "type_vocab_size", 1)
    if types < 1:
        raise ValueError(
            "BertBackbone cannot hold this encoder: it always adds segment embeddings, and requires "
            f"type_vocab_size >= 1 (DistilBERT has none). Received: type_vocab_size={types!r}"
        )


def _read_lowercase(path, tokens):
    tokenizer_file = os.path.join(path, TOKENIZER_CONFIG_FILE)
    if os.path.exists(tokenizer_file):
        try:
            value = read_json(tokenizer_file).get("config", {}).get("lowercase")
        except (ValueError, AttributeError):
            value = None
        if isinstance(value, bool):
            return value
    return guess_do_lower_case(tokens) if tokens is not None else True


def _tensor_in_message(error):
    """The first `layer/...` path quoted in a Keras loading error, if any."""
    text = str(error)
    for quote in ("'", '"'):
        parts = text.split(quote)
        for part in parts[1::2]:
            if "/" in part or part.startswith(("transformer_layer", "token_embedding", "pooled_dense")):
                return part
    return None


