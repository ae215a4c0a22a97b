"""Google's original TF1 checkpoints of BERT's family: ALBERT and ELECTRA (google-research/albert, /electra).

`read_google` tells them from BERT by their variable names (`tables.GOOGLE_FAMILY_MARKS`) and hands the opened
checkpoint here. Each is one weight table and one `BertEncoder` with options, as their Hugging Face versions:

- ALBERT: `albert_config.json` next to the checkpoint (`model.ckpt-best.*` in google-research/albert's tars),
  its SentencePiece model as `spiece.model` or, as the tars name it, `30k-clean.model`. One block shared by every
  layer (`shared_layers=True`); `num_hidden_groups` and `inner_group_num` other than 1 are refused. Its masked LM
  (`cls/predictions/`, of the embeddings' width) is read as `"mlm"` where asked for; the sentence-order head is not.
- ELECTRA: the discriminator (`electra/`) is the encoder, its replaced-token head (`discriminator_predictions/`)
  read where asked for; the generator (`generator/`, `generator_predictions/`) is not read. The released zips hold
  the checkpoint and `vocab.txt` only, no config: the sizes are read from the stored shapes, the heads follow
  ELECTRA's rule `max(1, hidden_size // 64)`, unless an `electra_config.json` or `bert_config.json` names them.
"""

import dataclasses
import os
import re

from bert_keras.formats import tables
from bert_keras.formats._common import (
    CheckpointError,
    check_shared_block,
    check_tokenizer_size,
    encoder_kwargs,
    first_existing,
    read_json,
    translate_activation,
)
from bert_keras.formats._read import held_blocks, read_weights

ALBERT_CONFIG_FILE = "albert_config.json"
ELECTRA_CONFIG_FILES = ("electra_config.json", "bert_config.json")
ELECTRA_EMBEDDINGS = "electra/embeddings/word_embeddings"
# google-research/albert's AlbertConfig defaults, for the keys a config may leave out; the sizes are required.
_ALBERT_DEFAULTS = {"dropout": 0.0, "attention_dropout": 0.0, "max_sequence_length": 512, "type_vocab_size": 2,
                    "initializer_range": 0.02, "embedding_size": 128}


def family_of(source):
    """`"albert"`, `"electra"` or `"bert"`: the model whose variable names a TF1 checkpoint holds."""
    names = source.names()
    for family, mark in tables.GOOGLE_FAMILY_MARKS:
        if any(name.startswith(mark) for name in names):
            return family
    return "bert"  # no known name at all: BERT's reader names the tensors it misses


def _config_keys(table):
    """Our argument -> the config's key, for messages; the tables' width is `embedding_size`."""
    return {**table, "embedding_width": table["embedding_size"]}


def _with_projection(table, projection, encoder_config):
    if encoder_config.get("embedding_size") is None:
        return table
    return {**table, tables.EMBEDDINGS: table[tables.EMBEDDINGS] + projection}


# ---------------------------------------------------------------------------
# ALBERT
# ---------------------------------------------------------------------------


def albert_config_to_kwargs(config, file):
    """Translates an `albert_config.json` dict to `BertEncoder` arguments (one shared block).

    Raises:
        ConfigError: `num_hidden_groups` or `inner_group_num` is not 1, or `num_hidden_layers` is above
            `MAX_LAYERS` (`check_shared_block`), naming the field.
    """
    check_shared_block(config, file)
    kwargs = encoder_kwargs(config, tables.GOOGLE_ALBERT_CONFIG, file, defaults=_ALBERT_DEFAULTS)
    kwargs["activation"] = translate_activation(config.get("hidden_act", "gelu"), tables.GOOGLE_ACTIVATIONS, file,
                                                "hidden_act")
    kwargs["layer_norm_epsilon"] = 1e-12
    kwargs["shared_layers"] = True
    if kwargs["embedding_size"] == kwargs["hidden_size"]:
        kwargs["embedding_size"] = None  # ALBERT maps the embeddings only where they are narrower
    return kwargs


def _check_one_group(source):
    """Refuses the tensors of a second group of layers, or of a second layer in a group: one shared block is read."""
    pattern = re.compile(tables.GOOGLE_ALBERT_GROUPS)
    extra = next((name for name in source.names() if pattern.match(name)), None)
    if extra is not None:
        raise CheckpointError(source.file_of(extra), source.original_name(extra), "belongs to a second group of "
                              "layers (num_hidden_groups > 1) or a second layer of a group (inner_group_num > 1); only "
                              "one block shared by every layer is supported, as in every released ALBERT.")


def read_albert(prefix, source, *, with_heads, do_lower_case, ignored):
    """Reads an original ALBERT checkpoint (google-research/albert): our encoder config and its weights.

    Args:
        prefix: str. The checkpoint prefix; `albert_config.json` and the
            SentencePiece model (`spiece.model` or `30k-clean.model`) are read from its folder.
        source: `TFCheckpointSource` of the checkpoint.
        with_heads: bool or list of head names. ALBERT's masked LM
            (`cls/predictions/`: a transform to the embedding width, scored
            against the word embeddings) is read as `"mlm"` when asked for and
            present; its sentence-order head (`cls/seq_relationship/`) is not
            read: the summary lists it unused.
        do_lower_case: bool.
        ignored: callable `name -> bool`: optimizer slots and counters.

    Returns:
        `CheckpointWeights` with `tokenizer_kind="sentencepiece"`. Google's
        `gelu` is the tanh approximation: `activation="gelu_approximate"`.

    Raises:
        CheckpointError: no `albert_config.json`, `num_hidden_groups` or
            `inner_group_num` not 1 or too many layers (a `ConfigError`
            naming the field), tensors of a second group, or a SentencePiece
            model that cannot be read or is not the size of the word
            embeddings (naming it).
    """
    directory = os.path.dirname(prefix)
    config_file = os.path.join(directory, ALBERT_CONFIG_FILE)
    if not os.path.isfile(config_file):
        raise CheckpointError(directory, None, f"holds an ALBERT checkpoint ({prefix}) but no {ALBERT_CONFIG_FILE} "
                              "next to it; add the checkpoint's config.")
    kwargs = albert_config_to_kwargs(read_json(config_file), config_file)
    _check_one_group(source)
    embeddings = "bert/embeddings/word_embeddings"
    if source.has(embeddings):  # the SentencePiece model against the embeddings' rows (the missing tensor: below)
        check_tokenizer_size("sentencepiece", directory, None, source.file_of(embeddings), embeddings,
                             source.shape(embeddings)[0])
    weights = read_weights(
        format="google",
        source=source,
        table=_with_projection(tables.GOOGLE_ALBERT_WEIGHTS, tables.GOOGLE_ALBERT_PROJECTION, kwargs),
        part_prefixes=tables.GOOGLE_ALBERT_PART_PREFIXES,
        config_keys=_config_keys(tables.GOOGLE_ALBERT_CONFIG),
        encoder_config=kwargs,
        mlm_activation=kwargs["activation"],
        with_heads=with_heads,
        ignored=ignored,
        hint=f" Check {config_file}.",
        vocab_file=None,
        do_lower_case=do_lower_case,
    )
    # `bert_keras.text` reads the model as `spiece.model` or, failing that, `30k-clean.model`.
    return dataclasses.replace(weights, tokenizer_kind="sentencepiece", tokenizer_folder=directory)


# ---------------------------------------------------------------------------
# ELECTRA
# ---------------------------------------------------------------------------


def _stored_matrix(source, name):
    if not source.has(name):
        raise CheckpointError(source.file, name, "missing from the ELECTRA checkpoint; the encoder's sizes are read "
                              "from it. The checkpoint may be incomplete, or of another model.")
    shape = tuple(source.shape(name))
    if len(shape) != 2:
        raise CheckpointError(source.file_of(name), source.original_name(name), f"has shape {shape}, expected a "
                              "matrix (2 dimensions).")
    return shape


def electra_sizes(source):
    """ELECTRA's encoder arguments read from the stored shapes, as its released zips carry no config.

    `vocab_size` and `embedding_size` from the word embeddings,
    `max_sequence_length` and `type_vocab_size` from the position and
    token-type tables, `hidden_size` from the first block's query kernel,
    `intermediate_size` from its feed-forward kernel, `num_layers` by counting
    `electra/encoder/layer_N`, and `num_heads` by ELECTRA's rule
    (google-research/electra, util/training_utils.py): `max(1, hidden_size // 64)`,
    e.g. 4 heads for ELECTRA-Small's 256, 12 for Base's 768, 16 for Large's 1024.
    Dropout 0.1, as ELECTRA's `BertConfig`.
    """
    vocab_size, width = _stored_matrix(source, ELECTRA_EMBEDDINGS)
    hidden_size = _stored_matrix(source, "electra/encoder/layer_0/attention/self/query/kernel")[1]
    return {
        "vocab_size": vocab_size,
        "num_layers": held_blocks(source, tables.GOOGLE_ELECTRA_WEIGHTS),
        "hidden_size": hidden_size,
        "num_heads": max(1, hidden_size // tables.ELECTRA_HEAD_SIZE),
        "intermediate_size": _stored_matrix(source, "electra/encoder/layer_0/intermediate/dense/kernel")[1],
        "max_sequence_length": _stored_matrix(source, "electra/embeddings/position_embeddings")[0],
        "type_vocab_size": _stored_matrix(source, "electra/embeddings/token_type_embeddings")[0],
        "embedding_size": width,
        "dropout": 0.1,
        "attention_dropout": 0.1,
        "initializer_range": 0.02,
    }


def electra_config_to_kwargs(source, directory):
    """`(kwargs, config_file or None, config_keys)`: the stored sizes, with what an optional config names over them."""
    sizes = electra_sizes(source)
    config_file = first_existing(directory, ELECTRA_CONFIG_FILES)
    if config_file is None:
        kwargs, activation, keys = sizes, "gelu", {}
    else:
        config = read_json(config_file)
        kwargs = encoder_kwargs(config, tables.GOOGLE_ELECTRA_CONFIG, config_file, defaults=sizes)
        activation, keys = config.get("hidden_act", "gelu"), _config_keys(tables.GOOGLE_ELECTRA_CONFIG)
    kwargs = dict(kwargs)
    kwargs["activation"] = translate_activation(activation, tables.GOOGLE_ELECTRA_ACTIVATIONS,
                                                config_file or source.file, "hidden_act")
    kwargs["layer_norm_epsilon"] = 1e-12
    kwargs["use_pooler"] = False
    if kwargs["embedding_size"] == kwargs["hidden_size"]:
        kwargs["embedding_size"] = None  # ELECTRA projects the embeddings only where they are narrower
    return kwargs, config_file, keys


def read_electra(prefix, source, *, with_heads, do_lower_case, vocab_file, ignored):
    """Reads an original ELECTRA checkpoint (google-research/electra): the discriminator as our encoder.

    Args:
        prefix: str. The checkpoint prefix (the released zips: `electra_small.*`, ...).
        source: `TFCheckpointSource` of the checkpoint.
        with_heads: bool or list of head names. The replaced-token head
            (`discriminator_predictions/`) is read as `"discriminator"` when asked for and present.
        do_lower_case: bool.
        vocab_file: str or None. The WordPiece `vocab.txt`, checked against the embeddings by the caller.
        ignored: callable `name -> bool`: optimizer slots and counters.

    Returns:
        `CheckpointWeights`. ELECTRA's `gelu` is the exact GELU: `activation="gelu"`; no pooler
        (`use_pooler=False`: `pooled_output` is the first token's `sequence_output`).
    """
    kwargs, config_file, config_keys = electra_config_to_kwargs(source, os.path.dirname(prefix))
    hint = (f" Check {config_file}." if config_file else " The sizes were read from the checkpoint's shapes (it has "
            f"no {' or '.join(ELECTRA_CONFIG_FILES)}); num_heads = max(1, hidden_size // 64) as ELECTRA's own.")
    weights = read_weights(
        format="google",
        source=source,
        table=_with_projection(tables.GOOGLE_ELECTRA_WEIGHTS, tables.GOOGLE_ELECTRA_PROJECTION, kwargs),
        part_prefixes=tables.GOOGLE_ELECTRA_PART_PREFIXES,
        config_keys=config_keys,
        encoder_config=kwargs,
        mlm_activation=kwargs["activation"],
        with_heads=with_heads,
        ignored=ignored,
        hint=hint,
        vocab_file=vocab_file,
        do_lower_case=do_lower_case,
    )
    return dataclasses.replace(weights, tokenizer_folder=os.path.dirname(prefix))
