"""The one place a run's configuration is resolved: what a user gives becomes one checked, frozen config, once.

What a command that trains or prepares a run takes from the user, in order:

    the config          a preset or a YAML file with `--set` pairs (`config.load_config`), or a `config.Config`;
                        without one, the run's own config.yaml with the `--set` pairs where the run exists, else
                        the preset `new_run` (`command_config`)
    --init-from RUN     RUN's model section (an imported checkpoint's switches with it) and vocabulary (`adopt`):
                        a `--set` that differs from them is refused, but for fewer layers and the LayerNorm epsilon
                        (training/init_from.py copies the tokenizer and loads the weights)
    the run's config    for a run that exists: its model and data sections, which must not change (a corpus at a
                        new place excepted: `corpus_moved`), with the new training and decoding sections
    paths               data file paths absolute: `--set` paths from the current directory, a config file's from its
                        folder, a run's from the run (`config_paths`)

`resolve_run` does all of it before anything is opened or written and returns a `ResolvedRun`. `RunDirectory`
stores its config (`save_config`: a new run's when the command opens it, which makes the run; a run that exists
has it written once the command's own checks pass) and loads it back; the trainer, the task and the data road
read it, and none resolves it again:

    resolved = resolve_run("runs/student", "student-mini", ["training.train_steps=100"])
    train(resolved)                     # training.trainer
"""

import dataclasses
import json
import logging

from t2t_keras import config_paths
from t2t_keras.config import MODEL_SOURCES, Config, load_config, parse_override, replace, with_overrides
from t2t_keras.errors import ConfigError
from t2t_keras.runs import open_run

logger = logging.getLogger(__name__)

# Sections that must not change when a run is continued; training and decoding may.
FROZEN_SECTIONS = ("model", "data")
# Data keys that shape the batch stream only: a run takes new values of them until its first checkpoint (from then
# on, resuming checks its stream: training.resume.check_input_stream).
BATCH_KEYS = ("batch_tokens", "shuffle_buffer")
# Keys of the other sections that must not change either: the checkpoints' layout depends on them.
FROZEN_KEYS = (("training", "lora_rank"),)
VOCABULARY_KEYS = ("vocab_size", "tokenizer")  # the data keys a new run takes from --init-from RUN
ADJUSTABLE_KEYS = ("layer_norm_epsilon",)  # model keys a new run may set otherwise: the weights fit either way
LAYER_KEYS = ("num_layers", "num_decoder_layers")  # model keys a new run may set lower (training/fewer_layers.py)


@dataclasses.dataclass(frozen=True)
class InitSource:
    """Which trained run a new run starts from (`train --init-from`), and with which of its weights."""

    run: object  # the trained run: a path or a RunDirectory
    weights: str = "auto"  # runs.MODEL_SOURCES: "auto" (what export takes), "averaged", "latest" or "best"
    overrides: tuple = ()  # the `section.key=value` settings given on purpose; model and vocabulary keys are checked

    def __post_init__(self):
        if self.weights not in MODEL_SOURCES:
            raise ConfigError(f"--init-weights must be one of {', '.join(MODEL_SOURCES)}. "
                              f"Received: {self.weights!r}")


@dataclasses.dataclass(frozen=True)
class ResolvedRun:
    """A run and the configuration it is trained with, resolved once (`resolve_run`)."""

    run: object  # the runs.RunDirectory, opened once and handed down
    config: Config  # data file paths absolute; for a run that exists, its model and data sections kept
    init_from: InitSource = None  # the trained run a new run starts from (`train --init-from`), or None
    new: bool = False  # whether the run had no config.yaml when it was resolved (the command then writes it)


def init_source(run, weights=None, overrides=()):
    """`train --init-from RUN [--init-weights W]`: the `InitSource`, or None without a run to start from."""
    if run is None:
        if weights is not None:
            raise ConfigError("--init-weights chooses the weights of --init-from RUN: give --init-from too.")
        return None
    return InitSource(run, "auto" if weights is None else weights, tuple(overrides))


def resolve_run(run_dir, config=None, overrides=(), init_from=None, new_run="base"):
    """The `ResolvedRun` of the run at `run_dir` (a path or a RunDirectory): `config` (a preset, a YAML file or a
    `config.Config`; None: `command_config`'s choice) with `overrides`, the model section and vocabulary of
    `init_from` (an `InitSource`), checked against the run's saved config. Reads, writes nothing; raises the
    `errors.ConfigError` of the first setting refused."""
    run = open_run(run_dir)
    if not isinstance(config, Config):
        config = command_config(run, config, overrides, new_run)
    elif overrides:
        config = with_overrides(config, overrides)
    if init_from is not None:
        config = adopt(config, init_from, run)
    config = replace(config, data=config_paths.absolute(config.data.__dict__))
    new = not run.exists()
    return ResolvedRun(run, config if new else _continued(run, config), init_from, new)


def command_config(run_dir, config=None, overrides=(), new_run="base"):
    """The config a command trains with: `config` (a preset or a YAML file) with `overrides`; without it the run's
    own config with `overrides` where `run_dir` holds a run, else the preset `new_run`'s."""
    run = open_run(run_dir)
    if config is None and run.exists():
        return with_overrides(run.load_config(), overrides)
    return load_config(new_run if config is None else config, overrides)


def _continued(run, config):
    """The saved config of `run` with the training and decoding sections of `config`, after checking that model,
    data and `FROZEN_KEYS` did not change."""
    saved = run.load_config()
    _check_frozen_sections(run, saved, config)
    for section, key in FROZEN_KEYS:
        old, new = getattr(getattr(saved, section), key), getattr(getattr(config, section), key)
        if old != new:  # values written as --set takes them (YAML: null for None)
            old, new = json.dumps(old), json.dumps(new)
            raise ConfigError(
                f"{run.path} was trained with {section}.{key}={old}, and its checkpoints are laid out for it; "
                f"received {section}.{key}={new}. Continue it with {section}.{key}={old}, or start a new run "
                f"from its weights: t2t-keras train --init-from {run.path} --run-dir NEW --set {section}.{key}="
                f"{new}."
            )
    return replace(saved, data=config.data.__dict__, training=config.training.__dict__,
                   decoding=config.decoding.__dict__)


def _check_frozen_sections(run, saved, config):
    """Refuses `config` where its model or data section differs from the run's `saved` one; data files that moved
    are taken (`corpus_moved`), and before the first checkpoint the `BATCH_KEYS`."""
    untrained = not run.checkpoint_paths()
    for section in FROZEN_SECTIONS:
        old, new = getattr(saved, section).__dict__, getattr(config, section).__dict__
        changed = {key: (old[key], new[key]) for key in old if old[key] != new[key]
                   and not (section == "data" and untrained and key in BATCH_KEYS)}
        if not changed or (section == "data" and corpus_moved(run, saved.data, config.data)):
            continue
        details = ", ".join(f"{section}.{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
        moved = section == "data" and config_paths.moved(old, new)
        raise ConfigError(
            f"{run.path} was created with a different {section} config ({details}). "
            "Continue it with the same config, or train into a new --run-dir." + (
                " A corpus at a new place is taken by a run that has trained on planned batches (resuming checks "
                "their corpus); this one has not, so put the files back where its config.yaml names them."
                if moved else ""))


def corpus_moved(run, saved, new):
    """Whether the data configs `saved` (the run's) and `new` differ only in where their files are, in a run that
    has trained on planned batches: its input stream record (input_stream.json) holds a digest of the corpus
    (`corpus`, or the preparation's `manifest`), which `training.resume.check_input_stream` compares on resume, so
    a corpus that moved goes on and one that changed is refused there. Logs the new places."""
    moves = config_paths.moved(saved.__dict__, new.__dict__)
    stream = run.read_json(run.input_stream_path) or {}
    if not moves or not ("corpus" in stream or "manifest" in stream):
        return False
    logger.warning("%s reads its corpus from a new place (%s); resuming checks that its training files hold the "
                   "same corpus.", run.path, ", ".join(f"{old} -> {new}" for old, new in moves))
    return True


def _explicit_keys(overrides):
    """`{(section, key)}` set by the `section.key=value` texts in `overrides`."""
    return {(section, key) for text in overrides for section, values in parse_override(text).items()
            for key in values}


def _is_fewer(model, trained):
    """Whether the model section `model` has at most the layers of `trained` in every stack (and at least one)."""
    return 1 <= model.num_layers <= trained.num_layers and 1 <= model.decoder_layers <= trained.decoder_layers


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
    fewer = {key for section, key in differing if key in LAYER_KEYS} \
        if _is_fewer(config.model, theirs.model) else set()
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
