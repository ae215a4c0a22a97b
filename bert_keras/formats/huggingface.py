"""Hugging Face `transformers` checkpoints of BERT and its family -> our encoder config and weights (and the heads').

The family: BERT, ELECTRA (`ElectraModel`, the discriminator `ElectraForPreTraining`, the generator
`ElectraForMaskedLM`), DistilBERT, ALBERT and RoBERTa, told apart by config.json's `model_type`; each is one
`tables.HF_FAMILIES` entry (its weight table, its config keys, what it fixes) and one `BertEncoder` with options,
not a class of its own. Each family's masked LM is read as `"mlm"` (a `MaskedLMHead` tied to the word embeddings).
"""

import collections
import dataclasses
import logging
import functools
import os
import re

from bert_keras._checks import quoted, shortened
from bert_keras.formats import tables
from bert_keras.formats._common import (
    CheckpointError,
    ConfigError,
    check_shared_block,
    check_vocabulary,
    encoder_kwargs,
    first_existing,
    guess_do_lower_case,
    read_json,
    read_tokenizer,
    translate_activation,
)
from bert_keras.formats._read import check_tied_decoder, read_weights, wanted_heads
from bert_keras.formats.sources import SafetensorsSource, TorchSource
from bert_keras.text.kinds import tokenizer_class
from bert_keras.text.tokenizer import WordPieceTokenizer

# A class index of `id2label`, as transformers writes it ("0", "1", ...).
_INDEX = re.compile(r"0|[1-9][0-9]{0,8}")
CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.txt"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def normalize_name(name, prefix="bert."):
    """Drops the model's prefix (`bert.`, `roberta.`, ...) and renames legacy `LayerNorm.gamma/beta` to `weight/bias`."""
    if name.startswith(prefix):
        name = name[len(prefix):]
    for legacy, current in ((".LayerNorm.gamma", ".LayerNorm.weight"), (".LayerNorm.beta", ".LayerNorm.bias")):
        if name.endswith(legacy):
            name = name[: -len(legacy)] + current
    return name


def is_ignored(name):
    return name.endswith(tables.HF_IGNORED_SUFFIXES)


def model_type_of(config, file):
    """config.json's `model_type`, one of `tables.HF_MODEL_TYPES` ('bert' where it is missing and a Bert class is listed).

    Raises:
        ConfigError: naming the file, the type found and the types supported.
    """
    model_type = config.get("model_type")
    architectures = config.get("architectures")
    names = architectures if isinstance(architectures, list) else []  # a malformed list: `read_architectures`'s
    if model_type is None and not any(isinstance(a, str) and "Bert" in a for a in names):
        raise ConfigError(file, "model_type", "missing, and no Bert architecture is listed; is this a BERT config?")
    if model_type is None:
        return "bert"
    if model_type not in tables.HF_MODEL_TYPES:
        raise ConfigError(
            file,
            "model_type",
            f"this is a {quoted(model_type)} config, not BERT or a model of its family (supported model_type: "
            f"{', '.join(repr(name) for name in tables.HF_MODEL_TYPES)}). Only those can be converted to BertEncoder.",
        )
    return model_type


def config_to_kwargs(config, file):
    """Translates a `transformers` config dict of BERT's family (`BertConfig`, `ElectraConfig`, `DistilBertConfig`,
    `AlbertConfig`, `RobertaConfig`) to `BertEncoder` arguments."""
    model_type = model_type_of(config, file)
    family = tables.HF_FAMILIES[model_type]
    position_type = config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ConfigError(
            file,
            "position_embedding_type",
            f"{quoted(position_type)} is not supported; BertEncoder has absolute (learned) positions.",
        )
    kwargs = encoder_kwargs(config, family["config"], file, defaults={"layer_norm_epsilon": 1e-12})
    kwargs.update(family["fixed"])
    key = family["activation_key"]
    kwargs["activation"] = translate_activation(config.get(key, "gelu"), tables.HF_ACTIVATIONS, file, key)
    if model_type == "electra" and kwargs["embedding_size"] == kwargs["hidden_size"]:
        kwargs["embedding_size"] = None  # ElectraModel has no projection where the widths agree
    if model_type == "albert":
        check_shared_block(config, file)
    if model_type in tables.HF_PADDING_OFFSET_FAMILIES:
        _roberta_positions(config, kwargs, file)
    return kwargs


def _roberta_positions(config, kwargs, file):
    """RoBERTa's positions start after its padding index: rows 0..pad_token_id are never read."""
    pad = config.get("pad_token_id", 1)
    if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
        raise ConfigError(file, "pad_token_id", f"expected a non-negative integer, found {quoted(pad)}.")
    offset = pad + 1
    rows = kwargs["max_sequence_length"]
    if rows <= offset:
        raise ConfigError(file, "max_position_embeddings", f"is {rows}, which leaves no position after the "
                          f"padding index {pad} (RoBERTa's positions start at pad_token_id + 1 = {offset}).")
    kwargs["position_offset"] = offset
    kwargs["max_sequence_length"] = rows - offset  # the longest input: 512 for roberta-base's 514 rows


def open_weights(directory, prefix="bert."):
    """The tensor source of a Hugging Face directory (safetensors preferred); `prefix`: the model's (`bert.`, ...)."""
    path = first_existing(directory, WEIGHT_FILES)
    if path is None:
        raise CheckpointError(
            directory, None, f"holds no weights; expected one of {list(WEIGHT_FILES)}."
        )
    normalize = functools.partial(normalize_name, prefix=prefix)
    if path.endswith((".bin", ".bin.index.json")):
        return TorchSource(path, normalize=normalize)
    return SafetensorsSource(path, normalize=normalize)


def family_table(model_type, encoder_config):
    """The weight table of a family for one config: its table, with the embedding projection where there is one."""
    family = tables.HF_FAMILIES[model_type]
    table = dict(family["weights"])
    if encoder_config.get("embedding_size") is not None:
        table[tables.EMBEDDINGS] = table[tables.EMBEDDINGS] + family["projection"]
    return table


def family_config_keys(model_type):
    """Our argument -> the family's config key, for messages (derived sizes too: the tables' width, the positions)."""
    config = tables.HF_FAMILIES[model_type]["config"]
    return {**config, "embedding_width": config.get("embedding_size", config["hidden_size"])}


def read_huggingface(path, *, with_heads=True, do_lower_case=None):
    """Reads a Hugging Face BERT directory: our encoder config and its weights (and the heads').

    Args:
        path: str. Directory with `config.json`, `model.safetensors` (or a
            sharded `model.safetensors.index.json`, or, when torch is
            installed, `pytorch_model.bin` or `pytorch_model.bin.index.json`),
            and optionally `vocab.txt` and `tokenizer_config.json`. An index
            may only name shard files in the same directory.
        with_heads: bool, or a list of head names. `True`: also read
            `cls.predictions.*` (masked LM) and `cls.seq_relationship.*` (next
            sentence) when present, and the family's pre-training heads: its
            masked LM as `"mlm"` (ALBERT's `predictions`, RoBERTa's `lm_head`,
            DistilBERT's `vocab_transform`/`vocab_layer_norm`/`vocab_projector`,
            an ELECTRA generator's `generator_predictions`/`generator_lm_head`),
            ELECTRA's replaced-token head as `"discriminator"`; a list names the heads to read when
            present, the task heads among them: `"classifier"`
            (`BertForSequenceClassification`'s `classifier`),
            `"token_classifier"` (`BertForTokenClassification`'s `classifier`),
            `"span"` (`BertForQuestionAnswering`'s `qa_outputs`), and the
            family's (`tables.HF_TASK_ARCHITECTURES`: ALBERT's three, RoBERTa's
            three, whose sequence classifier's `dense` is read as the pooler,
            DistilBERT's and ELECTRA's token classifier and question answering).
            A task head is read only where config.json's `architectures` names
            its class: both classifiers call their head `classifier`. Defaults
            to `True`.
        do_lower_case: optional bool. Overrides `tokenizer_config.json`.

    Returns:
        `CheckpointWeights`, with the config's `architectures`, and its
        `id2label` and `num_labels` (with a classifier head read: one name for
        each of the head's outputs; transformers' `LABEL_0`, `LABEL_1`, ...
        where the config names none).

    Raises:
        CheckpointError: also a classifier head whose number of outputs is
            not the number of labels `id2label` names.
        ConfigError: `architectures` or, with a classifier head read,
            `id2label` malformed. (A head asked for that `architectures` names
            in a layout ours cannot hold, DistilBERT's and ELECTRA's sequence
            classifiers, `tables.HF_REFUSED_TASK_ARCHITECTURES`, is left
            unread with a warning.)
    """
    directory = os.path.dirname(path) if os.path.isfile(path) else path
    config_file = os.path.join(directory, CONFIG_FILE)
    if not os.path.exists(config_file):
        raise CheckpointError(directory, None, f"has no {CONFIG_FILE}; is it a Hugging Face model directory?")
    config = read_json(config_file)
    kwargs = config_to_kwargs(config, config_file)
    model_type = model_type_of(config, config_file)
    architectures = read_architectures(config, config_file)
    warn_unread_task_heads(architectures, wanted_heads(with_heads), config_file)
    source = open_weights(directory, tables.HF_FAMILIES[model_type]["prefix"])

    tokenizer_kind = tables.HF_FAMILIES[model_type]["tokenizer"]
    vocab_file = first_existing(directory, (VOCAB_FILE,))
    found, tokens = _check_tokenizer(tokenizer_kind, directory, vocab_file, source)
    if not tokenizer_class(tokenizer_kind).lower_cases():  # RoBERTa's byte-level BPE is cased: it never lower-cases
        do_lower_case = False
    elif do_lower_case is None:
        do_lower_case = _read_do_lower_case(found, tokens)

    table = family_table(model_type, kwargs)
    family = tables.HF_FAMILIES[model_type]
    if tables.MLM in table:  # Some checkpoints spell the MLM output bias `cls.predictions.decoder.bias`.
        table[tables.MLM] = tuple((target, _alias(source, name, family["aliases"]), transform)
                                  for target, name, transform in table[tables.MLM])
    weights = read_weights(
        format="huggingface",
        source=source,
        table=table,
        part_prefixes=part_prefixes(architectures, model_type),
        config_keys=family_config_keys(model_type),
        encoder_config=kwargs,
        mlm_activation=family["mlm_activation"] or kwargs["activation"],
        with_heads=with_heads,
        ignored=is_ignored,
        extra_checks=lambda src, heads: _extra_checks(src, heads, table, family),
        hint=f" Check {config_file}.",
        vocab_file=vocab_file,
        do_lower_case=do_lower_case,
    )
    classifier = next((head for head in weights.heads if head in (tables.CLASSIFIER, tables.TOKEN_CLASSIFIER)), None)
    if classifier is None:
        try:
            id2label = read_id2label(config, config_file)
        except ConfigError:  # labels of no head read: they do not stop the encoder from loading
            id2label = None
        num_labels = len(id2label) if id2label else None
    else:
        id2label = classifier_labels(source, table[classifier], read_id2label(config, config_file), config_file,
                                     kwargs["hidden_size"])
        num_labels = len(id2label)
    return dataclasses.replace(weights, architectures=architectures, id2label=id2label, num_labels=num_labels,
                               tokenizer_kind=tokenizer_kind, tokenizer_folder=directory)


def read_architectures(config, file):
    """config.json's `architectures`: a list of class names (empty where it has none)."""
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list) or not all(isinstance(name, str) for name in architectures):
        raise ConfigError(file, "architectures", f"expected a list of class names, found {quoted(architectures)}.")
    return architectures


def warn_unread_task_heads(architectures, heads, file):
    """Warns (logger `bert_keras.checkpoints`) of a task head in `heads` that `architectures` names in a layout ours
    cannot hold: it is left unread, as any head of another task, and the warning says why."""
    for name in architectures:
        part, differs = tables.HF_REFUSED_TASK_ARCHITECTURES.get(name, (None, None))
        if part in heads:
            logging.getLogger("bert_keras.checkpoints").warning(
                "%s names %s, whose head cannot be read as our %r head: %s. It is left unread: a task starts from "
                "the encoder with a new head.", file, name, part, differs)


def part_prefixes(architectures, model_type="bert"):
    """The parts a checkpoint may hold: the encoder's, the pre-training heads, the task heads its architectures name.

    `classifier.*` is the head of a sequence classifier and of a token
    classifier alike: without an architecture that says which, it is left unused.
    ALBERT's sentence-order head (`sop_classifier`) is not read: the summary lists it unused.
    """
    named = {tables.HF_TASK_ARCHITECTURES[name] for name in architectures if name in tables.HF_TASK_ARCHITECTURES}
    return {part: prefix for part, prefix in tables.HF_FAMILIES[model_type]["part_prefixes"].items()
            if part not in tables.TASK_HEADS or part in named}


def read_id2label(config, file):
    """transformers' `id2label` as `{int: str}` with the indices 0..n-1 and distinct names, or None if absent."""
    id2label = config.get("id2label")
    if id2label is None:
        return None
    if not isinstance(id2label, dict) or not id2label:
        raise ConfigError(file, "id2label", f"expected an object of class index -> name, found {quoted(id2label)}.")
    labels = {}
    for key, name in id2label.items():
        index = int(key) if isinstance(key, str) and _INDEX.fullmatch(key) else None
        if index is None or not isinstance(name, str):
            raise ConfigError(file, "id2label", f"expected class indices (\"0\", \"1\", ...) mapped to names, found "
                              f"{quoted(key)}: {quoted(name)}.")
        labels[index] = name
    if set(labels) != set(range(len(labels))):
        missing = min(set(range(len(labels))) - set(labels))
        raise ConfigError(file, "id2label", f"expected the class indices 0 to {len(labels) - 1}, found "
                          f"{quoted(sorted(labels))} (no {missing}).")
    repeated = sorted(name for name, count in collections.Counter(labels.values()).items() if count > 1)
    if repeated:
        raise ConfigError(file, "id2label", f"names {quoted(repeated)} more than one class; each class needs its own "
                          "name.")
    return labels


def classifier_labels(source, entries, id2label, config_file, hidden_size):
    """The labels of a classifier head read: `id2label`, checked against the head's outputs, or transformers' defaults.

    Raises:
        CheckpointError: the head is not `(outputs, hidden_size)`, or its
            number of outputs is not the number of labels.
    """
    # The head's own kernel (RoBERTa's classifier also holds the pooler's: `encoder.pooler.kernel`).
    name = next(name for target, name, _ in entries
                if target.split(".", 1)[0] in tables.TASK_HEADS and target.endswith(".kernel"))
    shape = tuple(source.shape(name))
    if len(shape) != 2 or shape[0] < 1 or shape[1] != hidden_size:  # a torch Linear: (outputs, inputs)
        raise CheckpointError(source.file_of(name), source.original_name(name), f"has shape {shape}, expected "
                              f"(number of classes, {hidden_size}): a classifier on hidden_size={hidden_size}.")
    outputs = shape[0]
    if id2label is None:
        return {index: f"LABEL_{index}" for index in range(outputs)}  # what transformers calls them
    if len(id2label) != outputs:
        raise CheckpointError(
            source.file_of(name),
            source.original_name(name),
            f"has shape {shape}: {outputs} classes, but {config_file}'s id2label names {len(id2label)} "
            f"({shortened(', '.join(id2label[i] for i in range(min(len(id2label), 80))))}). The config does not belong "
            "to these weights.",
        )
    return id2label


def _alias(source, name, aliases):
    if source.has(name):
        return name
    for alternative in aliases.get(name, ()):
        if source.has(alternative):
            return alternative
    return name


def _extra_checks(source, heads, table, family):
    skipped = []
    if tables.MLM in heads:
        skipped += check_tied_decoder(source, family["tied_decoder"], "embeddings.word_embeddings.weight")
        # An alias is the same parameter (`cls.predictions.decoder.bias` is `cls.predictions.bias`): the one not read
        # is skipped.
        read = {entry[1] for entry in table[tables.MLM]}
        for name, alternatives in family["aliases"].items():
            skipped += [n for n in (name,) + alternatives if source.has(n) and n not in read]
    return skipped


def _check_tokenizer(kind, directory, vocab_file, source):
    """Checks the folder's tokenizer files against the word embeddings' rows, before anything is built: a `vocab.txt`
    (WordPiece's, or one beside another kind's files) and the family's own (its files, else its `tokenizer.json`).

    Returns:
        `(found, tokens)`: where the family's tokenizer is read from
        (`bert_keras.text.folders.FolderTokenizer`, None where nowhere) and
        the WordPiece tokens (`vocab.txt`'s, or a WordPiece `tokenizer.json`'s),
        which tell whether the vocabulary is cased; None where there are none.
    """
    name = "embeddings.word_embeddings.weight"
    # Without the tensor, the files are only read: the missing tensor is named by the weights' check.
    rows = (source.file_of(name), source.original_name(name), source.shape(name)[0]) if source.has(name) else None

    def check(kind, vocab_file):
        found, tokens = read_tokenizer(kind, directory, vocab_file)
        if tokens is not None and rows is not None:
            check_vocabulary(found.file, tokens, *rows)
        return found, tokens

    vocab_found, vocab_tokens = check(WordPieceTokenizer.kind, vocab_file) if vocab_file else (None, None)
    cls = tokenizer_class(kind)
    if vocab_file is not None and cls is WordPieceTokenizer:
        return vocab_found, vocab_tokens
    found, tokens = check(kind, None)  # the family's own files, else its tokenizer.json
    if vocab_tokens is None and cls is WordPieceTokenizer:  # a tokenizer.json's
        vocab_tokens = tokens
    return found, vocab_tokens


def _read_do_lower_case(found, tokens):
    """What the folder records (`tokenizer_config.json`'s `do_lower_case`, a `tokenizer.json`'s normalizer), else a
    guess from the WordPiece tokens, else `True`."""
    if found is not None and "lower_case" in found.arguments:
        return found.arguments["lower_case"]
    return guess_do_lower_case(tokens) if tokens is not None else True
