"""A Hugging Face checkpoint directory as people download it: its config.json, its weights, its other files.

Weights are read without PyTorch from `model.safetensors` (or its shards, named by
`model.safetensors.index.json`), one tensor at a time from a memory map of the file
(float32, float16 or bfloat16 tensors, each given as float32), never the whole checkpoint
at once; an older checkpoint's
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
        for name in names:
            data = self.read(name)
            tensors.update(_safetensors(data, self.path(name)) if name.endswith(".safetensors")
                           else _torch(self.path(name)))
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


SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64}


class SafetensorsTensors(collections.abc.Mapping):
    """The tensors of safetensors files by name, each read as float32 from a memory map when looked up.

    The format: an 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and byte
    range, then the data. bfloat16 is the upper half of a float32, so widening it is exact.
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

    def __getitem__(self, name):
        path, entry, start = self._where[name]
        dtype = SAFETENSORS_DTYPES.get(entry.get("dtype"))
        if dtype is None:
            raise CheckpointError(f"{path}'s tensor {name} has dtype {entry.get('dtype')}; the import reads "
                                  f"{sorted(SAFETENSORS_DTYPES)}: convert the checkpoint to float32 first.")
        begin, end = entry["data_offsets"]
        shape = tuple(entry["shape"])
        values = np.memmap(path, dtype=dtype, mode="r", offset=start + begin, shape=shape) \
            if end > begin else np.zeros(shape, dtype)
        if entry["dtype"] == "BF16":
            return (np.asarray(values, np.uint32) << 16).view(np.float32)
        return np.array(values, dtype=np.float32)

    def __iter__(self):
        return iter(self._where)

    def __len__(self):
        return len(self._where)


def _safetensors(data, path):
    """The tensors of a safetensors file's bytes, as float32 numpy arrays (no PyTorch involved)."""
    from safetensors.numpy import load

    try:
        return {name: np.asarray(value, dtype=np.float32) for name, value in load(data).items()}
    except Exception as error:  # safetensors raises its own error types, and TypeError for a dtype numpy lacks
        raise CheckpointError(f"{path} could not be read as safetensors ({type(error).__name__}: {error}). A "
                              "bfloat16 checkpoint needs converting to float32 or float16 first; otherwise "
                              "download the file again.") from None


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
