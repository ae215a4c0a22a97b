"""A DeBERTa-v2/v3 folder as transformers 5 saves it (`DebertaV2Model`, its task models) -> `DebertaV3Encoder`
arguments and the encoder's weights in our layout.

The config's names are translated here (`config_to_kwargs`); the weight names are a table of
`(target, source, transform, shape)` (`weight_table`): absolute positions, segments, the embedding projection, the
separate position projections (`share_att_key` false) and the relative LayerNorm only where the config has them.
A task model's head is read where config.json's `architectures` names its class and it is asked for
(`TASK_ARCHITECTURES`: one Linear layer, as BERT's); a sequence classifier's `ContextPooler` is read as the encoder's
pooler whenever the folder holds one, since that is what the model pools with. The masked LM's `lm_predictions` is not
read: the summary lists it unused.
"""

import os

from bert_keras._checks import quoted
from bert_keras.formats import tables
from bert_keras.formats._common import (
    CheckpointError,
    CheckpointWeights,
    ConfigError,
    encoder_kwargs,
    read_entries,
    read_json,
    translate_activation,
)
from bert_keras.formats._read import wanted_heads
from bert_keras.formats.huggingface import (
    CONFIG_FILE,
    classifier_labels,
    open_weights,
    read_architectures,
    read_id2label,
)


MODEL_TYPE = "deberta-v2"  # DeBERTa-v3 is saved as a DeBERTa-v2 model
ENCODER_KIND = "deberta"
# DeBERTa-v3's tokenizer.json (a SentencePiece Unigram with [CLS]/[SEP] and its own normalizer):
# `bert_keras.text.DebertaV3Tokenizer`.
TOKENIZER_KIND = "deberta_unigram"
# Our argument -> DebertaV2Config's key, for the sizes and numbers `encoder_kwargs` checks.
CONFIG_KEYS = {
    "vocab_size": "vocab_size",
    "num_layers": "num_hidden_layers",
    "hidden_size": "hidden_size",
    "num_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "max_sequence_length": "max_position_embeddings",
    "layer_norm_epsilon": "layer_norm_eps",
    "dropout": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
    "initializer_range": "initializer_range",
}
# DebertaV2Config's defaults, for keys a config.json may leave out.
DEFAULTS = {"max_sequence_length": 512, "layer_norm_epsilon": 1e-7, "dropout": 0.1, "attention_dropout": 0.1,
            "initializer_range": 0.02}
_POSITION_ATTENTION = ("c2p", "p2c")
# transformers' DeBERTa task classes -> the head part each holds; its tensors are BERT's (`tables.HF_WEIGHTS`).
TASK_ARCHITECTURES = {
    "DebertaV2ForSequenceClassification": tables.CLASSIFIER,
    "DebertaV2ForTokenClassification": tables.TOKEN_CLASSIFIER,
    "DebertaV2ForQuestionAnswering": tables.SPAN,
}
POOLER_WEIGHT = "pooler.dense.weight"


def is_deberta(path):
    """Whether `path` (a folder, or a file in one) holds a config.json whose `model_type` is DeBERTa-v2's (v3's)."""
    directory = os.path.dirname(path) if os.path.isfile(path) else path
    config_file = os.path.join(directory, CONFIG_FILE)
    if not os.path.isfile(config_file):
        return False
    return read_json(config_file).get("model_type") == MODEL_TYPE


def _flag(config, key, default, file):
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(file, key, f"expected true or false, found {quoted(value)}.")
    return value


def _int(config, key, default, file, minimum=None):
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        expected = "an integer" if minimum is None else f"an integer of at least {minimum}"
        raise ConfigError(file, key, f"expected {expected}, found {quoted(value)}.")
    return value


def _position_attention(config, file):
    """`pos_att_type`: a list, or the older "p2c|c2p" string; None for none."""
    value = config.get("pos_att_type")
    kinds = [] if value is None else value
    if isinstance(kinds, str):
        kinds = [kind.strip() for kind in kinds.lower().split("|") if kind.strip()]
    if not isinstance(kinds, list) or any(kind not in _POSITION_ATTENTION for kind in kinds):
        raise ConfigError(file, "pos_att_type", f"expected a list among {list(_POSITION_ATTENTION)}, found "
                          f"{quoted(value)}.")
    return [kind for kind in _POSITION_ATTENTION if kind in kinds]


def _relative_norm(config, file):
    value = config.get("norm_rel_ebd", "none")
    kinds = [kind.strip() for kind in value.lower().split("|")] if isinstance(value, str) else None
    if kinds is None or any(kind not in ("layer_norm", "none") for kind in kinds):
        raise ConfigError(file, "norm_rel_ebd", f"expected 'layer_norm' or 'none', found {quoted(value)}.")
    return "layer_norm" if "layer_norm" in kinds else "none"


def _refuse_unsupported(config, kwargs, file):
    """What no released DeBERTa-v3 has and `DebertaV3Encoder` does not build, refused by name."""
    if not _flag(config, "relative_attention", False, file):
        raise ConfigError(file, "relative_attention", "is false; only DeBERTa with relative attention (every "
                          "DeBERTa-v2 and v3 checkpoint) is supported.")
    if _int(config, "conv_kernel_size", 0, file) > 0:
        raise ConfigError(file, "conv_kernel_size", "is set: the convolution of DeBERTa-v2 xlarge/xxlarge's first "
                          "layer is not supported (DeBERTa-v3 has none).")
    head_size = config.get("attention_head_size")
    if head_size is not None and head_size * kwargs["num_heads"] != kwargs["hidden_size"]:
        raise ConfigError(file, "attention_head_size", f"is {quoted(head_size)}; only hidden_size / "
                          "num_attention_heads is supported.")
    if kwargs["hidden_size"] % kwargs["num_heads"]:
        raise ConfigError(file, "num_attention_heads", f"is {kwargs['num_heads']}, which does not divide "
                          f"hidden_size={kwargs['hidden_size']}.")


def config_to_kwargs(config, file):
    """Translates a `DebertaV2Config` dict to `DebertaV3Encoder` arguments.

    Raises:
        ConfigError: naming the file and the field at fault.
    """
    kwargs = encoder_kwargs(config, CONFIG_KEYS, file, defaults=DEFAULTS)
    _refuse_unsupported(config, kwargs, file)
    kwargs["activation"] = translate_activation(config.get("hidden_act", "gelu"), tables.HF_ACTIVATIONS, file,
                                                "hidden_act")
    kwargs["position_biased_input"] = _flag(config, "position_biased_input", True, file)
    kwargs["type_vocab_size"] = _int(config, "type_vocab_size", 0, file, minimum=0)
    embedding_size = _int(config, "embedding_size", kwargs["hidden_size"], file, minimum=1)
    kwargs["embedding_size"] = None if embedding_size == kwargs["hidden_size"] else embedding_size
    kwargs["position_buckets"] = _int(config, "position_buckets", -1, file)
    maximum = _int(config, "max_relative_positions", -1, file)
    kwargs["max_relative_positions"] = maximum if maximum >= 1 else kwargs["max_sequence_length"]
    if 0 < kwargs["position_buckets"] and kwargs["max_relative_positions"] <= kwargs["position_buckets"] // 2 + 1:
        raise ConfigError(file, "max_relative_positions", f"is {kwargs['max_relative_positions']}; with "
                          f"position_buckets={kwargs['position_buckets']} it must be above position_buckets // 2 + 1.")
    kwargs["position_attention"] = _position_attention(config, file)
    kwargs["share_attention_key"] = _flag(config, "share_att_key", False, file)
    kwargs["relative_norm"] = _relative_norm(config, file)
    return kwargs


def weight_table(kwargs):
    """`(target, source, transform, shape)` of every tensor the encoder reads; `shape` is the stored one."""
    hidden, inner, vocab = kwargs["hidden_size"], kwargs["intermediate_size"], kwargs["vocab_size"]
    width = kwargs["embedding_size"] or hidden
    span = kwargs["position_buckets"] if kwargs["position_buckets"] > 0 else kwargs["max_relative_positions"]

    def norm(target, source):
        return [(f"{target}.gamma", f"{source}.weight", None, (hidden,)),
                (f"{target}.beta", f"{source}.bias", None, (hidden,))]

    def dense(target, source, units, inputs):
        return [(f"{target}.kernel", f"{source}.weight", tables.TRANSPOSE, (units, inputs)),
                (f"{target}.bias", f"{source}.bias", None, (units,))]

    ours = "encoder.embeddings"
    entries = [(f"{ours}.word_embeddings.embeddings", "embeddings.word_embeddings.weight", None, (vocab, width))]
    if kwargs["position_biased_input"]:
        entries.append((f"{ours}.position_embeddings.embeddings", "embeddings.position_embeddings.weight", None,
                        (kwargs["max_sequence_length"], width)))
    if kwargs["type_vocab_size"]:
        entries.append((f"{ours}.type_embeddings.embeddings", "embeddings.token_type_embeddings.weight", None,
                        (kwargs["type_vocab_size"], width)))
    if kwargs["embedding_size"]:
        entries.append((f"{ours}.projection.kernel", "embeddings.embed_proj.weight", tables.TRANSPOSE, (hidden, width)))
    entries += norm(f"{ours}.layer_norm", "embeddings.LayerNorm")
    if kwargs.get("pooler_activation") is not None:  # a sequence classifier's ContextPooler
        entries += dense("encoder.pooler", "pooler.dense", hidden, hidden)
    entries.append(("encoder.relative_embeddings.embeddings", "encoder.rel_embeddings.weight", None,
                    (2 * span, hidden)))
    if kwargs["relative_norm"] == "layer_norm":
        entries += norm("encoder.relative_embeddings.layer_norm", "encoder.LayerNorm")
    for i in range(kwargs["num_layers"]):
        ours, theirs = f"encoder.transformer_layers.{i}", f"encoder.layer.{i}"
        for name in ("query", "key", "value"):
            entries += dense(f"{ours}.attention.{name}_dense", f"{theirs}.attention.self.{name}_proj", hidden, hidden)
        if not kwargs["share_attention_key"]:
            if "c2p" in kwargs["position_attention"]:
                entries += dense(f"{ours}.attention.position_key_dense", f"{theirs}.attention.self.pos_key_proj",
                                 hidden, hidden)
            if "p2c" in kwargs["position_attention"]:
                entries += dense(f"{ours}.attention.position_query_dense", f"{theirs}.attention.self.pos_query_proj",
                                 hidden, hidden)
        entries += dense(f"{ours}.attention.output_dense", f"{theirs}.attention.output.dense", hidden, hidden)
        entries += norm(f"{ours}.attention_layer_norm", f"{theirs}.attention.output.LayerNorm")
        entries += dense(f"{ours}.feed_forward.intermediate_dense", f"{theirs}.intermediate.dense", inner, hidden)
        entries += dense(f"{ours}.feed_forward.output_dense", f"{theirs}.output.dense", hidden, inner)
        entries += norm(f"{ours}.feed_forward_layer_norm", f"{theirs}.output.LayerNorm")
    return entries


def _check_stored(source, entries, config_file):
    """Every tensor of the table is there with the shape the config gives it, before anything is read."""
    for _, name, _, shape in entries:
        if not source.has(name):
            raise CheckpointError(source.file, name, f"is missing: a DeBERTa of this config ({config_file}) needs it.")
        if tuple(source.shape(name)) != shape:
            raise CheckpointError(source.file_of(name), source.original_name(name), f"has shape "
                                  f"{tuple(source.shape(name))}, but {config_file} gives {shape}: the config does not "
                                  "belong to these weights.")


def _pooler_activation(config, kwargs, file):
    """The ContextPooler's activation (`pooler_hidden_act`); its width must be the hidden size."""
    width = config.get("pooler_hidden_size", kwargs["hidden_size"])
    if width != kwargs["hidden_size"]:
        raise ConfigError(file, "pooler_hidden_size", f"is {quoted(width)}; only the hidden size "
                          f"({kwargs['hidden_size']}) is supported, as in every released DeBERTa.")
    return translate_activation(config.get("pooler_hidden_act", "gelu"), tables.HF_ACTIVATIONS, file,
                                "pooler_hidden_act")


def _labels(source, heads, head_entries, config, config_file, hidden_size):
    """`(id2label, num_labels)`: a classifier head's, checked against its outputs, else the config's where readable."""
    if tables.CLASSIFIER in heads or tables.TOKEN_CLASSIFIER in heads:
        id2label = classifier_labels(source, head_entries, read_id2label(config, config_file), config_file,
                                     hidden_size)
        return id2label, len(id2label)
    try:
        id2label = read_id2label(config, config_file)
    except ConfigError:  # labels of no head read: they do not stop the encoder from loading
        id2label = None
    return id2label, (len(id2label) if id2label else None)


def read_deberta(path, *, with_heads=False):
    """Reads a DeBERTa-v2/v3 folder: `DebertaV3Encoder` arguments, its weights and the task head asked for.

    Args:
        path: str. A folder (or a file in one) with config.json
            (`model_type: deberta-v2`) and model.safetensors (or another
            weight file transformers writes); the `deberta.` prefix of the
            task models is dropped.
        with_heads: bool or list of head names, as `read_huggingface` takes
            it: the task heads asked for that `architectures` names
            (`TASK_ARCHITECTURES`) are read; the others are listed unused.

    Returns:
        `CheckpointWeights` with `encoder_kind="deberta"`.

    Raises:
        ConfigError: a config field this encoder cannot follow.
        CheckpointError: a tensor missing, of another shape than the config
            gives, or not finite floating point.
    """
    directory = os.path.dirname(path) if os.path.isfile(path) else path
    config_file = os.path.join(directory, CONFIG_FILE)
    config = read_json(config_file)
    kwargs = config_to_kwargs(config, config_file)
    architectures = read_architectures(config, config_file)
    named = {TASK_ARCHITECTURES[name] for name in architectures if name in TASK_ARCHITECTURES}
    source = open_weights(directory, prefix="deberta.")
    if tables.CLASSIFIER in named and source.has(POOLER_WEIGHT):
        kwargs["pooler_activation"] = _pooler_activation(config, kwargs, config_file)
    entries = weight_table(kwargs)
    _check_stored(source, entries, config_file)
    heads = [part for part in wanted_heads(with_heads) if part in named]
    head_entries = [entry for part in heads for entry in tables.HF_WEIGHTS[part]]
    for _, name, _ in head_entries:
        if not source.has(name):
            raise CheckpointError(source.file, name, f"is missing: {', '.join(architectures)} holds it.")
    id2label, num_labels = _labels(source, heads, head_entries, config, config_file, kwargs["hidden_size"])
    arrays, origins, summary = read_entries(source, entries + [(*entry, None) for entry in head_entries])
    return CheckpointWeights(
        encoder_configs=[kwargs], arrays=arrays, origins=origins, heads=heads, mlm_activation=kwargs["activation"],
        vocab_file=None, do_lower_case=False, summary=summary, architectures=architectures, id2label=id2label,
        num_labels=num_labels, tokenizer_kind=TOKENIZER_KIND, tokenizer_folder=directory, encoder_kind=ENCODER_KIND,
    )
