"""Original Google BERT checkpoints (google-research/bert, TF1) -> our encoder config and weights.

The TF1 checkpoints of ALBERT and ELECTRA are told apart by their variable names and read by `google_family`.
"""

import glob
import os
import re

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
from bert_keras.formats.google_family import ELECTRA_EMBEDDINGS, family_of, read_albert, read_electra
from bert_keras.formats.sources import TFCheckpointSource

CONFIG_FILE = "bert_config.json"
VOCAB_FILE = "vocab.txt"
CHECKPOINT_PREFIX = "bert_model.ckpt"
# The prefixes looked for first in a folder of several checkpoints: google-research/bert's, google-research/albert's.
PREFERRED_PREFIXES = (CHECKPOINT_PREFIX, "model.ckpt-best")
# TF1's Saver records the latest checkpoint of a folder in the `checkpoint` file.
STATE_FILE = "checkpoint"
_LATEST = re.compile(r'^model_checkpoint_path:\s*"([^"]*)"\s*$', re.MULTILINE)


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
    """`path` itself if it is a checkpoint prefix, else the checkpoint inside directory `path`.

    In a folder: `bert_model.ckpt` or `model.ckpt-best` (ALBERT's tars), else
    the only `*.index`, else the latest that the folder's `checkpoint` file
    names (taken by its file name, in this folder only).
    """
    if os.path.exists(path + ".index"):
        return path
    for name in PREFERRED_PREFIXES:
        preferred = os.path.join(path, name)
        if os.path.exists(preferred + ".index"):
            return preferred
    indexes = sorted(glob.glob(os.path.join(glob.escape(path), "*.index")))
    if len(indexes) == 1:
        return indexes[0][: -len(".index")]
    latest = _latest_checkpoint(path)
    if latest is not None:
        return latest
    raise CheckpointError(
        path,
        None,
        f"expected one TensorFlow checkpoint ({CHECKPOINT_PREFIX}.index + .data-*), "
        f"found {len(indexes)}: {[os.path.basename(i) for i in indexes]}.",
    )


def holds_tf_checkpoint(directory):
    """Whether `directory` holds a TF checkpoint of its own (a `*.index` file), as Google's TF1 releases do."""
    return any(os.path.isfile(index) for index in glob.glob(os.path.join(glob.escape(directory), "*.index")))


def _latest_checkpoint(directory):
    """The prefix the folder's `checkpoint` file names as the latest, where it is one of this folder's; else None."""
    state = os.path.join(directory, STATE_FILE)
    if not os.path.isfile(state):
        return None
    try:
        with open(state, encoding="utf-8") as f:
            match = _LATEST.search(f.read(1 << 20))
    except (OSError, UnicodeDecodeError):
        return None
    if match is None:
        return None
    # Saver records an absolute path unless told otherwise: the name alone is looked for, here.
    name = os.path.basename(match.group(1).rstrip("/"))
    prefix = os.path.join(directory, name)
    return prefix if name and os.path.isfile(prefix + ".index") else None


def read_google(path, *, with_heads=True, do_lower_case=None):
    """Reads an original Google TF1 checkpoint: our encoder config and its weights (and the heads').

    BERT (google-research/bert), and the family's TF1 checkpoints told apart by
    their variable names: ALBERT (`bert/encoder/transformer/...`,
    google-research/albert) and ELECTRA (`electra/...`, google-research/electra);
    see `google_family`.

    Args:
        path: str. Directory with `bert_config.json`, `bert_model.ckpt.*` and
            `vocab.txt` (ALBERT: `albert_config.json`, `model.ckpt-best.*`,
            `spiece.model` or `30k-clean.model`; ELECTRA: its checkpoint and
            `vocab.txt`), or the checkpoint prefix itself.
        with_heads: bool. Also read `cls/predictions/*` (masked LM) and
            `cls/seq_relationship/*` (next sentence) of BERT, ELECTRA's
            `discriminator_predictions/*`, when present. Defaults to `True`.
        do_lower_case: optional bool. Defaults to what the directory name says
            (`uncased_...` / `cased_...`), else to what the vocabulary suggests
            (ALBERT: lower case).

    Returns:
        `CheckpointWeights`. Google's `gelu` is the tanh approximation, so the
        encoder config of BERT and ALBERT says `activation="gelu_approximate"`
        (ELECTRA's code uses the exact GELU: `"gelu"`).
    """
    prefix = find_checkpoint_prefix(path)
    directory = os.path.dirname(prefix)
    source = TFCheckpointSource(prefix)
    family = family_of(source)
    if family == "albert":
        if do_lower_case is None:
            do_lower_case = _guess_do_lower_case(directory, None)
        return read_albert(prefix, source, with_heads=with_heads, do_lower_case=do_lower_case, ignored=is_ignored)

    embeddings_name = ELECTRA_EMBEDDINGS if family == "electra" else "bert/embeddings/word_embeddings"
    vocab_file = first_existing(directory, (VOCAB_FILE,))
    tokens = read_vocabulary(vocab_file) if vocab_file else None
    if tokens is not None and source.has(embeddings_name):
        check_vocabulary(vocab_file, tokens, source.file_of(embeddings_name), embeddings_name,
                         source.shape(embeddings_name)[0])
    if do_lower_case is None:
        do_lower_case = _guess_do_lower_case(directory, tokens)
    if family == "electra":
        return read_electra(prefix, source, with_heads=with_heads, do_lower_case=do_lower_case,
                            vocab_file=vocab_file, ignored=is_ignored)

    config_file = os.path.join(directory, CONFIG_FILE)
    if not os.path.exists(config_file):
        raise CheckpointError(directory, None, f"has no {CONFIG_FILE} next to the checkpoint {prefix}.")
    kwargs = config_to_kwargs(read_json(config_file), config_file)
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
