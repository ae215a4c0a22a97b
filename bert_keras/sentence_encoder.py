"""Sentence embeddings: the `SentenceEncoder` task, sentence-transformers folders read as data, semantic search.

`SentenceEncoder` is our `BertEncoder` (or a Hub encoder layer) and
`BertPreprocessor` followed by `SentencePooling`: raw strings in, one vector
per text out. `SentenceEncoder.from_checkpoint(folder)` reproduces a
sentence-transformers folder (`modules.json`: Transformer -> Pooling ->
Normalize, `1_Pooling/config.json`, `sentence_bert_config.json` and the
tokenizer's `model_max_length`), reading its files as data; the BERT weights
come through `bert_keras.checkpoints.load_checkpoint`.
Its export, a SavedModel from strings to embeddings, is
`bert_keras.export.export_sentence_encoder`. `write_embeddings` streams the
embeddings of a stream of texts into a `.npy` or `.jsonl` file,
`build_index` into an index directory, and `load_index(...).search` finds
the nearest texts of queries by exact cosine similarity.

Departure from DESIGN.md's layout (tasks/): the tasks module is being
reorganised, so the task and its folder reader live here for now.
"""

import contextlib
import dataclasses
import json
import logging
import math
import os
import reprlib
import shlex
import tempfile

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from bert_keras._checks import check_int, check_positive_int
from bert_keras._files import staged_directory
from bert_keras._task import Task, call_encoder, check_encoder, model_inputs
from bert_keras.checkpoints import ModuleRefusedError, holds_weights, load_checkpoint
from bert_keras.export.sentence_encoder import (
    BatchEmbedder,
    EmbeddingMethods,
    ExportedSentenceEncoder,
    describe_model,
    encode_in_batches,
    load_sentence_encoder,
)
from bert_keras.heads import POOLING_MODES, SentencePooling
from bert_keras.text import BertPreprocessor

logger = logging.getLogger(__name__)

__all__ = [
    "SentenceEncoder",
    "SentenceIndex",
    "SentenceTransformersConfig",
    "build_index",
    "load_index",
    "model_identity",
    "read_sentence_transformers_folder",
    "write_embeddings",
]

# sentence-transformers' names of the pooling modes (`pooling_mode` in 6.x, the legacy `pooling_mode_*_token(s)`
# booleans before), in the order its Pooling module concatenates the legacy ones.
_ST_MODES = {
    "cls": "cls",
    "max": "max",
    "mean": "mean",
    "mean_sqrt_len_tokens": "mean_sqrt_len",
    "weightedmean": "weighted_mean",
    "lasttoken": "last_token",
}
_ST_LEGACY_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
_ST_MODULES = ("Transformer", "Pooling", "Normalize")
# How a message quotes a value read from a file: cut short, so that a list of a million items is not the message.
_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 60


# === sentence-transformers folders, read as data ===


@dataclasses.dataclass(frozen=True)
class SentenceTransformersConfig:
    """What a sentence-transformers folder says about embedding a text.

    Attributes:
        transformer_path: str. The folder of the BERT checkpoint (the
            Transformer module's path: the folder itself, or e.g.
            `0_Transformer/` in older folders).
        pooling: tuple of str. Our names (`SentencePooling`) of the pooling
            modes, in the order their vectors are concatenated.
        normalize: bool. Whether a Normalize module follows the pooling.
        max_seq_length: int or None. `sentence_bert_config.json`'s
            `max_seq_length` (older folders); None when it is not set.
        do_lower_case: bool. `sentence_bert_config.json`'s `do_lower_case`.
        dimension: int or None. The Pooling module's embedding dimension.
    """

    transformer_path: str
    pooling: tuple
    normalize: bool
    max_seq_length: object
    do_lower_case: bool
    dimension: object


def _read_json(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{path} is missing: the sentence-transformers folder's {what} is needed.") from None
    # ValueError: not JSON, or an integer of more than 4,300 digits; RecursionError: arrays nested too deep.
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ValueError(f"{path} cannot be read as JSON ({error}): the sentence-transformers folder's {what}.") from None


def _json_object(value, path):
    if not isinstance(value, dict):
        raise ValueError(f"{path} must hold a JSON object. Received: {type(value).__name__}")
    return value


def _is_bool(value):
    return isinstance(value, bool)


def _is_int(value, minimum):
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _config_field(config, key, path, expected, accepts):
    """`config[key]` (None when absent or null), refused unless `accepts(value)`: a `ValueError` naming file and field.

    Every field is checked by type before it is used, so that a value of the
    wrong kind (a list where a name goes) is a message, not a `TypeError`.
    """
    value = config.get(key)
    if value is not None and not accepts(value):
        raise ValueError(f"{path}: `{key}` must be {expected}. Received: {key}={_SHOWN.repr(value)}")
    return value


def _module_kind(entry, path):
    """`"Transformer"`, `"Pooling"` or `"Normalize"` for an entry of `modules.json`; anything else is refused."""
    kind = entry.get("type") if isinstance(entry, dict) else None
    name = kind.rsplit(".", 1)[-1] if isinstance(kind, str) else None
    if not isinstance(kind, str) or not kind.startswith("sentence_transformers.") or name not in _ST_MODULES:
        raise ValueError(
            f"{path} lists the module {kind or entry!r}: SentenceEncoder reproduces Transformer -> Pooling "
            "[-> Normalize] only (sentence-transformers' own modules)."
        )
    if not isinstance(entry.get("path", ""), str):
        raise ValueError(f"{path}: the {name} module's `path` must be a string. Received: {entry.get('path')!r}")
    return name


def _pooling_modes(config, path):
    """Our pooling mode names from a Pooling module's config (`pooling_mode`, or the legacy booleans)."""
    if "pooling_mode" in config:
        given = config["pooling_mode"]
        names = [given] if isinstance(given, str) else given
        if not isinstance(names, list) or not names or not all(isinstance(name, str) for name in names):
            raise ValueError(f"{path}: `pooling_mode` must be a mode's name or a non-empty list of names. "
                             f"Received: pooling_mode={_SHOWN.repr(given)}")
        key = "pooling_mode"
    else:
        flags = {legacy: _config_field(config, legacy, path, "true or false", _is_bool) for legacy in _ST_LEGACY_KEYS}
        names = [mode for legacy, mode in _ST_LEGACY_KEYS.items() if flags[legacy]] or ["mean"]
        key = "pooling_mode_*"
    unknown = [name for name in names if name not in _ST_MODES]
    if unknown:
        raise ValueError(
            f"{path}: `{key}` names the pooling mode(s) {unknown!r}, which do not exist. sentence-transformers' "
            f"modes are {list(_ST_MODES)}."
        )
    return tuple(_ST_MODES[name] for name in names)


def _inside(folder, relative, modules_file):
    """`folder/relative`, refused unless it stays inside `folder` (no absolute path, no `..`, no link out)."""
    if not isinstance(relative, str) or os.path.isabs(relative):
        raise ValueError(f"{modules_file}: a module path must be relative to the folder. Received: {relative!r}")
    target = os.path.join(folder, relative)
    root = os.path.realpath(folder)
    if os.path.realpath(target) != root and not os.path.realpath(target).startswith(root + os.sep):
        raise ValueError(f"{modules_file}: the module path {relative!r} leads outside {folder!r}.")
    return target


def read_sentence_transformers_folder(path):
    """Reads the description of a sentence-transformers folder; None when `path` has no `modules.json`.

    Only the files are read (JSON), nothing is imported or run:
    `modules.json` (a Transformer module, then Pooling, then optionally
    Normalize), the Pooling module's `config.json` (`pooling_mode`, or the
    older `pooling_mode_*_token(s)` booleans: none set means mean, as
    sentence-transformers reads it) and `sentence_bert_config.json`
    (`max_seq_length`, `do_lower_case`; optional).

    Args:
        path: str. The folder.

    Returns:
        A `SentenceTransformersConfig`, or None.

    Raises:
        ValueError: naming the file and what is wrong in it: a module other
            than Transformer / Pooling / Normalize (e.g. a Dense layer), a
            missing Pooling module or config, a pooling mode that does not
            exist, JSON that cannot be read.

    Example:
    >>> from bert_keras.text.corpora import minilm_vocab_path  # all-MiniLM-L6-v2, from the test extra
    >>> config = read_sentence_transformers_folder(os.path.dirname(minilm_vocab_path()))
    >>> config.pooling, config.normalize, config.max_seq_length
    (('mean',), True, 256)
    """
    path = os.fspath(path)
    modules_file = os.path.join(path, "modules.json")
    if not os.path.isfile(modules_file):
        return None
    modules = _read_json(modules_file, "list of modules")
    if not isinstance(modules, list):
        raise ValueError(f"{modules_file} must hold a list of modules. Received: {type(modules).__name__}")
    kinds = [_module_kind(entry, modules_file) for entry in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise ValueError(
            f"{modules_file} lists the modules {kinds}: SentenceEncoder reproduces Transformer -> Pooling [-> Normalize]."
        )
    transformer_path = _inside(path, modules[0].get("path", ""), modules_file)
    if not holds_weights(transformer_path):
        # A folder read as data never runs a graph: its Transformer must be weights, not a SavedModel.
        raise ValueError(f"{modules_file}: the Transformer module {transformer_path!r} holds no BERT weights (config.json "
                         "with model.safetensors or pytorch_model.bin); a SavedModel there is never loaded.")
    pooling_file = os.path.join(_inside(path, modules[1].get("path", ""), modules_file), "config.json")
    pooling = _json_object(_read_json(pooling_file, "pooling configuration"), pooling_file)
    dimensions = [_config_field(pooling, key, pooling_file, "a positive integer", lambda value: _is_int(value, 1))
                  for key in ("embedding_dimension", "word_embedding_dimension")]  # sentence-transformers 6, older
    if len(modules) == 3:
        normalize_file = os.path.join(_inside(path, modules[2].get("path", ""), modules_file), "config.json")
        if os.path.isfile(normalize_file):
            normalized = _json_object(_read_json(normalize_file, "Normalize configuration"), normalize_file)
            for key in ("module_input_name", "module_output_name"):  # the output name defaults to the input's
                _config_field(normalized, key, normalize_file, "'sentence_embedding' (only the normalisation of the "
                              "sentence embedding is reproduced)", lambda value: value == "sentence_embedding")
    bert_config_file = os.path.join(transformer_path, "sentence_bert_config.json")
    bert_config = (_json_object(_read_json(bert_config_file, "Transformer configuration"), bert_config_file)
                   if os.path.isfile(bert_config_file) else {})
    return SentenceTransformersConfig(
        transformer_path=transformer_path,
        pooling=_pooling_modes(pooling, pooling_file),
        normalize=len(modules) == 3,
        max_seq_length=_config_field(bert_config, "max_seq_length", bert_config_file, "an integer >= 3",
                                     lambda value: _is_int(value, 3)),
        do_lower_case=bool(_config_field(bert_config, "do_lower_case", bert_config_file, "true or false", _is_bool)),
        dimension=next((dimension for dimension in dimensions if dimension is not None), None),
    )


def _tokenizer_max_length(folder):
    """`model_max_length` of a Hugging Face folder's `tokenizer_config.json`, or None."""
    path = os.path.join(folder, "tokenizer_config.json")
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f).get("model_max_length")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    if isinstance(value, float) and math.isfinite(value):  # 1e400 reads as inf, which has no int
        value = int(value)
    return value if _is_int(value, 3) else None


def _tokenizer_json_vocabulary(folder):
    """`(tokens, lower_case)` of a BERT WordPiece `tokenizer.json` (transformers 5 saves no vocab.txt), or None.

    Only BERT's own tokenizer is taken: a `BertNormalizer` that strips
    accents exactly when it lower-cases (uncased or cased BERT), the
    `BertPreTokenizer` and a WordPiece model with `##` pieces and ids
    0..n-1; anything else is refused with a `ValueError`.
    """
    path = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(path):
        return None
    tokenizer = _read_json(path, "tokenizer")
    model = tokenizer.get("model") if isinstance(tokenizer, dict) else None
    normalizer = tokenizer.get("normalizer") if isinstance(tokenizer, dict) else None
    pre_tokenizer = tokenizer.get("pre_tokenizer") if isinstance(tokenizer, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    lower_case = normalizer.get("lowercase") if isinstance(normalizer, dict) else None
    strip_accents = normalizer.get("strip_accents") if isinstance(normalizer, dict) else None
    ids = sorted(vocab.values()) if isinstance(vocab, dict) and all(_is_int(i, 0) for i in vocab.values()) else None
    if (
        not isinstance(model, dict) or model.get("type") != "WordPiece" or model.get("continuing_subword_prefix", "##") != "##"
        or not isinstance(normalizer, dict) or normalizer.get("type") != "BertNormalizer" or not isinstance(lower_case, bool)
        or strip_accents not in (None, lower_case)
        or not isinstance(pre_tokenizer, dict) or pre_tokenizer.get("type") != "BertPreTokenizer"
        or ids != list(range(len(ids or [])))
    ):
        raise ValueError(
            f"{path} is not BERT's WordPiece tokenizer (BertNormalizer, BertPreTokenizer, WordPiece with '##' "
            "pieces and ids 0..n-1), and the folder has no vocab.txt: put the model's vocab.txt next to its weights."
        )
    tokens = [None] * len(ids)
    for token, index in vocab.items():
        tokens[index] = token
    return tokens, lower_case


# === The task ===


@keras.saving.register_keras_serializable(package="bert_keras")
class TrimPadding(keras.layers.Layer):
    """The Hub input dict cut after the batch's longest row: padding columns change no real token's output.

    A preprocessor packs every text to its full length (e.g. 256 tokens);
    tweets fill a sixth of that. Attention ignores padding exactly (its
    weights are zero), so cutting it gives the same outputs for less work,
    as sentence-transformers pads each batch to its longest text only.

    Call arguments:
        inputs: the Hub input dict of int32 `(batch, seq)` tensors.

    Returns:
        The same dict, `(batch, longest)`, at least one column.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.built = True

    def call(self, inputs):
        lengths = ops.sum(ops.cast(ops.not_equal(inputs["input_mask"], 0), "int32"), axis=1)  # (batch,)
        longest = ops.max(ops.concatenate([lengths, ops.ones((1,), "int32")]))  # at least 1, for an empty batch too
        return {key: value[:, :longest] for key, value in inputs.items()}  # (batch, longest)

    def compute_output_spec(self, inputs):
        return {key: keras.KerasTensor((value.shape[0], None), dtype=value.dtype) for key, value in inputs.items()}


@keras.saving.register_keras_serializable(package="bert_keras")
class SentenceEncoder(EmbeddingMethods, Task):
    """Sentence embeddings: an encoder, its preprocessor, and `SentencePooling` over the token vectors.

    Texts are packed by the preprocessor (at its `seq_length`: longer texts
    are cut there, `[CLS]` and `[SEP]` included, as sentence-transformers
    cuts at `max_seq_length`), the padding after a batch's longest text is
    cut, the encoder gives the token vectors (`sequence_output`) and the
    pooling one vector per text (mean over the real tokens, `[CLS]`, max,
    ...; optionally L2-normalised). The embedding is float32 whatever the
    encoder computes in.

    Args:
        encoder: `BertEncoder` or a layer with the Hub dict in and out (e.g.
            `bert_keras.hub.KerasLayer`). Reachable as `.encoder`.
        preprocessor: optional `BertPreprocessor` or Hub preprocess layer;
            the model then takes raw strings. Its `seq_length` is the maximum
            length of a text in tokens. Defaults to `None` (the Hub input dict).
        pooling: str or list of str. A mode of `SentencePooling` (`"mean"`,
            `"cls"`, `"max"`, `"mean_sqrt_len"`, `"weighted_mean"`,
            `"last_token"`), or several, concatenated. Defaults to `"mean"`.
        normalize: bool. L2-normalise the embeddings. Defaults to `False`.
        **kwargs: other `keras.Model` arguments (`name`, ...).

    Call arguments:
        inputs: strings with a preprocessor (a `(batch,)` string tensor, a
            list of str or a numpy array of them: Keras' `predict`, `fit` and
            `__call__` take each); else the Hub input dict.

    Returns:
        float32 embeddings `(batch, dim)`: `dim` is the encoder's hidden size
        times the number of pooling modes.

    Example:
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "day"] + [f"w{i}" for i in range(92)]
    >>> encoder = BertEncoder(vocab_size=100, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32)
    >>> model = SentenceEncoder(encoder, BertPreprocessor(vocab, seq_length=16), pooling="mean", normalize=True)
    >>> vectors = model.encode(["good day", "bad day", ""])
    >>> vectors.shape, vectors.dtype
    ((3, 16), dtype('float32'))
    >>> model.similarity(vectors[:1], vectors).shape
    (1, 3)
    >>> bool(np.allclose(model.predict(["good day", "bad day", ""], verbose=0), vectors, atol=1e-6))
    True
    """

    _own_args = ("pooling", "normalize")

    def __init__(self, encoder, preprocessor=None, pooling="mean", normalize=False, **kwargs):
        check_encoder(encoder)
        # === Layers ===
        trim = TrimPadding(name="trim_padding")
        # float32: the means and norms of a bfloat16 encoder's vectors are taken in float32.
        pooling_layer = SentencePooling(pooling, normalize=normalize, dtype="float32", name="pooling")
        # === Functional model ===
        inputs, packed = model_inputs(preprocessor)
        packed = trim(packed)
        sequence_output = call_encoder(encoder, packed, "sequence_output")["sequence_output"]  # (batch, seq, hidden)
        outputs = pooling_layer(sequence_output, packed["input_mask"])  # (batch, dim)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        # === Config ===
        self.encoder = encoder
        self.preprocessor = preprocessor
        self.pooling_layer = pooling_layer
        self.pooling = pooling if isinstance(pooling, str) else list(pooling)
        self.normalize = normalize
        self.source = None  # the checkpoint `from_checkpoint` read (not part of the config)
        self._embedder = None  # a BatchEmbedder, made by the first `encode`

    @property
    def embedding_dim(self):
        """The length of an embedding."""
        return int(self.outputs[0].shape[-1])

    @property
    def max_seq_length(self):
        """The longest text in tokens (`[CLS]` and `[SEP]` included); None without a preprocessor."""
        return getattr(self.preprocessor, "seq_length", None)

    @classmethod
    def from_checkpoint(cls, path, *, pooling=None, normalize=None, max_seq_length=None, dtype=None, allow_modules=True,
                        **kwargs):
        """A sentence encoder as a sentence-transformers folder describes it, or a BERT checkpoint with a pooling.

        A sentence-transformers folder (`modules.json`: Transformer ->
        Pooling [-> Normalize]) is reproduced exactly: its pooling modes, its
        normalisation, and its maximum length (`sentence_bert_config.json`'s
        `max_seq_length`, else the tokenizer's `model_max_length`, at most the
        encoder's positions; as sentence-transformers reads them). Any other
        checkpoint `bert_keras.checkpoints.load_checkpoint` reads needs
        `pooling=`. Arguments given here override what the folder says.

        Args:
            path: str. A sentence-transformers folder or a BERT checkpoint.
            pooling: optional str or list of str. The pooling mode(s)
                (`SentencePooling`). Required without a sentence-transformers
                configuration.
            normalize: optional bool. Defaults to whether the folder lists a
                Normalize module (False for a plain checkpoint).
            max_seq_length: optional int. The longest text in tokens.
            dtype: optional dtype policy of the encoder (e.g. `"mixed_bfloat16"`).
            allow_modules: bool. Whether `path` may be a TF Hub module,
                whose graph runs when it is loaded. `False` for a path that
                came from data (`load_embedding_model`): only weights are
                read. The Transformer a sentence-transformers folder names
                is always read as weights. Defaults to `True`.
            **kwargs: other `keras.Model` arguments (`name`, ...).

        Returns:
            A `SentenceEncoder` taking raw strings; `.source` is `path`.

        Raises:
            ValueError: a folder without pooling configuration and no
                `pooling=`, a pooling mode that does not exist, a module
                other than Transformer / Pooling / Normalize, an embedding
                dimension other than the encoder's, a length beyond the
                encoder's positions.
            CheckpointError: from `load_checkpoint`, for the weights
                (`ModuleRefusedError`: a module, with `allow_modules=False`).

        Example:
        >>> from bert_keras.text.corpora import minilm_vocab_path  # all-MiniLM-L6-v2, from the test extra
        >>> model = SentenceEncoder.from_checkpoint(os.path.dirname(minilm_vocab_path()))
        >>> model.pooling, model.normalize, model.max_seq_length, model.embedding_dim
        ('mean', True, 256, 384)
        """
        path = os.fspath(path)
        folder = read_sentence_transformers_folder(path)
        if folder is None and pooling is None:
            raise ValueError(
                f"{path!r} has no sentence-transformers configuration (modules.json with a Pooling module and its "
                f"1_Pooling/config.json), so how to pool its token vectors is unknown. Pass `pooling=` (one of "
                f"{list(POOLING_MODES)}; sentence-transformers' default is 'mean'), e.g. "
                "SentenceEncoder.from_checkpoint(path, pooling='mean'); on the command line: --pooling mean."
            )
        if pooling is None:
            pooling = folder.pooling[0] if len(folder.pooling) == 1 else list(folder.pooling)
        SentencePooling(pooling)  # checks the mode(s) before the weights are read
        if normalize is None:
            normalize = folder.normalize if folder is not None else False
        # A folder's Transformer is a path modules.json records: data, read as weights only, whoever named the folder.
        loaded = load_checkpoint(folder.transformer_path if folder else path, with_heads=False, dtype=dtype,
                                 allow_modules=allow_modules and folder is None)
        encoder = loaded.encoder
        vocabulary, lower_case = loaded.vocab_file, loaded.do_lower_case
        if vocabulary is None:
            from_json = _tokenizer_json_vocabulary(folder.transformer_path if folder else path)
            if from_json is None:
                raise ValueError(f"The checkpoint at {path!r} has no vocabulary (vocab.txt or tokenizer.json): put the "
                                 "model's vocab.txt next to its weights.")
            vocabulary, lower_case = from_json
            if len(vocabulary) != encoder.vocab_size:
                raise ValueError(f"The tokenizer.json of {path!r} has {len(vocabulary)} tokens, but the encoder's "
                                 f"word embeddings have {encoder.vocab_size} rows: they do not belong together.")
        if folder is not None and folder.do_lower_case and not lower_case:
            raise ValueError(
                f"{os.path.join(folder.transformer_path, 'sentence_bert_config.json')} sets do_lower_case for a cased "
                "vocabulary; lower-casing the text before a cased tokenizer is not reproduced."
            )
        if folder is not None and folder.dimension is not None and folder.dimension != encoder.hidden_size:
            raise ValueError(
                f"The pooling configuration of {path!r} says embedding_dimension={folder.dimension}, but the encoder's "
                f"hidden size is {encoder.hidden_size}: the folder's modules do not belong together."
            )
        if max_seq_length is None:
            max_seq_length = folder.max_seq_length if folder is not None else None
        if max_seq_length is None:
            tokenizer_max = _tokenizer_max_length(folder.transformer_path if folder else path)
            max_seq_length = min(encoder.max_sequence_length, tokenizer_max or encoder.max_sequence_length)
        check_int("max_seq_length", max_seq_length, minimum=3)
        if max_seq_length > encoder.max_sequence_length:
            raise ValueError(
                f"Received an invalid value for argument `max_seq_length`, expected at most the encoder's "
                f"max_sequence_length={encoder.max_sequence_length}. Received: max_seq_length={max_seq_length}"
            )
        preprocessor = BertPreprocessor(vocabulary, lower_case=lower_case, seq_length=max_seq_length, name="preprocessor")
        model = cls(encoder, preprocessor=preprocessor, pooling=pooling, normalize=normalize, **kwargs)
        model.source = path
        return model

    def encode(self, texts, batch_size=32):
        """Embeddings of texts, as `SentenceTransformer.encode` gives them.

        Args:
            texts: a str, a list of str, or a 1-D numpy array of strings.
            batch_size: int. Texts per batch of the model; texts of similar
                lengths are batched together (longest first), two batches
                run at once (`export.sentence_encoder.BATCHES_PER_CALL`),
                and the rows are put back in input order. Defaults to `32`.

        Returns:
            float32 numpy array `(len(texts), dim)` in input order;
            `(dim,)` for a single str.
        """
        if self.preprocessor is None:
            raise ValueError(
                "This SentenceEncoder has no preprocessor, so it cannot take text: build it with `preprocessor=`, "
                "or call it on the Hub input dict."
            )
        if self._embedder is None:
            self._embedder = BatchEmbedder(lambda texts: tf.cast(self(texts, training=False), tf.float32))
        return encode_in_batches(texts, batch_size, self.embedding_dim, self._embedder)

    def predict(self, x, *args, **kwargs):
        """Keras' `predict`; an empty list of texts gives a `(0, dim)` array (Keras fails on no batch)."""
        if isinstance(x, (list, tuple, np.ndarray)) and len(x) == 0:
            return np.zeros((0, self.embedding_dim), dtype="float32")
        return super().predict(x, *args, **kwargs)


# === Embedding files and the index: streamed, bounded memory, whole or not at all ===

INDEX_FORMAT = "bert_keras.sentence_index"
INDEX_KIND = "sentence_index"
INDEX_FILE = "index.json"
VECTORS_FILE = "vectors.npy"
TEXTS_FILE = "texts.jsonl"
# Embedded with every index: a query model that gives another vector for it is another model.
PROBE_TEXT = "bert-keras index probe: is this the model that wrote the index?"
_PROBE_TOLERANCE = 1e-4
_ROWS_PER_CHUNK = 65536  # rows of the vectors read at a time (searching, copying, checking): 100 MB at dim 384


def model_identity(model):
    """What an index records of the model that wrote it: a `SentenceEncoder`'s source, pooling, normalisation,
    maximum length and dimension, or for a loaded export its directory (`export`) and its recorded description."""
    if isinstance(model, ExportedSentenceEncoder):
        return dict(model.info, export=os.path.abspath(model.export_dir))
    return describe_model(model)


def load_embedding_model(identity, recorded_in=INDEX_FILE):
    """The model an index names (`model_identity`), read only as weights: an index is data, never a module to run.

    A recorded checkpoint is read as weights (Hugging Face, sentence-transformers,
    Google BERT, keras-nlp), configured as it was. A recorded export, or a
    source that is a TF Hub module, is a SavedModel whose graph runs when it
    is loaded: it is refused, with the flag that loads it when the user names
    it (`--model` / `--checkpoint`; in Python `load_sentence_encoder`,
    `SentenceEncoder.from_checkpoint`).

    Args:
        identity: dict. What the index records of its model (`SentenceIndex.model`).
        recorded_in: str. The file the record came from, named in messages.

    Raises:
        ModuleRefusedError: the record names an export or a module.
        ValueError: the record names no model, or has fields of the wrong type.
    """
    export, source = identity.get("export"), identity.get("source")
    if export:
        raise ModuleRefusedError(
            recorded_in, None, f"records the export {_shown_path(export)} as the model that wrote the index. An export "
            "is a SavedModel, whose graph runs when it is loaded, and an index is data: the model it records is read "
            "only as weights, never loaded as a graph. If you trust that export, pass it yourself: --model "
            f"{_shown_path(export)} (in Python: load_sentence_encoder(path)).")
    if not source:
        raise ValueError(f"{recorded_in} names no model it could load (it was written by a model built in Python).")
    pooling, normalize, length = identity.get("pooling"), identity.get("normalize"), identity.get("max_seq_length")
    modes = [pooling] if isinstance(pooling, str) else pooling
    if not (isinstance(source, str) and isinstance(modes, list) and modes and all(isinstance(m, str) for m in modes)
            and isinstance(normalize, bool) and (length is None or type(length) is int)):
        raise ValueError(
            f"{recorded_in} records its model as {json.dumps(identity, default=str)[:300]}; expected a string `source`, a "
            "`pooling` mode (a string or a list of strings), a boolean `normalize` and an integer (or null) "
            "`max_seq_length`: the index is damaged; build it again.")
    try:
        return SentenceEncoder.from_checkpoint(source, pooling=pooling, normalize=normalize, max_seq_length=length,
                                               allow_modules=False)
    except ModuleRefusedError:
        # The flags that rebuild the recorded model from the module, so that the probe check passes when it is that model.
        flags = (f"--checkpoint {_shown_path(source)} --pooling {_shown_path(','.join(modes))}"
                 + (" --normalize" if normalize else "") + ("" if length is None else f" --max-seq-length {length}"))
        raise ModuleRefusedError(
            recorded_in, None, f"records {_shown_path(source)} as the source of its model, and it is (or names) a TF "
            "Hub module: a SavedModel, whose graph runs when it is loaded. An index is data: the model it records is "
            "read only as weights (a Hugging Face, sentence-transformers, Google BERT or keras-nlp checkpoint), never "
            f"loaded as a graph. If you trust that module, pass it yourself: {flags} (in Python: "
            "SentenceEncoder.from_checkpoint(path, ...)).") from None


def _shown_path(path):
    """A recorded path as a message shows it: ready to paste into a shell, or escaped when it holds control characters
    (a path read from a file must not drive the terminal it is printed on)."""
    path = str(path)
    return shlex.quote(path) if path.isprintable() else ascii(path)


def _chunks(texts, size):
    chunk = []
    for text in texts:
        chunk.append(text)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _embed_stream(model, texts, batch_size, progress):
    """`(texts, vectors)` per chunk of a stream of texts: sixteen batches at a time, sorted by length within."""
    check_positive_int("batch_size", batch_size)
    done = 0
    for chunk in _chunks(texts, 16 * batch_size):
        vectors = np.asarray(model.encode(chunk, batch_size=batch_size), dtype="float32")
        done += len(chunk)
        if progress is not None:
            progress(done)
        yield chunk, vectors


def _npy_from_raw(raw_path, npy_path, rows, dimension):
    """Writes `rows x dimension` float32 values of a raw file as a `.npy` file, a chunk at a time."""
    target = np.lib.format.open_memmap(npy_path, mode="w+", dtype="float32", shape=(rows, dimension))
    if rows:
        source = np.memmap(raw_path, dtype="float32", mode="r", shape=(rows, dimension))
        for start in range(0, rows, _ROWS_PER_CHUNK):
            target[start : start + _ROWS_PER_CHUNK] = source[start : start + _ROWS_PER_CHUNK]
        del source
    target.flush()
    del target


def _write_stream(model, texts, directory, name, kind, batch_size, progress):
    """Streams the embeddings of `texts` into `directory/name` (`.npy` or `.jsonl`), and the texts into
    `directory/texts.jsonl` for an index; returns the number of texts."""
    path = os.path.join(directory, name)
    raw = path + ".raw"
    count = 0
    with open(path if kind == "jsonl" else raw, "wb") as out, (
        open(os.path.join(directory, TEXTS_FILE), "w", encoding="utf-8") if kind == "index" else contextlib.nullcontext()
    ) as text_out:
        for chunk, vectors in _embed_stream(model, texts, batch_size, progress):
            if kind == "jsonl":
                out.write("".join(json.dumps({"text": t, "embedding": v.tolist()}, ensure_ascii=False) + "\n"
                                  for t, v in zip(chunk, vectors)).encode("utf-8"))
            else:
                out.write(vectors.tobytes())
            if text_out is not None:
                text_out.write("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in chunk))
            count += len(chunk)
    if kind != "jsonl":
        _npy_from_raw(raw, path, count, model.embedding_dim)
        os.remove(raw)
    return count


def write_embeddings(model, texts, out, batch_size=32, progress=None):
    """Writes the embeddings of a stream of texts to a new `.npy` or `.jsonl` file, whole or not at all.

    The texts are read and embedded a few batches at a time (memory does not
    grow with their number); the file is written under a hidden temporary
    name next to `out` and linked into place at the end: nothing appears at
    `out` if anything fails (a bad input record, a full disk), and an
    existing file is never replaced.

    Args:
        model: a `SentenceEncoder` or a loaded export (anything with
            `encode(texts, batch_size)` and `embedding_dim`).
        texts: an iterable of str, read once, in order (a blank text is
            embedded too, so that rows line up with the input).
        out: str. `FILE.npy` (a float32 `(n, dim)` array) or `FILE.jsonl`
            (one `{"text": ..., "embedding": [...]}` per line).
        batch_size: int. Texts per model call. Defaults to `32`.
        progress: optional callable, called with the number of texts done.

    Returns:
        The number of texts embedded.

    Raises:
        FileExistsError: `out` exists (checked first, and again at the end).
        ValueError: `out` ends neither in `.npy` nor in `.jsonl`.
    """
    out = os.fspath(out)
    kind = os.path.splitext(out)[1].lower().lstrip(".")
    if kind not in ("npy", "jsonl"):
        raise ValueError(f"Received an invalid value for `out`, expected a .npy or .jsonl file. Received: out={out!r}")
    if os.path.lexists(out):
        raise FileExistsError(f"{out!r} exists; it is never replaced. Pick another name, or remove it yourself.")
    parent = os.path.dirname(os.path.abspath(out))
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.partial-", dir=parent)
    try:
        count = _write_stream(model, texts, staging, os.path.basename(out), kind, batch_size, progress)
        os.link(os.path.join(staging, os.path.basename(out)), out)  # fails, replacing nothing, if `out` appeared
    finally:
        for name in os.listdir(staging):
            os.remove(os.path.join(staging, name))
        os.rmdir(staging)
    return count


def build_index(model, texts, index_dir, batch_size=32, overwrite=False, input_name=None, progress=None):
    """Embeds a stream of texts into an index directory for `load_index(...).search`, whole or not at all.

    The directory holds `vectors.npy` (float32 `(n, dim)`, the model's
    embeddings as `encode` gives them), `texts.jsonl` (one JSON string per
    line, in order) and `index.json` (count, dimension, the model that wrote
    it (`model_identity`), and the embedding of a probe text, by which a
    query model is checked to be the same model). It is written through
    `bert_keras._files.staged_directory`: a failure leaves `index_dir` as
    it was.

    Args:
        model: a `SentenceEncoder` or a loaded export.
        texts: an iterable of str, read once, in order.
        index_dir: str. The index directory.
        batch_size: int. Texts per model call. Defaults to `32`.
        overwrite: bool. Replace an earlier index (or output) of this package. Defaults to `False`.
        input_name: optional str. What the texts came from, recorded in `index.json`.
        progress: optional callable, called with the number of texts done.

    Returns:
        The `SentenceIndex`.
    """
    index_dir = os.fspath(index_dir)
    identity = model_identity(model)
    probe = np.asarray(model.encode([PROBE_TEXT]), dtype="float32")[0]
    with staged_directory(index_dir, overwrite, kind=INDEX_KIND, argument="index directory") as staging:
        count = _write_stream(model, texts, staging, VECTORS_FILE, "index", batch_size, progress)
        with open(os.path.join(staging, INDEX_FILE), "w", encoding="utf-8") as f:
            json.dump({
                "format": INDEX_FORMAT, "version": 1, "count": count, "dimension": model.embedding_dim,
                "model": identity, "input": input_name, "probe": {"text": PROBE_TEXT, "embedding": probe.tolist()},
            }, f, indent=2, ensure_ascii=False)
    return load_index(index_dir)


class SentenceIndex:
    """An index directory written by `build_index`, checked as it is opened; exact cosine search over it.

    Args:
        index_dir: str.

    Attributes:
        count: int. The number of texts.
        dimension: int. The length of an embedding.
        model: dict. The model that wrote it (`model_identity`).
        texts: list of str, in index order.
        vectors: float32 `(count, dimension)` array, read from disk as needed (a memory map).

    Raises:
        ValueError: naming the file and what is wrong: no `index.json` of
            this format, a vectors file that cannot be read, of another
            shape or dtype, or with values that are not finite, a probe
            embedding that is not `dimension` finite numbers, a texts file
            of another length.
    """

    def __init__(self, index_dir):
        self.index_dir = os.fspath(index_dir)
        info_path = os.path.join(self.index_dir, INDEX_FILE)
        try:
            with open(info_path, encoding="utf-8") as f:
                info = json.load(f)
            if not isinstance(info, dict) or info.get("format") != INDEX_FORMAT:
                raise ValueError(f"it is not a {INDEX_FORMAT} description")
            self.count = check_int("count", info["count"], minimum=0)
            self.dimension = check_positive_int("dimension", info["dimension"])
            self.model = dict(info["model"])
            probe = info["probe"]["embedding"]
        except FileNotFoundError:
            raise ValueError(f"{self.index_dir!r} is not an index written by bert-keras index (no {INDEX_FILE}).") from None
        except (OSError, ValueError, TypeError, KeyError, RecursionError) as error:
            raise ValueError(f"{info_path} cannot be read as an index description ({error}).") from None
        # The probe is what tells the index's model from another (`check_model`): a NaN compares as no difference
        # and an empty or shorter one does not compare at all, so either would let any model search the index.
        self._probe = self._read_probe(probe, info_path)
        self.vectors = self._read_vectors()
        self.texts = self._read_texts()

    def _read_probe(self, probe, info_path):
        """The probe embedding of `index.json`: `dimension` finite float32 numbers, or a ValueError naming the file."""
        try:
            with np.errstate(over="ignore"):  # a number beyond float32 becomes inf, refused below with a message
                array = np.asarray(probe, dtype="float32")  # (dimension,)
        except (ValueError, TypeError, OverflowError, RecursionError):
            array = None
        if array is None:
            found = "values that are not numbers"
        elif array.shape != (self.dimension,):
            found = f"shape {array.shape}"
        elif not np.isfinite(array).all():
            found = "values that are not finite"  # NaN, or beyond float32's range (1e39 -> inf)
        else:
            return array
        raise ValueError(f"{info_path}: its probe embedding must be {self.dimension} finite numbers (the index's "
                         f"dimension); found {found}: the index is damaged; build it again.")

    def _read_vectors(self):
        path = os.path.join(self.index_dir, VECTORS_FILE)
        try:
            vectors = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as error:
            raise ValueError(f"{path} cannot be read as a .npy array ({error}): the index is damaged; build it again.") from None
        if vectors.dtype != np.float32 or vectors.shape != (self.count, self.dimension):
            raise ValueError(
                f"{path} holds a {vectors.dtype} array of shape {vectors.shape}, but {INDEX_FILE} describes "
                f"float32 ({self.count}, {self.dimension}): the index is damaged; build it again."
            )
        self._inverse_norms = np.empty(self.count, dtype="float32")  # (count,): cosines from dot products
        for start in range(0, self.count, _ROWS_PER_CHUNK):
            rows = np.asarray(vectors[start : start + _ROWS_PER_CHUNK])
            if not np.isfinite(rows).all():
                raise ValueError(f"{path} holds values that are not finite: the index is damaged; build it again.")
            self._inverse_norms[start : start + len(rows)] = 1.0 / np.maximum(np.linalg.norm(rows, axis=1), 1e-12)
        return vectors

    def _read_texts(self):
        path = os.path.join(self.index_dir, TEXTS_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                texts = [json.loads(line) for line in f]
        except (OSError, ValueError) as error:
            raise ValueError(f"{path} cannot be read ({error}): the index is damaged; build it again.") from None
        if len(texts) != self.count or not all(isinstance(text, str) for text in texts):
            raise ValueError(f"{path} holds {len(texts)} lines for {self.count} vectors: the index is damaged; build it again.")
        return texts

    def check_model(self, model):
        """Raises a `ValueError` unless `model` is the model that wrote the index (its dimension, then its probe vector)."""
        dimension = int(model.embedding_dim)
        recorded = self.model.get("export") or self.model.get("source")
        written_by = _shown_path(recorded) if recorded else "a model built in Python"
        if dimension != self.dimension:
            raise ValueError(
                f"Dimension mismatch: the index {self.index_dir!r} holds {self.dimension}-dimensional vectors (written by "
                f"{written_by}), but the query model gives {dimension}. Search with the model that wrote the index."
            )
        probe = np.asarray(model.encode([PROBE_TEXT]), dtype="float32")[0]
        difference = float(np.max(np.abs(probe - self._probe)))
        if difference > _PROBE_TOLERANCE:
            raise ValueError(
                f"The index {self.index_dir!r} was written by another model ({written_by}, pooling "
                f"{self.model.get('pooling')!r}): the query model embeds its probe text differently (max difference "
                f"{difference:.3g}). Search with the model that wrote the index, or build the index again."
            )

    def search(self, query_vectors, top_k=10):
        """The `top_k` texts of highest cosine similarity to each query, exactly (matrix products over all rows).

        Args:
            query_vectors: float array `(q, dim)` (or `(dim,)`).
            top_k: int. Results per query (at most `count`). Defaults to `10`.

        Returns:
            `(indices, scores)`: int64 and float32 arrays `(q, k)`, best first
            (ties: the earlier text first).
        """
        check_positive_int("top_k", top_k)
        queries = np.atleast_2d(np.asarray(query_vectors, dtype="float32"))  # (q, dim)
        if queries.shape[1] != self.dimension:
            raise ValueError(f"Expected queries of dimension {self.dimension}. Received: shape {queries.shape}")
        queries = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
        k = min(top_k, self.count)
        best_scores = np.full((len(queries), 0), -np.inf, dtype="float32")
        best_indices = np.zeros((len(queries), 0), dtype="int64")
        for start in range(0, self.count, _ROWS_PER_CHUNK):
            rows = np.asarray(self.vectors[start : start + _ROWS_PER_CHUNK])  # (chunk, dim)
            chunk = (queries @ rows.T) * self._inverse_norms[start : start + len(rows)]  # (q, chunk) cosines
            kept_scores, kept_indices = [], []
            for query in range(len(queries)):
                # The candidates: every row scoring at least the chunk's k-th best (ties at the edge included), with
                # the best kept so far; sorted by score, then the earlier text. A partition, not a sort of the chunk.
                row = chunk[query]
                kth = np.partition(row, len(row) - min(k, len(row)))[len(row) - min(k, len(row))]
                candidates = np.flatnonzero(row >= kth)
                scores = np.concatenate([best_scores[query], row[candidates]])
                indices = np.concatenate([best_indices[query], candidates + start])
                order = np.lexsort((indices, -scores))[:k]
                kept_scores.append(scores[order])
                kept_indices.append(indices[order])
            best_scores, best_indices = np.stack(kept_scores), np.stack(kept_indices)
        return best_indices, best_scores


def load_index(index_dir):
    """Opens an index written by `build_index` (see `SentenceIndex`)."""
    return SentenceIndex(index_dir)
