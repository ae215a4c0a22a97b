"""TF Hub / Model Garden BERT encoder modules (SavedModels) -> our encoder config and weights.

A module in the format of Model Garden's `export_tfhub_lib.py` (the published
`bert_en_uncased_L-12_H-768_A-12` and its kin) keeps no config: the
architecture is read from the variables' shapes, the activation from the ops
of its graph (`Erf` or `Erfc`: exact GELU), and the vocabulary from its `vocab_file`
asset or from the preprocess module next to it. Modules written by this
package's own exporter are read too (their attention kernels are 2-D, so the
head count is found by trying the divisors of `hidden_size`). Either way the
reader lists the candidate configs, and each encoder built from them is run
next to the module on a probe batch (`build_and_load`) until one gives its
outputs: a module that is not a post-LayerNorm BERT is refused, not
silently misread.

A module of the family (ALBERT, ELECTRA, DistilBERT, RoBERTa) that our
exporter wrote shows its options by the variables it holds: an embedding
projection, no type embeddings, no pooler, one block called once per
`encoder_outputs` entry (ALBERT's shared block). Only RoBERTa's position
offset leaves no trace in the shapes: each candidate is tried with the
recorded offset (or 0), then with RoBERTa's 2.

The tokenizer's kind is read from the module's asset attributes (each
tokenizer class's `files`: `bert_keras.text.kinds.kind_of_assets`), its options (which no variable
holds) as data from the folder our exporter writes beside the module
(`TOKENIZER_FOLDER`: the tokenizer's files and `tokenizer_config.json`).
"""

import dataclasses
import os

import numpy as np

from bert_keras._checks import open_regular_file, read_json
from bert_keras._contract import ARCHITECTURE_FILE, INPUT_KEYS
from bert_keras._files import MARKER, read_marker
from bert_keras.formats import tables
from bert_keras.formats._common import (
    CheckpointError,
    check_tokenizer_size,
    checkpoint_error,
    guess_do_lower_case,
    read_vocabulary,
)
from bert_keras.formats._read import read_weights
from bert_keras.formats.sources import _Source
from bert_keras.hub.loader import load, resolve, unpack_archive
from bert_keras.text.base import TokenizerFileError
from bert_keras.text.folders import TOKENIZER_OPTIONS  # noqa: F401 (`bert_keras.export` reads the options' names here)
from bert_keras.text.kinds import TOKENIZER_CLASSES, kind_of_assets, tokenizer_class
from bert_keras.text.tokenizer import WordPieceTokenizer

ENCODER_DIR = "encoder"
PREPROCESS_DIR = "preprocess"
SAVED_MODEL_FILE = "saved_model.pb"
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")
# Largest difference (relative to the largest output value) the converted encoder may show on the probe batch.
TOLERANCE = 1e-4

# Beside an encoder module that bert_keras's `export_module_pair` writes, where TensorFlow never reads: the tokenizer
# as the preprocess module applies it, in Hugging Face's folder layout (its files under the names `bert_keras.text`
# reads them by, and `tokenizer_config.json`), so that it is rebuilt with the options no variable of the module holds.
TOKENIZER_FOLDER = "assets.extra/tokenizer"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
I, T, R = tables.IDENTITY, tables.TRANSPOSE, tables.RESHAPE
_B = "encoder.transformer_layers.{i}."

# Model Garden's BertEncoderV2 (official/nlp/modeling/networks/bert_encoder.py), as exported.
_MG = "transformer/layer_{i}/"
MODEL_GARDEN_WEIGHTS = {
    tables.EMBEDDINGS: (
        ("encoder.embeddings.word_embeddings.embeddings", "word_embeddings/embeddings", I),
        ("encoder.embeddings.position_embeddings", "position_embedding/embeddings", I),
        ("encoder.embeddings.type_embeddings.embeddings", "type_embeddings/embeddings", I),
        ("encoder.embeddings.layer_norm.gamma", "embeddings/layer_norm/gamma", I),
        ("encoder.embeddings.layer_norm.beta", "embeddings/layer_norm/beta", I),
    ),
    tables.LAYER: (
        # Attention kernels are EinsumDense (hidden, heads, head_size) / (heads, head_size, hidden).
        (_B + "attention.query_dense.kernel", _MG + "self_attention/query/kernel", R),
        (_B + "attention.query_dense.bias", _MG + "self_attention/query/bias", R),
        (_B + "attention.key_dense.kernel", _MG + "self_attention/key/kernel", R),
        (_B + "attention.key_dense.bias", _MG + "self_attention/key/bias", R),
        (_B + "attention.value_dense.kernel", _MG + "self_attention/value/kernel", R),
        (_B + "attention.value_dense.bias", _MG + "self_attention/value/bias", R),
        (_B + "attention.output_dense.kernel", _MG + "self_attention/attention_output/kernel", R),
        (_B + "attention.output_dense.bias", _MG + "self_attention/attention_output/bias", I),
        (_B + "attention_layer_norm.gamma", _MG + "self_attention_layer_norm/gamma", I),
        (_B + "attention_layer_norm.beta", _MG + "self_attention_layer_norm/beta", I),
        (_B + "feed_forward.intermediate_dense.kernel", _MG + "intermediate/kernel", I),
        (_B + "feed_forward.intermediate_dense.bias", _MG + "intermediate/bias", I),
        (_B + "feed_forward.output_dense.kernel", _MG + "output/kernel", I),
        (_B + "feed_forward.output_dense.bias", _MG + "output/bias", I),
        (_B + "feed_forward_layer_norm.gamma", _MG + "output_layer_norm/gamma", I),
        (_B + "feed_forward_layer_norm.beta", _MG + "output_layer_norm/beta", I),
    ),
    tables.POOLER: (
        ("encoder.pooler.kernel", "pooler_transform/kernel", I),
        ("encoder.pooler.bias", "pooler_transform/bias", I),
    ),
}
MODEL_GARDEN_SHAPES = {  # what each size is read from: (name, axis)
    "vocab_size": ("word_embeddings/embeddings", 0),
    "hidden_size": ("word_embeddings/embeddings", 1),
    "max_sequence_length": ("position_embedding/embeddings", 0),
    "type_vocab_size": ("type_embeddings/embeddings", 0),
    "num_heads": ("transformer/layer_0/self_attention/query/kernel", 1),
    "intermediate_size": ("transformer/layer_0/intermediate/kernel", 1),
}

# Modules written by `bert_keras.hub.export_encoder` (our own variable paths).
_BK = "transformer_layer_{i}/"
BERT_KERAS_WEIGHTS = {
    tables.EMBEDDINGS: (
        ("encoder.embeddings.word_embeddings.embeddings", "embeddings/word_embeddings/embeddings", I),
        ("encoder.embeddings.position_embeddings", "embeddings/position_embeddings", I),
        ("encoder.embeddings.type_embeddings.embeddings", "embeddings/type_embeddings/embeddings", I),
        ("encoder.embeddings.layer_norm.gamma", "embeddings/layer_norm/gamma", I),
        ("encoder.embeddings.layer_norm.beta", "embeddings/layer_norm/beta", I),
    ),
    tables.LAYER: tuple(
        (_B + target, _BK + source, I)
        for target, source in (
            ("attention.query_dense.kernel", "attention/query/kernel"),
            ("attention.query_dense.bias", "attention/query/bias"),
            ("attention.key_dense.kernel", "attention/key/kernel"),
            ("attention.key_dense.bias", "attention/key/bias"),
            ("attention.value_dense.kernel", "attention/value/kernel"),
            ("attention.value_dense.bias", "attention/value/bias"),
            ("attention.output_dense.kernel", "attention/output/kernel"),
            ("attention.output_dense.bias", "attention/output/bias"),
            ("attention_layer_norm.gamma", "attention_layer_norm/gamma"),
            ("attention_layer_norm.beta", "attention_layer_norm/beta"),
            ("feed_forward.intermediate_dense.kernel", "feed_forward/intermediate/kernel"),
            ("feed_forward.intermediate_dense.bias", "feed_forward/intermediate/bias"),
            ("feed_forward.output_dense.kernel", "feed_forward/output/kernel"),
            ("feed_forward.output_dense.bias", "feed_forward/output/bias"),
            ("feed_forward_layer_norm.gamma", "feed_forward_layer_norm/gamma"),
            ("feed_forward_layer_norm.beta", "feed_forward_layer_norm/beta"),
        )
    ),
    tables.POOLER: (
        ("encoder.pooler.kernel", "pooler_dense/kernel", I),
        ("encoder.pooler.bias", "pooler_dense/bias", I),
    ),
}
BERT_KERAS_SHAPES = {
    "vocab_size": ("embeddings/word_embeddings/embeddings", 0),
    "hidden_size": ("embeddings/word_embeddings/embeddings", 1),
    "max_sequence_length": ("embeddings/position_embeddings", 0),
    "type_vocab_size": ("embeddings/type_embeddings/embeddings", 0),
    "intermediate_size": ("transformer_layer_0/feed_forward/intermediate/kernel", 1),
}
# The family's options in our layout: the projection of ALBERT and ELECTRA, present or not like the type
# embeddings (DistilBERT has none) and the pooler (DistilBERT and ELECTRA have none).
BERT_KERAS_PROJECTION = (
    ("encoder.embeddings.projection.kernel", "embeddings/projection/kernel", I),
    ("encoder.embeddings.projection.bias", "embeddings/projection/bias", I),
)
_BK_OPTIONAL_SIZES = ("type_vocab_size",)  # a size whose variable may be absent: 0 then
_BK_POOLER = "pooler_dense/kernel"
# The position table's first rows a module may skip (RoBERTa: padding index + 1 = 2). Its shape does not tell.
POSITION_OFFSETS = (0, 2)

# kind: (weight table, shape table, first query kernel of block i, pooler prefix)
LAYOUTS = {
    "model_garden": (MODEL_GARDEN_WEIGHTS, MODEL_GARDEN_SHAPES, _MG + "self_attention/query/kernel", "pooler_transform/"),
    "bert_keras": (BERT_KERAS_WEIGHTS, BERT_KERAS_SHAPES, _BK + "attention/query/kernel", "pooler_dense/"),
}


def is_hub_module(path):
    """Whether `path` is an encoder SavedModel, a directory with `encoder/` (and
    `preprocess/`) modules, a `.tar.gz` module or an http(s) handle."""
    path = os.fspath(path)
    if path.startswith(("http://", "https://")):
        return True
    if os.path.isfile(path):
        return path.endswith(ARCHIVE_SUFFIXES)
    return os.path.isfile(os.path.join(path, SAVED_MODEL_FILE)) or os.path.isfile(
        os.path.join(path, ENCODER_DIR, SAVED_MODEL_FILE)
    )


def _variable_name(name):
    return name.rsplit(":", 1)[0]  # "word_embeddings/embeddings:0" -> "word_embeddings/embeddings"


class ModuleSource(_Source):
    """The variables of a loaded SavedModel, by name without the `:0` suffix."""

    def __init__(self, module, directory):
        super().__init__({}, {})
        self.file = directory
        self.files = [directory]
        self._variables = {}
        for variable in getattr(module, "variables", ()):
            name = _variable_name(variable.name)
            if name in self._variables:  # e.g. two unnamed `Variable`s: neither is a weight we read
                continue
            self._variables[name] = variable
            self._add(name, directory, variable.name, variable.shape, _variable_name)

    def get(self, name):
        return self._variables[name].numpy()


def read_hub_module(path, *, do_lower_case=None, module=None):
    """Reads a TF Hub BERT encoder module: the candidate encoder configs, the weights, the vocabulary.

    Args:
        path: str. An encoder SavedModel directory, a directory holding
            `encoder/` and `preprocess/` (as `bert-keras convert` writes), a
            `.tar.gz` of a module, or an http(s) handle (fetched once into
            `$TFHUB_CACHE_DIR`).
        do_lower_case: optional bool. Overrides the module's `do_lower_case`
            (RoBERTa's byte-level BPE never lower-cases: always `False`).
        module: optional SavedModel object already loaded from the encoder
            module of `path` (e.g. a Hub layer's `resolved_object`), read as
            it is (its variables' current values) instead of loading the
            module again.

    Returns:
        `CheckpointWeights` with format `"hub_module"`, the candidate configs
        most likely first, and the module's outputs on a probe batch to
        compare a built encoder with (`difference`). `tokenizer_kind` is
        what the module's asset attributes name (the preprocess module's
        `assets/` files where the encoder has none): `"wordpiece"` (then
        `vocab_file` is the vocabulary), `"sentencepiece"` or `"byte_bpe"`.
        `tokenizer_folder` is `TOKENIZER_FOLDER` for a pair of
        `export_module_pair`: its `tokenizer_config.json` gives back the
        options the pair was written with (`do_lower_case`, `keep_accents`,
        `add_prefix_space`). A module without it (an older pair, one of
        `export_encoder` alone or of another exporter) is read from its
        assets' folder with the tokenizer's defaults: `do_lower_case` from
        the module's variable (else `True` for SentencePiece, else guessed
        from the vocabulary), `keep_accents` and `add_prefix_space` `False`.
        The `mlm` sub-object of a module is not read (its encoder is).

    Raises:
        CheckpointError: the module is not a BERT encoder this package can
            rebuild, has no tokenizer files, or its tokenizer's vocabulary
            (WordPiece tokens, SentencePiece pieces, BPE vocab.json) is not
            the size of its word embeddings (naming the file).
        ConfigError: the recorded `tokenizer_config.json` is not a JSON
            object of booleans (naming the file and the key).
    """
    directory, preprocess_dir = _module_dirs(resolve(os.fspath(path)))
    if module is None:
        try:
            module = load(directory)
        except (ValueError, RuntimeError, OSError) as error:
            raise CheckpointError(directory, None, f"cannot be loaded as a SavedModel ({error}).") from error
    source = ModuleSource(module, directory)
    layout = _layout(source, directory)
    table, shape_table, query_kernel, pooler_prefix = LAYOUTS[layout]
    config = _config(source, shape_table, query_kernel,
                     optional=_BK_OPTIONAL_SIZES if layout == "bert_keras" else ())
    kind, files = _tokenizer_files(module, directory, preprocess_dir)
    cls = tokenizer_class(kind)
    folder = _tokenizer_folder(directory, cls, files)
    options = _tokenizer_options(folder, cls)
    vocab_file = files["vocab_file"] if cls is WordPieceTokenizer else None  # read whatever its name
    check_tokenizer_size(kind, folder, vocab_file, directory, shape_table["vocab_size"][0], config["vocab_size"])
    do_lower_case = _do_lower_case(module, cls, options, vocab_file, do_lower_case)
    probe_inputs = _probe_inputs(config)
    expected = module(probe_inputs, training=False)
    if layout == "bert_keras":
        config = _family_options(source, config, num_outputs=len(expected.get("encoder_outputs", ())))
        table = _bert_keras_table(config)

    candidates = list(_candidates(config, layout, _graph_ops(directory)))
    recorded = _recorded_architecture(directory, config)
    if recorded is not None:
        candidates = [recorded] + [candidate for candidate in candidates if candidate != recorded]
    if layout == "bert_keras":
        candidates = _with_position_offsets(candidates, config["max_sequence_length"])
    weights = read_weights(
        format="hub_module", source=source, table=table,
        part_prefixes={tables.POOLER: pooler_prefix}, encoder_config=candidates[0],
        mlm_activation=candidates[0]["activation"], with_heads=False, ignored=_is_bookkeeping,
        hint=f" Is {directory} a BERT encoder module?", vocab_file=vocab_file, do_lower_case=bool(do_lower_case),
    )
    # The candidates differ in the head count, the activation and the position offset, on which no weight's
    # shape in our layout depends.
    return dataclasses.replace(
        weights,
        encoder_configs=candidates,
        difference=lambda encoder: _difference(encoder, probe_inputs, expected),
        tolerance=TOLERANCE,
        tokenizer_kind=kind,
        tokenizer_folder=folder,
    )


def _module_dirs(path):
    """`(encoder_dir, preprocess_dir or None)` for a module, a pair directory or an archive."""
    if os.path.isfile(path) and path.endswith(ARCHIVE_SUFFIXES):
        path = _extract(path)
    if os.path.isfile(os.path.join(path, ENCODER_DIR, SAVED_MODEL_FILE)):
        preprocess = os.path.join(path, PREPROCESS_DIR)
        return os.path.join(path, ENCODER_DIR), preprocess if os.path.isdir(preprocess) else None
    if not os.path.isfile(os.path.join(path, SAVED_MODEL_FILE)):
        raise CheckpointError(path, None, f"holds no {SAVED_MODEL_FILE} and no {ENCODER_DIR}/{SAVED_MODEL_FILE}; "
                              "it is not a TF Hub module.")
    sibling = os.path.join(os.path.dirname(os.path.abspath(path)), PREPROCESS_DIR)
    return path, sibling if os.path.isdir(sibling) else None


def _extract(archive):
    """The module in a `.tar.gz` archive, unpacked into the private Hub cache (`hub.loader.unpack_archive`)."""
    try:
        target = unpack_archive(archive)
    except (ValueError, OSError) as error:
        raise CheckpointError(archive, None, f"cannot be unpacked as a .tar.gz module ({error}).") from error
    entries = [name for name in os.listdir(target) if name != MARKER]
    if SAVED_MODEL_FILE not in entries and ENCODER_DIR not in entries and len(entries) == 1:
        return os.path.join(target, entries[0])  # the archive holds one top-level folder
    return target


def _layout(source, directory):
    for layout, (_, _, query_kernel, _) in LAYOUTS.items():
        if source.has(query_kernel.format(i=0)):
            return layout
    names = source.names()
    raise CheckpointError(
        directory,
        None,
        "is a SavedModel but not a BERT encoder module this package reads: no variable "
        f"{MODEL_GARDEN_SHAPES['num_heads'][0]!r} (Model Garden) or {BERT_KERAS_SHAPES['intermediate_size'][0]!r} "
        f"(bert_keras). Found {len(names)} variables{': ' + ', '.join(names[:5]) if names else ''}.",
    )


def _config(source, shape_table, query_kernel, optional=()):
    """The sizes the variables' shapes show; a size in `optional` whose variable is absent is 0."""
    config = {key: int(source.shape(name)[axis]) for key, (name, axis) in shape_table.items() if source.has(name)}
    config.update({key: 0 for key in optional if key not in config})
    missing = [name for key, (name, _) in shape_table.items() if key not in config]
    if missing:
        raise CheckpointError(source.file, missing[0], "missing from the module; it is needed to read the architecture.")
    num_layers = 0
    while source.has(query_kernel.format(i=num_layers)):
        num_layers += 1
    config.update(num_layers=num_layers, dropout=0.1, attention_dropout=0.1, layer_norm_epsilon=1e-12)
    return config


def _family_options(source, config, num_outputs):
    """`config` with the family options a module of our exporter shows by the variables it holds and its outputs."""
    options = {}
    if source.has(BERT_KERAS_PROJECTION[0][1]):  # ALBERT, ELECTRA: tables of embedding_size, mapped to hidden_size
        options.update(embedding_size=config["hidden_size"],
                       hidden_size=int(source.shape(BERT_KERAS_PROJECTION[0][1])[1]))
    if not source.has(_BK_POOLER):  # DistilBERT, ELECTRA: pooled_output is the first token's sequence output
        options["use_pooler"] = False
    if config["num_layers"] == 1 and num_outputs > 1:  # ALBERT: one block, called once for each of the outputs
        options.update(num_layers=num_outputs, shared_layers=True)
    return dict(config, **options)


def _bert_keras_table(config):
    """Our layout's table for the family options of `config`: projection, no type embeddings, one shared block."""
    embeddings = tuple(entry for entry in BERT_KERAS_WEIGHTS[tables.EMBEDDINGS]
                       if config["type_vocab_size"] or "type_embeddings" not in entry[0])
    if config.get("embedding_size") is not None:
        embeddings += BERT_KERAS_PROJECTION
    layer = BERT_KERAS_WEIGHTS[tables.LAYER]
    if config.get("shared_layers"):  # the one block, `transformer_layer_0`, read once (no `{i}`: held_blocks is None)
        layer = tuple((target.format(i=0), name.format(i=0), transform) for target, name, transform in layer)
    return dict(BERT_KERAS_WEIGHTS, **{tables.EMBEDDINGS: embeddings, tables.LAYER: layer})


def _with_position_offsets(candidates, rows):
    """Each candidate with its recorded position offset (else 0), then the other `POSITION_OFFSETS`, once each.

    `rows` is the position table's; `max_sequence_length` is what the offset leaves of it.
    """
    expanded = {}
    for candidate in candidates:
        first = candidate.get("position_offset", 0)
        for offset in dict.fromkeys((first,) + POSITION_OFFSETS):
            if offset < rows:
                config = dict(candidate, max_sequence_length=rows - offset)
                config.pop("position_offset", None)
                if offset:
                    config["position_offset"] = offset
                expanded.setdefault(tuple(sorted(config.items())), config)
    return list(expanded.values())


def _candidates(config, layout, ops):
    """Configs to try, most likely first: the head count (known, or hidden_size / 64 first) x the activation."""
    activations = ["gelu", "gelu_approximate", "relu"]
    if not ops & {"Erf", "Erfc"}:  # exact GELU is 0.5 x (1 + erf(x / sqrt 2)); Keras writes it with erfc(-x / sqrt 2)
        activations = ["gelu_approximate", "relu", "gelu"]
    if "num_heads" in config:
        heads = [config["num_heads"]]
    else:
        hidden = config["hidden_size"]
        heads = sorted((h for h in range(1, hidden + 1) if hidden % h == 0), key=lambda h: abs(hidden // h - 64))
    for num_heads in heads:
        for activation in activations:
            yield dict(config, num_heads=num_heads, activation=activation)


def _recorded_architecture(directory, config):
    """The config with the head count, activation and epsilon that bert_keras's exporter records, or None.

    A recorded `position_offset` (which the shapes do not show) is kept too. Only a candidate: the probe checks
    it like any other.
    """
    try:
        recorded = read_json(os.path.join(directory, ARCHITECTURE_FILE))
        heads, activation, epsilon = (recorded[key] for key in ("num_heads", "activation", "layer_norm_epsilon"))
        offset = recorded.get("position_offset", 0)
    # OSError: no such file; ValueError: not JSON, or not a regular file (`FileContentError`).
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    valid = (isinstance(heads, int) and heads > 0 and config["hidden_size"] % heads == 0
             and activation in ("gelu", "gelu_approximate", "relu") and isinstance(epsilon, float) and 0 < epsilon < 1)
    if not valid or config.get("num_heads", heads) != heads:
        return None
    architecture = dict(config, num_heads=heads, activation=activation, layer_norm_epsilon=epsilon)
    if isinstance(offset, int) and not isinstance(offset, bool) and 0 < offset < config["max_sequence_length"]:
        architecture["position_offset"] = offset
    return architecture


def _graph_ops(directory):
    """The op types used by the module's functions (read from saved_model.pb)."""
    from tensorflow.core.protobuf import saved_model_pb2  # the SavedModel proto; tf.saved_model has no public reader

    proto = saved_model_pb2.SavedModel()
    with open_regular_file(os.path.join(directory, SAVED_MODEL_FILE)) as f:
        proto.ParseFromString(f.read())
    return {node.op for graph in proto.meta_graphs for function in graph.graph_def.library.function
            for node in function.node_def}


def _is_bookkeeping(name):
    """The module's `do_lower_case` flag (named `Variable` by Model Garden's exporter) is not a weight."""
    return name in ("Variable", "do_lower_case")


# The name `bert_keras.export` imports.
tokenizer_kind = kind_of_assets


def _tokenizer_files(module, directory, preprocess_dir):
    """`(kind, {attribute: path})`: the tokenizer files the encoder module carries as assets, else the preprocess
    module's `assets/` files (read as files: that module is not loaded)."""
    attributes = {name for cls in TOKENIZER_CLASSES for name in cls.files
                  if hasattr(getattr(module, name, None), "asset_path")}
    kind = kind_of_assets(attributes)
    if kind is not None:
        files = {name: getattr(module, name).asset_path.numpy().decode("utf-8") for name in tokenizer_class(kind).files}
        if all(os.path.isfile(path) for path in files.values()):
            return kind, files
    if preprocess_dir is not None:
        assets = os.path.join(preprocess_dir, "assets")
        # The kind the encoder's attributes name, else any whose files are there (vocab.json before vocab.txt).
        candidates = ([tokenizer_class(kind)] if kind is not None
                      else sorted(TOKENIZER_CLASSES, key=lambda cls: -len(cls.files)))
        for cls in candidates:
            files = cls.folder_files(assets)
            if None not in files.values():
                return cls.kind, files
    raise CheckpointError(
        directory,
        None,
        "has no vocabulary: the encoder module has no vocab_file asset (nor sp_model_file, nor vocab_file with "
        "merges_file) whose file exists, and no preprocess module with assets/vocab.txt (or spiece.model, or "
        "vocab.json and merges.txt) sits next to it. Pass the directory that holds both encoder/ and preprocess/.",
    )


def _tokenizer_folder(directory, cls, files):
    """The folder the tokenizer is built from: the one our exporter writes beside the module (its files checked to be
    the module's own), else the folder of the module's assets, whose files must go by the names the tokenizer reads."""
    recorded = os.path.join(directory, TOKENIZER_FOLDER)
    if not os.path.isdir(recorded):
        folder = os.path.dirname(next(iter(files.values())))
        if cls is not WordPieceTokenizer:  # WordPiece is read from `vocab_file` itself, whatever its name
            found = cls.folder_files(folder)
            misnamed = [path for name, path in files.items() if found[name] != path]
            if misnamed:
                names = " and ".join(cls.files.values())
                raise CheckpointError(misnamed[0], None, f"is a file of the module's {cls.kind} tokenizer, but the "
                                      f"tokenizer reads its files as {names}, all in one folder.")
        return folder
    copies = cls.folder_files(recorded)
    for name, path in files.items():
        copy = copies[name]
        if copy is None:
            raise CheckpointError(recorded, None, f"has no {cls.files[name]}, a file of the module's "
                                  f"{cls.kind} tokenizer ({name}). The pair is incomplete: write it again.")
        if not _same_bytes(copy, path):
            raise CheckpointError(copy, None, f"differs from {path}, the {name} the module's graph tokenizes with: the "
                                  "pair was changed after it was written. Write it again.")
    return recorded


def _same_bytes(a, b):
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    with open_regular_file(a) as f, open_regular_file(b) as g:
        return f.read() == g.read()


def _tokenizer_options(folder, cls):
    """The options (`cls.options`) that `folder/tokenizer_config.json` records; {} without one."""
    try:
        return cls.config_options(folder)
    except TokenizerFileError as error:
        raise checkpoint_error(error) from error


def _do_lower_case(module, cls, options, vocab_file, override):
    """Byte-level BPE never lower-cases; else `override`, the recorded option, the module's variable, a guess from
    the WordPiece vocabulary, or (ALBERT's SentencePiece, which has none) its tokenizer's default, `True`."""
    if not cls.lower_cases():  # as the Hugging Face reader says of RoBERTa
        return False
    if override is not None:
        return bool(override)
    if "do_lower_case" in options:
        return options["do_lower_case"]
    variable = getattr(module, "do_lower_case", None)
    if variable is not None and hasattr(variable, "numpy"):
        return bool(variable.numpy())
    return guess_do_lower_case(read_vocabulary(vocab_file)) if vocab_file is not None else True


def _probe_inputs(config):
    """A fixed batch of two rows: two segments, then one with padding."""
    import tensorflow as tf  # the module is called with tensors

    # Short enough for every position offset tried (`max_sequence_length` here is the table's rows).
    length = max(1, min(12, config["max_sequence_length"] - max(POSITION_OFFSETS)))
    rng = np.random.default_rng(0)
    ids = rng.integers(min(5, config["vocab_size"] - 1), config["vocab_size"], size=(2, length))
    mask = np.ones((2, length), dtype=np.int32)
    mask[1, length // 2 + 1:] = 0
    types = np.zeros((2, length), dtype=np.int32)
    types[0, length // 2:] = 1 if config["type_vocab_size"] > 1 else 0
    arrays = {"input_word_ids": ids * mask, "input_mask": mask, "input_type_ids": types}
    return {key: tf.constant(arrays[key], tf.int32) for key in INPUT_KEYS}


def _difference(encoder, inputs, expected):
    """Largest difference of sequence (real positions) and pooled outputs, relative to the module's largest value."""
    ours = encoder(inputs, training=False)
    real = inputs["input_mask"].numpy().astype(bool)
    worst, scale = 0.0, 1e-6
    for key, where in (("sequence_output", real), ("pooled_output", slice(None))):
        theirs = np.asarray(expected[key])[where]
        worst = max(worst, float(np.max(np.abs(np.asarray(ours[key])[where] - theirs))))
        scale = max(scale, float(np.max(np.abs(theirs))))
    return worst / max(scale, 1.0)


def read_module_pair(out_dir):
    """`(encoder_dir, preprocess_dir)` of a whole pair written by `export_module_pair`, else None (read as data)."""
    marker = read_marker(out_dir)
    if marker is None or marker.get("kind") != "module_pair":
        return None
    return os.path.join(out_dir, ENCODER_DIR), os.path.join(out_dir, PREPROCESS_DIR)
