"""Which road a run's training batches take (`data.pipeline`), and the prepared road's setup.

    memory    the training split is read whole. A translation corpus of files is tokenized once into shards
              held in memory and batched as the prepared road batches (`memory_training`): the same
              batches, and a resumed run seeks. A TFDS dataset, a weighted mixture and the language-model
              tasks are tokenized as they stream through a shuffle buffer; a resumed run skips the batches
              it consumed by reading them again
    prepared  the corpus is tokenized once into shards in RUN/prepared/ (`data.prepare.prepare_corpus`, also
              `t2t-keras prepare`); a resumed run seeks to its position (`data.prepared`), reading nothing twice

`auto` is decided once per run and kept in RUN/input_stream.json with what the stream's positions depend on
(`stream_record`), which the trainer checks on every resume (`training.resume.check_input_stream`).
"""

import hashlib
import json
import logging
import pathlib
from typing import Callable, NamedTuple

import numpy as np
import tensorflow as tf

from t2t_keras.data import sources
from t2t_keras.data.manifest import MANIFEST_FILE, read_manifest
from t2t_keras.data.prepare import prepare_corpus, tokenized_shards
from t2t_keras.data.prepared import GROUP_SHARDS, memory_training_dataset, prepared_training_dataset
from t2t_keras.data.tokenizer import check_vocab_size
from t2t_keras.data.tokenizers import load_tokenizer
from t2t_keras.errors import ConfigError, DataError, check_task
from t2t_keras.resolved_run import resolve_run
from t2t_keras.runs import RunDirectory

logger = logging.getLogger(__name__)

MEMORY, PREPARED = "memory", "prepared"
# `auto` prepares a text/tsv corpus whose training files hold more than this. Above it the in-memory road's
# lists of strings take several times the corpus in RAM; below it they are small, and tokenizing into shards
# held in memory (`memory_training`) skips writing files: both roads then give the same batches, and both
# resume by seeking (bench/results/data_scale.md).
PREPARE_THRESHOLD_BYTES = 256 * 2**20


class Route(NamedTuple):
    """The road chosen (MEMORY or PREPARED) and why, for the log."""

    name: str
    reason: str


def choose_route(run, config, num_workers=1) -> Route:
    """The road of `run`'s training batches under `config.data.pipeline`, logged once at INFO.

    Raises:
      ConfigError: the prepared road on several workers without a finished preparation (workers do not
        prepare one directory together: `t2t-keras prepare` first).
    """
    route = _route(run, config, num_workers)
    if route.name == PREPARED and num_workers > 1 and not is_prepared(run.prepared_dir):
        raise ConfigError(
            f"data.pipeline=prepared on {num_workers} workers reads a corpus prepared beforehand, and "
            f"{run.prepared_dir} holds no finished preparation: run `t2t-keras prepare --run-dir {run.path}` "
            "(with the same config) on one machine first, or set data.pipeline=memory.")
    logger.info("Training batches: %s (%s).", "prepared shards in " + str(run.prepared_dir)
                if route.name == PREPARED else "in memory", route.reason)
    return route


def _route(run, config, num_workers):
    setting = config.data.pipeline
    if setting != "auto":
        return Route(setting, f"data.pipeline={setting}")
    recorded = (run.read_json(run.input_stream_path) or {}).get("pipeline")
    if recorded:
        return Route(recorded, "data.pipeline=auto: the road this run took when it started")
    if config.task != "translation":
        return Route(MEMORY, f"data.pipeline=auto: task {config.task} trains from memory (prepared shards are "
                             "translation-only for now)")
    if run.checkpoint_paths():
        return Route(MEMORY, "data.pipeline=auto: the run has checkpoints of in-memory training")
    if is_prepared(run.prepared_dir):
        return Route(PREPARED, f"data.pipeline=auto: {run.prepared_dir} holds a prepared corpus")
    if num_workers > 1:
        return Route(MEMORY, f"data.pipeline=auto: {num_workers} workers read prepared shards only once they are "
                             "prepared (t2t-keras prepare)")
    fetched = [part.source for part, _ in sources.components(config.data) if part.source in sources.PREPARED_SOURCES]
    if fetched:
        return Route(MEMORY, f"data.pipeline=auto: data.source={fetched[0]} is a corpus t2t_keras fetches, small "
                             "enough for memory")
    if any(part.source == "tfds" for part, _ in sources.components(config.data)):
        return Route(MEMORY, "data.pipeline=auto: data.source=tfds is read in memory unless it is prepared "
                             "(t2t-keras prepare, or data.pipeline=prepared)")
    size, threshold = training_files_bytes(config.data) / 2**20, PREPARE_THRESHOLD_BYTES / 2**20
    if size > threshold:
        return Route(PREPARED, f"data.pipeline=auto: the training files hold {size:.0f} MB, more than {threshold:.0f}")
    return Route(MEMORY, f"data.pipeline=auto: the training files hold {size:.1f} MB, at most {threshold:.0f}")


def training_files_bytes(data_config) -> int:
    """The total size of the training files of every corpus (missing files count 0: reading them fails clearly
    later; the corpora t2t_keras fetches count 0, being small)."""
    paths = [pathlib.Path(path) for part, _ in sources.components(data_config) for path in part.train_files or ()]
    return sum(path.stat().st_size for path in paths if path.is_file())


def is_prepared(directory) -> bool:
    """Whether `directory` holds a finished preparation."""
    manifest = read_manifest(directory) if (pathlib.Path(directory) / MANIFEST_FILE).exists() else None
    return bool(manifest and manifest["complete"])


class PreparedTraining(NamedTuple):
    """The prepared road's part of `RunData`."""

    tokenizer: object
    seek: Callable  # (position, input_context=None) -> the training batches from micro-batch `position` on
    stream: dict  # what the positions depend on (`stream_record`)
    provenance: dict  # RUN/data.json's "train"


FILE_SHARDING = "file"  # `stream["sharding"]` when each worker reads only its own shards


def prepared_training(run, config, num_replicas=1, num_workers=1) -> PreparedTraining:
    """Prepares (or checks) RUN/prepared/ and the tokenizer, and the seeking training stream over it.

    On one worker, `seek(position)` is the stream of batches of `data.batch_tokens` tokens that tf.distribute
    splits among the local replicas (`num_replicas`), from micro-batch `position` on. On several workers each
    reads only its own shards: `seek(position, input_context)` is that worker's stream (`_worker_stream`).

    Raises (when a worker's stream is built):
      DataError: fewer shards than workers (`prepared.prepared_training_dataset`).
    """
    manifest = prepare_run_corpus(run, config)
    data = config.data
    tokenizer = load_tokenizer(run.checked_tokenizer_file(data.tokenizer), data.tokenizer)
    check_vocab_size(tokenizer.vocab_size, config.model.vocab_size)
    options = _stream_options(config, num_replicas)
    ids = config.model.special_ids  # frame and pad the pieces (data/framing.py)

    def seek(position, input_context=None):
        if num_workers == 1:
            dataset = prepared_training_dataset(run.prepared_dir, position=position, special_ids=ids, **options)
        elif input_context is None:
            raise ValueError(f"On {num_workers} workers each reads its own shards: pass the tf.distribute "
                             "InputContext of `distribute_datasets_from_function`.")
        else:
            dataset = _worker_stream(run.prepared_dir, dict(options, special_ids=ids), position, input_context)
        # The stream never ends. Told so, a multi-worker iterator skips the collective it otherwise runs at
        # every step for the workers to agree that each still has a batch.
        return dataset.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))

    split = dict(num_workers=num_workers)
    if num_workers > 1:  # absent on one worker, as in the records of runs from before file-level sharding
        split["sharding"] = FILE_SHARDING
    return PreparedTraining(tokenizer, seek, stream_record(manifest, dict(options, **split)),
                            _provenance(run, manifest))


def _stream_options(config, num_replicas):
    """The prepared stream's settings: seed, tokens a batch, length limit, replicas, and a mixture's shares."""
    data = config.data
    options = dict(seed=config.training.seed, batch_tokens=data.batch_tokens, max_length=data.max_length,
                   num_replicas=num_replicas)
    if data.sources:  # a weighted mixture: each epoch draws from each corpus by its weight
        options["shares"] = [weight for _, weight in sources.components(data)]
    return options


def _provenance(run, manifest):
    """What the run records of the corpus it trains on: its source, directory, files, pairs kept and shards."""
    return dict(source=manifest["settings"]["source"], prepared=str(run.prepared_dir),
                files=[entry["path"] for entry in manifest["corpus"]], pairs=manifest["pairs"]["kept"],
                shards=len(manifest["shards"]))


def _worker_stream(prepared_dir, options, position, input_context):
    """Worker `input_context.input_pipeline_id`'s own stream: one batch per replica, from `position` on.

    File-level sharding: `batch_plan.worker_shards` deals each epoch's shards out among the workers. The
    stream gives one batch of `data.batch_tokens // replicas` tokens per replica (the cluster's replicas), for
    `strategy.distribute_datasets_from_function`, which gives each local replica an element of its own. A
    plain dataset would not do: `fit` hands it to `experimental_distribute_dataset`, which splits every
    worker's batch across all the replicas of the cluster, so a worker would feed its batches over several
    steps and its position would no longer count them. `position` counts the micro-batches every replica
    consumed, so the worker's stream starts at `position` times its local replicas.
    """
    replicas, workers = input_context.num_replicas_in_sync, input_context.num_input_pipelines
    return prepared_training_dataset(
        prepared_dir, seed=options["seed"], batch_tokens=options["batch_tokens"] // replicas,
        max_length=options["max_length"], num_replicas=1, worker_index=input_context.input_pipeline_id,
        num_workers=workers, position=position * (replicas // workers), shares=options.get("shares"),
        special_ids=options.get("special_ids"))


def stream_record(manifest, options) -> dict:
    """What the positions of a prepared stream depend on: settings, and a digest of the preparation."""
    return dict(options, pipeline=PREPARED, bucket_boundaries=None, group_shards=GROUP_SHARDS,
                manifest=manifest_digest(manifest))


def manifest_digest(manifest) -> str:
    """sha256 of what a finished preparation holds: corpus checksums, settings, tokenizer, shards."""
    # The shards' file checksums are left out: the same shards, from a preparation recorded before they were kept.
    shards = [{key: value for key, value in entry.items() if key != "files"} for entry in manifest["shards"]]
    held = dict(corpus=[[entry["size"], entry["sha256"]] for entry in manifest["corpus"]],
                settings=manifest["settings"], tokenizer=(manifest["tokenizer"] or {}).get("sha256"),
                shards=shards, pairs=manifest["pairs"])
    return hashlib.sha256(json.dumps(held, sort_keys=True).encode("utf-8")).hexdigest()


def prepare_run_corpus(run, config) -> dict:
    """`prepare_corpus` into RUN/prepared/ with the run's tokenizer file and seed; its manifest."""
    try:
        return prepare_corpus(config, run.prepared_dir, tokenizer_path=run.tokenizer_file(config.data.tokenizer),
                              seed=config.training.seed, pairs_per_shard=config.data.pairs_per_shard)
    except DataError as error:
        raise DataError(f"{error} For the run {run.path}: restore what changed (the corpus files, or "
                        "training.seed) to continue it, or train the changed corpus into a new --run-dir.") from None


def prepare_run(config, run_dir, where="the config") -> dict:
    """`t2t-keras prepare`: RUN/config.yaml written (or checked) and the corpus prepared in RUN/prepared/.

    Raises:
      T2TError: a task other than translation (`where` names the config).
      ConfigError: data.pipeline=memory, or a run that has already trained in memory.
    """
    check_task("prepare", config.task, where)
    run = RunDirectory(run_dir)
    with run.lock("prepare"):
        return _prepare_run(run, config)


def _prepare_run(run, config):
    if config.data.pipeline == MEMORY:
        raise ConfigError("data.pipeline=memory: a run with this config would not read prepared shards. Set "
                          "data.pipeline=auto (or prepared) to prepare its corpus.")
    recorded = (run.read_json(run.input_stream_path) or {}).get("pipeline")
    if recorded == MEMORY or (recorded is None and run.checkpoint_paths()):
        raise ConfigError(f"{run.path} has trained on in-memory batches, and its input position counts those: "
                          "it cannot go on from prepared shards. Prepare into a new --run-dir and train there.")
    config = resolve_run(run, config).config
    if not run.exists():
        run.save_config(config)  # which makes the run, as `train` makes it before reading its corpus
    manifest = prepare_run_corpus(run, config)
    run.save_config(config)  # once the preparation took the corpus: a refused one leaves the run as it was
    run.record_tokenizer(config.data.tokenizer)
    return manifest


def format_preparation(manifest, run_dir) -> str:
    """One line of counts for `t2t-keras prepare` of the run `run_dir`."""
    directory = RunDirectory(run_dir).prepared_dir
    pairs, shards = manifest["pairs"], len(manifest["shards"])
    return (f"prepared {pairs['kept']} of {pairs['read']} pairs in {shards} shard{'s' if shards != 1 else ''} in "
            f"{directory} (dropped {pairs['empty']} with an empty side, {pairs['overlong']} over data.max_length)")


PLANNED = "planned"  # input_stream.json's "batches" for the in-memory road through the batch planner


class MemoryTraining(NamedTuple):
    """The in-memory road's planned part of `RunData`."""

    seek: Callable  # position -> the training batches from micro-batch `position` on
    stream: dict  # what the positions depend on (`stream_record`)
    counts: dict  # read / empty / overlong / kept pairs


def plans_in_memory(run, task_name, examples) -> bool:
    """Whether the in-memory road tokenizes `examples` once and plans its batches as the prepared road does.

    It does for a translation corpus held as a list of pairs, and for a weighted mixture of such corpora
    (`sources.Mixture`, drawn by weight each epoch). A TFDS dataset (alone or in a mixture), the language-model
    tasks and a run that started on the streamed batches of earlier versions (its positions count those) stream
    through `batching.make_training_dataset`, as before.
    """
    if task_name != "translation" or not isinstance(examples, (list, sources.Mixture)):
        return False
    recorded = run.read_json(run.input_stream_path)
    return recorded.get("batches") == PLANNED if recorded and run.checkpoint_paths() else True


def memory_training(examples, tokenizer, config, num_replicas=1, num_workers=1) -> MemoryTraining:
    """The training pairs tokenized once into shards in memory, and the seeking stream over them.

    The shards are those `t2t-keras prepare` writes for the same pairs and tokenizer, and the stream is the
    prepared road's (`prepared.memory_training_dataset`): the same batches in the same order for a seed,
    exact resume by seeking. On several workers every worker holds the corpus and takes its share of each
    batch (data sharding).

    Raises:
      DataError: no pair fits data.max_length.
    """
    data, seed = config.data, config.training.seed
    shards, parts, counts = _tokenized_parts(examples, tokenizer, data.max_length, seed)
    if not shards:
        raise DataError(f"No training pair fits data.max_length={data.max_length} ({counts}): check the corpus "
                        "files, or raise data.max_length.")
    if counts["overlong"]:
        logger.warning("Dropping %d of %d pairs longer than max_length=%d tokens.", counts["overlong"],
                       counts["read"], data.max_length)
    options = dict(seed=seed, batch_tokens=data.batch_tokens, max_length=data.max_length, num_replicas=num_replicas)
    if isinstance(examples, sources.Mixture):
        options["shares"] = list(examples.shares)

    def seek(position):
        dataset = memory_training_dataset(shards, position=position, parts=parts,
                                          special_ids=config.model.special_ids, **options)
        if num_workers > 1:
            sharding = tf.data.Options()
            sharding.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
            dataset = dataset.with_options(sharding)
        return dataset

    stream = dict(options, pipeline=MEMORY, batches=PLANNED, num_workers=num_workers, bucket_boundaries=None,
                  group_shards=GROUP_SHARDS, corpus=shards_digest(shards))
    return MemoryTraining(seek, stream, counts)


def _tokenized_parts(examples, tokenizer, max_length, seed):
    """`(shards, parts, counts)`: the pairs tokenized into shards in memory, the corpus of each shard (a
    mixture's are tokenized corpus by corpus, so each shard holds one corpus), and the pairs counted."""
    lists = examples.parts if isinstance(examples, sources.Mixture) else [examples]
    shards, parts, counts = [], [], {}
    for index, pairs in enumerate(lists):
        held, part_counts = tokenized_shards(pairs, tokenizer, max_length=max_length, seed=seed, progress=True,
                                             first_window=counts.get("windows", 0))
        shards, parts = shards + held, parts + [index] * len(held)
        counts = {key: counts.get(key, 0) + value for key, value in part_counts.items()}
    return shards, parts, counts


def shards_digest(shards) -> str:
    """sha256 of the token ids and lengths of shards held in memory."""
    digest = hashlib.sha256()
    for shard in shards:
        digest.update(np.ascontiguousarray(shard.lengths).tobytes())
        digest.update(np.ascontiguousarray(shard.ids).tobytes())
    return digest.hexdigest()
