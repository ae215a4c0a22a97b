"""Shared pieces of the readers: errors, summaries, what a reader returns, weight plans and vocabularies."""

import dataclasses
import logging
import math
import os
import re

import numpy as np

from bert_keras._checks import FileContentError, read_json as read_user_json
from bert_keras.formats import tables
from bert_keras.text.base import TokenizerFileError
from bert_keras.text.folders import read_folder
from bert_keras.text.tokenizer import load_vocabulary

logger = logging.getLogger("bert_keras.checkpoints")


class CheckpointError(ValueError):
    """A checkpoint that cannot be converted. Names the file and, where known, the tensor.

    Attributes:
        file: str. The file at fault.
        tensor: str or None. The tensor (or, for a `ConfigError`, the config field) at fault.
    """

    kind = "tensor"

    def __init__(self, file, tensor, message):
        self.file = str(file)
        self.tensor = tensor
        where = self.file + (f", {self.kind} {tensor!r}" if tensor is not None else "")
        super().__init__(f"{where}: {message}")


class ConfigError(CheckpointError):
    """A config file that does not describe a model we can build; `tensor` holds the field."""

    kind = "field"


class ModuleRefusedError(CheckpointError):
    """A module (a SavedModel, whose graph runs when it is loaded) found where only weights may be read.

    Raised by `read_checkpoint(path, allow_modules=False)`: a path that came
    from data (an index's record, a file) is read only as weights; a module
    is loaded only where the user names it in the call.
    """


@dataclasses.dataclass
class ConversionSummary:
    """What a conversion read and what it left alone.

    Attributes:
        format: str. `"huggingface"`, `"google"` or `"keras_nlp"`.
        files: list of str. The weight files read.
        loaded: list of `(source_name, target_path)` pairs.
        ignored: list of str. Source tensors skipped on purpose (buffers such as
            `position_ids`, optimizer slots, tied copies).
        unused: list of str. Source tensors that nothing here reads (e.g. a
            task head we do not convert).
        not_in_checkpoint: list of str. Parts we built that the checkpoint lacks
            and that keep their random initialization (e.g. `"pooler"`).
        heads: list of str. The heads converted (`"mlm"`, `"nsp"`, and the task
            heads `"classifier"`, `"token_classifier"`, `"span"`).
    """

    format: str
    files: list
    loaded: list = dataclasses.field(default_factory=list)
    ignored: list = dataclasses.field(default_factory=list)
    unused: list = dataclasses.field(default_factory=list)
    not_in_checkpoint: list = dataclasses.field(default_factory=list)
    heads: list = dataclasses.field(default_factory=list)

    def __str__(self):
        lines = [
            f"Converted a {self.format} checkpoint ({', '.join(self.files)}): "
            f"{len(self.loaded)} tensors loaded, heads: {', '.join(self.heads) or 'none'}.",
            f"Ignored ({len(self.ignored)}): {_listing(self.ignored)}.",
            f"Unused ({len(self.unused)}): {_listing(self.unused)}.",
        ]
        if self.not_in_checkpoint:
            lines.append(
                "Not in the checkpoint, left randomly initialized: "
                f"{', '.join(self.not_in_checkpoint)}."
            )
        return "\n".join(lines)


def _listing(names, limit=12):
    if not names:
        return "-"
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown}, ... ({len(names) - limit} more)"


@dataclasses.dataclass
class CheckpointWeights:
    """What a reader returns: our encoder's arguments and the weights under our names. No model.

    Models are built from it by whoever holds their classes (`build_and_load`):
    `BertEncoder.from_checkpoint`, and `bert_keras.checkpoints` for the heads.

    Attributes:
        encoder_configs: list of dict of `BertEncoder` arguments. One, except
            for a Hub module, whose files leave the head count and the
            activation open: its candidates, most likely first.
        arrays: dict. Target path (`encoder.pooler.kernel`, `mlm.output_bias`:
            see `tables.py`) -> numpy array in the layout of our variable.
        origins: dict. Target path -> `(file, tensor)` it was read from.
        heads: list of str. The heads whose weights are in `arrays` (`"mlm"`,
            `"nsp"`; a task's: `"classifier"`, `"token_classifier"`, `"span"`).
        mlm_activation: the activation of the masked-LM transform.
        vocab_file: str or None. Path of the WordPiece vocabulary.
        do_lower_case: bool. Whether the vocabulary expects lower-cased text.
        summary: `ConversionSummary`.
        difference: optional callable `encoder -> float`: how far a built
            encoder's outputs are from the checkpoint's own (a Hub module's),
            relative to their largest value; None where the files fix the
            architecture.
        tolerance: float. The largest `difference` accepted.
        architectures: list of str. The model classes the checkpoint's config
            names (transformers' `architectures`, e.g.
            `["BertForTokenClassification"]`); empty where it names none.
        id2label: dict or None. Class index -> name, from the config
            (transformers' `id2label`); with a classifier head read, one name
            for each of its outputs.
        num_labels: int or None. The number of classes of a classifier head
            read (its stored outputs), else what the config says.
        tokenizer_kind: str. The family's tokenizer: `"wordpiece"`,
            `"sentencepiece"` (ALBERT) or `"byte_bpe"` (RoBERTa).
        tokenizer_folder: str or None. The folder its files are read from
            (`bert_keras.text.folders`); None where only `vocab_file` is known.
        encoder_kind: str. The encoder class the config is for: `"bert"`
            (`BertEncoder`, the family with options) or `"modernbert"`
            (`ModernBertEncoder`).
        head_options: dict. Head name -> arguments its head class takes
            beyond the defaults (ModernBERT's: `transform`, bias flags).
    """

    encoder_configs: list
    arrays: dict
    origins: dict
    heads: list
    mlm_activation: object
    vocab_file: object
    do_lower_case: bool
    summary: ConversionSummary
    difference: object = None
    tolerance: float = 0.0
    architectures: list = dataclasses.field(default_factory=list)
    id2label: object = None
    num_labels: object = None
    tokenizer_kind: str = "wordpiece"
    tokenizer_folder: object = None
    encoder_kind: str = "bert"
    head_options: dict = dataclasses.field(default_factory=dict)

    @property
    def encoder_config(self):
        """The most likely encoder arguments (the only ones, unless this is a Hub module)."""
        return self.encoder_configs[0]

    @property
    def label_names(self):
        """The class names in the order of the outputs (`id2label`), or None where the config has none."""
        if not self.id2label or self.num_labels is None or set(self.id2label) != set(range(self.num_labels)):
            return None
        return [self.id2label[index] for index in range(self.num_labels)]


# ---------------------------------------------------------------------------
# Weight plans: tables expanded, tensors read and turned into our layout, then assigned.
# ---------------------------------------------------------------------------


def expand_table(table, parts, num_layers):
    """Expands the `{i}` templates of `table[part]` for the given parts, block by block.

    Returns a list of `(target, source, transform)`.
    """
    entries = []
    for part in parts:
        repeated = any("{i}" in target for target, _, _ in table[part])
        for i in range(num_layers) if repeated else (None,):
            for target, source, transform in table[part]:
                entries.append((target.format(i=i), source.format(i=i), transform) if repeated else (target, source, transform))
    return entries


def resolve_target(roots, path):
    """Returns the variable at an attribute path such as `encoder.transformer_layers.0.pooler.kernel`."""
    root, *attributes = path.split(".")
    obj = roots[root]
    for attribute in attributes:
        obj = obj[int(attribute)] if attribute.isdigit() else getattr(obj, attribute)
    return obj


def expected_source_shape(transform, target_shape):
    """The shape a source tensor must have so that `transform` gives `target_shape`.

    For `"reshape"` any shape with as many elements fits; the target shape is returned.
    """
    if transform == tables.TRANSPOSE:
        return tuple(reversed(target_shape))
    return tuple(target_shape)


def shape_fits(transform, stored_shape, target_shape):
    if transform == tables.RESHAPE:
        return int(np.prod(stored_shape)) == int(np.prod(target_shape))
    return tuple(stored_shape) == expected_source_shape(transform, target_shape)


def apply_transform(array, transform, target_shape):
    """Turns a source array into the layout of our variable."""
    if transform == tables.TRANSPOSE:
        return np.ascontiguousarray(np.transpose(array))
    if transform == tables.RESHAPE:
        return np.reshape(array, target_shape)
    return array


def check_float(file, name, array):
    if not np.issubdtype(array.dtype, np.floating):
        raise CheckpointError(
            file, name, f"expected a floating-point weight, found dtype {array.dtype}."
        )


def check_finite(file, name, array):
    """Refuses a weight holding NaN or infinity: every output of the model would be NaN."""
    count = int(array.size - np.count_nonzero(np.isfinite(array)))
    if count:
        raise CheckpointError(
            file,
            name,
            f"holds {count} non-finite value{'' if count == 1 else 's'} (NaN or infinity) among its "
            f"{array.size}; a converted model would output NaN. The file is corrupt, or the training "
            "it comes from diverged.",
        )


def read_tensors(source, names):
    """Reads the named tensors that `source` holds, checking that each is finite floating point.

    Returns:
        dict: name -> numpy array.
    """
    arrays = {}
    for name in names:
        if source.has(name) and name not in arrays:
            array = source.get(name)
            check_float(source.file_of(name), source.original_name(name), array)
            check_finite(source.file_of(name), source.original_name(name), array)
            arrays[name] = array
    return arrays


def read_entries(source, entries, format="huggingface"):
    """The arrays a weight table names, read from `source` and put in the model's layout, and what was read.

    Args:
        source: the opened weight files (`read_tensors`' `source`).
        entries: `(target, name, transform, shape)` rows: the variable's
            path, the stored tensor's name, its transform (`tables`) and its
            stored shape (None: as stored, for a head whose width the file
            decides).
        format: str. The format named in the summary.

    Returns:
        `(arrays, origins, summary)`: target -> numpy array in the model's
        layout, target -> `(file, original name)`, and the
        `ConversionSummary` (logged), which lists what the files hold
        beyond the table as unused.
    """
    stored = read_tensors(source, [name for _, name, _, _ in entries])
    arrays, origins = {}, {}
    for target, name, transform, shape in entries:
        shape = stored[name].shape if shape is None else shape
        target_shape = tuple(reversed(shape)) if transform == tables.TRANSPOSE else shape
        arrays[target] = apply_transform(stored[name], transform, target_shape)
        origins[target] = (source.file_of(name), source.original_name(name))
    summary = ConversionSummary(
        format=format,
        files=list(source.files),
        loaded=[(source.original_name(name), target) for target, name, _, _ in entries],
        unused=sorted(source.original_name(n) for n in source.names() if n not in stored),
    )
    logger.info("%s", summary)
    return arrays, origins, summary


def assign_arrays(weights, roots):
    """Assigns `weights.arrays` to the variables of `roots` (e.g. `{"encoder": BertEncoder}`).

    Targets under roots that are not given (a head's, for an encoder alone) are skipped.

    Raises:
        CheckpointError: a built variable's shape is not the array's, naming
            the file and the tensor.
    """
    for target, array in weights.arrays.items():
        if target.split(".", 1)[0] not in roots:
            continue
        variable = resolve_target(roots, target)
        if tuple(variable.shape) != array.shape:
            file, name = weights.origins[target]
            raise CheckpointError(file, name, f"has shape {array.shape} in our layout, expected "
                                  f"{tuple(variable.shape)} for {target}.")
        variable.assign(array.astype(variable.dtype))


class Candidates:
    """The encoder configs of `weights` to build in turn, most likely first, until one reproduces the checkpoint.

    The caller builds (it holds the model classes: readers import none) and
    asks; nothing here calls back into it:

        candidates = Candidates(weights)
        for config in candidates:
            roots = build(config)  # {"encoder": ..., heads}
            assign_arrays(weights, roots)
            if candidates.fits(roots["encoder"]):
                break

    Where the files fix the architecture (`weights.difference` is None)
    the one config fits. Where `weights` lists several (a Hub module), each
    built encoder is run next to the module's outputs; the loop raises a
    `CheckpointError` (naming the closest candidate) when none fits.
    """

    def __init__(self, weights):
        self.weights = weights
        self._config = None
        self._best = None

    def __iter__(self):
        for config in self.weights.encoder_configs:
            self._config = config
            yield config
        best = self._best
        raise CheckpointError(
            self.weights.summary.files[0],
            None,
            f"no BertEncoder reproduces this module's outputs (closest: num_heads={best[1]['num_heads']}, "
            f"activation={best[1]['activation']!r}, position_offset={best[1].get('position_offset', 0)}, relative "
            f"difference {best[0]:.3g}). It may be a BERT variant this package does not build (pre-LayerNorm, "
            "another activation, another position offset).",
        )

    def fits(self, encoder):
        """Whether `encoder`, built from the current config with the weights assigned, reproduces the checkpoint."""
        if self.weights.difference is None:
            return True
        config = self._config
        difference = self.weights.difference(encoder)
        logger.info("%s: num_heads=%d, activation=%s, position_offset=%d: max difference %.3g",
                    self.weights.summary.files[0], config["num_heads"], config["activation"],
                    config.get("position_offset", 0), difference)
        if self._best is None or difference < self._best[0]:
            self._best = (difference, config)
        return difference <= self.weights.tolerance


def build_and_load(weights, make_roots):
    """Builds models with `make_roots(encoder_config)` and assigns the checkpoint's weights to them.

    The checkpoint is read and checked before (`read_checkpoint`); this only
    builds and assigns. Where `weights` lists several encoder configs (a Hub
    module), each is built in turn and the first whose encoder reproduces
    the module's outputs is kept (`Candidates`).

    Args:
        weights: `CheckpointWeights`.
        make_roots: callable `encoder_config -> dict` of the models the
            targets start from: `"encoder"`, and optionally `"mlm"`, `"nsp"`.
            The caller holds the classes; readers import no model.

    Returns:
        The dict `make_roots` returned, with the weights assigned.

    Raises:
        CheckpointError: no candidate reproduces the module's outputs.
    """
    candidates = Candidates(weights)
    for config in candidates:
        roots = make_roots(config)
        assign_arrays(weights, roots)
        if candidates.fits(roots["encoder"]):
            return roots


# ---------------------------------------------------------------------------
# Configs and vocabularies.
# ---------------------------------------------------------------------------


def read_json(path):
    """The JSON object of a checkpoint's file (`bert_keras._checks.read_json`); a `ConfigError` naming it otherwise."""
    try:
        config = read_user_json(path)
    except FileContentError as error:
        raise ConfigError(path, None, error.reason) from error
    if not isinstance(config, dict):
        raise ConfigError(path, None, f"expected a JSON object, found {type(config).__name__}.")
    return config


# The most Transformer blocks a checkpoint may have. The deepest models of BERT's family have 48 (Megatron-BERT
# 3.9B, ALBERT's study of depth); every released ALBERT 12 or 24. A stored count is read from the tensors' names, but
# ALBERT's one shared block leaves only its config to say how often it runs: a config of 10**9 layers would build
# that many calls of it (about 60 ms each).
MAX_LAYERS = 128
# Our float arguments a config may set -> `(lowest, whether the lowest is allowed, bound above, what is expected)`.
_FLOAT_RANGES = {
    "dropout": (0.0, True, 1.0, "a dropout rate in [0, 1)"),
    "attention_dropout": (0.0, True, 1.0, "a dropout rate in [0, 1)"),
    "initializer_range": (0.0, False, math.inf, "a positive number"),
    "layer_norm_epsilon": (0.0, False, 1.0, "a number in (0, 1)"),
}


def _in_range(value, lowest, lowest_allowed, above):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        value = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return False
    return (lowest <= value if lowest_allowed else lowest < value) and value < above  # NaN: False


def encoder_kwargs(config, key_table, file, defaults=None):
    """Translates a config dict to `BertEncoder` arguments with a key table.

    Raises:
        ConfigError: a size that is not a positive integer, or a rate,
            `initializer_range` or `layer_norm_epsilon` that is not a number
            in its range, naming the file and the field.
    """
    kwargs = dict(defaults or {})
    for ours, theirs in key_table.items():
        if theirs in config:
            kwargs[ours] = config[theirs]
        elif ours not in kwargs:
            raise ConfigError(
                file,
                theirs,
                f"missing; a BERT config needs {sorted(key_table.values())}.",
            )
    for ours in ("vocab_size", "num_layers", "hidden_size", "num_heads", "intermediate_size",
                 "max_sequence_length", "type_vocab_size", "embedding_size"):
        if ours not in key_table:  # a size the format does not have (DistilBERT's segments, BERT's embedding_size)
            continue
        value = kwargs[ours]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(file, key_table[ours], f"expected a positive integer, found {value!r:.100}.")
    for ours, (lowest, lowest_allowed, above, expected) in _FLOAT_RANGES.items():
        theirs = key_table.get(ours)
        if theirs in config and not _in_range(config[theirs], lowest, lowest_allowed, above):
            raise ConfigError(file, theirs, f"expected {expected}, found {config[theirs]!r:.100}.")
    return kwargs


def check_shared_block(config, file):
    """Refuses an ALBERT config (transformers' or google-research/albert's) that one shared block cannot be.

    Raises:
        ConfigError: `num_hidden_groups` or `inner_group_num` not 1 (every
            released ALBERT has one group of one layer), or
            `num_hidden_layers` above `MAX_LAYERS`: no stored tensor counts the
            layers of a shared block, so the config's count is bounded here.
    """
    for field in ("num_hidden_groups", "inner_group_num"):
        value = config.get(field, 1)
        if isinstance(value, bool) or value != 1:
            raise ConfigError(file, field, f"is {value!r:.100}; only 1 is supported (one block shared by every layer, "
                              "as in every released ALBERT): BertEncoder(shared_layers=True) holds one shared block.")
    layers = config.get("num_hidden_layers")
    if isinstance(layers, int) and not isinstance(layers, bool) and layers > MAX_LAYERS:
        raise ConfigError(file, "num_hidden_layers", f"is {layers}; ALBERT's shared block is applied at most "
                          f"{MAX_LAYERS} times here (released ALBERTs: 12 or 24 layers; the deepest models of BERT's "
                          "family: 48). The checkpoint stores one block, so only the config counts them.")


def translate_activation(name, table, file, field):
    if not isinstance(name, str) or name not in table:
        raise ConfigError(
            file, field, f"unsupported activation {name!r:.100}; supported: {sorted(table)}."
        )
    return table[name]


def read_vocabulary(path):
    """The tokens of a WordPiece vocabulary file, one a line, read as the tokenizer will read them.

    Raises:
        ValueError: a token appears twice (the message names the file, the
            token and both lines), before any model is built.
    """
    return load_vocabulary(path)


def checkpoint_error(error):
    """A tokenizer file's error (`TokenizerFileError`) as the readers raise it: a `ConfigError` for
    `tokenizer_config.json` (naming the key at fault), else a `CheckpointError` naming the file."""
    if error.key is not None or os.path.basename(error.file) == "tokenizer_config.json":
        return ConfigError(error.file, error.key, error.reason)
    return CheckpointError(error.file, None, error.reason)


def read_tokenizer(kind, folder, vocab_file=None):
    """`(found, tokens)`: where the tokenizer of `kind` is read from (`bert_keras.text.folders.read_folder`: its own
    files, else a `tokenizer.json`) and its tokens in id order, read as the tokenizer reads them; `(None, None)`
    where `folder` has none of them (the tokenizer names its files when it is built).

    WordPiece's `vocab_file` (else `folder/vocab.txt`), the pieces of
    SentencePiece's `spiece.model`, the entries of byte-level BPE's
    `vocab.json` (with its `merges.txt`). The kind's options in
    `folder/tokenizer_config.json` are read too, so that a bad one is named here.

    Raises:
        CheckpointError: a file the tokenizer cannot read, naming it
            (`ConfigError`, naming the key, for tokenizer_config.json).
    """
    try:
        found = read_folder(folder, kind, vocab_file)
        return (found, found.tokens()) if found is not None else (None, None)
    except TokenizerFileError as error:
        raise checkpoint_error(error) from error


def read_tokenizer_vocabulary(kind, folder, vocab_file=None):
    """`(file, tokens)` of `read_tokenizer`: the file the tokens are read from; `(None, None)` where none."""
    found, tokens = read_tokenizer(kind, folder, vocab_file)
    return (found.file if found is not None else None), tokens


def check_tokenizer_size(kind, folder, vocab_file, tensor_file, tensor_name, rows):
    """Refuses a tokenizer whose vocabulary (WordPiece tokens, SentencePiece pieces, BPE vocab.json entries) is not
    the size of the word embeddings, naming the file: an id past the last row fails in the gather (or, on a GPU,
    reads zeros). Returns its tokens (None where `folder` lacks its files)."""
    file, tokens = read_tokenizer_vocabulary(kind, folder, vocab_file)
    if tokens is not None:
        check_vocabulary(file, tokens, tensor_file, tensor_name, rows)
    return tokens


def check_vocabulary(vocab_file, tokens, tensor_file, tensor_name, embeddings_rows):
    if len(tokens) != embeddings_rows:
        raise CheckpointError(
            vocab_file,
            tensor_name,
            f"the vocabulary has {len(tokens)} tokens but the word embeddings "
            f"{tensor_name!r} in {tensor_file} have {embeddings_rows} rows. The vocabulary "
            "does not belong to these weights.",
        )


_SPECIAL = re.compile(r"^\[[A-Za-z0-9_]+\]$|^<[^>]+>$")


def guess_do_lower_case(tokens):
    """True when no ordinary token has an upper-case letter (an uncased vocabulary)."""
    for token in tokens:
        if _SPECIAL.match(token):
            continue
        if token != token.lower():
            return False
    return True


def first_existing(directory, names):
    for name in names:
        path = os.path.join(directory, name)
        if os.path.exists(path):
            return path
    return None
