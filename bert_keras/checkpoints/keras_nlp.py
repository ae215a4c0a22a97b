"""keras-nlp (keras-hub) `BertBackbone` <-> BertEncoder, objects or preset directories."""

import os

from bert_keras.checkpoints import tables
from bert_keras.checkpoints._build import convert
from bert_keras.checkpoints._common import (
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
from bert_keras.checkpoints.sources import ArraySource

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
TOKENIZER_CONFIG_FILE = "tokenizer.json"


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


def load_keras_nlp_preset(path, *, do_lower_case=None, dtype=None):
    """Converts a keras-nlp / keras-hub `BertBackbone` preset directory.

    Args:
        path: str. Directory with `config.json`, `model.weights.h5` and
            `assets/tokenizer/vocabulary.txt` (as written by
            `BertBackbone.save_to_preset` and `BertTokenizer.save_to_preset`).
        do_lower_case: optional bool. Defaults to the tokenizer's `lowercase`.
        dtype: optional dtype policy of the built encoder.

    Returns:
        `LoadedCheckpoint` (no heads).
    """
    config_file = os.path.join(path, CONFIG_FILE)
    config = read_json(config_file)
    class_name = config.get("class_name") or ""
    registered = config.get("registered_name") or ""
    if not (class_name in tables.KERAS_NLP_CLASS_NAMES or registered.endswith(">BertBackbone")):
        raise ConfigError(
            config_file,
            "class_name",
            f"this preset holds a {class_name or registered!r}, not a BertBackbone.",
        )
    weights_file = os.path.join(path, WEIGHTS_FILE)
    if not os.path.exists(weights_file) and not os.path.exists(os.path.join(path, "model.weights.json")):
        raise CheckpointError(path, None, f"has no {WEIGHTS_FILE}.")
    kwargs = backbone_config_to_kwargs(config.get("config", {}), config_file)

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
    return from_keras_nlp(backbone, vocab_file=vocab_file, do_lower_case=do_lower_case, dtype=dtype, file=weights_file)


def from_keras_nlp(backbone, *, vocab_file=None, do_lower_case=True, dtype=None, file=None):
    """Converts a `keras_nlp.models.BertBackbone` object to a `BertEncoder`.

    The encoder gets `activation="gelu_approximate"`, the GELU of `BertBackbone`.

    Returns:
        `LoadedCheckpoint` (no heads).
    """
    if not is_backbone(backbone):
        raise ValueError(
            "Received an invalid value for argument `backbone`, expected a "
            f"keras_nlp.models.BertBackbone. Received: backbone={type(backbone).__name__}"
        )
    file = file or f"<BertBackbone {backbone.name}>"
    kwargs = backbone_config_to_kwargs(backbone.get_config(), file)
    source = ArraySource({variable.path: variable.numpy() for variable in backbone.weights}, file)
    return convert(
        format="keras_nlp",
        source=source,
        table=tables.KERAS_NLP_WEIGHTS,
        part_prefixes={tables.POOLER: "pooled_dense/"},
        encoder_config=kwargs,
        mlm_activation=kwargs["activation"],
        with_heads=False,
        ignored=lambda name: False,
        vocab_file=vocab_file,
        do_lower_case=do_lower_case,
        dtype=dtype,
    )


def to_keras_nlp(encoder, *, preset_dir=None, vocab_file=None, do_lower_case=True, allow_activation_change=False):
    """Converts a `BertEncoder` to a `keras_nlp.models.BertBackbone`.

    `BertBackbone` always uses the tanh GELU, LayerNorm epsilon 1e-12, learned
    positions and post-LayerNorm blocks; the encoder must match.

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
    """
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


