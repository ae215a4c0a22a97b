"""A ModernBERT folder as transformers 5 saves it (`ModernBertModel`, `ModernBertForMaskedLM`, its task models) ->
`ModernBertEncoder` arguments and the encoder's weights in our layout.

The config's names are translated here (`config_to_kwargs`); the weight names are a table of
`(target, source, transform)` per block (`weight_table`): the first block has no `attn_norm`, and the biases are
there only where the config's `attention_bias`, `mlp_bias` and `norm_bias` say so.

Every task model of ModernBERT puts the same `head` (transformers' `ModernBertPredictionHead`: dense with
`classifier_bias`, `classifier_activation`, LayerNorm with `norm_bias`) before its output layer; each is read where
config.json's `architectures` names its class and the head is asked for (`with_heads`, `TASK_ARCHITECTURES`):
- `ModernBertForSequenceClassification` (`"classifier"`): `head` on the pooled token(s) as the encoder's pooler
  (`use_pooler`), `classifier` as our `ClassificationHead`;
- `ModernBertForTokenClassification` (`"token_classifier"`) and `ModernBertForQuestionAnswering` (`"span"`: its
  `classifier` of 2 outputs, start and end): `head` on every token as the head's `PredictionTransform`
  (`transform=`), `classifier` as its dense layer;
- `ModernBertForMaskedLM` (`"mlm"`): `head` as `MaskedLMHead`'s transform, `decoder.bias` as its output bias, the
  decoder's matrix tied to the word embeddings (a folder that unties them keeps its head unread, saying so).
The options each head needs beyond its defaults travel in `CheckpointWeights.head_options`.
"""

import logging
import os

import numpy as np

from bert_keras._checks import quoted
from bert_keras.formats import tables
from bert_keras.formats._common import (
    CheckpointError,
    CheckpointWeights,
    ConfigError,
    check_vocabulary,
    encoder_kwargs,
    read_entries,
    read_json,
    read_tokenizer,
    read_tensors,
    translate_activation,
)
from bert_keras.formats._read import wanted_heads
from bert_keras.formats.huggingface import CONFIG_FILE, classifier_labels, open_weights, read_id2label

logger = logging.getLogger("bert_keras.checkpoints")

MODEL_TYPE = "modernbert"
ENCODER_KIND = "modernbert"
TOKENIZER_KIND = "modernbert_bpe"  # `bert_keras.text.ModernBertTokenizer`
# Our argument -> ModernBertConfig's key, for the sizes and numbers `encoder_kwargs` checks.
CONFIG_KEYS = {
    "vocab_size": "vocab_size",
    "num_layers": "num_hidden_layers",
    "hidden_size": "hidden_size",
    "num_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "max_sequence_length": "max_position_embeddings",
    "layer_norm_epsilon": "norm_eps",
    "attention_dropout": "attention_dropout",
    "initializer_range": "initializer_range",
}
# ModernBertConfig's defaults, for keys a config.json may leave out.
DEFAULTS = {"max_sequence_length": 8192, "layer_norm_epsilon": 1e-5, "attention_dropout": 0.0,
            "initializer_range": 0.02}
# Our flag -> the config's key (each defaults to false in ModernBertConfig).
BIAS_FLAGS = {"use_attention_bias": "attention_bias", "use_mlp_bias": "mlp_bias", "use_norm_bias": "norm_bias"}
_RATES = {"embedding_dropout": "embedding_dropout", "mlp_dropout": "mlp_dropout"}
_THETAS = {"global_rope_theta": ("full_attention", "global_rope_theta", 160000.0),
           "local_rope_theta": ("sliding_attention", "local_rope_theta", 10000.0)}
_LAYER_TYPES = ("full_attention", "sliding_attention")
SEQUENCE_CLASSIFIER = "ModernBertForSequenceClassification"
# transformers' ModernBERT classes -> the head each holds.
TASK_ARCHITECTURES = {
    SEQUENCE_CLASSIFIER: tables.CLASSIFIER,
    "ModernBertForTokenClassification": tables.TOKEN_CLASSIFIER,
    "ModernBertForQuestionAnswering": tables.SPAN,
    "ModernBertForMaskedLM": tables.MLM,
}


def is_modernbert(path):
    """Whether `path` (a folder, or a file in one) holds a config.json whose `model_type` is ModernBERT's."""
    directory = os.path.dirname(path) if os.path.isfile(path) else path
    config_file = os.path.join(directory, CONFIG_FILE)
    if not os.path.isfile(config_file):
        return False
    return read_json(config_file).get("model_type") == MODEL_TYPE


def _flag(config, key, file, default=False):
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(file, key, f"expected true or false, found {quoted(value)}.")
    return value


def _rate(config, key, file):
    value = config.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ConfigError(file, key, f"expected a dropout rate in [0, 1), found {quoted(value)}.")
    return float(value)


def _layer_types(config, num_layers, file):
    """transformers 5's `layer_types`, else the pattern of the older `global_attn_every_n_layers` (default 3)."""
    layer_types = config.get("layer_types")
    if layer_types is None:
        every = config.get("global_attn_every_n_layers", 3)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ConfigError(file, "global_attn_every_n_layers", f"expected a positive integer, found {quoted(every)}.")
        return [_LAYER_TYPES[1] if i % every else _LAYER_TYPES[0] for i in range(num_layers)]
    if (not isinstance(layer_types, list) or len(layer_types) != num_layers
            or any(kind not in _LAYER_TYPES for kind in layer_types)):
        raise ConfigError(file, "layer_types", f"expected {num_layers} (num_hidden_layers) entries, each "
                          f"'full_attention' or 'sliding_attention', found {quoted(layer_types)}.")
    return list(layer_types)


def _rope_theta(config, ours, file):
    """A layer kind's theta: transformers 5's `rope_parameters[kind]`, else the older `global_/local_rope_theta`."""
    kind, legacy, default = _THETAS[ours]
    parameters = (config.get("rope_parameters") or {}).get(kind)
    if parameters is None:
        theta, field = config.get(legacy, default), legacy
    else:
        rope_type = parameters.get("rope_type", "default")
        if rope_type != "default":
            raise ConfigError(file, "rope_parameters", f"{kind} has rope_type {quoted(rope_type)}; only 'default' "
                              "(plain RoPE, as every released ModernBERT) is supported.")
        theta, field = parameters.get("rope_theta", default), "rope_parameters"
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
        raise ConfigError(file, field, f"expected a positive rope_theta for {kind}, found {quoted(theta)}.")
    return float(theta)


def config_to_kwargs(config, file):
    """Translates a `ModernBertConfig` dict to `ModernBertEncoder` arguments.

    Raises:
        ConfigError: naming the file and the field at fault.
    """
    kwargs = encoder_kwargs(config, CONFIG_KEYS, file, defaults=DEFAULTS)
    kwargs["activation"] = translate_activation(config.get("hidden_activation", "gelu"), tables.HF_ACTIVATIONS, file,
                                                "hidden_activation")
    kwargs["layer_types"] = _layer_types(config, kwargs["num_layers"], file)
    window = config.get("local_attention", 128)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ConfigError(file, "local_attention", f"expected a positive integer, found {quoted(window)}.")
    kwargs["local_attention"] = window
    for ours in _THETAS:
        kwargs[ours] = _rope_theta(config, ours, file)
    for ours, theirs in BIAS_FLAGS.items():
        kwargs[ours] = _flag(config, theirs, file)
    for ours, theirs in _RATES.items():
        kwargs[ours] = _rate(config, theirs, file)
    pooling = config.get("classifier_pooling", "cls")
    if pooling not in ("cls", "mean"):
        raise ConfigError(file, "classifier_pooling", f"expected 'cls' or 'mean', found {quoted(pooling)}.")
    kwargs["pooling"] = pooling
    if kwargs["hidden_size"] % kwargs["num_heads"] or (kwargs["hidden_size"] // kwargs["num_heads"]) % 2:
        raise ConfigError(file, "num_attention_heads", f"is {kwargs['num_heads']}, which does not divide "
                          f"hidden_size={kwargs['hidden_size']} into heads of even size (RoPE rotates pairs).")
    return kwargs


def weight_table(kwargs):
    """`(target, source, transform, shape)` of every tensor the encoder reads; `shape` is the stored one."""
    hidden, inner, vocab = kwargs["hidden_size"], kwargs["intermediate_size"], kwargs["vocab_size"]
    norm_bias, attention_bias, mlp_bias = (kwargs[flag] for flag in ("use_norm_bias", "use_attention_bias",
                                                                     "use_mlp_bias"))

    def norm(target, source):
        entries = [(f"{target}.gamma", f"{source}.weight", None, (hidden,))]
        return entries + ([(f"{target}.beta", f"{source}.bias", None, (hidden,))] if norm_bias else [])

    def dense(target, source, units, inputs, bias):
        entries = [(f"{target}.kernel", f"{source}.weight", tables.TRANSPOSE, (units, inputs))]
        return entries + ([(f"{target}.bias", f"{source}.bias", None, (units,))] if bias else [])

    entries = [("encoder.embeddings.word_embeddings.embeddings", "embeddings.tok_embeddings.weight", None,
                (vocab, hidden))]
    entries += norm("encoder.embeddings.layer_norm", "embeddings.norm")
    for i in range(kwargs["num_layers"]):
        ours, theirs = f"encoder.transformer_layers.{i}", f"layers.{i}"
        if i > 0:  # the first block's attn_norm is an Identity: the embeddings end with a LayerNorm
            entries += norm(f"{ours}.attention_layer_norm", f"{theirs}.attn_norm")
        entries += dense(f"{ours}.attention.qkv_dense", f"{theirs}.attn.Wqkv", 3 * hidden, hidden, attention_bias)
        entries += dense(f"{ours}.attention.output_dense", f"{theirs}.attn.Wo", hidden, hidden, attention_bias)
        entries += norm(f"{ours}.feed_forward_layer_norm", f"{theirs}.mlp_norm")
        entries += dense(f"{ours}.feed_forward.intermediate_dense", f"{theirs}.mlp.Wi", 2 * inner, hidden, mlp_bias)
        entries += dense(f"{ours}.feed_forward.output_dense", f"{theirs}.mlp.Wo", hidden, inner, mlp_bias)
    entries += norm("encoder.final_layer_norm", "final_norm")
    if kwargs.get("use_pooler"):  # the sequence classifier's `head`, read as the encoder's pooler
        entries += dense("encoder.pooler_dense", "head.dense", hidden, hidden, kwargs["pooler_bias"])
        entries += norm("encoder.pooler_layer_norm", "head.norm")
    return entries


def _check_stored(source, entries, config_file):
    """Every tensor of the table is there with the shape the config gives it, before anything is read."""
    for _, name, _, shape in entries:
        if not source.has(name):
            raise CheckpointError(source.file, name, f"is missing: a ModernBERT of this config ({config_file}) needs "
                                  "it.")
        if tuple(source.shape(name)) != shape:
            raise CheckpointError(source.file_of(name), source.original_name(name), f"has shape "
                                  f"{tuple(source.shape(name))}, but {config_file} gives {shape}: the config does not "
                                  "belong to these weights.")


def _check_tokenizer(directory, source):
    """The folder's byte-level BPE (its vocab.json, else tokenizer.json) must have a token per embedding row."""
    found, tokens = read_tokenizer(TOKENIZER_KIND, directory)
    name = "embeddings.tok_embeddings.weight"
    if tokens is not None and len(tokens) > source.shape(name)[0]:
        check_vocabulary(found.file, tokens, source.file_of(name), source.original_name(name), source.shape(name)[0])


def _prediction_head(target, kwargs, transform_names):
    """`(target, source, transform, shape)` of `ModernBertPredictionHead` (`head.`) under our `target`'s names."""
    hidden = kwargs["hidden_size"]
    dense, norm = transform_names
    entries = [(f"{target}.{dense}.kernel", "head.dense.weight", tables.TRANSPOSE, (hidden, hidden))]
    if kwargs["classifier_bias"]:
        entries.append((f"{target}.{dense}.bias", "head.dense.bias", None, (hidden,)))
    entries.append((f"{target}.{norm}.gamma", "head.norm.weight", None, (hidden,)))
    if kwargs["use_norm_bias"]:
        entries.append((f"{target}.{norm}.beta", "head.norm.bias", None, (hidden,)))
    return entries


def _head_settings(config, config_file, kwargs):
    """The prediction head's `classifier_bias`, `classifier_activation` and `classifier_dropout`."""
    return dict(classifier_bias=_flag(config, "classifier_bias", config_file),
                classifier_activation=translate_activation(config.get("classifier_activation", "gelu"),
                                                           tables.HF_ACTIVATIONS, config_file, "classifier_activation"),
                classifier_dropout=_rate(config, "classifier_dropout", config_file))


def _task_head(part, source, config, config_file, kwargs, settings):
    """`(entries, options, id2label)` of a token classifier's or a QA model's head: `head` then `classifier`."""
    hidden = kwargs["hidden_size"]
    options = {"transform": {"activation": settings["classifier_activation"],
                             "use_bias": settings["classifier_bias"], "use_norm_bias": kwargs["use_norm_bias"],
                             "layer_norm_epsilon": kwargs["layer_norm_epsilon"]}}
    entries = _prediction_head(part, dict(kwargs, **settings), ("transform.dense", "transform.layer_norm"))
    head = [(f"{part}.dense.kernel", "classifier.weight", tables.TRANSPOSE),
            (f"{part}.dense.bias", "classifier.bias", None)]
    if part == tables.SPAN:
        outputs, id2label = 2, None
    else:
        options["dropout"] = settings["classifier_dropout"]
        id2label = classifier_labels(source, head, read_id2label(config, config_file), config_file, hidden)
        outputs = len(id2label)
    stored = {"classifier.weight": (outputs, hidden), "classifier.bias": (outputs,)}
    return entries + [(target, name, transform, stored[name]) for target, name, transform in head], options, id2label


def _masked_lm_head(source, config, config_file, kwargs, settings):
    """`(entries, options)` of `ModernBertForMaskedLM`'s head, or None where its decoder is not the embeddings."""
    if not _flag(config, "tie_word_embeddings", config_file, default=True) or (
            source.has("decoder.weight") and not _same_tensor(source, "decoder.weight")):
        logger.warning("%s: its masked-LM decoder is not tied to the word embeddings (tie_word_embeddings is false); "
                       "MaskedLMHead scores against the embeddings, so the head is left unread.", config_file)
        return None
    entries = _prediction_head(tables.MLM, dict(kwargs, **settings), ("transform_dense", "layer_norm"))
    decoder_bias = _flag(config, "decoder_bias", config_file, default=True)
    if decoder_bias:
        entries.append(("mlm.output_bias", "decoder.bias", None, (kwargs["vocab_size"],)))
    options = {"use_transform_bias": settings["classifier_bias"], "use_norm_bias": kwargs["use_norm_bias"],
               "use_output_bias": decoder_bias}
    return entries, options


def _same_tensor(source, name):
    """Whether the stored `name` equals the word embeddings (a tied decoder written twice)."""
    stored = read_tensors(source, [name, "embeddings.tok_embeddings.weight"])
    first, second = stored[name], stored["embeddings.tok_embeddings.weight"]
    return first.shape == second.shape and bool(np.array_equal(first, second))


def read_modernbert(path, *, with_heads=False):
    """Reads a ModernBERT folder: `ModernBertEncoder` arguments, its weights and the task head asked for.

    Args:
        path: str. A folder (or a file in one) with config.json
            (`model_type: modernbert`) and model.safetensors (or another
            weight file transformers writes); the `model.` prefix of
            `ModernBertForMaskedLM` and the task models is dropped.
        with_heads: bool or list of head names (`read_checkpoint`'s): the
            head asked for that `architectures` names (`TASK_ARCHITECTURES`)
            is read (see the module's docstring); the others are listed unused.

    Returns:
        `CheckpointWeights` with `encoder_kind="modernbert"`.

    Raises:
        ConfigError: a config field this encoder cannot follow.
        CheckpointError: a tensor missing, of another shape than the config
            gives, or not finite floating point.
    """
    directory = os.path.dirname(path) if os.path.isfile(path) else path
    config_file = os.path.join(directory, CONFIG_FILE)
    config = read_json(config_file)
    kwargs = config_to_kwargs(config, config_file)
    source = open_weights(directory, prefix="model.")
    architectures = config.get("architectures") or []
    architectures = [a for a in architectures if isinstance(a, str)] if isinstance(architectures, list) else []
    named = {TASK_ARCHITECTURES[name] for name in architectures if name in TASK_ARCHITECTURES}
    wanted = [part for part in wanted_heads(with_heads) if part in named]
    settings = _head_settings(config, config_file, kwargs) if wanted else None
    classifier = tables.CLASSIFIER in wanted
    if classifier:
        kwargs.update(use_pooler=True, pooler_bias=settings["classifier_bias"],
                      pooler_activation=settings["classifier_activation"])
    entries = weight_table(kwargs)
    _check_stored(source, entries, config_file)
    _check_tokenizer(directory, source)
    id2label = num_labels = None
    heads, head_options = [tables.CLASSIFIER] if classifier else [], {}
    for part in (tables.TOKEN_CLASSIFIER, tables.SPAN):
        if part in wanted:
            head_entries, head_options[part], labels = _task_head(part, source, config, config_file, kwargs, settings)
            _check_stored(source, head_entries, config_file)
            entries += head_entries
            heads.append(part)
            if labels is not None:
                id2label, num_labels = labels, len(labels)
    if tables.MLM in wanted:
        masked_lm = _masked_lm_head(source, config, config_file, kwargs, settings)
        if masked_lm is not None:
            _check_stored(source, masked_lm[0], config_file)
            entries += masked_lm[0]
            head_options[tables.MLM] = masked_lm[1]
            heads.append(tables.MLM)
    if classifier:
        head = [("classifier.dense.kernel", "classifier.weight", tables.TRANSPOSE),
                ("classifier.dense.bias", "classifier.bias", None)]
        id2label = classifier_labels(source, head, read_id2label(config, config_file), config_file,
                                     kwargs["hidden_size"])
        num_labels = len(id2label)
        stored = {"classifier.weight": (num_labels, kwargs["hidden_size"]), "classifier.bias": (num_labels,)}
        entries += [(target, name, transform, stored[name]) for target, name, transform in head]
        _check_stored(source, entries[-2:], config_file)
    arrays, origins, summary = read_entries(source, entries)
    return CheckpointWeights(
        encoder_configs=[kwargs], arrays=arrays, origins=origins, heads=heads,
        mlm_activation=settings["classifier_activation"] if settings else kwargs["activation"], vocab_file=None, do_lower_case=False, summary=summary,
        architectures=architectures, id2label=id2label, num_labels=num_labels,
        tokenizer_kind=TOKENIZER_KIND, tokenizer_folder=directory, encoder_kind=ENCODER_KIND,
        head_options=head_options,
    )
