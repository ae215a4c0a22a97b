"""sentence-transformers folders, read as data: `modules.json`, the Pooling and Normalize configs, the tokenizer's.

`read_sentence_transformers_folder` says how a folder embeds a text (its
pooling modes, normalisation and maximum length) without importing or
running anything of it; `bert_keras.tasks.sentence_encoder.SentenceEncoder.from_checkpoint`
builds the model it describes. `tokenizer_max_length` reads what a Hugging
Face folder's tokenizer says when it has no `max_seq_length` (its vocabulary,
from `vocab.txt` or `tokenizer.json`, is read where every reader reads it:
`bert_keras.text.folders`).
"""

import dataclasses
import math
import os
import reprlib

from bert_keras._checks import FileContentError, quoted, read_json
from bert_keras.formats import holds_weights

__all__ = ["SentenceTransformersConfig", "read_sentence_transformers_folder", "tokenizer_max_length"]

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
        return read_json(path)
    except FileNotFoundError:
        raise ValueError(f"{path} is missing: the sentence-transformers folder's {what} is needed.") from None
    except FileContentError as error:  # a FIFO, a directory, not UTF-8 JSON
        raise ValueError(f"{path} cannot be read as JSON ({error.detail}): the sentence-transformers folder's "
                         f"{what}.") from None
    except OSError as error:  # unreadable
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
            f"{path} lists the module {quoted(kind or entry)}: SentenceEncoder reproduces Transformer -> Pooling "
            "[-> Normalize] only (sentence-transformers' own modules)."
        )
    if not isinstance(entry.get("path", ""), str):
        raise ValueError(f"{path}: the {name} module's `path` must be a string. Received: {quoted(entry.get('path'))}")
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
            f"{path}: `{key}` names the pooling mode(s) {quoted(unknown)}, which do not exist. sentence-transformers' "
            f"modes are {list(_ST_MODES)}."
        )
    return tuple(_ST_MODES[name] for name in names)


def _inside(folder, relative, modules_file):
    """`folder/relative`, refused unless it stays inside `folder` (no absolute path, no `..`, no link out)."""
    if not isinstance(relative, str) or os.path.isabs(relative):
        raise ValueError(f"{modules_file}: a module path must be relative to the folder. Received: {quoted(relative)}")
    target = os.path.join(folder, relative)
    root = os.path.realpath(folder)
    if os.path.realpath(target) != root and not os.path.realpath(target).startswith(root + os.sep):
        raise ValueError(f"{modules_file}: the module path {quoted(relative)} leads outside {folder!r}.")
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
    if not os.path.exists(modules_file):  # a FIFO or a directory there is refused by the reading
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
        if os.path.exists(normalize_file):
            normalized = _json_object(_read_json(normalize_file, "Normalize configuration"), normalize_file)
            for key in ("module_input_name", "module_output_name"):  # the output name defaults to the input's
                _config_field(normalized, key, normalize_file, "'sentence_embedding' (only the normalisation of the "
                              "sentence embedding is reproduced)", lambda value: value == "sentence_embedding")
    bert_config_file = os.path.join(transformer_path, "sentence_bert_config.json")
    bert_config = (_json_object(_read_json(bert_config_file, "Transformer configuration"), bert_config_file)
                   if os.path.exists(bert_config_file) else {})
    return SentenceTransformersConfig(
        transformer_path=transformer_path,
        pooling=_pooling_modes(pooling, pooling_file),
        normalize=len(modules) == 3,
        max_seq_length=_config_field(bert_config, "max_seq_length", bert_config_file, "an integer >= 3",
                                     lambda value: _is_int(value, 3)),
        do_lower_case=bool(_config_field(bert_config, "do_lower_case", bert_config_file, "true or false", _is_bool)),
        dimension=next((dimension for dimension in dimensions if dimension is not None), None),
    )


def tokenizer_max_length(folder):
    """`model_max_length` of a Hugging Face folder's `tokenizer_config.json`, or None."""
    path = os.path.join(folder, "tokenizer_config.json")
    if not os.path.isfile(path):
        return None
    try:
        value = read_json(path).get("model_max_length")
    except (OSError, ValueError, AttributeError):  # FileContentError is a ValueError: a FIFO, not JSON
        return None
    if isinstance(value, float) and math.isfinite(value):  # 1e400 reads as inf, which has no int
        value = int(value)
    return value if _is_int(value, 3) else None
