"""Vocabulary shortlist on a trained run: test BLEU and sentences/s with and without it.

    python bench/bench_shortlist.py --run-dir runs/base                 # prints a markdown report
    python bench/bench_shortlist.py --run-dir runs/base --learn --output bench/results/shortlist.md

For each backend (the run directory, whose `Generator` searches with or
without the run's shortlist, and its SavedModel export with and without
`--shortlist`, both opened with `artifacts.open_artifact`), each search
(beam 4, greedy, the rest of the request the run's) and each shortlist
setting (off, on), the run's test split (or its first `--limit`
sentences) is translated once and scored with sacreBLEU, and then the first 1
and 32 sentences are timed as one call each (`timing.measure_quietly`: one
untimed call, the median of `--repeats` timed calls, other processes' cores
recorded). "S" is the searched vocabulary of the 32-sentence batch (its
shortlist union, padded to a multiple of `decoding.shortlist.SIZE_MULTIPLE`).

The run needs its shortlist (RUN/shortlist.npz, `t2t-keras shortlist`);
`--learn` learns it first with `--per-source` and `--frequent`.
"""

import argparse
import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import timing  # noqa: E402
from timing import machine_description, measure_quietly  # noqa: E402

from t2t_keras.artifacts import open_artifact  # noqa: E402
from t2t_keras.decoding.batch_shapes import pad_batch  # noqa: E402
from t2t_keras.decoding.shortlist import ShortlistTable  # noqa: E402
from t2t_keras.evaluation.bleu import score  # noqa: E402
from t2t_keras.evaluation.evaluate_run import load_eval_pairs  # noqa: E402
from t2t_keras.export.saved_model import export_run  # noqa: E402
from t2t_keras.runs import RunDirectory, learn_run_shortlist  # noqa: E402

SEARCHES = [("beam 4", 4), ("greedy", 1)]
HEADER = ("| backend | search | shortlist | BLEU | batch | sentences/s | ms / call | first call s | runs "
          "| other cores |\n|---|---|---|---|---|---|---|---|---|---|")


def run_backend(run, beam_size, shortlist, args):
    """`translate(sentences) -> list of str` with the run directory's own model at `beam_size` (the rest of the
    request: the run's `decoding` config)."""
    artifact = open_artifact(run, model=args.model, shortlist=shortlist, jit_compile=args.xla,
                             batch_tokens=32 * run.load_config().model.max_length)
    request = artifact.request(beam_size=beam_size)
    return lambda sentences: artifact.generate(sentences, request).best


def saved_model_backends(run, workdir, args):
    """`{shortlist: SavedModelArtifact}` of the run exported without and with its shortlist."""
    backends = {}
    for shortlist in (False, True):
        out = export_run(run, workdir / f"export-{shortlist}", source=args.model, max_beam_size=4,
                         jit_compile=args.xla, shortlist=shortlist)
        backends[shortlist] = open_artifact(out, batch_size=32)
    return backends


def export_backend(artifact, beam_size):
    """`translate(sentences) -> list of str` with an export at `beam_size`."""
    request = artifact.request(beam_size=beam_size)
    return lambda sentences: artifact.generate(sentences, request).best


def searched_size(run, sentences):
    """S of a batch of `sentences`: the size of its shortlist union padded to a bucket."""
    model_config = run.load_config().model
    tokenizer, table = run.load_tokenizer(), ShortlistTable(run.load_shortlist(), model_config.vocab_size)
    rows = [list(ids) + [3] for ids in tokenizer.tokenize(tf.constant(sentences)).numpy()]
    return int(table.output_ids(pad_batch(rows)).shape[0])


def bench(name, translate, sentences, references, target_lang, args, **labels):
    """BLEU of `translate` on `sentences`, then its speed at each batch size: rows for the report."""
    bleu = score(translate(sentences), references, target_lang)["bleu"]
    rows = []
    for batch in args.batches:
        result = measure_quietly(lambda b=batch: translate(sentences[:b]), args.repeats, args.quiet_wait,
                                 args.max_other, args.retries)
        result.update(labels, backend=name, bleu=bleu, batch=batch, repeats=args.repeats)
        rows.append(result)
        print(format_row(result), flush=True)
    return rows


def format_row(r):
    per_call = r["median_s"]
    return (f"| {r['backend']} | {r['search']} | {'on' if r['shortlist'] else 'off'} | {r['bleu']:.2f} | "
            f"{r['batch']} | {r['batch'] / per_call:.1f} | {1000 * per_call:.0f} | {r['first_s']:.1f} | "
            f"{r['repeats']} | {r['other_cores']:.2f} |")


def report(rows, run, size, sentences, args):
    settings = run.load_shortlist().settings
    lines = [
        f"# Vocabulary shortlist on {run.path}", "",
        f"`python bench/bench_shortlist.py {' '.join(sys.argv[1:])}`, {time.strftime('%Y-%m-%d')}.", "",
        f"{len(sentences)} test sentences; shortlist: {settings['per_source']} target pieces per source piece, the "
        f"{settings['frequent']} most frequent, learned from {settings['pairs']} pairs ({settings['method']}); "
        f"vocabulary {run.load_config().model.vocab_size}, S of the 32-sentence batch {size}. XLA "
        f"{'on' if args.xla else 'off'}. Median of the timed calls.", "", HEADER,
    ]
    lines += [format_row(r) for r in rows]
    lines += ["", "## Machine", "", machine_description(f"TensorFlow {tf.__version__}"), ""]
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, help="a trained translation run")
    parser.add_argument("--model", default="auto", help="which weights of the run (as t2t-keras translate --model)")
    parser.add_argument("--split", default="test", choices=("dev", "test"))
    parser.add_argument("--limit", type=int, help="only the first N sentences of the split")
    parser.add_argument("--learn", action="store_true", help="learn the run's shortlist first")
    parser.add_argument("--per-source", type=int, default=50)
    parser.add_argument("--frequent", type=int, default=100)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--backends", nargs="+", default=["run", "saved_model"], choices=("run", "saved_model"))
    parser.add_argument("--xla", action="store_true", help="compile the searches with XLA")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per configuration")
    timing.add_arguments(parser, quiet_wait=300.0, max_other=0.2)
    parser.add_argument("--output", help="write the markdown report here")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    run = RunDirectory(args.run_dir)
    if args.learn:
        learn_run_shortlist(run, args.per_source, args.frequent)
    pairs = load_eval_pairs(run, args.split)[:args.limit]
    sentences, references = [s for s, _ in pairs], [t for _, t in pairs]
    target_lang, rows = run.load_config().data.target_lang, []
    with tempfile.TemporaryDirectory() as tmp:
        exports = saved_model_backends(run, pathlib.Path(tmp), args) if "saved_model" in args.backends else {}
        for search, beam_size in SEARCHES:
            for shortlist in (False, True):
                labels = dict(search=search, shortlist=shortlist)
                if "run" in args.backends:
                    rows += bench("run", run_backend(run, beam_size, shortlist, args), sentences, references,
                                  target_lang, args, **labels)
                if exports:
                    rows += bench("SavedModel", export_backend(exports[shortlist], beam_size), sentences,
                                  references, target_lang, args, **labels)
    timing.publish(report(rows, run, searched_size(run, sentences[:32]), sentences, args), args.output)


if __name__ == "__main__":
    main()
