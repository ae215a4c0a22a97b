"""Hugging Face `transformers` BERT checkpoints -> our encoder config and weights (and the heads')."""

import os

from bert_keras.formats import tables
from bert_keras.formats._common import (
    CheckpointError,
    ConfigError,
    check_vocabulary,
    encoder_kwargs,
    first_existing,
    guess_do_lower_case,
    read_json,
    read_vocabulary,
    translate_activation,
)
from bert_keras.formats._read import check_tied_decoder, read_weights
from bert_keras.formats.sources import SafetensorsSource, TorchSource

CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.txt"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def normalize_name(name):
    """Drops the `bert.` prefix and renames legacy `LayerNorm.gamma/beta` to `weight/bias`."""
    if name.startswith("bert."):
        name = name[len("bert."):]
    for legacy, current in ((".LayerNorm.gamma", ".LayerNorm.weight"), (".LayerNorm.beta", ".LayerNorm.bias")):
        if name.endswith(legacy):
            name = name[: -len(legacy)] + current
    return name


def is_ignored(name):
    return name.endswith(tables.HF_IGNORED_SUFFIXES)


def config_to_kwargs(config, file):
    """Translates a `transformers.BertConfig` dict to `BertEncoder` arguments."""
    model_type = config.get("model_type")
    if model_type is None and not any("Bert" in a for a in config.get("architectures") or []):
        raise ConfigError(file, "model_type", "missing, and no Bert architecture is listed; is this a BERT config?")
    if model_type is not None and model_type not in tables.HF_MODEL_TYPES:
        raise ConfigError(
            file,
            "model_type",
            f"this is a {model_type!r} config, not BERT (expected model_type 'bert'). "
            "Only BERT checkpoints can be converted to BertEncoder.",
        )
    position_type = config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ConfigError(
            file,
            "position_embedding_type",
            f"{position_type!r} is not supported; BertEncoder has absolute (learned) positions.",
        )
    kwargs = encoder_kwargs(config, tables.HF_CONFIG, file, defaults={"layer_norm_epsilon": 1e-12})
    kwargs["activation"] = translate_activation(
        config.get("hidden_act", "gelu"), tables.HF_ACTIVATIONS, file, "hidden_act"
    )
    return kwargs


def open_weights(directory):
    """The tensor source of a Hugging Face directory (safetensors preferred)."""
    path = first_existing(directory, WEIGHT_FILES)
    if path is None:
        raise CheckpointError(
            directory, None, f"holds no weights; expected one of {list(WEIGHT_FILES)}."
        )
    if path.endswith((".bin", ".bin.index.json")):
        return TorchSource(path, normalize=normalize_name)
    return SafetensorsSource(path, normalize=normalize_name)


def read_huggingface(path, *, with_heads=True, do_lower_case=None):
    """Reads a Hugging Face BERT directory: our encoder config and its weights (and the heads').

    Args:
        path: str. Directory with `config.json`, `model.safetensors` (or a
            sharded `model.safetensors.index.json`, or, when torch is
            installed, `pytorch_model.bin` or `pytorch_model.bin.index.json`),
            and optionally `vocab.txt` and `tokenizer_config.json`. An index
            may only name shard files in the same directory.
        with_heads: bool. Also read `cls.predictions.*` (masked LM) and
            `cls.seq_relationship.*` (next sentence) when present. Defaults to `True`.
        do_lower_case: optional bool. Overrides `tokenizer_config.json`.

    Returns:
        `CheckpointWeights`.
    """
    directory = os.path.dirname(path) if os.path.isfile(path) else path
    config_file = os.path.join(directory, CONFIG_FILE)
    if not os.path.exists(config_file):
        raise CheckpointError(directory, None, f"has no {CONFIG_FILE}; is it a Hugging Face model directory?")
    kwargs = config_to_kwargs(read_json(config_file), config_file)
    source = open_weights(directory)

    vocab_file = first_existing(directory, (VOCAB_FILE,))
    embeddings_name = "embeddings.word_embeddings.weight"
    tokens = None
    if vocab_file is not None:
        tokens = read_vocabulary(vocab_file)
        if source.has(embeddings_name):
            check_vocabulary(
                vocab_file,
                tokens,
                source.file_of(embeddings_name),
                source.original_name(embeddings_name),
                source.shape(embeddings_name)[0],
            )
    if do_lower_case is None:
        do_lower_case = _read_do_lower_case(directory, tokens)

    # Some checkpoints spell the MLM output bias `cls.predictions.decoder.bias`.
    table = dict(tables.HF_WEIGHTS)
    table[tables.MLM] = tuple(
        (target, _alias(source, name), transform) for target, name, transform in table[tables.MLM]
    )
    return read_weights(
        format="huggingface",
        source=source,
        table=table,
        part_prefixes=tables.HF_PART_PREFIXES,
        encoder_config=kwargs,
        mlm_activation=kwargs["activation"],
        with_heads=with_heads,
        ignored=is_ignored,
        extra_checks=lambda src, heads: _extra_checks(src, heads, table),
        hint=f" Check {config_file}.",
        vocab_file=vocab_file,
        do_lower_case=do_lower_case,
    )


def _alias(source, name):
    if source.has(name):
        return name
    for alternative in tables.HF_ALIASES.get(name, ()):
        if source.has(alternative):
            return alternative
    return name


def _extra_checks(source, heads, table):
    skipped = []
    if tables.MLM in heads:
        skipped += check_tied_decoder(source, tables.HF_TIED_DECODER, "embeddings.word_embeddings.weight")
        # `cls.predictions.decoder.bias` is the same parameter as `cls.predictions.bias`.
        for name in ("cls.predictions.bias",) + tables.HF_ALIASES["cls.predictions.bias"]:
            if source.has(name) and name not in [entry[1] for entry in table[tables.MLM]]:
                skipped.append(name)
    return skipped


def _read_do_lower_case(directory, tokens):
    tokenizer_config = os.path.join(directory, TOKENIZER_CONFIG_FILE)
    if os.path.exists(tokenizer_config):
        value = read_json(tokenizer_config).get("do_lower_case")
        if isinstance(value, bool):
            return value
    return guess_do_lower_case(tokens) if tokens is not None else True
