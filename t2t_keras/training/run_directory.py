"""The run directory: one place for a training run's config, tokenizer, checkpoints and logs.

    RUN/config.yaml         the resolved configuration (written once, checked on resume)
    RUN/tokenizer.model     the shared SentencePiece vocabulary
    RUN/data.json           where the data came from (package versions, licence, counts)
    RUN/checkpoints/        tf.train checkpoints of model + optimizer (last K kept)
    RUN/averaged/           the average of the last N checkpoints, as a .keras model
    RUN/logs/               TensorBoard event files (train/, validation/, attention/)
"""

import json
import pathlib

import yaml

from t2t_keras import config as config_lib
from t2t_keras.data.text_files import write_bytes_atomic
from t2t_keras.errors import ConfigError

# Sections that must not change when a run is continued; training and decoding may.
FROZEN_SECTIONS = ("model", "data")


def atomic_write_text(path, text):
    """Writes `text` to `path` through a temporary file and a rename, so readers never see half a file."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, text.encode("utf-8"))


class RunDirectory:
    """Paths and bookkeeping of one run directory."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        self.config_path = self.path / "config.yaml"
        self.tokenizer_path = self.path / "tokenizer.model"
        self.checkpoint_dir = self.path / "checkpoints"
        self.averaged_dir = self.path / "averaged"
        self.averaged_model_path = self.averaged_dir / "model.keras"
        self.log_dir = self.path / "logs"

    def exists(self):
        return self.config_path.exists()

    def load_config(self):
        if not self.exists():
            raise ConfigError(f"{self.path} is not a run directory (no config.yaml): train into it first.")
        return config_lib.from_dict(yaml.safe_load(self.config_path.read_text(encoding="utf-8")))

    def save_config(self, config):
        atomic_write_text(self.config_path, yaml.safe_dump(config.to_dict(), sort_keys=False))

    def resolve_config(self, config):
        """The config to train with: `config` for a new run; for an existing run, the saved one
        with the new training/decoding sections, after checking model and data did not change."""
        if not self.exists():
            self.save_config(config)
            return config
        saved = self.load_config()
        for section in FROZEN_SECTIONS:
            old, new = getattr(saved, section).__dict__, getattr(config, section).__dict__
            changed = {key: (old[key], new[key]) for key in old if old[key] != new[key]}
            if changed:
                details = ", ".join(f"{section}.{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
                raise ConfigError(
                    f"{self.path} was created with a different {section} config ({details}). "
                    "Continue it with the same config, or train into a new --run-dir."
                )
        resolved = config_lib.replace(saved, training=config.training.__dict__, decoding=config.decoding.__dict__)
        self.save_config(resolved)
        return resolved

    def write_json(self, name, data):
        atomic_write_text(self.path / name, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")

    def read_json(self, name):
        path = self.path / name
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
