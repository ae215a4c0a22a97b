"""The one pipeline of every reader: check a config against the stored shapes, read, turn into our layout.

Nothing here builds a model: a reader returns `CheckpointWeights`, and
models are built from it by whoever holds their classes (`build_and_load`).
"""

import collections.abc
import re

import numpy as np

from bert_keras.formats import tables
from bert_keras.formats._common import (
    MAX_LAYERS,
    CheckpointError,
    CheckpointWeights,
    ConversionSummary,
    apply_transform,
    expand_table,
    logger,
    read_tensors,
    shape_fits,
)


# Each format's config key for our argument, to name the field in messages.
CONFIG_KEYS = {"huggingface": tables.HF_CONFIG, "google": tables.GOOGLE_CONFIG, "keras_nlp": tables.KERAS_NLP_CONFIG}
# Sizes derived from the arguments (`_sizes`) -> the argument a message names where a format's keys lack them: the
# tables' width (`embedding_size`, else `hidden_size`) and the position table's rows (`max_sequence_length` +
# `position_offset`: transformers' `max_position_embeddings`).
_DERIVED_FROM = {"embedding_width": "hidden_size", "position_rows": "max_sequence_length"}

# The encoder arguments that fix the shape of every target, in our layout (a Keras kernel is
# (inputs, outputs)); an int is a fixed size. Block targets stand for every block. A config is checked
# against the stored shapes with this table before anything is built; a test compares it with the
# shapes of built models.
_H = "hidden_size"
_BLOCK = "encoder.transformer_layers.{i}."
_E = "embedding_width"
TARGET_SHAPES = {
    "encoder.embeddings.word_embeddings.embeddings": ("vocab_size", _E),
    "encoder.embeddings.position_embeddings": ("position_rows", _E),
    "encoder.embeddings.type_embeddings.embeddings": ("type_vocab_size", _E),
    "encoder.embeddings.layer_norm.gamma": (_E,),
    "encoder.embeddings.layer_norm.beta": (_E,),
    "encoder.embeddings.projection.kernel": (_E, _H),
    "encoder.embeddings.projection.bias": (_H,),
    **{_BLOCK + f"attention.{name}_dense.kernel": (_H, _H) for name in ("query", "key", "value", "output")},
    **{_BLOCK + f"attention.{name}_dense.bias": (_H,) for name in ("query", "key", "value", "output")},
    _BLOCK + "attention_layer_norm.gamma": (_H,),
    _BLOCK + "attention_layer_norm.beta": (_H,),
    _BLOCK + "feed_forward.intermediate_dense.kernel": (_H, "intermediate_size"),
    _BLOCK + "feed_forward.intermediate_dense.bias": ("intermediate_size",),
    _BLOCK + "feed_forward.output_dense.kernel": ("intermediate_size", _H),
    _BLOCK + "feed_forward.output_dense.bias": (_H,),
    _BLOCK + "feed_forward_layer_norm.gamma": (_H,),
    _BLOCK + "feed_forward_layer_norm.beta": (_H,),
    "encoder.pooler.kernel": (_H, _H),
    "encoder.pooler.bias": (_H,),
    # The masked LM's transform ends at the tables' width: the hidden size for BERT, RoBERTa and DistilBERT,
    # `embedding_size` for ALBERT and ELECTRA's generator (scored against their narrower word embeddings).
    "mlm.transform_dense.kernel": (_H, _E),
    "mlm.transform_dense.bias": (_E,),
    "mlm.layer_norm.gamma": (_E,),
    "mlm.layer_norm.beta": (_E,),
    "mlm.output_bias": ("vocab_size",),
    "nsp.dense.kernel": (_H, 2),
    "nsp.dense.bias": (2,),
    # The span head's 2 outputs: start and end. A classifier's outputs are as many as its checkpoint says
    # (checked against its labels by the Hugging Face reader).
    "span.dense.kernel": (_H, 2),
    "span.dense.bias": (2,),
    "discriminator.dense.kernel": (_H, _H),
    "discriminator.dense.bias": (_H,),
    "discriminator.prediction.kernel": (_H, 1),
    "discriminator.prediction.bias": (1,),
}
# A reshaped source tensor (keras-nlp, Model Garden) is stored in the layout of Keras'
# MultiHeadAttention: (hidden, heads, head_size) in, (heads, head_size, hidden) out.
RESHAPED_SHAPES = {
    **{_BLOCK + f"attention.{name}_dense.kernel": (_H, "num_heads", "head_size") for name in ("query", "key", "value")},
    **{_BLOCK + f"attention.{name}_dense.bias": ("num_heads", "head_size") for name in ("query", "key", "value")},
    _BLOCK + "attention.output_dense.kernel": ("num_heads", "head_size", _H),
}
_BLOCK_INDEX = re.compile(r"^encoder\.transformer_layers\.\d+\.")
# The targets of the encoder's pooler.
_POOLER = "encoder.pooler."
# The query kernel of the first block: where a config's `num_heads` is checked against the hidden size.
_FIRST_QUERY = "encoder.transformer_layers.0.attention.query_dense.kernel"


def _sizes(encoder_config):
    """The config's sizes, with `head_size` (hidden_size / num_heads, None when it does not divide), the tables'
    width `embedding_width` and the position table's `position_rows` (max_sequence_length + position_offset)."""
    sizes = dict(encoder_config)
    hidden, heads = sizes["hidden_size"], sizes["num_heads"]
    sizes["head_size"] = hidden // heads if hidden % heads == 0 else None
    sizes["embedding_width"] = sizes.get("embedding_size") or hidden
    sizes["position_rows"] = sizes["max_sequence_length"] + sizes.get("position_offset", 0)
    return sizes


def _fields(target, transform):
    """The size names of each axis of the stored tensor for `target`, or None when no table says."""
    key = _BLOCK_INDEX.sub(_BLOCK, target)
    if transform == tables.RESHAPE:
        return RESHAPED_SHAPES.get(key)
    fields = TARGET_SHAPES.get(key)
    if fields is not None and transform == tables.TRANSPOSE:
        return tuple(reversed(fields))
    return fields


def expected_stored_shape(target, transform, encoder_config):
    """The shape a stored tensor must have for `target`, computed from the config alone (None if unknown)."""
    fields = _fields(target, transform)
    if fields is None:
        return None
    sizes = _sizes(encoder_config)
    return tuple(sizes[field] if isinstance(field, str) else field for field in fields)


def expected_shape(target, encoder_config):
    """The shape the built variable at `target` will have, computed from the config alone (None if unknown)."""
    return expected_stored_shape(target, tables.IDENTITY, encoder_config)


def held_blocks(source, table):
    """How many Transformer blocks `source` holds: one more than the highest block index in it.

    None for a table of one shared block (ALBERT), whose names have no block index.

    Raises:
        CheckpointError: a tensor of block `MAX_LAYERS` or later, naming it.
    """
    if not any("{i}" in name for _, name, _ in table[tables.LAYER]):
        return None
    patterns = [
        re.compile(re.escape(name).replace(re.escape("{i}"), r"(\d+)")) for _, name, _ in table[tables.LAYER]
    ]
    # A block index of thousands of digits is past any bound (and past what int() reads): counted as 10**9.
    indices = {int(m.group(1)) if len(m.group(1)) < 10 else 10**9: (name, m.group(1))
               for name in source.names() for p in patterns if (m := p.fullmatch(name))}
    if not indices:
        return 0
    last = max(indices)
    if last >= MAX_LAYERS:  # every block's tensors would be listed (and looked for) before the count is compared
        name, index = indices[last]
        shown = index if len(index) < 20 else index[:20] + "..."
        raise CheckpointError(source.file_of(name), source.original_name(name), f"names Transformer block {shown}; "
                              f"at most {MAX_LAYERS} blocks are read (the deepest models of BERT's family have 48).")
    return last + 1


def check_config(source, table, parts, encoder_config, config_keys, hint=""):
    """Compares every size of the config with the shapes of the tensors, before anything is built or read.

    Only shapes are looked at (a safetensors header, a checkpoint's variable
    map, HDF5 dataset shapes), so a config of 60 blocks for a 6-block
    checkpoint, or of `intermediate_size` 2,000,000,000, is refused before a
    model is allocated: the number of blocks, then the shape of every tensor
    of `parts` present (each size lives in some tensor: `vocab_size` and
    `hidden_size` in the word embeddings, `intermediate_size` in the
    feed-forward kernels...), then the tensors missing, then whether
    `num_heads` divides the hidden size.

    Raises:
        CheckpointError: naming the tensor, its stored shape, and the config
            key and value that disagree with it.
    """

    def key(field):  # our name -> the config's
        if field not in config_keys:
            field = _DERIVED_FROM.get(field, field)
        return config_keys.get(field, field)

    num_layers = encoder_config["num_layers"]
    held = held_blocks(source, table)
    if held is not None and held != num_layers:
        raise CheckpointError(
            source.file,
            None,
            f"holds {held} Transformer blocks, but the config says {key('num_layers')}={num_layers}.{hint}",
        )
    entries = expand_table(table, parts, num_layers)
    for target, name, transform in entries:
        if source.has(name):
            _check_shape(source, name, target, transform, encoder_config, key, hint)
    for target, name, transform in entries:
        if not source.has(name):
            raise CheckpointError(
                source.file_of(name),
                name,
                f"missing from the checkpoint; it is needed for {target} (shape "
                f"{expected_shape(target, encoder_config)}). The checkpoint may be incomplete, or of another model.",
            )
    hidden, heads = encoder_config["hidden_size"], encoder_config["num_heads"]
    query = next((name for target, name, _ in entries if target == _FIRST_QUERY), None)
    if hidden % heads and query is not None:
        raise CheckpointError(
            source.file_of(query),
            source.original_name(query),
            f"has shape {tuple(source.shape(query))}: the hidden size is {hidden}, and the config's "
            f"{key('num_heads')}={heads} does not divide it (every attention head gets hidden_size / num_heads "
            f"dimensions).{hint}",
        )


def _check_shape(source, name, target, transform, encoder_config, key, hint):
    """Raises a CheckpointError when the stored shape of `name` is not what the config implies for `target`."""
    stored = tuple(source.shape(name))
    fields = _fields(target, transform)
    if fields is None:
        fields = _fields(target, tables.IDENTITY)
        if fields is None:  # a target the table lacks: checked against the built variable (`assign_arrays`)
            return
        if shape_fits(transform, stored, expected_shape(target, encoder_config)):
            return  # a reshape of no known layout: the number of values agrees
    sizes = _sizes(encoder_config)
    expected = tuple(sizes[f] if isinstance(f, str) else f for f in fields)
    if stored == expected:
        return
    implied, consistent = {}, len(stored) == len(fields)
    for field, size in zip(fields, stored):
        if isinstance(field, int):
            consistent = consistent and size == field
        elif implied.setdefault(field, size) != size:
            consistent = False  # e.g. a square kernel stored (16, 8)
    # The config's sizes and those derived from them (not head_size: a wrong num_heads is checked on its own).
    said = {f: size for f, size in sizes.items() if f in encoder_config or f in _DERIVED_FROM}
    wrong = [f for f, size in implied.items() if f in said and said[f] != size]
    if consistent and wrong:
        means = ", ".join(f"{key(f)}={size}" for f, size in implied.items())
        says = ", ".join(f"{key(f)}={said[f]}" for f in wrong)
        message = f"has shape {stored}, which means {means}; the config says {says}.{hint}"
    else:
        named = dict.fromkeys(f for f in fields if isinstance(f, str) and f in said)
        says = ", ".join(f"{key(f)}={said[f]}" for f in named)
        message = f"has shape {stored}, expected {expected} for {target} (the config says {says}).{hint}"
    raise CheckpointError(source.file_of(name), source.original_name(name), message)


def wanted_heads(with_heads):
    """The heads `with_heads` asks for: `True` the pre-training heads, `False` none, or the names given."""
    if with_heads is True:
        return tables.PRETRAINING_HEADS
    if with_heads is False or with_heads is None:
        return ()
    if isinstance(with_heads, str) or not isinstance(with_heads, collections.abc.Iterable):
        heads = None
    else:
        heads = tuple(with_heads)
    if heads is None or any(head not in tables.HEADS for head in heads):
        raise ValueError(
            f"Received an invalid value for argument `with_heads`, expected a bool or a list of head names from "
            f"{list(tables.HEADS)}. Received: with_heads={with_heads!r}"
        )
    return heads


def plan_parts(source, part_prefixes, with_heads, pooler=True):
    """`(parts, heads, not_in_checkpoint)`: the parts to convert, the heads among them, the parts left random.

    `with_heads`: `True` (the pre-training heads), `False`, or a list of head
    names (`tables.HEADS`); a head is read when it is asked for and present.
    `pooler`: whether the encoder has a pooler (DistilBERT and ELECTRA have none).
    """
    wanted = wanted_heads(with_heads)
    present = detect_parts(source, part_prefixes)
    heads = [part for part in tables.HEADS if part in wanted and part in present]
    parts = [tables.EMBEDDINGS, tables.LAYER]
    not_in_checkpoint = []
    if pooler and tables.POOLER in present:
        parts.append(tables.POOLER)
    elif pooler:
        not_in_checkpoint.append("pooler")
    return parts + heads, heads, not_in_checkpoint


def detect_parts(source, part_prefixes):
    """The optional parts (pooler, mlm, nsp) whose tensors appear in `source`."""
    names = source.names()
    return [part for part, prefix in part_prefixes.items() if any(n.startswith(prefix) for n in names)]


def read_weights(
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
    config_keys=None,
):
    """Checks `source` against the config, reads it through `table` into our layout, and summarizes.

    Args:
        ignored: callable `name -> bool` for source tensors skipped on purpose.
        extra_checks: optional callable `(source, heads) -> list of ignored names`,
            run after the tensors are read.
        config_keys: optional dict of our argument -> the config's key, to
            name fields in messages; defaults to the format's (`CONFIG_KEYS`).

    Returns:
        `CheckpointWeights`.

    Raises:
        CheckpointError: a config that disagrees with the stored shapes, a
            missing tensor, a weight that is not finite floating point.
    """
    parts, heads, not_in_checkpoint = plan_parts(source, part_prefixes, with_heads,
                                                 pooler=encoder_config.get("use_pooler", True))
    if any(target.startswith(_POOLER) for head in heads for target, _, _ in table.get(head, ())):
        # A head that holds the pooler (RoBERTa's sequence classifier: its dense + tanh is BERT's pooler) is the
        # pooler read: one stored too is not what that model computes, and is left unused.
        parts = [part for part in parts if part != tables.POOLER]
        not_in_checkpoint = [part for part in not_in_checkpoint if part != "pooler"]

    # Everything is checked before any model exists: a config of 60 blocks for a 6-block
    # checkpoint, of a 2-billion-wide feed-forward layer, or a NaN weight, is refused here.
    if config_keys is None:
        config_keys = CONFIG_KEYS.get(format, {})
    check_config(source, table, parts, encoder_config, config_keys, hint=hint)
    entries = expand_table(table, parts, encoder_config["num_layers"])
    arrays = read_tensors(source, [name for _, name, _ in entries])
    ours, origins = {}, {}
    for target, name, transform in entries:
        ours[target] = apply_transform(arrays[name], transform, _target_shape(source, name, target, transform,
                                                                               encoder_config))
        origins[target] = (source.file_of(name), source.original_name(name))
    skipped = list(extra_checks(source, heads)) if extra_checks else []

    used = {name for _, name, _ in entries} | set(skipped)
    skipped += [n for n in source.names() if n not in used and ignored(n)]
    unused = [n for n in source.names() if n not in used and n not in skipped]
    summary = ConversionSummary(
        format=format,
        files=list(source.files),
        loaded=[(source.original_name(name), target) for target, name, _ in entries],
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
    return CheckpointWeights(
        encoder_configs=[encoder_config],
        arrays=ours,
        origins=origins,
        heads=heads,
        mlm_activation=mlm_activation,
        vocab_file=vocab_file,
        do_lower_case=do_lower_case,
        summary=summary,
    )


def _target_shape(source, name, target, transform, encoder_config):
    """The shape of our variable at `target`; only a reshape needs it, and then the size table must know it."""
    shape = expected_shape(target, encoder_config)
    if shape is None and transform == tables.RESHAPE:
        raise CheckpointError(source.file_of(name), source.original_name(name),
                              f"is reshaped for {target}, a weight of no known shape.")
    return shape


def check_tied_decoder(source, name, embeddings_name):
    """Checks that a stored decoder matrix equals the word embeddings (it is tied). Returns the names to skip.

    A checkpoint that ties them stores the matrix once (transformers 5) or twice, equal (older files); one
    saved with `tie_word_embeddings: false` stores a decoder of its own, which `MaskedLMHead` cannot hold.
    """
    if not source.has(name):
        return []
    decoder, embeddings = source.get(name), source.get(embeddings_name)
    if decoder.shape != embeddings.shape or not np.array_equal(decoder, embeddings):
        raise CheckpointError(
            source.file_of(name),
            source.original_name(name),
            f"differs from the word embeddings {source.original_name(embeddings_name)!r}; BERT and its family "
            "(ALBERT, ELECTRA, DistilBERT, RoBERTa) tie them, and so does MaskedLMHead. An untied decoder is not "
            "supported: read the encoder without the masked-LM head (with_heads=False).",
        )
    return [name]
