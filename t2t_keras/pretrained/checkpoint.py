"""A Hugging Face checkpoint directory as people download it: its config.json, its weights, its other files.

Weights are read without PyTorch from `model.safetensors` (or its shards, named by
`model.safetensors.index.json`), one tensor at a time, a large one a block of rows at a time
(float32, float16 or bfloat16 tensors, each given as float32, or as bfloat16 for a model of bfloat16 weights:
a bfloat16 tensor then as stored, without widening), never the whole checkpoint at once; an older checkpoint's
`pytorch_model.bin` (or its shards) needs torch, and is read whole. Every file read is
recorded with its sha256, for the imported run's provenance.
"""

import collections.abc
import hashlib
import json
import pathlib
import struct

import numpy as np

from t2t_keras.errors import T2TError

SAFETENSORS = "model.safetensors"
TORCH_WEIGHTS = "pytorch_model.bin"
CONFIG = "config.json"


class CheckpointError(T2TError):
    """A checkpoint directory that cannot be imported: a file missing or malformed, a setting the model lacks."""


class Checkpoint:
    """The files of one checkpoint directory, each read once and recorded (`digests`)."""

    def __init__(self, directory):
        self.directory = pathlib.Path(directory)
        self.digests = {}  # file name -> sha256 of the bytes read
        if not (self.directory / CONFIG).is_file():
            raise CheckpointError(
                f"{self.directory} is not a Hugging Face checkpoint directory: it has no {CONFIG}. Give the "
                "directory that holds config.json, the weights (model.safetensors or pytorch_model.bin) and the "
                "tokenizer files, as downloaded (e.g. with huggingface-cli download MODEL --local-dir DIR).")
        self.config = self.json(CONFIG)
        self._shards = None
        self._tensors = None  # the safetensors mapping, made once

    def path(self, name):
        return self.directory / name

    def has(self, name):
        return (self.directory / name).is_file()

    def read(self, name, fix="download the checkpoint again"):
        """The bytes of file `name`, recorded; a `CheckpointError` naming it when it is missing."""
        path = self.directory / name
        if not path.is_file():
            raise CheckpointError(f"{self.directory} has no {name}, which the import needs: {fix}.")
        data = path.read_bytes()
        self.digests[name] = hashlib.sha256(data).hexdigest()
        return data

    def json(self, name, fix="download the checkpoint again"):
        """The content of JSON file `name`, recorded."""
        try:
            return json.loads(self.read(name, fix).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise CheckpointError(f"{self.directory / name} is not valid JSON ({error}): {fix}.") from None

    def optional_json(self, name):
        """The content of JSON file `name`, or {} when the checkpoint has none."""
        return self.json(name) if self.has(name) else {}

    def tensors(self):
        """`{name: float32 numpy array}` of every weight of the checkpoint: a mapping that reads a safetensors
        tensor when it is looked up (`SafetensorsTensors`)."""
        names = self._weight_files()
        if all(name.endswith(".safetensors") for name in names):
            if self._tensors is None:
                for name in names:
                    self.digests[name] = _file_digest(self.path(name))
                self._tensors = SafetensorsTensors([self.path(name) for name in names])
            return self._tensors
        tensors = {}
        for name in names:  # PyTorch's pickles (_weight_files gives one kind)
            self.digests[name] = _file_digest(self.path(name))
            tensors.update(_torch(self.path(name)))
        return tensors

    def _weight_files(self):
        """The weight files, safetensors first, a sharded checkpoint's from its index."""
        for single in (SAFETENSORS, TORCH_WEIGHTS):
            index = single + ".index.json"
            if self.has(single):
                return [single]
            if self.has(index):
                weight_map = self.json(index).get("weight_map")
                if not isinstance(weight_map, dict) or not weight_map:
                    raise CheckpointError(f"{self.path(index)} has no weight_map: download the checkpoint again.")
                return sorted(set(weight_map.values()))
        raise CheckpointError(f"{self.directory} holds no weights: expected {SAFETENSORS} (or {TORCH_WEIGHTS}, or "
                              "their sharded index). Download the weights into the directory.")


def _file_digest(path):
    """The sha256 of a file, read in pieces (a shard may be several GB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


# safetensors' dtype -> (numpy dtype of the stored values, read as float32); bfloat16 is read as its bits
SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64}
BLOCK_BYTES = 4 << 20  # the float32 bytes of one block of rows read at a time (`row_blocks`)


class SafetensorsTensors(collections.abc.Mapping):
    """The tensors of safetensors files by name, each read as float32 from its file when looked up (`rows`: as
    another dtype).

    The format: an 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and byte
    range, then the data. Values are read into a new array (not a memory map, whose pages would count towards the
    process's memory until it is closed); `rows` reads a block of a tensor's leading axis, so that a large tensor
    never needs to be held whole (`row_blocks`). bfloat16 is the upper half of a float32, so widening it is exact;
    read as bfloat16, its bits are given as they are stored.
    """

    def __init__(self, paths):
        self._where = {}  # tensor name -> (path, header entry, data start)
        for path in paths:
            try:
                with open(path, "rb") as handle:
                    (length,) = struct.unpack("<Q", handle.read(8))
                    header = json.loads(handle.read(length).decode("utf-8"))
            except (OSError, struct.error, UnicodeDecodeError, json.JSONDecodeError) as error:
                raise CheckpointError(f"{path} could not be read as safetensors ({type(error).__name__}: {error}): "
                                      "download the file again.") from None
            for name, entry in header.items():
                if name != "__metadata__":
                    self._where[name] = (path, entry, 8 + length)

    def shape(self, name):
        return tuple(self._where[name][1]["shape"])

    def rows(self, name, start, stop, dtype=np.float32):
        """Rows `start:stop` of tensor `name` (along its first axis), as `dtype` (a numpy dtype: float32, or the
        bfloat16 of `ml_dtypes` that TensorFlow's `tf.bfloat16.as_numpy_dtype` is; `converted`)."""
        path, entry, data = self._where[name]
        stored = SAFETENSORS_DTYPES.get(entry.get("dtype"))
        if stored is None:
            raise CheckpointError(f"{path}'s tensor {name} has dtype {entry.get('dtype')}; the import reads "
                                  f"{sorted(SAFETENSORS_DTYPES)}: convert the checkpoint to float32 first.")
        shape = self.shape(name)
        begin, end = entry["data_offsets"]
        if end - begin != int(np.prod(shape)) * np.dtype(stored).itemsize:
            raise CheckpointError(f"{path}'s tensor {name} holds {end - begin} bytes, not those of its shape {shape} "
                                  f"in {entry['dtype']}: the file is damaged; download it again.")
        values = np.empty((stop - start, *shape[1:]) if shape else (), stored)
        offset = data + begin + start * (values.nbytes // max(stop - start, 1))
        with open(path, "rb") as handle:
            handle.seek(offset)
            if values.nbytes and handle.readinto(memoryview(values.reshape(-1)).cast("B")) != values.nbytes:
                raise CheckpointError(f"{path} ends inside its tensor {name}: the file is truncated; download it "
                                      "again.")
        return converted(values, stored, dtype)

    def __getitem__(self, name):
        shape = self.shape(name)
        return self.rows(name, 0, shape[0] if shape else 1)

    def __contains__(self, name):  # Mapping's own would read the tensor
        return name in self._where

    def __iter__(self):
        return iter(self._where)

    def __len__(self):
        return len(self._where)

    def renamed(self, prefix):
        """The same tensors, each name preceded by `prefix` (nothing is read)."""
        copy = SafetensorsTensors([])
        copy._where = {prefix + name: where for name, where in self._where.items()}
        return copy


def converted(values, stored, dtype=np.float32):
    """`values`, read as numpy's `stored` (`SAFETENSORS_DTYPES`: bfloat16 as its bits, uint16), as `dtype`:
    bfloat16 bits as bfloat16 without a copy; anything else through float32 (bfloat16 widened exactly), then
    rounded to `dtype` (to nearest even, as torch and TensorFlow round to bfloat16)."""
    dtype = np.dtype(dtype)
    if stored is np.uint16:
        if dtype.name == "bfloat16":
            return values.view(dtype)
        widened = values.astype(np.uint32)  # bfloat16's 16 bits become a float32's upper half
        widened <<= 16
        values = widened.view(np.float32)
    elif values.dtype != dtype:
        values = values.astype(np.float32)
    return values if values.dtype == dtype else values.astype(dtype)


def tensor_shape(tensors, name):
    """The shape of tensor `name` of `tensors` (a `SafetensorsTensors`, read without its values, or a dict)."""
    return tensors.shape(name) if isinstance(tensors, SafetensorsTensors) else tuple(np.shape(tensors[name]))


def whole_tensor(tensors, name, dtype=np.float32):
    """Tensor `name` of `tensors` (a `SafetensorsTensors` or a dict of float32 arrays) as `dtype`, read at once."""
    if isinstance(tensors, SafetensorsTensors):
        shape = tensors.shape(name)
        return tensors.rows(name, 0, shape[0] if shape else 1, dtype)
    return converted(np.asarray(tensors[name]), np.float32, dtype)


def row_blocks(tensors, name, block_bytes=None, dtype=np.float32):
    """`(start, rows)` blocks of tensor `name` along its first axis as `dtype`, each about `block_bytes`
    (`BLOCK_BYTES`) as float32: a large tensor of a `SafetensorsTensors` is read a block at a time; one of a dict (or
    a vector) is one block."""
    block_bytes = BLOCK_BYTES if block_bytes is None else block_bytes
    shape = tensor_shape(tensors, name)
    if not isinstance(tensors, SafetensorsTensors) or len(shape) < 2:
        yield 0, whole_tensor(tensors, name, dtype)
        return
    step = max(1, block_bytes // (4 * int(np.prod(shape[1:])) or 1))
    for start in range(0, shape[0], step):
        yield start, tensors.rows(name, start, min(start + step, shape[0]), dtype)


def equal_tensors(tensors, first, second):
    """Whether tensors `first` and `second` of `tensors` hold the same values, compared a block at a time."""
    shape = tensor_shape(tensors, first)
    if shape != tensor_shape(tensors, second):
        return False
    if not isinstance(tensors, SafetensorsTensors) or len(shape) < 2:
        return np.array_equal(tensors[first], tensors[second])
    return all(np.array_equal(block, tensors.rows(second, start, start + len(block)))
               for start, block in row_blocks(tensors, first))


def renamed(tensors, prefix):
    """`tensors` with `prefix` before each name: a `SafetensorsTensors` without reading, a dict's values shared."""
    if isinstance(tensors, SafetensorsTensors):
        return tensors.renamed(prefix)
    return {prefix + name: value for name, value in tensors.items()}


def _torch(path):
    """The tensors of a `pytorch_model.bin`, through torch, as float32 numpy arrays."""
    try:
        import torch
    except ImportError:
        raise CheckpointError(
            f"{path} is a PyTorch pickle, which only torch reads, and torch is not installed: pip install torch "
            "(the CPU build is enough), or use the checkpoint's model.safetensors if it has one.") from None
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {name: value.float().numpy() for name, value in state.items()}
