"""A Hugging Face checkpoint directory as people download it: its config.json, its weights, its other files.

Weights are read without PyTorch from `model.safetensors` (or its shards, named by
`model.safetensors.index.json`) through the `safetensors` package's numpy API; an
older checkpoint's `pytorch_model.bin` (or its shards) needs torch. Every file read
is recorded with its sha256, for the imported run's provenance.
"""

import hashlib
import json
import pathlib

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
        """`{name: float32 numpy array}` of every weight of the checkpoint."""
        names = self._weight_files()
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
