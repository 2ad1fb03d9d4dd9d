"""`train --init-from RUN`: a new run that starts from a trained run's weights and vocabulary, on its own data.

What the new run takes from RUN:

- its model section and its vocabulary (`data.vocab_size`, `data.tokenizer`), taken into the new run's config when
  it is resolved (`resolved_run.adopt`), and the tokenizer file, copied into the new run: the weights only fit that
  model. A setting given on purpose (`--set model.X=...`) that differs from RUN's is refused, naming the key, except
  fewer layers (`model.num_layers`, `model.num_decoder_layers`): the new run then starts from some of RUN's layers,
  evenly spaced (`fewer_layers`; RUN/init_from.json lists them); and except the LayerNorm epsilon, which no weight
  depends on (`export --format marian` needs 1e-5);
- the weights `export` would take (`runs.run_weights`, "auto": the average when it includes the newest
  checkpoint, else the newest checkpoint), or those `weights` names; a run with adapters gives its merged weights.

Everything else is the new run's own: data, training and decoding sections. Its optimizer starts fresh at step 0, so
the schedule of eq. (3) warms up again over `training.warmup_steps` (or runs at the constant
`training.learning_rate`). RUN is read once, when the new run has no checkpoint; after that the new run resumes from
its own checkpoints like any other, and RUN/init_from.json records where it started.
"""

import logging

from t2t_keras.errors import ConfigError
from t2t_keras.files import write_bytes_atomic
from t2t_keras.runs import load_run_model, open_run, run_weights
from t2t_keras.training import fewer_layers

logger = logging.getLogger(__name__)


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
