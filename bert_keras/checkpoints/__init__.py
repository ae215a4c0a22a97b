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
        `LoadedCheckpoint` with `encoder`, `heads`, `vocab_file`,
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


__all__ = [
    "CheckpointError",
    "ConfigError",
    "ConversionSummary",
    "LoadedCheckpoint",
    "ModuleRefusedError",
    "Pretrained",
    "detect_format",
    "holds_weights",
    "load_checkpoint",
    "load_pretrained",
    "to_keras_nlp",
]
