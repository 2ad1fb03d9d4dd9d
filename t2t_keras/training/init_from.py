"""`train --init-from RUN`: a new run that starts from a trained run's weights and vocabulary, on its own data.

What the new run takes from RUN:

- its model section and its vocabulary (`data.vocab_size`, `data.tokenizer`, and the tokenizer file, copied into the
  new run): the weights only fit that model. A setting given on purpose (`--set model.X=...`) that differs from
  RUN's is refused, naming the key, except fewer layers (`model.num_layers`, `model.num_decoder_layers`): the new
  run then starts from some of RUN's layers, evenly spaced (`fewer_layers`; RUN/init_from.json lists them); and
  except the LayerNorm epsilon, which no weight depends on (`export --format marian` needs 1e-5);
- the weights `export` would take (`runs.run_weights`, "auto": the average when it includes the newest
  checkpoint, else the newest checkpoint), or those `weights` names; a run with adapters gives its merged weights.

Everything else is the new run's own: data, training and decoding sections. Its optimizer starts fresh at step 0, so
the schedule of eq. (3) warms up again over `training.warmup_steps` (or runs at the constant
`training.learning_rate`). RUN is read once, when the new run has no checkpoint; after that the new run resumes from
its own checkpoints like any other, and RUN/init_from.json records where it started.
"""

import dataclasses
import logging

from t2t_keras.config import MODEL_SOURCES, parse_override, replace
from t2t_keras.errors import ConfigError
from t2t_keras.files import write_bytes_atomic
from t2t_keras.runs import load_run_model, open_run, run_weights
from t2t_keras.training import fewer_layers

logger = logging.getLogger(__name__)

VOCABULARY_KEYS = ("vocab_size", "tokenizer")  # the data keys a new run takes from RUN with its tokenizer file
ADJUSTABLE_KEYS = ("layer_norm_epsilon",)  # model keys a new run may set otherwise: the weights fit either way


@dataclasses.dataclass(frozen=True)
class InitSource:
    """Which trained run a new run starts from, and with which of its weights."""

    run: object  # the trained run: a path or a RunDirectory
    weights: str = "auto"  # runs.MODEL_SOURCES: "auto" (what export takes), "averaged", "latest" or "best"
    overrides: tuple = ()  # the `section.key=value` settings given on purpose; model and vocabulary keys are checked

    def __post_init__(self):
        if self.weights not in MODEL_SOURCES:
            raise ConfigError(f"--init-weights must be one of {', '.join(MODEL_SOURCES)}. "
                              f"Received: {self.weights!r}")


def init_source(run, weights=None, overrides=()):
    """`train --init-from RUN [--init-weights W]`: the `InitSource`, or None without a run to start from."""
    if run is None:
        if weights is not None:
            raise ConfigError("--init-weights chooses the weights of --init-from RUN: give --init-from too.")
        return None
    return InitSource(run, "auto" if weights is None else weights, tuple(overrides))


def _explicit_keys(overrides):
    """`{(section, key)}` set by the `section.key=value` texts in `overrides`."""
    return {(section, key) for text in overrides for section, values in parse_override(text).items()
            for key in values}


def adopt(config, source, run):
    """`config` with the model section and vocabulary of `source.run`; refuses explicit settings that differ.

    `run` is the new run (a RunDirectory), which must not be the source itself.
    """
    trained = open_run(source.run)
    if trained.path.resolve() == run.path.resolve():
        raise ConfigError(f"--init-from {trained.path} names the run being trained: start from another run, or "
                          "continue this one without --init-from.")
    theirs = trained.load_config()
    taken = {("model", key) for key in theirs.model.__dict__} | {("data", key) for key in VOCABULARY_KEYS}
    differing = [(section, key) for section, key in sorted(_explicit_keys(source.overrides) & taken)
                 if getattr(getattr(config, section), key) != getattr(getattr(theirs, section), key)]
    fewer = {key for section, key in differing if key in fewer_layers.LAYER_KEYS} \
        if fewer_layers.is_fewer(config.model, theirs.model) else set()
    own = fewer | {key for section, key in differing if key in ADJUSTABLE_KEYS}
    differing = [(section, key) for section, key in differing if key not in own]
    if differing:
        details = "; ".join(f"{s}.{k}={getattr(getattr(config, s), k)!r} here, {getattr(getattr(theirs, s), k)!r} in "
                            f"{trained.path}" for s, k in differing)
        raise ConfigError(f"--init-from {trained.path} keeps that run's model and vocabulary, and these settings "
                          f"differ: {details}. Remove {', '.join(f'--set {s}.{k}' for s, k in differing)}, or train "
                          "a new model without --init-from (model.num_layers and model.num_decoder_layers may be "
                          "fewer than that run's: the new run then starts from some of its layers; "
                          "model.layer_norm_epsilon may differ).")
    return replace(config, model={**theirs.model.__dict__, **{key: getattr(config.model, key) for key in own}},
                   data={key: getattr(theirs.data, key) for key in VOCABULARY_KEYS})


def copy_tokenizer(source, run, config):
    """Copies `source.run`'s tokenizer file into `run`, or checks that the one there is the same."""
    trained = open_run(source.run)
    theirs, ours = trained.tokenizer_file(config.data.tokenizer), run.tokenizer_file(config.data.tokenizer)
    if not theirs.exists():
        raise ConfigError(f"--init-from {trained.path} has no {theirs.name}: train that run first.")
    if not ours.exists():
        write_bytes_atomic(ours, theirs.read_bytes())
    elif ours.read_bytes() != theirs.read_bytes():
        raise ConfigError(f"{ours} differs from the tokenizer of --init-from {trained.path}: train into a new "
                          "--run-dir.")


def load_initial_weights(model, source, run):
    """Sets `model`'s base weights to those of `source` (its adapters keep their initial values); records
    RUN/init_from.json (the run, which weights, their steps) and returns that record."""
    trained = open_run(source.run)
    weights = run_weights(trained, source.weights)
    values = {variable.path: variable for variable in load_run_model(trained, weights.source).trainable_weights}
    paths, kept = fewer_layers.source_paths([variable.path for variable in model.weights], values)
    targets = [variable for variable in model.weights if paths[variable.path] in values]
    used = {paths[variable.path] for variable in targets}
    missing = sorted(path for path in values if path not in used and not fewer_layers.is_dropped(path, kept))
    if missing:
        raise ConfigError(f"--init-from {trained.path}: the new model has no weights {missing[:3]}...: its model "
                          "config differs from that run's.")
    for variable in targets:
        variable.assign(values[paths[variable.path]])
    record = {"run": str(trained.path), "source": weights.source, "checkpoint": weights.checkpoint,
              "steps": list(weights.steps)}
    if kept:
        record["layers"] = {stack.rsplit("/", 1)[-1]: layers for stack, layers in kept.items()}
    run.write_json(run.init_from_path, record)
    logger.info("%s starts from %s of %s%s, at step 0 with a fresh optimizer (the learning rate schedule restarts).",
                run.path, weights.describe(), trained.path,
                "".join(f", its {stack} layers {layers}" for stack, layers in record.get("layers", {}).items()))
    return record
