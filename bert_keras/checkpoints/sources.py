"""Read-only views of checkpoint files: tensor names, shapes and numpy arrays.

Every source answers `names()`, `has(name)`, `shape(name)`, `get(name)` and
`file_of(name)`, with names optionally rewritten by `normalize` (e.g. dropping
a `bert.` prefix); `original_name(name)` gives the name as stored.
"""

import json
import os
import struct

import numpy as np

from bert_keras.checkpoints._common import CheckpointError

_SAFETENSORS_DTYPE_SIZES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
    "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
}


def read_safetensors_header(path):
    """Parses a safetensors header and checks that the file holds every tensor's bytes.

    Returns:
        dict: tensor name -> `{"dtype", "shape", "data_offsets"}`.

    Raises:
        CheckpointError: naming the file and the first tensor whose bytes are
            missing (a truncated download), or the header if it is unreadable.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise CheckpointError(path, None, f"truncated: {size} bytes, too short for a safetensors header.")
        (header_size,) = struct.unpack("<Q", prefix)
        if 8 + header_size > size:
            raise CheckpointError(
                path,
                None,
                f"truncated inside the safetensors header ({size} bytes, the header needs "
                f"{8 + header_size}); no tensor can be read. Download the file again.",
            )
        try:
            header = json.loads(f.read(header_size))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise CheckpointError(path, None, f"has an unreadable safetensors header ({error}).") from error
    header.pop("__metadata__", None)
    data_size = size - 8 - header_size
    for name, info in sorted(header.items(), key=lambda item: item[1]["data_offsets"][1]):
        begin, end = info["data_offsets"]
        if end > data_size:
            raise CheckpointError(
                path,
                name,
                f"truncated: the tensor's bytes end at offset {end} of the data section, "
                f"which has only {data_size} bytes. Download the file again.",
            )
        count = int(np.prod(info["shape"])) if info["shape"] else 1
        width = _SAFETENSORS_DTYPE_SIZES.get(info["dtype"])
        if width is not None and end - begin != count * width:
            raise CheckpointError(
                path,
                name,
                f"corrupt: {end - begin} bytes stored for shape {info['shape']} of {info['dtype']}.",
            )
    return header


class _Source:
    """Keeps `normalized name -> (file, stored name)` and answers from it."""

    def __init__(self, index, shapes):
        self._index = index  # name -> (file, stored name)
        self._shapes = shapes  # name -> shape tuple

    def names(self):
        return sorted(self._index)

    def has(self, name):
        return name in self._index

    def shape(self, name):
        return self._shapes[name]

    def file_of(self, name):
        return self._index[name][0] if name in self._index else self.file

    def original_name(self, name):
        return self._index[name][1]

    def _add(self, name, file, stored_name, shape, normalize):
        key = normalize(stored_name) if normalize else stored_name
        if key in self._index:
            raise CheckpointError(
                file,
                stored_name,
                f"appears twice (also as {self._index[key][1]!r} in {self._index[key][0]}).",
            )
        self._index[key] = (file, stored_name)
        self._shapes[key] = tuple(shape)


class SafetensorsSource(_Source):
    """One `model.safetensors` file, or the shards listed by `model.safetensors.index.json`."""

    def __init__(self, path, normalize=None):
        super().__init__({}, {})
        self.file = path
        self._handles = {}
        if path.endswith(".json"):
            directory = os.path.dirname(path)
            with open(path, encoding="utf-8") as f:
                weight_map = json.load(f).get("weight_map", {})
            files = sorted({os.path.join(directory, shard) for shard in weight_map.values()})
        else:
            files = [path]
        from safetensors import safe_open

        for file in files:
            if not os.path.exists(file):
                raise CheckpointError(path, None, f"lists the shard {file}, which does not exist.")
            header = read_safetensors_header(file)
            try:
                self._handles[file] = safe_open(file, framework="np")
            except Exception as error:  # safetensors raises its own SafetensorError
                raise CheckpointError(file, None, f"cannot be read as safetensors ({error}).") from error
            for name, info in header.items():
                self._add(name, file, name, info["shape"], normalize)
        self.files = files

    def get(self, name):
        file, stored_name = self._index[name]
        try:
            return self._handles[file].get_tensor(stored_name)
        except Exception as error:
            raise CheckpointError(file, stored_name, f"cannot be read ({error}).") from error


class TorchSource(_Source):
    """A `pytorch_model.bin` state dict, read with `torch.load(weights_only=True)`."""

    def __init__(self, path, normalize=None):
        super().__init__({}, {})
        self.file = path
        self.files = [path]
        try:
            import torch
        except ImportError as error:
            raise CheckpointError(
                path, None, "is a PyTorch checkpoint and reading it needs torch (pip install torch), "
                "or convert it to model.safetensors."
            ) from error
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:
            raise CheckpointError(path, None, f"cannot be read by torch.load ({error}).") from error
        if not isinstance(state, dict):
            raise CheckpointError(path, None, f"expected a state dict, found {type(state).__name__}.")
        self._arrays = {}
        for stored_name, tensor in state.items():
            if not hasattr(tensor, "detach"):
                continue
            tensor = tensor.detach().cpu()
            if tensor.is_floating_point() and tensor.dtype != torch.float64:
                tensor = tensor.float()
            self._add(stored_name, path, stored_name, tuple(tensor.shape), normalize)
            self._arrays[stored_name] = tensor.numpy()

    def get(self, name):
        return self._arrays[self._index[name][1]]


class TFCheckpointSource(_Source):
    """A TF1 or TF2 checkpoint read with `tf.train.load_checkpoint` (`.index` + `.data-*`)."""

    def __init__(self, prefix, normalize=None):
        super().__init__({}, {})
        import tensorflow as tf

        self.file = prefix
        self.files = [prefix + ".index"]
        try:
            self._reader = tf.train.load_checkpoint(prefix)
        except Exception as error:
            raise CheckpointError(prefix + ".index", None, f"cannot be read as a TensorFlow checkpoint ({error}).") from error
        for name, shape in self._reader.get_variable_to_shape_map().items():
            self._add(name, prefix, name, shape, normalize)

    def get(self, name):
        stored_name = self._index[name][1]
        try:
            return np.asarray(self._reader.get_tensor(stored_name))
        except Exception as error:
            raise CheckpointError(self.file, stored_name, f"cannot be read ({error}).") from error


class ArraySource(_Source):
    """Arrays held in memory, e.g. the variables of a Keras model by path."""

    def __init__(self, arrays, file):
        super().__init__({}, {})
        self.file = str(file)
        self.files = [self.file]
        self._arrays = {}
        for name, array in arrays.items():
            self._add(name, self.file, name, np.shape(array), None)
            self._arrays[name] = array

    def get(self, name):
        return np.asarray(self._arrays[name])
