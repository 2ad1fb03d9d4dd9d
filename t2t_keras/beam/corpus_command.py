"""`t2t-keras prepare --runner`: RUN/prepared/ written by the corpus pipeline (`corpus_pipeline`), with the manifest
`prepare` writes, so that `train` reads it unchanged.

The run's tokenizer is the one `prepare` would use: the run's file when it has one, else trained here, as
`prepare` trains it (a seeded uniform sample of the corpus's pairs, one streaming pass in this process).
"""

import itertools
import json
import logging
import pathlib
import shutil

from t2t_keras.beam import corpus_pipeline, runner_options
from t2t_keras.errors import ConfigError, DataError, T2TError

logger = logging.getLogger(__name__)

SHARDS_RECORD = ".pipeline-shards.json"  # the pipeline's shard records, read back here, then removed


def prepare_command(config, run_dir, runner, workers=None, extra=(), max_ratio=None):
    """Prepares the run's corpus through a pipeline on `runner`; returns the manifest (`prepare_run`'s).
    `max_ratio`: drop pairs whose longer side has more than that many times the characters of the shorter."""
    from t2t_keras.errors import check_task
    from t2t_keras.resolved_run import resolve_run
    from t2t_keras.runs import RunDirectory
    from t2t_keras.tasks.data_route import is_prepared, prepare_run

    check_task("prepare", config.task, "the config")
    run = RunDirectory(run_dir)
    if max_ratio is not None and not max_ratio >= 1:
        raise ConfigError(f"--max-length-ratio {max_ratio}: give a ratio of at least 1 (e.g. 3).")
    if is_prepared(run.prepared_dir):  # checked against the corpus and settings, as prepare checks it
        return prepare_run(config, run_dir)
    if run.prepared_dir.exists() and any(run.prepared_dir.iterdir()):
        raise DataError(f"{run.prepared_dir} holds an unfinished preparation: finish it with `t2t-keras prepare "
                        f"--run-dir {run_dir}` (no --runner), or remove it.")
    if config.data.pipeline == "memory":
        raise ConfigError("data.pipeline=memory: a run with this config would not read prepared shards. Set "
                          "data.pipeline=auto (or prepared) to prepare its corpus.")
    with run.lock("prepare"):
        config = resolve_run(run, config).config
        if not run.exists():
            run.save_config(config)  # which makes the run, as `train` makes it before reading its corpus
        manifest = _prepared(run, config, runner_options.pipeline_options(runner, workers, extra), max_ratio)
        run.save_config(config)
        run.record_tokenizer(config.data.tokenizer)
    return manifest


def _prepared(run, config, options, max_ratio):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import StandardOptions

    from t2t_keras.data.corpus_parts import training_parts
    from t2t_keras.data.sources import components, split_files

    data, out_dir = config.data, run.prepared_dir
    parts = training_parts(data)
    if any(part.source == "tfds" for part in parts):
        raise ConfigError("prepare --runner reads corpus files (data.source text or tsv): a TFDS corpus is "
                          "prepared by `t2t-keras prepare` without --runner.")
    files = [split_files(part_config, "train") for part_config, _ in components(data)]
    tokenizer_path, trained = _tokenizer(run, config, parts)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = (str(tokenizer_path), data.tokenizer)
    try:
        with beam.Pipeline(options=options) as pipeline:
            shards, counted = corpus_pipeline.build_corpus_pipeline(
                pipeline, files, tokenizer, str(out_dir), data.max_length, data.pairs_per_shard, max_ratio)
            _record(shards, counted, str(out_dir / SHARDS_RECORD))
    except Exception as error:
        shutil.rmtree(out_dir, ignore_errors=True)  # held only this run's shards: the same command runs again
        if options.view_as(StandardOptions).runner == "DirectRunner" and runner_options.lost_worker(error):
            raise T2TError(runner_options.lost_worker_message(error, f"The shards it wrote in {out_dir} were "
                                                              "removed.")) from error
        raise
    return _manifest(out_dir, parts, config, tokenizer_path, trained, max_ratio)


def _record(shards, counted, path):
    """Writes the shard records and the counts to `path` once the pipeline has them all."""
    import apache_beam as beam

    from t2t_keras.beam.pipeline_paths import write_whole

    def write(records, counts):
        text = json.dumps(dict(shards=records, pairs=corpus_pipeline.counts(counts)))
        write_whole(path, text.encode("utf-8"))

    (shards | "All shards" >> beam.combiners.ToList()
     | "Record" >> beam.Map(write, beam.pvalue.AsSingleton(counted)))


def _tokenizer(run, config, parts):
    """`(path, trained)`: the run's tokenizer file, trained on a sample of the corpus first if it has none."""
    from t2t_keras.data.prepare import SAMPLE_PAIRS, reservoir_sample
    from t2t_keras.data.tokenizers import train_tokenizer

    data, seed = config.data, config.training.seed
    path = pathlib.Path(run.tokenizer_file(data.tokenizer))
    if path.exists():
        return path, False
    pairs = itertools.chain.from_iterable(part.pairs() for part in parts)
    sample, total = reservoir_sample((p for p in pairs if p[0] and p[1]), SAMPLE_PAIRS, seed)
    logger.info("Training a %d-piece %s vocabulary on %d of %d pairs.", data.vocab_size, data.tokenizer,
                len(sample), total)
    train_tokenizer(data.tokenizer, [side for pair in sample for side in pair], path, data.vocab_size, seed=seed)
    return path, True


def _manifest(out_dir, parts, config, tokenizer_path, trained, max_ratio):
    """The manifest `prepare` would write for these shards (numbered in part and bucket order), written."""
    from t2t_keras.data import manifest as manifests
    from t2t_keras.data.prepare import MIXTURE, SAMPLE_PAIRS, WINDOW_SHARDS
    from t2t_keras.data.shards import shard_files, shard_name
    from t2t_keras.data.tokenizers import load_tokenizer

    recorded = json.loads((out_dir / SHARDS_RECORD).read_text(encoding="utf-8"))
    shards = []
    for index, shard in enumerate(sorted(recorded["shards"], key=lambda entry: (entry["part"], entry["bucket"]))):
        for old, new in zip(shard_files(out_dir, shard["name"]), shard_files(out_dir, shard_name(index))):
            old.rename(new)
        entry = dict(shard, name=shard_name(index))
        del entry["bucket"]
        if len(parts) == 1:
            del entry["part"]
        shards.append(entry)
    if not shards:
        raise DataError(f"No pair of the corpus fits data.max_length={config.data.max_length} "
                        f"({recorded['pairs']}): check the corpus files, or raise data.max_length.")
    data, tokenizer = config.data, load_tokenizer(tokenizer_path, config.data.tokenizer)
    settings = dict(source=parts[0].source if len(parts) == 1 else MIXTURE, tokenizer_kind=data.tokenizer,
                    vocab_size=data.vocab_size, max_length=data.max_length, pairs_per_shard=data.pairs_per_shard,
                    window_shards=WINDOW_SHARDS, sample_pairs=SAMPLE_PAIRS, seed=config.training.seed)
    corpus = [dict(entry, **({"part": index} if len(parts) > 1 else {}))
              for index, part in enumerate(parts) for entry in part.entries]
    token = dict(manifests.file_fingerprint(tokenizer_path), path=str(pathlib.Path(tokenizer_path).resolve()),
                 kind=tokenizer.kind, vocab_size=tokenizer.vocab_size, trained=trained)
    manifest = dict(format=manifests.FORMAT, version=manifests.VERSION, complete=True, corpus=corpus,
                    settings=settings, tokenizer=token, windows_done=0, shards=shards, pairs=recorded["pairs"],
                    order=corpus_pipeline.ORDER, prepared_by="t2t-keras prepare --runner", max_length_ratio=max_ratio)
    manifests.write_manifest(out_dir, manifest)
    (out_dir / SHARDS_RECORD).unlink()
    return manifest
