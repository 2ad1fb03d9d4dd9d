"""Adaptive softmax against the full softmax: training tokens/s and dev loss in the same run.

    python bench/bench_adaptive_softmax.py --minutes 12 --output bench/results/adaptive_softmax.md
    python bench/bench_adaptive_softmax.py --config tiny --vocab-size 1000 --cutoffs 200 500 --minutes 0.3  # smoke

Both runs use the same config (by default `base` on the default corpus with a 32,000-piece shared BPE vocabulary,
learned once and copied into both run directories, so the ids are the same), and differ only in `model.softmax`
(`full`, or `adaptive` with `--cutoffs`). Each trains for `--minutes` on a quiet machine, with the fast path the
`auto` settings choose; then:

- **tokens/s**: target (non-padding) tokens per second of training, counted from the `target_tokens` metric after the
  first `--skip-steps` updates (graph tracing and compilation excluded);
- **dev loss**: the un-smoothed negative log-likelihood per target token (EOS included) of the dev split under
  the newest checkpoint, by forced decoding (the run artifact's `score`, `evaluation.scoring`), the same
  computation for both models: each gives a normalised distribution over the whole vocabulary, so the figures
  compare directly. Dev pairs longer than the model's `max_length` are left out (the same ones for both).

The markdown report (for docs/results.md) is printed and written to `--output`.
"""

import argparse
import os
import pathlib
import shlex
import shutil
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from timing import busy_cores_seconds, machine_description, publish, wait_for_quiet  # noqa: E402

from t2t_keras.artifacts import open_artifact  # noqa: E402
from t2t_keras.config import load_config, replace  # noqa: E402
from t2t_keras.data import sources  # noqa: E402
from t2t_keras.evaluation.evaluate_run import load_eval_pairs  # noqa: E402
from t2t_keras.evaluation.scoring import ScorePair  # noqa: E402
from t2t_keras.params import count_parameters  # noqa: E402
from t2t_keras.resolved_run import resolve_run  # noqa: E402
from t2t_keras.runs import RunDirectory  # noqa: E402
from t2t_keras.tasks.base import prepare_tokenizer  # noqa: E402
from t2t_keras.training.trainer import train  # noqa: E402

FAST_PATH = ("training.mixed_precision=auto", "training.jit_compile=auto", "training.fuse_elementwise=auto")
CPU_SCALE = ("data.batch_tokens=4096", "training.warmup_steps=400", "training.steps_per_epoch=100000",
             "training.checkpoint_every_steps=100000", "training.checkpoint_every_minutes=1000",
             "training.attention_every_steps=0", "training.eval_every_steps=0")


class TokenRate(keras.callbacks.Callback):
    """Target tokens per second after the first `skip` updates of one epoch (the metric counts per epoch)."""

    def __init__(self, skip):
        super().__init__()
        self.skip, self.start, self.last, self.updates = skip, None, None, 0

    def on_train_batch_end(self, batch, logs=None):
        self.updates += 1
        point = (float((logs or {}).get("target_tokens", 0.0)), time.monotonic())
        if self.updates == self.skip:
            self.start = point
        self.last = point

    def tokens_per_second(self):
        if self.start is None or self.last[1] <= self.start[1]:
            raise RuntimeError(f"fewer than {self.skip + 1} updates ran: give more --minutes or fewer --skip-steps")
        return (self.last[0] - self.start[0]) / (self.last[1] - self.start[1])


def dev_loss(run_dir):
    """(NLL per target token, tokens, pairs) of the dev split under the newest checkpoint."""
    artifact = open_artifact(run_dir, model="latest")
    pairs = load_eval_pairs(run_dir, "dev")
    lengths = [artifact.piece_lengths([side[i] for i in range(len(pairs))]) for side in zip(*pairs)]
    kept = [ScorePair(n + 1, s, t, ns, nt) for n, ((s, t), ns, nt) in enumerate(zip(pairs, *lengths))
            if max(ns, nt) + 1 <= artifact.max_length]
    scores = artifact.score(kept, progress=True)
    tokens = sum(len(score.token_nll) for score in scores)
    return sum(score.nll for score in scores) / tokens, tokens, len(kept)


def measure(config, run_dir, args):
    rate = TokenRate(args.skip_steps)
    wait_for_quiet(max_wait=args.quiet_wait)
    machine, own, wall = busy_cores_seconds(), time.process_time(), time.monotonic()
    result = train(resolve_run(run_dir, config), minutes=args.minutes, callbacks=[rate], verbose=args.verbose)
    wall = time.monotonic() - wall
    other = max(0.0, (busy_cores_seconds() - machine) - (time.process_time() - own)) / wall
    loss, tokens, pairs = dev_loss(run_dir)
    return dict(softmax=config.model.softmax, cutoffs=config.model.adaptive_cutoffs,
                parameters=count_parameters(config.model)["total"], steps=result.final_step,
                tokens_per_second=rate.tokens_per_second(), other_cores=other, dev_loss=loss,
                dev_perplexity=float(np.exp(loss)), dev_tokens=tokens, dev_pairs=pairs)


def report(rows, config, args):
    full = rows[0]
    overrides = "".join(f" --set {shlex.quote(text)}" for text in args.set)
    lines = [f"## Adaptive softmax against the full softmax (`python bench/bench_adaptive_softmax.py "
             f"--config {args.config} --vocab-size {args.vocab_size} --cutoffs {' '.join(map(str, args.cutoffs))} "
             f"--minutes {args.minutes}{overrides}`)", "",
             f"`{args.config}` (d_model {config.model.hidden_dim}, {config.model.num_layers} layers) with a "
             f"{args.vocab_size}-piece shared {config.data.tokenizer} vocabulary, {config.data.batch_tokens} "
             f"tokens per batch, {args.minutes} minutes of training each, in one run. tokens/s: target tokens per "
             f"second after the first {args.skip_steps} updates. Dev loss: un-smoothed NLL per target token (EOS "
             f"included) of {full['dev_pairs']} dev pairs ({full['dev_tokens']} tokens) under the newest "
             "checkpoint. \"other cores\": cores other processes used during the training (should be near 0).", "",
             "| softmax | cutoffs | parameters | updates | target tokens/s | vs full | dev loss | dev perplexity "
             "| other cores |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        cutoffs = ", ".join(map(str, r["cutoffs"] or [])) or "-"
        lines.append(f"| {r['softmax']} | {cutoffs} | {r['parameters'] / 1e6:.1f} M | {r['steps']} "
                     f"| {r['tokens_per_second']:,.0f} | {r['tokens_per_second'] / full['tokens_per_second']:.2f}× "
                     f"| {r['dev_loss']:.3f} | {r['dev_perplexity']:.1f} | {r['other_cores']:.2f} |")
    lines += ["", machine_description(f"TensorFlow {tf.__version__}"), ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="base", help="preset or YAML file, the same for both runs")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="config override (after the bench's CPU-scale and fast-path settings)")
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--cutoffs", type=int, nargs="+", default=[2000, 8000],
                        help="model.adaptive_cutoffs of the adaptive run")
    parser.add_argument("--minutes", type=float, default=12.0, help="training minutes for each softmax")
    parser.add_argument("--skip-steps", type=int, default=20, help="updates left out of tokens/s (compilation)")
    parser.add_argument("--work-dir", help="where the runs go (default: a temporary directory)")
    parser.add_argument("--output", help="also write the markdown report here")
    parser.add_argument("--verbose", type=int, default=2, help="Keras fit verbosity")
    parser.add_argument("--quiet-wait", type=float, default=600.0, help="max seconds to wait for a quiet machine")
    args = parser.parse_args()

    settings = [f"data.vocab_size={args.vocab_size}", *CPU_SCALE, *FAST_PATH, *args.set]
    config = load_config(args.config, settings)
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(args.work_dir or tmp)
        runs = {"full": work / "full", "adaptive": work / "adaptive"}
        existing = [str(path) for path in runs.values() if path.exists()]
        if existing:
            parser.error(f"{', '.join(existing)} already exist: the comparison trains new runs; remove them or "
                         "choose another --work-dir.")
        first = RunDirectory(runs["full"])
        first.path.mkdir(parents=True)
        train_pairs, _ = sources.training_pairs(config.data, seed=config.training.seed)
        prepare_tokenizer(first, config, train_pairs)  # learned once: both models see the same ids
        runs["adaptive"].mkdir(parents=True)
        name = first.tokenizer_file(config.data.tokenizer).name
        for path in first.path.glob(pathlib.Path(name).stem + ".*"):
            shutil.copy2(path, runs["adaptive"] / path.name)
        variants = [config, replace(config, model={"softmax": "adaptive", "adaptive_cutoffs": list(args.cutoffs)})]
        rows = [measure(variant, run_dir, args) for variant, run_dir in zip(variants, runs.values())]
    publish(report(rows, config, args), args.output)


if __name__ == "__main__":
    main()
