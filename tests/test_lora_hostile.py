"""Hostile adapter directories: everything `load_adapters` reads is checked before anything is allocated.

NaN adapters, integer tensors, a config without `alpha`, a rank of 400,000,000, shapes that fit
neither the model's kernels nor the recorded rank: each is a ValueError naming the file and the
field (or tensor), and the model is left as it was (no LoRA enabled).
"""

import json
import os
import re

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from bert_keras import BertEncoder, lora
from bert_keras.tasks import BertClassifier

TINY = dict(vocab_size=30, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32, max_sequence_length=16)


def _classifier():
    return BertClassifier(BertEncoder(**TINY), num_classes=2)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model = _classifier()
    lora.enable_lora(model, rank=4, targets="query,intermediate", alpha=8)
    return lora.save_adapters(model, str(tmp_path_factory.mktemp("lora") / "adapters"))


@pytest.fixture
def adapters(saved, tmp_path):
    """A copy of the saved adapters directory, to tamper with."""
    import shutil

    return shutil.copytree(saved, tmp_path / "adapters")


def _config_file(path):
    return os.path.join(path, lora.CONFIG_FILE)


def _tensors_file(path):
    return os.path.join(path, lora.ADAPTERS_FILE)


def _edit_config(path, **changes):
    with open(_config_file(path)) as f:
        config = json.load(f)
    for key, value in changes.items():
        if value is _DROP:
            del config[key]
        else:
            config[key] = value
    with open(_config_file(path), "w") as f:
        json.dump(config, f)


def _edit_tensors(path, edit):
    tensors = load_file(_tensors_file(path))
    tensors = edit(tensors) or tensors
    save_file(tensors, _tensors_file(path))


_DROP = object()


def _refused(path, pattern):
    """Loads into a fresh model; asserts the ValueError and that LoRA was not enabled."""
    model = _classifier()
    with pytest.raises(ValueError, match=pattern):
        lora.load_adapters(model, str(path))
    assert lora.lora_summary(model) is None
    return model


def test_the_untouched_directory_loads(adapters):
    summary = lora.load_adapters(_classifier(), str(adapters))
    assert (summary.rank, summary.alpha, summary.targets) == (4, 8.0, ("query", "intermediate"))


def test_non_finite_adapters_are_refused(adapters):
    name = "transformer_layer_1/query/lora_kernel_b"

    def edit(tensors):
        tensors[name][0, :3] = [np.nan, np.inf, -np.inf]

    _edit_tensors(adapters, edit)
    _refused(adapters, re.escape(f"{_tensors_file(adapters)}: tensor {name!r} holds 3 non-finite values (NaN or "
                                 "infinity) among its 64; the adapters would make every output NaN."))


def test_integer_adapters_are_refused(adapters):
    _edit_tensors(adapters, lambda tensors: {k: v.astype("int64") for k, v in tensors.items()})
    _refused(adapters, re.escape(f"{_tensors_file(adapters)}: tensor 'transformer_layer_0/intermediate/lora_kernel_a' "
                                 "has dtype I64; expected floating point (F16, F32 or F64)."))


@pytest.mark.parametrize("field", ["alpha", "rank", "targets", "num_layers", "hidden_size", "intermediate_size"])
def test_a_missing_config_field_is_named(adapters, field):
    _edit_config(adapters, **{field: _DROP})
    _refused(adapters, re.escape(
        f"{_config_file(adapters)}: the field `{field}` is missing; an adapter config records format, rank, alpha, "
        "targets, num_layers, hidden_size and intermediate_size."))


def test_a_huge_rank_is_refused_before_allocating(adapters):
    _edit_config(adapters, rank=400_000_000)
    _refused(adapters, re.escape(
        f"{_config_file(adapters)}: Received an invalid value for `rank`, expected an integer from 1 to 16 (the "
        "smallest side of the model's query and intermediate kernels). Received: rank=400000000"))


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("rank", 0, "an integer from 1 to 16"),
        ("rank", "4", "an integer from 1 to 16"),
        ("rank", True, "an integer from 1 to 16"),
        ("rank", 4.0, "an integer from 1 to 16"),
        ("alpha", "8", "a positive finite number"),
        ("alpha", -1.0, "a positive finite number"),
        ("alpha", 1e400, "a positive finite number"),  # json writes Infinity
        ("alpha", None, "a positive finite number"),
        ("alpha", 1e300, "at most 1000 times the rank"),  # finite, but the logits overflow to NaN
        ("targets", "query", "a non-empty list of target names"),
        ("targets", [], "a non-empty list of target names"),
        ("targets", ["query", "queries"], "a non-empty list of target names"),
        ("num_layers", -2, "a positive integer"),
        ("hidden_size", "16", "a positive integer"),
    ],
)
def test_config_values_of_the_wrong_kind_are_named(adapters, field, value, expected):
    _edit_config(adapters, **{field: value})
    _refused(adapters, re.escape(f"{_config_file(adapters)}: Received an invalid value for `{field}`, expected "
                                 f"{expected}") + ".*" + re.escape(f"Received: {field}="))


@pytest.mark.parametrize("field, expected", [("alpha", "a positive finite number"), ("rank", "an integer from 1 to 16")])
def test_an_integer_beyond_every_float_is_refused_not_overflowed(adapters, field, expected):
    _edit_config(adapters, **{field: 10**400})  # json reads it as an int of 401 digits, which has no float
    _refused(adapters, re.escape(f"{_config_file(adapters)}: Received an invalid value for `{field}`, expected "
                                 f"{expected}") + ".*" + re.escape(f"Received: {field}=1000000"))


def test_shapes_must_fit_the_recorded_rank_and_the_kernels(adapters):
    _edit_config(adapters, rank=2)  # tensors of rank 4, a config of rank 2
    _refused(adapters, re.escape(f"{_tensors_file(adapters)}: tensor 'transformer_layer_0/intermediate/lora_kernel_a' "
                                 "has shape (16, 4); expected (16, 2) (the kernel's 16 inputs by rank 2)."))


def test_a_tensor_of_another_kernel_shape_is_refused(adapters):
    name = "transformer_layer_0/intermediate/lora_kernel_b"
    _edit_tensors(adapters, lambda tensors: tensors.update({name: np.zeros((4, 16), "float32")}))
    _refused(adapters, re.escape(f"{_tensors_file(adapters)}: tensor {name!r} has shape (4, 16); expected (4, 32) "
                                 "(rank 4 by the kernel's 32 outputs)."))


def test_missing_and_unexpected_tensors_are_listed(adapters):
    def edit(tensors):
        tensors["transformer_layer_9/query/lora_kernel_a"] = tensors.pop("transformer_layer_1/query/lora_kernel_a")

    _edit_tensors(adapters, edit)
    _refused(adapters, re.escape(f"{_tensors_file(adapters)}: the adapters do not fit the model. Missing: "
                                 "['transformer_layer_1/query/lora_kernel_a']. Unexpected: "
                                 "['transformer_layer_9/query/lora_kernel_a']."))


def test_unreadable_files_are_named(adapters):
    with open(_config_file(adapters), "w") as f:
        f.write("{not json")
    _refused(adapters, re.escape(f"{_config_file(adapters)} is not valid JSON (Expecting property name"))
    with open(_config_file(adapters), "w") as f:
        f.write("[1, 2]")
    _refused(adapters, re.escape(f"{_config_file(adapters)}: expected a JSON object, found a list."))


def test_a_truncated_tensors_file_is_named(adapters, saved):
    import shutil

    data = open(_tensors_file(adapters), "rb").read()
    with open(_tensors_file(adapters), "wb") as f:
        f.write(data[: len(data) - 100])
    _refused(adapters, re.escape(_tensors_file(adapters)) + ".*truncated")
    os.remove(_tensors_file(adapters))
    _refused(adapters, re.escape(f"{_tensors_file(adapters)}: no such file; the adapters directory is incomplete."))
    shutil.copy(_tensors_file(saved), _tensors_file(adapters))
