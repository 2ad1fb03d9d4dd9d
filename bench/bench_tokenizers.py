"""Tokenizers compared: the same model and training budget with each `data.tokenizer` (BPE, unigram, WordPiece).

    python bench/bench_tokenizers.py --minutes 20 --output bench/results/tokenizers.md
    python bench/bench_tokenizers.py --config tiny --minutes 0.2 --set data.source=text ...   # a smoke run

For each tokenizer the script makes a new run in `--work-dir/<tokenizer>` from
the same config (`--config` plus `--set`, by default `mini` on the default
corpus), changing only `data.tokenizer`:

1. it learns the shared vocabulary on the training split, as `train` would
   (`tasks.base.prepare_tokenizer`), and times that;
2. it trains for `--minutes` minutes (the same budget for each; the steps
   reached differ with the tokens per sentence and are reported);
3. it translates the dev split with the run's newest checkpoint and the
   config's decoding (or `--beam`) and scores sacreBLEU and chrF on
   detokenized text (so WordPiece's detokenizer, which may change whitespace
   around punctuation, is part of its score);
4. it counts, on the dev split, the pieces per sentence on each side (without
   EOS) and the unknown-token rate: the share of those pieces that are
   `<unk>` (SentencePiece replaces an unseen character, WordPiece a whole
   word that holds one).

Each training waits for a quiet machine first and records how many cores other
processes used while it ran: a figure taken while something else ran is not
comparable. The markdown table (for docs/results.md) is printed and written to
`--output`.
"""

import argparse
import os
import pathlib
import shlex
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from timing import busy_cores_seconds, publish, table_report, wait_for_quiet  # noqa: E402

from t2t_keras.config import TOKENIZER_CHOICES, load_config, replace  # noqa: E402
from t2t_keras.data import sources  # noqa: E402
from t2t_keras.decoding.request import GenerationRequest  # noqa: E402
from t2t_keras.evaluation.evaluate_run import evaluate_run, load_eval_pairs  # noqa: E402
from t2t_keras.resolved_run import resolve_run  # noqa: E402
from t2t_keras.runs import RunDirectory  # noqa: E402
from t2t_keras.special_ids import UNK_ID  # noqa: E402
from t2t_keras.tasks.base import prepare_tokenizer  # noqa: E402
from t2t_keras.training.trainer import train  # noqa: E402

HEADER = ("| tokenizer | vocabulary | vocabulary s | steps | other cores | dev BLEU | dev chrF "
          "| pieces/sentence (source) | pieces/sentence (target) | unknown pieces |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def piece_statistics(tokenizer, pairs):
    """Mean pieces per sentence of each side and the share of `<unk>` among all pieces."""
    counts, unknown, total = [], 0, 0
    for side in zip(*pairs):
        ids = tokenizer.tokenize(tf.constant(list(side), tf.string))
        values = ids.flat_values.numpy()
        counts.append(float(np.mean(ids.row_lengths().numpy())))
        unknown += int(np.sum(values == UNK_ID))
        total += values.size
    return {"pieces_source": counts[0], "pieces_target": counts[1], "unknown_rate": unknown / max(total, 1)}


def compare(kind, config, run_dir, args):
    """Vocabulary, training and dev scores of one tokenizer: a dict for the table."""
    config = replace(config, data={"tokenizer": kind})
    run = RunDirectory(run_dir)
    began = time.monotonic()
    train_pairs, _ = sources.training_pairs(config.data, seed=config.training.seed)
    tokenizer = prepare_tokenizer(run, config, train_pairs)  # `train` loads it from the run directory
    vocabulary_seconds = time.monotonic() - began

    wait_for_quiet(max_wait=args.quiet_wait)
    machine, own, wall = busy_cores_seconds(), time.process_time(), time.monotonic()
    result = train(resolve_run(run_dir, config), minutes=args.minutes, verbose=args.verbose)
    wall = time.monotonic() - wall
    other = max(0.0, (busy_cores_seconds() - machine) - (time.process_time() - own)) / wall

    request = GenerationRequest.from_config(config.decoding).updated(beam_size=args.beam_size)
    scores = evaluate_run(run_dir, "dev", model="latest", request=request)
    statistics = piece_statistics(tokenizer, load_eval_pairs(run_dir, "dev"))
    return dict(statistics, tokenizer=kind, vocab_size=tokenizer.vocab_size, vocabulary_seconds=vocabulary_seconds,
                steps=result.final_step, minutes=result.seconds / 60, other_cores=other, bleu=scores["bleu"],
                chrf=scores["chrf"], sentences=scores["sentences"], signature=scores["signature"],
                beam_size=scores["beam_size"], alpha=scores["alpha"])


def row(r):
    return (f"| {r['tokenizer']} | {r['vocab_size']} | {r['vocabulary_seconds']:.0f} | {r['steps']} "
            f"| {r['other_cores']:.2f} | {r['bleu']:.1f} | {r['chrf']:.1f} | {r['pieces_source']:.1f} "
            f"| {r['pieces_target']:.1f} | {100 * r['unknown_rate']:.3f}% |")


def report(rows, args):
    first = rows[0]
    overrides = "".join(f" --set {shlex.quote(text)}" for text in args.set)
    return table_report(
        f"## Tokenizers at the same budget (`python bench/bench_tokenizers.py --config {args.config} "
        f"--minutes {args.minutes}{overrides}`)",
        f"Config `{args.config}` with the overrides above; only "
        f"`data.tokenizer` differs. {args.minutes} minutes of training each; the dev split "
        f"({first['sentences']} sentences) translated by the newest checkpoint with beam {first['beam_size']}, "
        f"alpha {first['alpha']}; sacreBLEU `{first['signature']}`. Pieces per sentence are counted "
        "without EOS; unknown pieces are the share of `<unk>` among the dev pieces of both sides. "
        "\"other cores\": cores other processes used during the training (should be near 0).",
        HEADER, [row(r) for r in rows], f"TensorFlow {tf.__version__}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="mini", help="preset or YAML file, the same for every tokenizer")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="config override")
    parser.add_argument("--minutes", type=float, default=20.0, help="training minutes for each tokenizer")
    parser.add_argument("--tokenizers", nargs="+", default=list(TOKENIZER_CHOICES), choices=TOKENIZER_CHOICES)
    parser.add_argument("--beam-size", type=int, help="beam size for the dev translation (default: the config's)")
    parser.add_argument("--work-dir", help="where the runs go, one directory per tokenizer (default: a temporary one)")
    parser.add_argument("--output", help="also write the markdown report here")
    parser.add_argument("--verbose", type=int, default=2, help="Keras fit verbosity")
    parser.add_argument("--quiet-wait", type=float, default=600.0, help="max seconds to wait for a quiet machine")
    args = parser.parse_args()

    config = load_config(args.config, args.set)
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(args.work_dir or tmp)
        runs = {kind: work / kind for kind in args.tokenizers}
        existing = [str(path) for path in runs.values() if path.exists()]
        if existing:
            parser.error(f"{', '.join(existing)} already exist: a comparison trains new runs; remove them or "
                         "choose another --work-dir.")
        rows = [compare(kind, config, run_dir, args) for kind, run_dir in runs.items()]
    publish(report(rows, args), args.output)


if __name__ == "__main__":
    main()
