"""LoRA (low-rank adaptation, Hu et al., 2021) for the native `BertEncoder`.

`enable_lora` gives chosen projections of every Transformer block LoRA
adapters. Each projection is a `bert_keras.layers.LoraDense` (a Keras
`Dense` with Keras' own `enable_lora`), which then computes
`x @ (kernel + alpha / rank * A @ B)` with `A` `(in, rank)` (He-uniform)
and `B` `(rank, out)` (zeros, so the encoder starts out unchanged). Every
other encoder variable is frozen for good (`keras_private.freeze_for_good`:
Keras has no public freeze that outlasts `layer.trainable = True`), so that
fine-tuning's phase 2 (`encoder.trainable = True`) trains the adapters (and
the head) only, and phase 1 (`encoder.trainable = False`) the head alone.

The adapters are weights of their layers: a weights file (`save_weights`,
a `.keras` file, the training backups) keeps the kernels, the biases and
the adapters exactly, and a resumed run continues as an uninterrupted one.
Such a file loads as it was into a model with the same LoRA; into a model
without LoRA it loads as the merged model (so does a `.keras` file through
`keras.saving.load_model`: the encoder's config does not record LoRA).

`merge_lora` folds the adapters into the kernels and removes every trace of
LoRA (variables, config, the freeze): the model is then an ordinary one, of
the ordinary speed, and exports as one (`saved_model.export_classifier`).
`save_adapters` / `load_adapters` keep the adapters alone (a small
safetensors file, addressed by name, with the rank, alpha and targets
recorded and checked).
"""

import dataclasses
import json
import logging
import os
import sys

import keras
import numpy as np
from keras import ops
from safetensors.numpy import load_file, save_file

from bert_keras import hub
from bert_keras._checks import check_choice, check_int, check_positive_float, check_positive_int
from bert_keras._files import read_marker, staged_directory
from bert_keras._platform.keras_private import freeze_for_good, thaw
from bert_keras.formats.sources import read_safetensors_header
from bert_keras.encoder import BertEncoder

logger = logging.getLogger(__name__)

# Target name -> where its `LoraDense` sits in a `TransformerEncoderBlock` (attribute names).
LORA_TARGETS = {
    "query": ("attention", "query_dense"),
    "key": ("attention", "key_dense"),
    "value": ("attention", "value_dense"),
    "attention_output": ("attention", "output_dense"),
    "intermediate": ("feed_forward", "intermediate_dense"),
    "output": ("feed_forward", "output_dense"),
}
DEFAULT_TARGETS = ("query", "value")
MAX_SCALE = 1e3  # the largest adapter scale (alpha / rank) `load_adapters` accepts
ADAPTERS_FILE = "adapters.safetensors"
CONFIG_FILE = "adapter_config.json"
FORMAT = "bert_keras.lora"
# What an adapter config records (all required), and the tensor dtypes an adapters file may hold.
CONFIG_FIELDS = ("format", "rank", "alpha", "targets", "num_layers", "hidden_size", "intermediate_size")
ADAPTER_DTYPES = ("F16", "F32", "F64")


@dataclasses.dataclass(frozen=True)
class LoraSummary:
    """What `enable_lora` did.

    Attributes:
        rank: int. The adapters' rank.
        alpha: float. Their scale is `alpha / rank`.
        targets: tuple of str. The target names, in `LORA_TARGETS` order.
        num_layers: int. Dense layers with adapters (`len(targets)` per block).
        adapter_parameters: int. Trainable adapter parameters.
        encoder_parameters: int. The encoder's parameters without adapters.
    """

    rank: int
    alpha: float
    targets: tuple
    num_layers: int
    adapter_parameters: int
    encoder_parameters: int

    @property
    def share(self):
        """Adapter parameters per encoder parameter (e.g. 0.0032 for 0.32%)."""
        return self.adapter_parameters / self.encoder_parameters


def check_lora_targets(targets):
    """The target names as a tuple, checked: a comma-separated string or a sequence of names.

    >>> check_lora_targets("query,value")
    ('query', 'value')
    >>> check_lora_targets(["query", "values"])
    Traceback (most recent call last):
    ...
    ValueError: Received an invalid value for argument `lora_targets`, expected one of ['query', 'key', ...]. Received: lora_targets='values'
    """
    if isinstance(targets, str):
        targets = [name.strip() for name in targets.split(",")]
    names = tuple(dict.fromkeys(targets))  # duplicates once, in order
    if not names:
        raise ValueError(
            f"Received an invalid value for argument `lora_targets`, expected at least one of {list(LORA_TARGETS)}. "
            f"Received: lora_targets={targets!r}"
        )
    for name in names:
        check_choice("lora_targets", name, LORA_TARGETS)
    return names


def find_encoder(model):
    """The native `BertEncoder` of `model` (the encoder itself, a task's `.encoder`, or the one inside).

    Raises:
        ValueError: the encoder is a Hub module layer (LoRA needs the native
            encoder; the message says how to import the module), or `model`
            holds no `BertEncoder`, or several.
    """
    if isinstance(model, BertEncoder):
        return model
    if isinstance(model, hub.KerasLayer):
        _refuse_hub_layer(model)
    found = getattr(model, "encoder", None)
    if found is not None and found is not model:
        return find_encoder(found)
    encoders, hub_layers = [], []
    for layer in _inner_layers(model):
        if isinstance(layer, BertEncoder):
            encoders.append(layer)
        elif isinstance(layer, hub.KerasLayer):
            hub_layers.append(layer)
    if len(encoders) == 1:
        return encoders[0]
    if not encoders and hub_layers:
        _refuse_hub_layer(hub_layers[0])
    raise ValueError(
        f"LoRA needs a model with exactly one bert_keras.BertEncoder; {type(model).__name__} "
        f"{getattr(model, 'name', '')!r} holds {len(encoders)}. Pass the encoder itself."
    )


def _inner_layers(model):
    """The layers inside `model`, depth first, as far as `keras.Model.layers` shows them (not inside an encoder)."""
    for layer in model.layers if isinstance(model, keras.Model) else ():
        yield layer
        if not isinstance(layer, BertEncoder):
            yield from _inner_layers(layer)


def _refuse_hub_layer(layer):
    handle = layer.handle if isinstance(layer.handle, (str, os.PathLike)) else "<encoder module dir>"
    raise ValueError(
        f"LoRA needs the native bert_keras.BertEncoder, not a Hub module layer (bert_keras.hub.KerasLayer "
        f"{layer.name!r} of {handle!r}): a module's kernels are SavedModel variables, not Keras Dense layers. "
        f"Import the module into a BertEncoder first: `encoder = BertEncoder.from_checkpoint({os.fspath(handle)!r})` "
        "(for a module pair, the pair's `encoder/` directory), then build the model on that encoder, e.g. "
        "`BertClassifier(encoder, num_classes, preprocessor=hub.PreprocessLayer(<pair>/preprocess))`."
    )


def _target_layer(block, target):
    parent, attribute = LORA_TARGETS[target]
    return getattr(getattr(block, parent), attribute)


def _lora_layers(encoder):
    """`{"<block>/<target>": LoraDense}` of the projections with LoRA, block by block, in `LORA_TARGETS` order."""
    layers = {}
    for block in encoder.transformer_layers:
        for target in LORA_TARGETS:
            layer = _target_layer(block, target)
            if layer.lora_enabled:
                layers[f"{block.name}/{target}"] = layer
    return layers


def _summary(encoder, layers):
    """The `LoraSummary` of `layers` (`_lora_layers(encoder)`, not empty): the layers are the record."""
    first = next(iter(layers.values()))
    adapter_parameters = sum(int(np.prod(w.shape)) for layer in layers.values() for w in layer.lora_weights)
    return LoraSummary(
        rank=int(first.lora_rank),
        alpha=float(first.lora_alpha),
        targets=tuple(dict.fromkeys(name.split("/")[-1] for name in layers)),
        num_layers=len(layers),
        adapter_parameters=adapter_parameters,
        encoder_parameters=encoder.count_params() - adapter_parameters,
    )


def lora_summary(model):
    """The `LoraSummary` of the LoRA enabled on `model`'s encoder, or None without LoRA."""
    encoder = find_encoder(model)
    layers = _lora_layers(encoder)
    return _summary(encoder, layers) if layers else None


def enable_lora(model, rank=8, targets=DEFAULT_TARGETS, alpha=None, seed=None):
    """Adds LoRA adapters to the encoder of `model` and freezes every other encoder variable.

    On each block's target `LoraDense` layers, `enable_lora` adds
    `lora_kernel_a` `(in, rank)` and `lora_kernel_b` `(rank, out)` (zeros:
    the outputs are unchanged until training moves them). All other encoder
    variables (embeddings, LayerNorms, biases, the pooler, the kernels) are
    frozen so that `encoder.trainable = True` leaves only the adapters
    trainable; layers outside the encoder (a task's head) are untouched.
    Call it before compiling; `merge_lora` undoes it (adapters folded in).

    Args:
        model: a `BertEncoder`, or a model holding one (e.g. a
            `BertClassifier`; its `.encoder` is used). Not a Hub module layer:
            import the module with `BertEncoder.from_checkpoint(<module dir>)`.
        rank: int. The adapters' rank. Defaults to `8`.
        targets: names from `LORA_TARGETS` (or a comma-separated string).
            Defaults to `("query", "value")`, as the LoRA paper.
        alpha: optional positive float. The adapters are scaled by
            `alpha / rank`. Defaults to `rank` (a scale of 1).
        seed: optional int. Seeds the initialisation of the `A` matrices
            (each layer its own stream). Defaults to Keras' global seeding.

    Returns:
        A `LoraSummary` (also logged): the trainable adapter parameters and
        their share of the encoder's.

    Raises:
        ValueError: a bad `rank` (named `lora_rank`), `alpha` or target name,
            a Hub module layer, LoRA already enabled, or a quantized encoder.

    Example:
    >>> encoder = BertEncoder(vocab_size=50, num_layers=2, hidden_size=16,
    ...                       num_heads=2, intermediate_size=32)
    >>> summary = enable_lora(encoder, rank=4, targets=("query", "value"))
    >>> summary.adapter_parameters, len(encoder.trainable_weights)
    (512, 8)
    >>> encoder.trainable = True  # as fine-tuning's phase 2 does
    >>> sum(int(np.prod(w.shape)) for w in encoder.trainable_weights)
    512
    """
    rank = check_positive_int("lora_rank", rank)
    alpha = float(rank) if alpha is None else check_positive_float("lora_alpha", alpha)
    targets = check_lora_targets(targets)
    targets = tuple(target for target in LORA_TARGETS if target in targets)
    if seed is not None:
        seed = check_int("seed", seed)
    encoder = find_encoder(model)
    enabled = lora_summary(encoder)
    if enabled is not None:
        raise ValueError(
            f"LoRA is already enabled on encoder {encoder.name!r} (rank {enabled.rank} on "
            f"{', '.join(enabled.targets)}). Call merge_lora(model) first, or build a new model."
        )
    layers = [_target_layer(block, target) for block in encoder.transformer_layers for target in targets]
    for layer in layers:
        if layer.quantization_mode is not None:
            raise ValueError(
                f"LoRA on a quantized encoder ({layer.path}: {layer.quantization_mode}) is not supported. "
                "Train the adapters on the float encoder, merge_lora(model), then quantize."
            )
    for index, layer in enumerate(layers):
        a_initializer = keras.initializers.HeUniform(seed=None if seed is None else seed + index)
        layer.enable_lora(rank, lora_alpha=alpha, a_initializer=a_initializer, b_initializer="zeros")
    freeze_for_good(encoder, keep=[weight for layer in layers for weight in layer.lora_weights])
    summary = lora_summary(encoder)
    logger.info(
        "LoRA rank %d (alpha %g) on %s of %d blocks: %s trainable adapter parameters, %.2f%% of the encoder's %s",
        rank, alpha, ", ".join(targets), len(encoder.transformer_layers),
        f"{summary.adapter_parameters:,}", 100 * summary.share, f"{summary.encoder_parameters:,}",
    )
    return summary


def _lora_state(model, action):
    """`(encoder, its _lora_layers)`, or a ValueError saying that `action` needs LoRA enabled."""
    encoder = find_encoder(model)
    layers = _lora_layers(encoder)
    if not layers:
        raise ValueError(
            f"Cannot {action}: LoRA is not enabled on encoder {encoder.name!r}. Call enable_lora(model) first."
        )
    return encoder, layers


def merge_lora(model):
    """Folds the adapters into the kernels, in place, and removes LoRA from `model`; returns `model`.

    Each target kernel becomes `kernel + alpha / rank * A @ B` (computed in
    float32 as Keras' LoRA layer does, stored in the kernel's dtype; see
    `LoraDense.merge_lora`); the adapter variables, the LoRA config entries
    (`lora_rank`, `lora_alpha`), the exact-state weight saving and the
    permanent freeze are removed, so the model has the variables, config,
    weights-file format and speed of one that never had LoRA, and every
    variable trains again with its layer's `trainable` flag. Outputs equal
    the unmerged model's to float rounding.

    In place rather than a new model: merging is the step before export, a
    copy would hold the encoder twice in memory and need every layer of the
    model (the preprocessor's vocabulary, the dtype policy) to round-trip
    through its config; and `model` stays the object the caller (and a
    fine-tuning result) holds. Call `save_adapters` first to keep the
    adapters on their own.

    Args:
        model: a model whose encoder has LoRA enabled (see `enable_lora`).

    Returns:
        `model`, merged.
    """
    encoder, layers = _lora_state(model, "merge the adapters")
    for layer in layers.values():
        layer.merge_lora()
    thaw(encoder)
    logger.info("Merged the LoRA adapters of %d layers into their kernels", len(layers))
    return model


def save_adapters(model, path, overwrite=False):
    """Writes the adapters of `model` alone: `path/adapters.safetensors` and `path/adapter_config.json`.

    The tensors are named `<block>/<target>/lora_kernel_a` (and `_b`), e.g.
    `transformer_layer_0/query/lora_kernel_a`; the config records the rank,
    alpha, targets and the encoder's shape, which `load_adapters` checks. The
    directory is written as every output of the package (`_files.staged_directory`):
    whole or not at all, never over a directory bert_keras did not write.

    Args:
        model: a model whose encoder has LoRA enabled.
        path: str. The output directory.
        overwrite: bool. Replace an earlier output at `path`. Defaults to `False`.

    Returns:
        `path`.
    """
    encoder, layers = _lora_state(model, "save adapters")
    summary = _summary(encoder, layers)
    tensors = {}
    for prefix, layer in layers.items():
        tensors[f"{prefix}/lora_kernel_a"] = ops.convert_to_numpy(layer.lora_kernel_a)
        tensors[f"{prefix}/lora_kernel_b"] = ops.convert_to_numpy(layer.lora_kernel_b)
    config = {
        "format": FORMAT,
        "rank": summary.rank,
        "alpha": summary.alpha,
        "targets": list(summary.targets),
        "num_layers": encoder.num_layers,
        "hidden_size": encoder.hidden_size,
        "intermediate_size": encoder.intermediate_size,
        "adapter_parameters": summary.adapter_parameters,
    }
    path = os.fspath(path)
    with staged_directory(path, overwrite, kind="lora_adapters", info={"format": FORMAT}, argument="path") as staging:
        save_file(tensors, os.path.join(staging, ADAPTERS_FILE))
        with open(os.path.join(staging, CONFIG_FILE), "w") as f:
            json.dump(config, f, indent=2)
    logger.info("Saved %s adapter parameters to %s", f"{summary.adapter_parameters:,}", path)
    return path


def _invalid_field(file, field, expected, value):
    return ValueError(
        f"{file}: Received an invalid value for `{field}`, expected {expected}. Received: {field}={value!r}"
    )


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _read_adapter_config(path):
    """The checked `adapter_config.json` of an adapters directory: every field present and of its kind.

    The rank is checked against the model later (`_check_rank`). Returns `(config, config_file)`.
    """
    marker = read_marker(path)
    if marker is None or marker.get("kind") != "lora_adapters":
        raise ValueError(f"{path!r} is not an adapters directory written by bert_keras.lora.save_adapters.")
    config_file = os.path.join(path, CONFIG_FILE)
    try:
        with open(config_file, encoding="utf-8") as f:
            config = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{config_file}: no such file; the adapters directory is incomplete.") from None
    except (ValueError, RecursionError) as error:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{config_file} is not valid JSON ({error}).") from None
    if not isinstance(config, dict):
        found = "list" if isinstance(config, list) else type(config).__name__
        raise ValueError(f"{config_file}: expected a JSON object, found a {found}.")
    if config.get("format", FORMAT) != FORMAT:
        raise ValueError(f"{config_file!r} is not a {FORMAT} adapter config: {config!r}")
    for field in CONFIG_FIELDS:
        if field not in config:
            raise ValueError(
                f"{config_file}: the field `{field}` is missing; an adapter config records "
                f"{', '.join(CONFIG_FIELDS[:-1])} and {CONFIG_FIELDS[-1]}."
            )
    for field in ("num_layers", "hidden_size", "intermediate_size"):
        if not _is_count(config[field]):
            raise _invalid_field(config_file, field, "a positive integer", config[field])
    alpha = config["alpha"]
    # Compared, never converted: an integer of 400 digits has no float (OverflowError); NaN fails every comparison.
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha <= sys.float_info.max:
        raise _invalid_field(config_file, "alpha", "a positive finite number", alpha)
    if _is_count(config.get("rank")) and alpha / MAX_SCALE > config["rank"]:  # a huge rank is compared exactly too
        # alpha / rank scales the adapters' product; papers use 0.5-16. Far beyond, float32 overflows to inf / NaN.
        raise _invalid_field(config_file, "alpha", f"at most {MAX_SCALE:g} times the rank (the adapters' scale)", alpha)
    targets = config["targets"]
    if (not isinstance(targets, list) or not targets or len(set(map(str, targets))) != len(targets)
            or any(not isinstance(t, str) or t not in LORA_TARGETS for t in targets)):
        raise _invalid_field(
            config_file, "targets", f"a non-empty list of target names from {list(LORA_TARGETS)}, each once", targets
        )
    return config, config_file


def _kernel_shapes(encoder, targets):
    """`{target: (inputs, outputs)}` of the target kernels (every block has the same)."""
    block = encoder.transformer_layers[0]
    return {target: tuple(int(n) for n in _target_layer(block, target).base_kernel.shape) for target in targets}


def _check_rank(config, config_file, kernels):
    """The recorded rank, checked to lie in [1, the smallest side of the target kernels] before any allocation."""
    rank, largest = config["rank"], min(min(shape) for shape in kernels.values())
    names = list(kernels)
    joined = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    if not _is_count(rank) or rank > largest:
        raise _invalid_field(
            config_file, "rank", f"an integer from 1 to {largest} (the smallest side of the model's {joined} kernels)",
            rank,
        )
    return rank


def _read_adapter_tensors(path, encoder, targets, rank, kernels):
    """The adapter arrays, each checked before use: present, expected, floating point, of its shape, finite.

    Names, dtypes and shapes come from the safetensors header, so a file that
    does not fit is refused before its arrays are read.
    """
    tensors_file = os.path.join(path, ADAPTERS_FILE)
    if not os.path.isfile(tensors_file):
        raise ValueError(f"{tensors_file}: no such file; the adapters directory is incomplete.")
    header = read_safetensors_header(tensors_file)  # a CheckpointError (a ValueError) names the file
    expected = {}
    for block in encoder.transformer_layers:
        for target in targets:
            inputs, outputs = kernels[target]
            expected[f"{block.name}/{target}/lora_kernel_a"] = (
                (inputs, rank), f"the kernel's {inputs} inputs by rank {rank}")
            expected[f"{block.name}/{target}/lora_kernel_b"] = (
                (rank, outputs), f"rank {rank} by the kernel's {outputs} outputs")
    missing, unexpected = sorted(set(expected) - set(header)), sorted(set(header) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"{tensors_file}: the adapters do not fit the model. Missing: {missing}. Unexpected: {unexpected}."
        )
    for name in sorted(expected):
        dtype, shape = header[name]["dtype"], tuple(header[name]["shape"])
        if dtype not in ADAPTER_DTYPES:
            raise ValueError(
                f"{tensors_file}: tensor {name!r} has dtype {dtype}; expected floating point "
                f"({', '.join(ADAPTER_DTYPES[:-1])} or {ADAPTER_DTYPES[-1]})."
            )
        if shape != expected[name][0]:
            raise ValueError(f"{tensors_file}: tensor {name!r} has shape {shape}; expected {expected[name][0]} "
                             f"({expected[name][1]}).")
    try:
        tensors = load_file(tensors_file)
    except Exception as error:  # safetensors raises its own SafetensorError
        raise ValueError(f"{tensors_file} cannot be read as safetensors ({error}).") from error
    for name in sorted(expected):
        count = int(tensors[name].size - np.count_nonzero(np.isfinite(tensors[name])))
        if count:
            raise ValueError(
                f"{tensors_file}: tensor {name!r} holds {count} non-finite value{'' if count == 1 else 's'} (NaN or "
                f"infinity) among its {tensors[name].size}; the adapters would make every output NaN."
            )
    return tensors


def load_adapters(model, path):
    """Loads adapters written by `save_adapters` into `model`; returns its `LoraSummary`.

    Without LoRA on its encoder, `model` gets it first with the recorded
    rank, alpha and targets (`enable_lora`); with LoRA, those must match.
    The encoder's shape must match the recorded one, and every tensor is
    assigned by name.

    Everything read is checked before anything is allocated: the config's
    fields (present, of their kind, the rank within 1 and the smallest side
    of the target kernels), then from the safetensors header each tensor's
    name, dtype (floating point) and shape (the kernel's and the rank's),
    then the values (finite).

    Args:
        model: a model with a native `BertEncoder` (see `enable_lora`).
        path: str. A directory written by `save_adapters`.

    Raises:
        ValueError: not an adapters directory, a missing, unreadable or
            invalid field or tensor (the message names the file and the field
            or tensor), or the rank, alpha, targets or the encoder's shape
            differ from the model's (the message shows both sides).
    """
    path = os.fspath(path)
    config, config_file = _read_adapter_config(path)
    encoder = find_encoder(model)
    shape = {key: getattr(encoder, key) for key in ("num_layers", "hidden_size", "intermediate_size")}
    recorded_shape = {key: config[key] for key in shape}
    if shape != recorded_shape:
        raise ValueError(
            f"The adapters in {path!r} were trained on an encoder with {recorded_shape}; this one has {shape}."
        )
    targets = tuple(config["targets"])
    kernels = _kernel_shapes(encoder, targets)
    rank = _check_rank(config, config_file, kernels)
    tensors = _read_adapter_tensors(path, encoder, targets, rank, kernels)
    if not _lora_layers(encoder):
        enable_lora(encoder, rank=rank, targets=targets, alpha=config["alpha"])
    layers = _lora_layers(encoder)
    summary = _summary(encoder, layers)
    recorded = {"rank": rank, "alpha": config["alpha"], "targets": [t for t in LORA_TARGETS if t in targets]}
    enabled = {"rank": summary.rank, "alpha": summary.alpha, "targets": list(summary.targets)}
    if recorded != enabled:
        raise ValueError(
            f"The adapters in {path!r} have {recorded}; the model's LoRA has {enabled}. "
            "Load them into a model without LoRA (load_adapters enables it as recorded), or enable_lora alike."
        )
    for prefix, layer in layers.items():  # names and shapes were checked against these layers
        layer.lora_kernel_a.assign(tensors[f"{prefix}/lora_kernel_a"])
        layer.lora_kernel_b.assign(tensors[f"{prefix}/lora_kernel_b"])
    logger.info("Loaded %d adapter tensors from %s", 2 * len(layers), path)
    return summary
