"""Read-only views of checkpoint files: tensor names, shapes and numpy arrays.

Every source answers `names()`, `has(name)`, `shape(name)`, `get(name)` and
`file_of(name)`, with names optionally rewritten by `normalize` (e.g. dropping
a `bert.` prefix); `original_name(name)` gives the name as stored.
"""

import glob
import json
import math
import os
import struct

import numpy as np

from bert_keras._checks import NotRegularFileError, check_regular_file, open_regular_file, quoted
from bert_keras.formats._common import CheckpointError, read_json

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
            missing (a truncated download) or whose entry is malformed, or the
            header if it is unreadable or not an object of tensor entries.
    """
    try:
        f = open_regular_file(path)
    except NotRegularFileError as error:  # a FIFO would wait for a writer
        raise CheckpointError(path, None, f"{error.strerror}.") from error
    except IsADirectoryError as error:
        raise CheckpointError(path, None, "is a directory; expected a safetensors file.") from error
    with f:
        size = os.fstat(f.fileno()).st_size
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
        except (ValueError, UnicodeDecodeError, RecursionError) as error:
            raise CheckpointError(path, None, f"has an unreadable safetensors header ({error}).") from error
    if not isinstance(header, dict):
        raise CheckpointError(
            path,
            None,
            f"the safetensors header is a JSON {_json_type(header)}; expected an object of tensor entries "
            '{"dtype", "shape", "data_offsets"}.',
        )
    header.pop("__metadata__", None)
    for name, info in header.items():
        problem = _header_entry_problem(info)
        if problem:
            raise CheckpointError(path, name, problem)
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
        width = _SAFETENSORS_DTYPE_SIZES.get(info["dtype"])
        if width is not None and end - begin != math.prod(info["shape"]) * width:
            raise CheckpointError(
                path,
                name,
                f"corrupt: {end - begin} bytes stored for shape {info['shape']} of {info['dtype']}.",
            )
    return header


def _json_type(value):
    names = {dict: "object", list: "list", str: "string", bool: "bool", int: "int", float: "float"}
    return names.get(type(value), "null")


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _header_entry_problem(info):
    """What is wrong with one tensor's entry of a safetensors header, or None."""
    if not isinstance(info, dict):
        return (
            f"its safetensors header entry is a JSON {_json_type(info)}; expected an object with "
            '"dtype", "shape" and "data_offsets".'
        )
    for key in ("dtype", "shape", "data_offsets"):
        if key not in info:
            return f"its safetensors header entry lacks {json.dumps(key)} (keys found: {sorted(info)})."
    if not isinstance(info["dtype"], str):
        return f'its "dtype" is {quoted(info["dtype"])}; expected a string such as "F32".'
    shape = info["shape"]
    if not isinstance(shape, list) or not all(_is_count(n) for n in shape):
        return f'its "shape" is {quoted(shape)}; expected a list of non-negative integers.'
    offsets = info["data_offsets"]
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(n) for n in offsets)
            and offsets[0] <= offsets[1]):
        return f'its "data_offsets" are {quoted(offsets)}; expected [begin, end] with 0 <= begin <= end.'
    return None


def shard_files(index_file):
    """The shard files that a sharded checkpoint's index (`*.index.json`) lists, in its folder.

    Only plain file names are accepted: an entry naming a path (`../x`,
    `/etc/x`, `sub/x`) is refused rather than opened. Links inside the folder
    are followed, as the Hugging Face cache stores every file as a link into
    its blob store.

    Returns:
        The sorted list of shard paths.

    Raises:
        CheckpointError: naming the index and the entry at fault.
    """
    directory = os.path.dirname(index_file)
    weight_map = read_json(index_file).get("weight_map")
    if not isinstance(weight_map, dict):
        raise CheckpointError(
            index_file,
            None,
            'expected "weight_map" to be an object of tensor name -> shard file name, found a JSON '
            f"{_json_type(weight_map)}.",
        )
    files = set()
    for tensor, shard in weight_map.items():
        plain = (
            isinstance(shard, str)
            and shard not in ("", ".", "..")
            and "\0" not in shard
            and not os.path.isabs(shard)
            and os.path.basename(shard) == shard
        )
        if not plain:
            raise CheckpointError(
                index_file,
                tensor,
                f"the index maps this tensor to {quoted(shard, limit=500)}, which is not a plain file name in {directory}; "
                "an index may only name files in its own folder.",
            )
        files.add(os.path.join(directory, shard))
    return sorted(files)


def check_weight_file(file):
    """Refuses a weight file that is not a regular file (a FIFO, a device, a directory), naming it: the libraries
    that read weights (torch, h5py, TensorFlow's checkpoint reader) would wait on a FIFO for a writer."""
    try:
        check_regular_file(file)
    except NotRegularFileError as error:
        raise CheckpointError(file, None, f"{error.strerror}.") from error
    if os.path.isdir(file):
        raise CheckpointError(file, None, "is a directory; expected a file of weights.")


def _check_shard_exists(index_file, file):
    """A missing shard is named with the index that lists it; one that is not a file is refused where it is read."""
    if not os.path.exists(file):
        raise CheckpointError(index_file, None, f"lists the shard {file}, which does not exist.")


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
        files = shard_files(path) if path.endswith(".json") else [path]
        from safetensors import safe_open

        for file in files:
            _check_shard_exists(path, file)
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
    """A `pytorch_model.bin` state dict, or the shards listed by `pytorch_model.bin.index.json`.

    Read with `torch.load(weights_only=True)`.
    """

    def __init__(self, path, normalize=None):
        super().__init__({}, {})
        self.file = path
        self.files = shard_files(path) if path.endswith(".json") else [path]
        try:
            import torch  # optional: only PyTorch checkpoints need it
        except ImportError as error:
            raise CheckpointError(
                path, None, "is a PyTorch checkpoint and reading it needs torch (pip install torch), "
                "or convert it to model.safetensors."
            ) from error
        self._arrays = {}
        for file in self.files:
            _check_shard_exists(path, file)
            for stored_name, array in _read_state_dict(torch, file).items():
                self._add(stored_name, file, stored_name, array.shape, normalize)
                self._arrays[stored_name] = array

    def get(self, name):
        return self._arrays[self._index[name][1]]


def _read_state_dict(torch, file):
    """The tensors of a `torch.save`d state dict as numpy arrays (float32 unless float64)."""
    check_weight_file(file)
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as error:
        raise CheckpointError(file, None, f"cannot be read by torch.load ({error}).") from error
    if not isinstance(state, dict):
        raise CheckpointError(file, None, f"expected a state dict, found {type(state).__name__}.")
    arrays = {}
    for stored_name, tensor in state.items():
        if not hasattr(tensor, "detach"):
            continue
        tensor = tensor.detach().cpu()
        if tensor.is_floating_point() and tensor.dtype != torch.float64:
            tensor = tensor.float()
        arrays[stored_name] = tensor.numpy()
    return arrays


class TFCheckpointSource(_Source):
    """A TF1 or TF2 checkpoint read with `tf.train.load_checkpoint` (`.index` + `.data-*`)."""

    def __init__(self, prefix, normalize=None):
        super().__init__({}, {})
        import tensorflow as tf

        self.file = prefix
        self.files = [prefix + ".index"]
        for file in [prefix + ".index"] + sorted(glob.glob(glob.escape(prefix) + ".data-*")):
            check_weight_file(file)
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
