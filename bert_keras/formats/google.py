"""Original Google BERT checkpoints (google-research/bert, TF1) -> our encoder config and weights."""

import glob
import os

from bert_keras.formats import tables
from bert_keras.formats._common import (
    CheckpointError,
    check_vocabulary,
    encoder_kwargs,
    first_existing,
    guess_do_lower_case,
    read_json,
    read_vocabulary,
    translate_activation,
)
from bert_keras.formats._read import read_weights
from bert_keras.formats.sources import TFCheckpointSource

CONFIG_FILE = "bert_config.json"
VOCAB_FILE = "vocab.txt"
CHECKPOINT_PREFIX = "bert_model.ckpt"


def is_ignored(name):
    """Optimizer slots (`.../adam_m`, `.../adam_v`) and counters are not weights."""
    return name in tables.GOOGLE_IGNORED_NAMES or name.endswith(tables.GOOGLE_IGNORED_SUFFIXES)


def config_to_kwargs(config, file):
    """Translates a `bert_config.json` dict to `BertEncoder` arguments."""
    kwargs = encoder_kwargs(config, tables.GOOGLE_CONFIG, file, defaults={"initializer_range": 0.02})
    kwargs["activation"] = translate_activation(
        config.get("hidden_act", "gelu"), tables.GOOGLE_ACTIVATIONS, file, "hidden_act"
    )
    kwargs["layer_norm_epsilon"] = 1e-12
    return kwargs


def find_checkpoint_prefix(path):
    """`path` itself if it is a checkpoint prefix, else the checkpoint inside directory `path`."""
    if os.path.exists(path + ".index"):
        return path
    preferred = os.path.join(path, CHECKPOINT_PREFIX)
    if os.path.exists(preferred + ".index"):
        return preferred
    indexes = sorted(glob.glob(os.path.join(path, "*.index")))
    if len(indexes) == 1:
        return indexes[0][: -len(".index")]
    raise CheckpointError(
        path,
        None,
        f"expected one TensorFlow checkpoint ({CHECKPOINT_PREFIX}.index + .data-*), "
        f"found {len(indexes)}: {[os.path.basename(i) for i in indexes]}.",
    )


def read_google(path, *, with_heads=True, do_lower_case=None):
    """Reads an original Google BERT checkpoint: our encoder config and its weights (and the heads').

    Args:
        path: str. Directory with `bert_config.json`, `bert_model.ckpt.*` and
            `vocab.txt`, or the checkpoint prefix itself.
        with_heads: bool. Also read `cls/predictions/*` (masked LM) and
            `cls/seq_relationship/*` (next sentence) when present. Defaults to `True`.
        do_lower_case: optional bool. Defaults to what the directory name says
            (`uncased_...` / `cased_...`), else to what the vocabulary suggests.

    Returns:
        `CheckpointWeights`. Google's `gelu` is the tanh approximation, so the
        encoder config says `activation="gelu_approximate"`.
    """
    prefix = find_checkpoint_prefix(path)
    directory = os.path.dirname(prefix)
    config_file = os.path.join(directory, CONFIG_FILE)
    if not os.path.exists(config_file):
        raise CheckpointError(directory, None, f"has no {CONFIG_FILE} next to the checkpoint {prefix}.")
    kwargs = config_to_kwargs(read_json(config_file), config_file)
    source = TFCheckpointSource(prefix)

    vocab_file = first_existing(directory, (VOCAB_FILE,))
    tokens = read_vocabulary(vocab_file) if vocab_file else None
    embeddings_name = "bert/embeddings/word_embeddings"
    if tokens is not None and source.has(embeddings_name):
        check_vocabulary(vocab_file, tokens, source.file_of(embeddings_name), embeddings_name,
                         source.shape(embeddings_name)[0])
    if do_lower_case is None:
        do_lower_case = _guess_do_lower_case(directory, tokens)
    return read_weights(
        format="google",
        source=source,
        table=tables.GOOGLE_WEIGHTS,
        part_prefixes=tables.GOOGLE_PART_PREFIXES,
        encoder_config=kwargs,
        mlm_activation=kwargs["activation"],
        with_heads=with_heads,
        ignored=is_ignored,
        hint=f" Check {config_file}.",
        vocab_file=vocab_file,
        do_lower_case=do_lower_case,
    )


def _guess_do_lower_case(directory, tokens):
    name = os.path.basename(os.path.abspath(directory)).lower()
    if "uncased" in name:
        return True
    if "cased" in name:
        return False
    return guess_do_lower_case(tokens) if tokens is not None else True
