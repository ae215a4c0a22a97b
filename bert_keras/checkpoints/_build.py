"""Builds our objects for a conversion and fills them from a checked plan."""

import re

import keras
import numpy as np

from bert_keras.checkpoints import tables
from bert_keras.checkpoints._common import (
    CheckpointError,
    ConversionSummary,
    LoadedCheckpoint,
    assign_plan,
    expand_table,
    load_plan,
    logger,
    read_tensors,
)
from bert_keras.encoder import BertEncoder
from bert_keras.heads import MaskedLMHead, NextSentenceHead
from bert_keras.pretrainer import BertPretrainer


# Each format's config key for our argument, to name the field in messages.
CONFIG_KEYS = {"huggingface": tables.HF_CONFIG, "google": tables.GOOGLE_CONFIG, "keras_nlp": tables.KERAS_NLP_CONFIG}
# The encoder arguments that fix the (rows, columns) of each embedding table.
EMBEDDING_FIELDS = {
    "encoder.embeddings.word_embeddings.embeddings": ("vocab_size", "hidden_size"),
    "encoder.embeddings.position_embeddings": ("max_sequence_length", "hidden_size"),
    "encoder.embeddings.type_embeddings.embeddings": ("type_vocab_size", "hidden_size"),
}


def held_blocks(source, table):
    """How many Transformer blocks `source` holds: one more than the highest block index in it."""
    patterns = [
        re.compile(re.escape(name).replace(re.escape("{i}"), r"(\d+)")) for _, name, _ in table[tables.LAYER]
    ]
    indices = {int(m.group(1)) for name in source.names() for p in patterns if (m := p.fullmatch(name))}
    return max(indices) + 1 if indices else 0


def check_config(source, table, encoder_config, config_keys, hint=""):
    """Compares the config with the tensors present (blocks, embedding shapes), before anything is built.

    Raises:
        CheckpointError: naming the weights (and the embedding table) that
            disagree, what they hold and what the config says.
    """
    num_layers = encoder_config["num_layers"]
    held = held_blocks(source, table)
    if held != num_layers:
        raise CheckpointError(
            source.file,
            None,
            f"holds {held} Transformer blocks, but the config says "
            f"{config_keys.get('num_layers', 'num_layers')}={num_layers}.{hint}",
        )
    for target, name, transform in table[tables.EMBEDDINGS]:
        fields = EMBEDDING_FIELDS.get(target)
        if fields is None or transform != tables.IDENTITY or not source.has(name):
            continue
        stored = tuple(source.shape(name))
        if len(stored) != 2 or stored == tuple(encoder_config[field] for field in fields):
            continue  # a table of another rank is reported with the other shapes, after building
        means = ", ".join(f"{config_keys.get(f, f)}={n}" for f, n in zip(fields, stored))
        says = ", ".join(
            f"{config_keys.get(f, f)}={encoder_config[f]}" for f, n in zip(fields, stored) if n != encoder_config[f]
        )
        raise CheckpointError(
            source.file_of(name),
            source.original_name(name),
            f"has shape {stored}, which means {means}; the config says {says}.{hint}",
        )


def detect_parts(source, part_prefixes):
    """The optional parts (pooler, mlm, nsp) whose tensors appear in `source`."""
    names = source.names()
    return [part for part, prefix in part_prefixes.items() if any(n.startswith(prefix) for n in names)]


def build_models(encoder_config, heads, mlm_activation, dtype=None):
    """Builds the encoder and the requested heads. Returns `(roots, pretrainer)`."""
    encoder = BertEncoder(**encoder_config, dtype=dtype)
    roots = {"encoder": encoder}
    pretrainer = None
    if tables.MLM in heads and tables.NSP in heads:
        pretrainer = BertPretrainer(encoder, mlm_activation=mlm_activation)
        roots["mlm"], roots["nsp"] = pretrainer.mlm_head, pretrainer.nsp_head
    elif tables.MLM in heads:
        head = MaskedLMHead(
            vocab_size=encoder.vocab_size,
            embedding=encoder.embeddings.word_embeddings,
            activation=mlm_activation,
            layer_norm_epsilon=encoder.layer_norm_epsilon,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=encoder.initializer_range),
            dtype=encoder.dtype_policy,
            name="mlm",
        )
        head.build((None, None, encoder.hidden_size))
        roots["mlm"] = head
    elif tables.NSP in heads:
        head = NextSentenceHead(
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=encoder.initializer_range),
            dtype=encoder.dtype_policy,
            name="nsp",
        )
        head.build((None, encoder.hidden_size))
        roots["nsp"] = head
    return roots, pretrainer


def convert(
    *,
    format,
    source,
    table,
    part_prefixes,
    encoder_config,
    mlm_activation,
    with_heads,
    ignored,
    extra_checks=None,
    hint="",
    vocab_file=None,
    do_lower_case=True,
    dtype=None,
):
    """Builds our models, loads `source` into them through `table`, and summarizes.

    Args:
        ignored: callable `name -> bool` for source tensors skipped on purpose.
        extra_checks: optional callable `(source, roots) -> list of ignored names`,
            run after the plan is checked and before anything is assigned.

    Returns:
        `LoadedCheckpoint`.
    """
    present = detect_parts(source, part_prefixes)
    heads = [part for part in (tables.MLM, tables.NSP) if with_heads and part in present]
    parts = [tables.EMBEDDINGS, tables.LAYER]
    not_in_checkpoint = []
    if tables.POOLER in present:
        parts.append(tables.POOLER)
    else:
        not_in_checkpoint.append("pooler")
    parts += heads

    # Everything that can be checked without the model is checked first: a
    # config of 60 blocks for a 6-block checkpoint, or a NaN weight, is
    # refused before a large model is built.
    check_config(source, table, encoder_config, CONFIG_KEYS.get(format, {}), hint=hint)
    entries = expand_table(table, parts, encoder_config["num_layers"])
    arrays = read_tensors(source, [name for _, name, _ in entries])
    roots, pretrainer = build_models(encoder_config, heads, mlm_activation, dtype=dtype)
    plan = load_plan(source, entries, roots, hint=hint, arrays=arrays)
    skipped = list(extra_checks(source, roots)) if extra_checks else []
    loaded = assign_plan(plan)

    used = {name for name, _ in loaded} | set(skipped)
    skipped += [n for n in source.names() if n not in used and ignored(n)]
    unused = [n for n in source.names() if n not in used and n not in skipped]
    summary = ConversionSummary(
        format=format,
        files=list(source.files),
        loaded=[(source.original_name(name), target) for name, target in loaded],
        ignored=sorted(source.original_name(n) for n in skipped),
        unused=sorted(source.original_name(n) for n in unused),
        not_in_checkpoint=not_in_checkpoint,
        heads=heads,
    )
    if not_in_checkpoint:
        logger.warning(
            "%s: no weights for %s; left randomly initialized.", source.file, ", ".join(not_in_checkpoint)
        )
    logger.info("%s", summary)
    return LoadedCheckpoint(
        encoder=roots["encoder"],
        heads={key: roots[key] for key in ("mlm", "nsp") if key in roots},
        pretrainer=pretrainer,
        vocab_file=vocab_file,
        do_lower_case=do_lower_case,
        summary=summary,
    )


def check_tied_decoder(source, name, embeddings_name):
    """Checks that a stored decoder matrix equals the word embeddings (it is tied)."""
    if not source.has(name):
        return []
    decoder, embeddings = source.get(name), source.get(embeddings_name)
    if decoder.shape != embeddings.shape or not np.array_equal(decoder, embeddings):
        raise CheckpointError(
            source.file_of(name),
            name,
            f"differs from the word embeddings {embeddings_name!r}; BERT ties them and so "
            "does MaskedLMHead. An untied decoder is not supported.",
        )
    return [name]
