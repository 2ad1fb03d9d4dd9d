"""The input pipeline at scale: preparing a corpus into shards, and reading batches from them, against today's path.

    python bench/bench_data_scale.py --pairs 32000
    python bench/bench_data_scale.py --pairs 4500000 --output bench/results/data_scale.md   # WMT size

The corpus is `--pairs` pairs of the default corpus' training sentences when they are cached
(`~/.cache/t2t_keras/corpora/*/train.en|de`, repeated as needed), else synthetic pairs (Zipf-distributed
made-up words, 5-40 per sentence, the target the words reversed). Each phase runs in its own process, so its
peak RSS is its own:

- **prepare**: `prepare_corpus` (8,000-piece BPE, max_length 128, shards of `--pairs-per-shard`): wall time,
  pairs/s, peak RSS; and tokenizing 20,000 pairs with tf.data's `num_parallel_calls` AUTOTUNE against 1;
- **prepared**: `prepared_training_dataset` (4,096 tokens per batch): seconds to the first batch at position 0 and
  at position 1,000,000 (seeking), then batches/s and target tokens/s over `--batches` batches; peak RSS;
- **in-memory**: today's path (`read_parallel_files`, `make_training_dataset` with its counting pass) with the same
  tokenizer: seconds to the first batch, batches/s, target tokens/s, peak RSS.
"""

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from timing import busy_cores_seconds, publish, wait_for_quiet  # noqa: E402

CORPORA = pathlib.Path.home() / ".cache" / "t2t_keras" / "corpora"
BATCHING = dict(batch_tokens=4096, max_length=128)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=32_000, help="pairs in the corpus")
    parser.add_argument("--pairs-per-shard", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=300, help="batches timed for throughput")
    parser.add_argument("--workdir", help="where the corpus and shards go (default: a temporary directory)")
    parser.add_argument("--output", help="also write the markdown report here")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="bench-data-scale-"))
    if args.phase:
        print(json.dumps(PHASES[args.phase](args, workdir)))
        return
    origin = write_corpus(workdir, args.pairs)
    results = {phase: run_phase(phase, args, workdir) for phase in ("prepare", "prepared", "in-memory")}
    publish(report(args, origin, results), args.output)


def write_corpus(workdir, count):
    """Writes `count` pairs to workdir/train.en|de; returns where the sentences came from."""
    cached = sorted(CORPORA.glob("*/train.en"))
    if cached and cached[0].with_suffix(".de").exists():
        sources = cached[0].read_text(encoding="utf-8").splitlines()
        targets = cached[0].with_suffix(".de").read_text(encoding="utf-8").splitlines()
        origin = f"the default corpus ({len(sources)} pairs in {cached[0].parent}, repeated)"
    else:
        sources, targets = synthetic_pairs(min(count, 200_000))
        origin = "synthetic pairs (Zipf-distributed made-up words, 5-40 per sentence)"
    workdir.mkdir(parents=True, exist_ok=True)
    for name, side in (("train.en", sources), ("train.de", targets)):
        with open(workdir / name, "w", encoding="utf-8") as handle:
            for i in range(count):
                handle.write(side[i % len(side)] + "\n")
    return origin


def synthetic_pairs(count, seed=0):
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, size=rng.integers(2, 10))) for _ in range(20_000)]
    ranks = np.minimum(rng.zipf(1.2, size=count * 45), len(words)) - 1
    sources, targets, used = [], [], 0
    for length in rng.integers(5, 41, size=count):
        chosen = [words[r] for r in ranks[used:used + length]]
        used += length
        sources.append(" ".join(chosen))
        targets.append(" ".join(w[::-1] for w in chosen))
    return sources, targets


def run_phase(phase, args, workdir):
    """Runs `phase` in a fresh process on a quiet machine; its JSON result with other processes' cores."""
    wait_for_quiet(max_wait=120)
    command = [sys.executable, __file__, "--phase", phase, "--workdir", str(workdir), "--pairs", str(args.pairs),
               "--pairs-per-shard", str(args.pairs_per_shard), "--batches", str(args.batches)]
    machine, children, start = busy_cores_seconds(), _children_cpu(), time.perf_counter()
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - start
    other = max(0.0, busy_cores_seconds() - machine - (_children_cpu() - children)) / wall
    return dict(json.loads(output.strip().splitlines()[-1]), other_cores=other)


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _config(workdir):
    from t2t_keras.config import load_config

    return load_config("base", [
        "data.source=text", f"data.train_files=[{str(workdir / 'train.en')!r}, {str(workdir / 'train.de')!r}]",
        "data.vocab_size=8000", f"data.max_length={BATCHING['max_length']}"])


def _peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def phase_prepare(args, workdir):
    from t2t_keras.data.pair_stream import stream_pairs
    from t2t_keras.data.prepare import prepare_corpus, tokenize_pairs
    from t2t_keras.data.tokenizers import load_tokenizer

    rss_before = _peak_rss_mib()
    start = time.perf_counter()
    manifest = prepare_corpus(_config(workdir), workdir / "prepared", pairs_per_shard=args.pairs_per_shard,
                              progress=False, overwrite=True)
    seconds = time.perf_counter() - start
    result = dict(seconds=seconds, pairs_per_s=args.pairs / seconds, rss_mib=_peak_rss_mib(),
                  rss_before_mib=rss_before, shards=len(manifest["shards"]), counts=manifest["pairs"])
    tokenizer = load_tokenizer(workdir / "prepared" / "tokenizer.model")
    pairs = [pair for _, pair in zip(range(20_000), stream_pairs("text", [workdir / "train.en", workdir / "train.de"]))]
    for name, calls in (("tokenize_autotune_s", None), ("tokenize_sequential_s", 1)):
        start = time.perf_counter()
        tokenize_pairs(pairs, tokenizer, **({} if calls is None else dict(parallel_calls=calls)))
        result[name] = time.perf_counter() - start
    return result


def phase_prepared(args, workdir):
    from t2t_keras.data.prepared import prepared_training_dataset

    timings = {}
    for position in (1_000_000, 0):
        start = time.perf_counter()
        iterator = iter(prepared_training_dataset(workdir / "prepared", seed=1, position=position, **BATCHING))
        next(iterator)
        timings[position] = time.perf_counter() - start
    return dict(first_batch_s=timings[0], first_batch_at_1m_s=timings[1_000_000], **_throughput(iterator, args),
                rss_mib=_peak_rss_mib())


def phase_in_memory(args, workdir):
    from t2t_keras.data.batching import make_training_dataset
    from t2t_keras.data.sources import as_dataset
    from t2t_keras.data.text_files import read_parallel_files
    from t2t_keras.data.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(workdir / "prepared" / "tokenizer.model")
    start = time.perf_counter()
    pairs = read_parallel_files(workdir / "train.en", workdir / "train.de")
    dataset = make_training_dataset(as_dataset(pairs), tokenizer, shuffle_buffer=20_000, seed=1, **BATCHING)
    iterator = iter(dataset.repeat())
    next(iterator)
    first = time.perf_counter() - start
    return dict(first_batch_s=first, **_throughput(iterator, args), rss_mib=_peak_rss_mib())


def _throughput(iterator, args):
    tokens, start = 0.0, time.perf_counter()
    for _ in range(args.batches):
        tokens += float(np.sum(next(iterator)[2]))
    seconds = time.perf_counter() - start
    return dict(batches_per_s=args.batches / seconds, target_tokens_per_s=tokens / seconds)


PHASES = {"prepare": phase_prepare, "prepared": phase_prepared, "in-memory": phase_in_memory}


def report(args, origin, results):
    prepare, prepared, memory = results["prepare"], results["prepared"], results["in-memory"]
    return "\n".join([
        f"## Input pipeline at {args.pairs:,} pairs ({origin})", "",
        f"{os.cpu_count()} cores; batches of {BATCHING['batch_tokens']} tokens per side, max_length "
        f"{BATCHING['max_length']}, 8,000-piece BPE; each phase in its own process.", "",
        f"**prepare_corpus**: {prepare['seconds']:.1f} s ({prepare['pairs_per_s']:,.0f} pairs/s), "
        f"{prepare['shards']} shards, counts {prepare['counts']}, peak RSS {prepare['rss_mib']:,.0f} MiB "
        f"({prepare['rss_before_mib']:,.0f} MiB before it started). Tokenizing 20,000 pairs: "
        f"{prepare['tokenize_autotune_s']:.2f} s with num_parallel_calls=AUTOTUNE, "
        f"{prepare['tokenize_sequential_s']:.2f} s with 1.", "",
        "| path | first batch (s) | first batch at position 1M (s) | batches/s | target tokens/s | peak RSS (MiB) |",
        "|---|---|---|---|---|---|",
        f"| prepared shards | {prepared['first_batch_s']:.2f} | {prepared['first_batch_at_1m_s']:.2f} | "
        f"{prepared['batches_per_s']:.0f} | {prepared['target_tokens_per_s']:,.0f} | {prepared['rss_mib']:,.0f} |",
        f"| in memory (today) | {memory['first_batch_s']:.2f} | (skip replays 1M batches) | "
        f"{memory['batches_per_s']:.0f} | {memory['target_tokens_per_s']:,.0f} | {memory['rss_mib']:,.0f} |", "",
        "Other processes used " + ", ".join(f"{name} {r['other_cores']:.2f}" for name, r in results.items())
        + " cores during the phases.", ""])


if __name__ == "__main__":
    main()
