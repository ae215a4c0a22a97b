"""Checkpoints as our models: Hugging Face, original Google BERT (TF1), keras-nlp, TF Hub / Model Garden modules.

`load_checkpoint(path)` reads a checkpoint of any supported format
(`bert_keras.formats`, which builds nothing) and returns a `LoadedCheckpoint`
with the encoder, any heads, the vocabulary and a summary of the conversion.
`load_pretrained(path)` adds the folder's tokenizer and a preprocessor: the
one way the tasks, the sentence encoder and the inspector read a folder.
"""

from bert_keras.checkpoints._build import LoadedCheckpoint, load
from bert_keras.checkpoints.pretrained import Pretrained, load_pretrained
from bert_keras.formats import (
    CheckpointError,
    ConfigError,
    ConversionSummary,
    ModuleRefusedError,
    detect_format,
    holds_weights,
    read_checkpoint,
    read_google,
    read_hub_module,
    read_huggingface,
    read_keras_nlp,
    read_keras_nlp_preset,
    to_keras_nlp,
)


def load_checkpoint(path, *, format=None, with_heads=True, do_lower_case=None, dtype=None, allow_modules=True):
    """Converts a BERT checkpoint of any supported format.

    Args:
        path: str, a checkpoint directory (or TF checkpoint prefix), or a
            `keras_nlp.models.BertBackbone` object.
        format: optional str, one of `"huggingface"`, `"google"`, `"keras_nlp"`, `"hub_module"`.
            Detected when omitted (see `detect_format`).
        with_heads: bool, or a list of head names. `True`: convert the
            pre-training heads (`"mlm"`, `"nsp"`) when present; a list: the
            heads named, when present, task heads of a Hugging Face checkpoint
            among them: `"classifier"` (`BertForSequenceClassification`),
            `"token_classifier"` (`BertForTokenClassification`), `"span"`
            (`BertForQuestionAnswering`), read where config.json's
            `architectures` names that class. Defaults to `True`.
        do_lower_case: optional bool. Overrides what the checkpoint says.
        dtype: optional dtype policy of the built models.
        allow_modules: bool. Whether `path` may be a TF Hub module, whose
            graph runs when it is loaded (`read_checkpoint`). `False` for a
            path that came from data, not from the user. Defaults to `True`.

    Returns:
        `LoadedCheckpoint` with `encoder`, `heads`, `pretrainer`, `vocab_file`,
        `do_lower_case`, `summary`, and the config's `architectures` and
        `label_names` (a classifier head's classes, from `id2label`).

    Raises:
        CheckpointError: naming the file and the tensor (or config field) at
            fault: a missing tensor, a wrong shape, a config of another model,
            a vocabulary that disagrees with the embeddings, a truncated file.
        ModuleRefusedError: with `allow_modules=False`, `path` is a module.

    Example:
    >>> import os
    >>> from bert_keras.text.corpora import minilm_vocab_path  # the MiniLM checkpoint of the test extra
    >>> loaded = load_checkpoint(os.path.dirname(minilm_vocab_path()))
    >>> loaded.encoder.num_layers, loaded.do_lower_case
    (6, True)
    """
    return load(read_checkpoint(path, format=format, with_heads=with_heads, do_lower_case=do_lower_case,
                                allow_modules=allow_modules), dtype)


def load_huggingface(path, *, with_heads=True, do_lower_case=None, dtype=None):
    """Converts a Hugging Face BERT directory to a `BertEncoder` (and heads).

    Args:
        path: str. Directory with `config.json`, `model.safetensors` (or a
            sharded `model.safetensors.index.json`, or, when torch is
            installed, `pytorch_model.bin` or `pytorch_model.bin.index.json`),
            and optionally `vocab.txt` and `tokenizer_config.json`. An index
            may only name shard files in the same directory.
        with_heads: bool, or a list of head names. `True`: also convert
            `cls.predictions.*` (masked LM) and `cls.seq_relationship.*` (next
            sentence) when present; a list: the heads named (`"mlm"`, `"nsp"`,
            `"classifier"`, `"token_classifier"`, `"span"`: see
            `load_checkpoint`). Defaults to `True`.
        do_lower_case: optional bool. Overrides `tokenizer_config.json`.
        dtype: optional dtype policy of the built models.

    Returns:
        `LoadedCheckpoint`.
    """
    return load(read_huggingface(path, with_heads=with_heads, do_lower_case=do_lower_case), dtype)


def load_google(path, *, with_heads=True, do_lower_case=None, dtype=None):
    """Converts an original Google BERT checkpoint to a `BertEncoder` (and heads).

    Args:
        path: str. Directory with `bert_config.json`, `bert_model.ckpt.*` and
            `vocab.txt`, or the checkpoint prefix itself.
        with_heads: bool. Also convert `cls/predictions/*` (masked LM) and
            `cls/seq_relationship/*` (next sentence) when present. Defaults to `True`.
        do_lower_case: optional bool. Defaults to what the directory name says
            (`uncased_...` / `cased_...`), else to what the vocabulary suggests.
        dtype: optional dtype policy of the built models.

    Returns:
        `LoadedCheckpoint`. Google's `gelu` is the tanh approximation, so the
        encoder gets `activation="gelu_approximate"`.
    """
    return load(read_google(path, with_heads=with_heads, do_lower_case=do_lower_case), dtype)


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
    return load(read_keras_nlp_preset(path, do_lower_case=do_lower_case), dtype)


def from_keras_nlp(backbone, *, vocab_file=None, do_lower_case=True, dtype=None, file=None):
    """Converts a `keras_nlp.models.BertBackbone` object to a `BertEncoder`.

    The encoder gets `activation="gelu_approximate"`, the GELU of `BertBackbone`.

    Returns:
        `LoadedCheckpoint` (no heads).
    """
    return load(read_keras_nlp(backbone, vocab_file=vocab_file, do_lower_case=do_lower_case, file=file), dtype)


def load_hub_module(path, *, with_heads=True, do_lower_case=None, dtype=None):
    """Converts a TF Hub BERT encoder module into a `BertEncoder`.

    The module's architecture is read from its variables' shapes and its
    graph; each candidate encoder is run next to the module on a probe batch
    and the first that gives the module's outputs is returned.

    Args:
        path: str. An encoder SavedModel directory, a directory holding
            `encoder/` and `preprocess/` (as `bert-keras convert` writes), a
            `.tar.gz` of a module, or an http(s) handle (fetched once into
            `$TFHUB_CACHE_DIR`).
        with_heads: bool. Ignored: the `mlm` sub-object of a module is not
            converted (its encoder is).
        do_lower_case: optional bool. Overrides the module's `do_lower_case`.
        dtype: optional dtype policy of the built encoder.

    Returns:
        `LoadedCheckpoint` with format `"hub_module"`; `vocab_file` is the
        module's vocabulary (or the preprocess module's).

    Raises:
        CheckpointError: the module is not a BERT encoder this package can
            rebuild, has no WordPiece vocabulary, or the rebuilt encoder does
            not give the module's outputs.
    """
    del with_heads  # a module's heads are not converted
    return load(read_hub_module(path, do_lower_case=do_lower_case), dtype)


__all__ = [
    "CheckpointError",
    "ConfigError",
    "ConversionSummary",
    "LoadedCheckpoint",
    "ModuleRefusedError",
    "Pretrained",
    "detect_format",
    "holds_weights",
    "from_keras_nlp",
    "load_checkpoint",
    "load_google",
    "load_hub_module",
    "load_huggingface",
    "load_keras_nlp_preset",
    "load_pretrained",
    "to_keras_nlp",
]
