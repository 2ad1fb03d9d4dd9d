"""The input pipeline at scale: preparing a corpus into shards, training from them, and the in-memory roads.

    python bench/bench_data_scale.py --pairs 32000 --record bench/results/data_scale.json
    python bench/bench_data_scale.py --pairs 4500000 --record bench/results/data_scale.json   # WMT14's size
    python bench/bench_data_scale.py --report bench/results/data_scale.json --output bench/results/data_scale.md \
        --summary bench/results/summary.json

The corpus is `--pairs` lines made from the default corpus' training pairs (`~/.cache/t2t_keras/corpora/*/
train.en|de`): each line joins two pairs drawn at random, the same two on both sides, so lines are distinct
and about as long as WMT's (never used in tests). Each phase runs in its own process, so its peak RSS is its
own, and on a quiet machine (other processes' cores are recorded):

- **prepare**: `t2t-keras prepare`'s step (`data_route.prepare_run`, the `mini` preset, 4,000-piece BPE learned
  on a reservoir sample, max_length 128): wall time, pairs/s per core, peak RSS;
- **shards**: the prepared road's input side alone (no model): seconds to the first batch at position 0 and at
  the end of the first epoch (a resume there seeks), then batches/s and target tokens/s; peak RSS;
- **train** / **resume**: `train` launched in a fresh process on the prepared run until its first step is done,
  then launched again to resume from that checkpoint with its input position set to the end of the first epoch;
- **planned-memory** (up to `--memory-up-to` pairs): the in-memory road of a small corpus: the files read into
  lists, tokenized once into shards held in memory, the same planner: first batch, throughput, peak RSS;
- **streamed** (up to `--memory-up-to` pairs): tokenization in the graph as batches stream (the road TFDS
  datasets, mixtures and language models take, and every translation corpus before shards): the files read
  into lists, `make_training_dataset` with its counting pass: first batch, throughput, peak RSS.
"""

import argparse
import json
import os
import pathlib
import platform
import resource
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from timing import busy_cores_seconds, publish, wait_for_quiet  # noqa: E402

CORPORA = pathlib.Path.home() / ".cache" / "t2t_keras" / "corpora"
MAX_LENGTH = 128
MEMORY_PHASES = ("planned-memory", "streamed")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=32_000, help="pairs in the corpus")
    parser.add_argument("--batches", type=int, default=300, help="batches timed for throughput")
    parser.add_argument("--memory-up-to", type=int, default=1_000_000,
                        help="run the in-memory phases only up to this many pairs (the streamed road takes ~9 GB "
                             "and minutes at 4.5M)")
    parser.add_argument("--quiet-wait", type=float, default=120, help="seconds to wait for a quiet machine per phase")
    parser.add_argument("--workdir", help="where the corpus and the run go (default: a temporary directory)")
    parser.add_argument("--record", help="add this size's results to this JSON file")
    parser.add_argument("--report", help="write the markdown table of the sizes recorded in this JSON file")
    parser.add_argument("--output", help="with --report: also write the markdown here")
    parser.add_argument("--summary", help="with --report: add the headline figures to this summary.json")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--launched", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.report:
        recorded = json.loads(pathlib.Path(args.report).read_text())
        publish(report(recorded), args.output)
        if args.summary:
            update_summary(recorded, pathlib.Path(args.summary))
        return
    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="bench-data-scale-"))
    if args.phase:
        print(json.dumps(PHASES[args.phase](args, workdir)))
        return
    origin = write_corpus(workdir, args.pairs)
    phases = ["prepare", "shards", "train", "resume"] + (list(MEMORY_PHASES) if args.pairs <= args.memory_up_to else [])
    results = dict(pairs=args.pairs, origin=origin, corpus_bytes=sum(
        (workdir / name).stat().st_size for name in ("train.en", "train.de")), cores=os.cpu_count(),
        machine=_machine(), date=time.strftime("%Y-%m-%d"))
    results.update({phase: run_phase(phase, args, workdir) for phase in phases})
    print(json.dumps(results, indent=1))
    if args.record:
        path = pathlib.Path(args.record)
        recorded = json.loads(path.read_text()) if path.exists() else {}
        recorded[str(args.pairs)] = results
        path.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")


def write_corpus(workdir, count, seed=0):
    """Writes `count` lines to workdir/train.en|de, each two random pairs of the default corpus joined."""
    cached = sorted(CORPORA.glob("libreoffice-help-*/train.en"))  # the default corpus
    if not cached or not cached[0].with_suffix(".de").exists():
        sys.exit("The default corpus is not cached: run `t2t-keras main` (or bash main.sh) once first.")
    sources = cached[0].read_text(encoding="utf-8").splitlines()
    targets = cached[0].with_suffix(".de").read_text(encoding="utf-8").splitlines()
    workdir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    with open(workdir / "train.en", "w", encoding="utf-8") as en, open(workdir / "train.de", "w", encoding="utf-8") as de:
        for start in range(0, count, 100_000):
            chosen = rng.integers(0, len(sources), size=(min(100_000, count - start), 2))
            en.write("".join(f"{sources[a]} {sources[b]}\n" for a, b in chosen))
            de.write("".join(f"{targets[a]} {targets[b]}\n" for a, b in chosen))
    return f"two random pairs of the default corpus per line ({len(sources):,} pairs in {cached[0].parent})"


def run_phase(phase, args, workdir):
    """Runs `phase` in a fresh process on a quiet machine; its JSON result with other processes' cores."""
    if args.quiet_wait > 0:
        wait_for_quiet(max_wait=args.quiet_wait)
    command = [sys.executable, __file__, "--phase", phase, "--workdir", str(workdir), "--pairs", str(args.pairs),
               "--batches", str(args.batches), "--launched", str(time.time())]
    machine, children, start = busy_cores_seconds(), _children_cpu(), time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"phase {phase} failed:\n{done.stderr[-4000:]}")
    wall = time.perf_counter() - start
    other = max(0.0, busy_cores_seconds() - machine - (_children_cpu() - children)) / wall
    return dict(json.loads(done.stdout.strip().splitlines()[-1]), other_cores=round(other, 2), wall_s=wall)


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _machine():
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 platform.processor())
    return f"{os.cpu_count()} cores, {model}"


def _config(workdir, *overrides):
    from t2t_keras.config import load_config

    return load_config("mini", [
        "data.source=text", f"data.train_files=[{str(workdir / 'train.en')!r}, {str(workdir / 'train.de')!r}]",
        f"data.max_length={MAX_LENGTH}", "data.pipeline=prepared", "training.attention_every_steps=0",
        "training.checkpoint_every_steps=1", *overrides])


def _peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _batching(config):
    return dict(batch_tokens=config.data.batch_tokens, max_length=config.data.max_length)


def phase_prepare(args, workdir):
    from t2t_keras.tasks.data_route import prepare_run

    rss_before, start = _peak_rss_mib(), time.perf_counter()
    cpu = time.process_time()
    manifest = prepare_run(_config(workdir), workdir / "run")
    seconds = time.perf_counter() - start
    return dict(seconds=seconds, pairs_per_s=args.pairs / seconds, pairs_per_s_per_core=args.pairs / seconds
                / os.cpu_count(), cores_busy=(time.process_time() - cpu) / seconds, rss_mib=_peak_rss_mib(),
                rss_before_mib=rss_before, shards=len(manifest["shards"]), counts=manifest["pairs"])


def _epoch_batches(config, run_dir):
    from t2t_keras.data import batch_plan
    from t2t_keras.data.batching import bucket_plan
    from t2t_keras.data.prepared import prepared_lengths

    lengths = prepared_lengths(run_dir / "prepared")
    plan = bucket_plan(config.data.max_length, config.data.batch_tokens)
    return batch_plan.batches_in_epoch(batch_plan.bucket_histogram(lengths, plan), plan, np.arange(len(lengths)))


def phase_shards(args, workdir):
    from t2t_keras.data.prepared import prepared_training_dataset

    config = _config(workdir)
    rss_before = _peak_rss_mib()
    epoch = _epoch_batches(config, workdir / "run")
    timings = {}
    for position in (epoch, 0):
        start = time.perf_counter()
        iterator = iter(prepared_training_dataset(workdir / "run" / "prepared", seed=config.training.seed,
                                                  position=position, **_batching(config)))
        next(iterator)
        timings[position] = time.perf_counter() - start
    return dict(first_batch_s=timings[0], first_batch_after_epoch_s=timings[epoch], epoch_batches=epoch,
                **_throughput(iterator, args), rss_mib=_peak_rss_mib(), rss_before_mib=rss_before)


def phase_train(args, workdir, resume_at=None):
    """`train` on the prepared run until its first step ends: seconds from the process' launch."""
    import keras

    from t2t_keras.resolved_run import resolve_run
    from t2t_keras.training import resume
    from t2t_keras.training.trainer import train

    class FirstStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            self.seconds = time.time() - args.launched
            self.model.stop_training = True

    first, steps = FirstStep(), (2 if resume_at is not None else 1)
    config = _config(workdir, f"training.train_steps={steps}")
    position = resume.InputPosition.position
    if resume_at is not None:  # the checkpoint of step 1, as if it had been written at the end of the epoch
        resume.InputPosition.position = lambda self, step: self.consumed.assign(resume_at) and resume_at
    try:
        result = train(resolve_run(workdir / "run", config), callbacks=[first], verbose=0)
    finally:
        resume.InputPosition.position = position
    return dict(first_step_s=first.seconds, start_step=result.start_step, rss_mib=_peak_rss_mib())


def phase_resume(args, workdir):
    return dict(phase_train(args, workdir, resume_at=_epoch_batches(_config(workdir), workdir / "run")))


def phase_planned_memory(args, workdir):
    from t2t_keras.data.prepare import tokenized_shards
    from t2t_keras.data.prepared import memory_training_dataset
    from t2t_keras.data.text_files import read_parallel_files
    from t2t_keras.data.tokenizers import load_tokenizer

    config = _config(workdir)
    tokenizer = load_tokenizer(workdir / "run" / "tokenizer.model")
    rss_before, start = _peak_rss_mib(), time.perf_counter()
    pairs = read_parallel_files(workdir / "train.en", workdir / "train.de")
    shards, _ = tokenized_shards(pairs, tokenizer, max_length=config.data.max_length, seed=config.training.seed)
    del pairs
    iterator = iter(memory_training_dataset(shards, seed=config.training.seed, **_batching(config)))
    next(iterator)
    first = time.perf_counter() - start
    return dict(first_batch_s=first, **_throughput(iterator, args), rss_mib=_peak_rss_mib(), rss_before_mib=rss_before)


def phase_streamed(args, workdir):
    from t2t_keras.data.batching import make_training_dataset
    from t2t_keras.data.sources import as_dataset
    from t2t_keras.data.text_files import read_parallel_files
    from t2t_keras.data.tokenizers import load_tokenizer

    config = _config(workdir)
    tokenizer = load_tokenizer(workdir / "run" / "tokenizer.model")
    rss_before, start = _peak_rss_mib(), time.perf_counter()
    pairs = read_parallel_files(workdir / "train.en", workdir / "train.de")
    dataset = make_training_dataset(as_dataset(pairs), tokenizer, shuffle_buffer=config.data.shuffle_buffer,
                                    seed=config.training.seed, **_batching(config))
    iterator = iter(dataset.repeat())
    next(iterator)
    first = time.perf_counter() - start
    return dict(first_batch_s=first, **_throughput(iterator, args), rss_mib=_peak_rss_mib(), rss_before_mib=rss_before)


def _throughput(iterator, args):
    tokens, start = 0.0, time.perf_counter()
    for _ in range(args.batches):
        tokens += float(np.sum(next(iterator)[2]))
    seconds = time.perf_counter() - start
    return dict(batches_per_s=args.batches / seconds, target_tokens_per_s=tokens / seconds)


PHASES = {"prepare": phase_prepare, "shards": phase_shards, "train": phase_train, "resume": phase_resume,
          "planned-memory": phase_planned_memory, "streamed": phase_streamed}


def report(recorded):
    sizes = sorted(recorded.values(), key=lambda r: r["pairs"])
    first = sizes[0]
    lines = [
        "## The input pipeline at 32k to 4.5M pairs", "",
        f"{first['machine']}; {first['date']}. Corpus: {first['origin']}. `mini` preset (4,000-piece BPE, batches "
        f"of its data.batch_tokens), max_length {MAX_LENGTH}; every phase in its own process "
        "(`python bench/bench_data_scale.py`).", "",
        "| pairs | corpus | prepare | pairs/s (per core) | prepare peak RSS | shards: input RSS | first batch | "
        "first batch after one epoch (seek) | batches/s | target tokens/s | `train` launch → first step | "
        "resume after one epoch → first step |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sizes:
        p, s = r["prepare"], r["shards"]
        lines.append(
            f"| {r['pairs']:,} | {r['corpus_bytes'] / 1e6:,.0f} MB | {p['seconds']:.0f} s | {p['pairs_per_s']:,.0f} "
            f"({p['pairs_per_s_per_core']:,.0f}) | {p['rss_mib']:,.0f} MiB | {s['rss_mib']:,.0f} MiB | "
            f"{s['first_batch_s']:.2f} s | {s['first_batch_after_epoch_s']:.2f} s ({s['epoch_batches']:,} batches) | "
            f"{s['batches_per_s']:,.0f} | {s['target_tokens_per_s']:,.0f} | {r['train']['first_step_s']:.1f} s | "
            f"{r['resume']['first_step_s']:.1f} s (step {r['resume']['start_step']}) |")
    lines += ["", "The in-memory roads, on the same corpora (the files read into lists first):", "",
              "| pairs | road | first batch | batches/s | target tokens/s | peak RSS |", "|---|---|---|---|---|---|"]
    for r in sizes:
        for phase, name in (("planned-memory", "tokenized once into shards in memory (the default below 256 MB)"),
                            ("streamed", "tokenized in the graph as it streams (TFDS, mixtures, lm)")):
            if phase in r:
                m = r[phase]
                lines.append(f"| {r['pairs']:,} | {name} | {m['first_batch_s']:.1f} s | {m['batches_per_s']:,.0f} | "
                             f"{m['target_tokens_per_s']:,.0f} | {m['rss_mib']:,.0f} MiB |")
    others = max(phase.get("other_cores", 0) for r in sizes for phase in r.values() if isinstance(phase, dict))
    lines += ["", f"Other processes used at most {others:.2f} cores during any phase.", ""]
    return "\n".join(lines + roads_table(ROADS_RESULTS))


ROADS_RESULTS = pathlib.Path(__file__).parent / "results" / "roads_training.json"


def roads_table(path):
    """The same `train` run on each road (bench_roads_training.py), if it was recorded."""
    if not path.exists():
        return []
    recorded = json.loads(path.read_text())
    roads = recorded["roads"]
    steps = [step for step, _ in next(iter(roads.values()))["loss"]]
    lines = [f"### The same `train` run on each road ({recorded['steps']} updates of `mini` on the default corpus, "
             f"{recorded['date']}; `python bench/bench_roads_training.py`)", "",
             "| road | target tokens/s (from update 50) | " + " | ".join(f"loss @{s}" for s in steps) + " |",
             "|---|---|" + "---|" * len(steps)]
    for road, result in roads.items():
        lines.append(f"| {road} | {result['target_tokens_per_s']:,.0f} | "
                     + " | ".join(f"{loss:.3f}" for _, loss in result["loss"]) + " |")
    return lines + [""]


def update_summary(recorded, path):
    """Adds prepare_pairs_per_s, input_rss_growth_4p5m_vs_32k and shard_input_target_tok_s to `path`."""
    small, large = recorded[str(min(map(int, recorded)))], recorded[str(max(map(int, recorded)))]
    summary = json.loads(path.read_text()) if path.exists() else {}
    summary.update(
        prepare_pairs_per_s=round(large["prepare"]["pairs_per_s"]),
        input_rss_growth_4p5m_vs_32k=round(large["shards"]["rss_mib"] / small["shards"]["rss_mib"], 3),
        shard_input_target_tok_s=round(large["shards"]["target_tokens_per_s"]))
    summary.setdefault("detail", {})["data_scale"] = (
        f"bench/results/data_scale.md: {large['pairs']:,} against {small['pairs']:,} pairs, {large['machine']}, "
        f"{large['date']}")
    path.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
