"""One-off preparation of a training corpus into shuffled, tokenized binary shards (`prepare_corpus`).

The corpus is streamed, never held: its files are hashed for the manifest,
a first pass keeps a uniform reservoir sample of bounded size for the
vocabulary (skipped when the tokenizer file exists), a second pass tokenizes
windows of pairs and writes them as shards (`shards.py`), counting and
dropping empty and over-long pairs on the way. Tokenization runs in tf.data, a batch of sentences per call,
with `num_parallel_calls=AUTOTUNE`, so every core tokenizes.

Shuffling: a window of `window_shards` shards' worth of consecutive pairs is
permuted (seeded by the seed and the window's index) and dealt out into those
shards, so a shard is not one contiguous stretch of the corpus. A window is a
pure function of its lines and the seed, which is what makes preparation
resumable: the manifest is rewritten after every window, and an interrupted
run skips the lines of the finished windows and writes the same bytes as an
uninterrupted one would. (A global shuffle would need the whole corpus at
once; the reader adds a seeded shuffle of shard order and of pairs across
groups of shards every epoch.)
"""

import itertools
import logging
import math
import pathlib
import random
import shutil

import numpy as np
import tensorflow as tf
from tqdm import tqdm

from t2t_keras.data import manifest as manifests
from t2t_keras.data.corpus_parts import training_parts
from t2t_keras.data.framing import piece_functions
from t2t_keras.data.shards import ids_dtype, memory_shard, shard_name, verify_shards, write_shard
from t2t_keras.data.tokenizers import load_tokenizer, tokenizer_filename, train_tokenizer
from t2t_keras.errors import DataError

logger = logging.getLogger(__name__)

PAIRS_PER_SHARD = 100_000
WINDOW_SHARDS = 4
SAMPLE_PAIRS = 1_000_000  # pairs of the vocabulary's sample: 2M sentences, as `sources.sentences_for_vocabulary`
TOKENIZE_BATCH = 1024
MIXTURE = "mixture"  # settings["source"] of a preparation of several corpora (data.sources)


def prepare_corpus(config, out_dir, *, tokenizer_path=None, seed=None, pairs_per_shard=PAIRS_PER_SHARD,
                   window_shards=WINDOW_SHARDS, sample_pairs=SAMPLE_PAIRS, overwrite=False, progress=True) -> dict:
    """Prepares the training corpus of `config.data` as shards in `out_dir`; returns the manifest.

    Args:
      config: the run's config: its corpus (`data.source` with its files or TFDS name, or the corpora of a
        weighted mixture, `data.sources`, each prepared into shards of its own), `data.tokenizer`,
        `data.vocab_size` and `data.max_length` are used.
      out_dir: directory of the shards and `manifest.json`; a finished preparation there is checked and
        returned, an interrupted one resumed.
      tokenizer_path: the tokenizer file, `out_dir/<tokenizer file name>` if None. An existing file is used
        as it is; otherwise it is trained on a uniform sample of `sample_pairs` pairs.
      seed: seed of the sample, the vocabulary and the shuffle; `config.training.seed` if None.
      pairs_per_shard: most pairs a shard holds.
      window_shards: shards whose pairs are shuffled together.
      sample_pairs: size of the vocabulary's sample, in pairs.
      overwrite: prepare again from scratch, replacing a preparation in `out_dir`.
      progress: show a progress bar (pairs/s).

    Raises:
      DataError: a corpus file or the tokenizer differs from the ones the shards were prepared from, or the
        settings differ; the message names the file and the fix. CorruptFileError: a shard written is damaged.
    """
    data = config.data
    parts = training_parts(data)
    out_dir = pathlib.Path(out_dir)
    seed = config.training.seed if seed is None else seed
    tokenizer_path = pathlib.Path(tokenizer_path or out_dir / tokenizer_filename(data.tokenizer))
    _make_out_dir(out_dir, tokenizer_path, overwrite)
    settings = _settings(data, parts, pairs_per_shard=pairs_per_shard, window_shards=window_shards,
                         sample_pairs=sample_pairs, seed=seed)
    manifest = _started_manifest(out_dir, _corpus_record(parts), settings)
    tokenizer = _ready_tokenizer(manifest, out_dir, tokenizer_path,
                                 lambda: itertools.chain.from_iterable(part.pairs() for part in parts))
    if not manifest["complete"]:
        _write_windows(manifest, out_dir, tokenizer, [part.pairs for part in parts], progress)
    return manifest


def _settings(data, parts, **chosen):
    """The manifest's "settings", which a resumed or reused preparation must match: the corpus (`MIXTURE` for
    several parts), the tokenizer's kind and size, `data.max_length`, then the shard sizes, sample and seed."""
    return dict(source=parts[0].source if len(parts) == 1 else MIXTURE, tokenizer_kind=data.tokenizer,
                vocab_size=data.vocab_size, max_length=data.max_length, **chosen)


def _corpus_record(parts):
    """The manifest's "corpus": every part's fingerprints, tagged with the part in a mixture."""
    return [dict(entry, **({"part": index} if len(parts) > 1 else {}))
            for index, part in enumerate(parts) for entry in part.entries]


def _make_out_dir(out_dir, tokenizer_path, overwrite):
    """Creates `out_dir`; with `overwrite`, a preparation there (and the tokenizer it trained) is removed first."""
    if overwrite:
        _clear(out_dir, tokenizer_path)
    out_dir.mkdir(parents=True, exist_ok=True)


def _clear(out_dir, tokenizer_path):
    """Removes a previous preparation in `out_dir` (and the tokenizer it trained), refusing other directories."""
    if not out_dir.exists():
        return
    old = manifests.read_manifest(out_dir) if (out_dir / manifests.MANIFEST_FILE).exists() else None
    if old is None and any(out_dir.iterdir()):
        raise DataError(f"{out_dir} is not empty and holds no {manifests.MANIFEST_FILE}: it is not a prepared "
                        "corpus, so overwrite will not delete it. Choose another directory.")
    recorded = (old or {}).get("tokenizer") or {}
    if recorded.get("trained") and _is_recorded_tokenizer(out_dir, recorded, tokenizer_path):
        tokenizer_path.unlink()
    shutil.rmtree(out_dir)


def _started_manifest(out_dir, corpus, settings) -> dict:
    """The manifest of `out_dir` checked against the corpus and settings (and its shards against their checksums),
    or a new one."""
    manifest = manifests.read_manifest(out_dir)
    if manifest is None:
        manifest = dict(format=manifests.FORMAT, version=manifests.VERSION, complete=False, corpus=corpus,
                        settings=settings, tokenizer=None, windows_done=0, shards=[],
                        pairs=dict(read=0, empty=0, overlong=0, kept=0))
        manifests.write_manifest(out_dir, manifest)
        return manifest
    if manifests.check_same_corpus(out_dir, manifest["corpus"], corpus):
        logger.info("%s was prepared from the same files at %s; they are now at %s.", out_dir,
                    [entry["path"] for entry in manifest["corpus"]], [entry["path"] for entry in corpus])
        manifest["corpus"] = corpus
        manifests.write_manifest(out_dir, manifest)
    manifests.check_same_settings(out_dir, manifest["settings"], settings)
    verify_shards(out_dir, manifest["shards"])
    if not manifest["complete"]:
        logger.info("Resuming the preparation in %s after %d shards.", out_dir, len(manifest["shards"]))
    return manifest


def _ready_tokenizer(manifest, out_dir, path, pairs):
    """The tokenizer recorded in the manifest (checked), an existing file, or one trained on a sample.

    A training is recorded (without checksum) before it starts, so one that was interrupted is done again
    on resume rather than mistaken for a file the caller provided.
    """
    settings, recorded = manifest["settings"], manifest["tokenizer"]
    if recorded is not None and recorded["sha256"] is not None:
        if not _is_recorded_tokenizer(out_dir, recorded, path):
            raise DataError(f"The tokenizer {path} is not the one {out_dir} was prepared with "
                            f"({recorded['path']}, sha256 {recorded['sha256']}): pass that tokenizer_path, "
                            "or prepare into a new directory (or pass overwrite=True).")
        return load_tokenizer(path, settings["tokenizer_kind"])
    trained = recorded is not None or not path.exists()
    if trained:
        manifest["tokenizer"] = dict(path=_path_record(out_dir, path), sha256=None, trained=True)
        manifests.write_manifest(out_dir, manifest)
        _train_on_sample(settings, pairs, path)
    tokenizer = load_tokenizer(path, settings["tokenizer_kind"])
    manifest["tokenizer"] = dict(manifests.file_fingerprint(path), path=_path_record(out_dir, path),
                                 kind=tokenizer.kind, vocab_size=tokenizer.vocab_size, trained=trained)
    manifests.write_manifest(out_dir, manifest)
    return tokenizer


def _train_on_sample(settings, pairs, path):
    """Trains the configured tokenizer at `path` on a uniform sample of the non-empty pairs of `pairs()`."""
    sample, total = reservoir_sample((p for p in pairs() if p[0] and p[1]), settings["sample_pairs"],
                                     settings["seed"])
    logger.info("Training a %d-piece %s vocabulary on %d of %d pairs.", settings["vocab_size"],
                settings["tokenizer_kind"], len(sample), total)
    train_tokenizer(settings["tokenizer_kind"], _sentences(sample), path, settings["vocab_size"],
                    seed=settings["seed"])


def _path_record(out_dir, path):
    """`path` as the manifest records it: relative to `out_dir` when inside it, so the directory can move."""
    path, out_dir = path.resolve(), out_dir.resolve()
    return str(path.relative_to(out_dir)) if path.is_relative_to(out_dir) else str(path)


def _recorded_file(out_dir, recorded):
    """The tokenizer file a manifest names (relative to `out_dir` when it lies inside it)."""
    return (out_dir / recorded["path"]).resolve()


def _is_recorded_tokenizer(out_dir, recorded, path):
    """Whether the file at `path` is the tokenizer the manifest records: the file it names, or (a run that moved)
    one with its checksum at another path."""
    if not path.exists():
        return False
    if recorded.get("sha256") is None:
        return path.resolve() == _recorded_file(out_dir, recorded)
    return manifests.file_fingerprint(path)["sha256"] == recorded["sha256"]


def reservoir_sample(items, size, seed):
    """`(sample, count)`: a uniform sample of at most `size` of `items` (in their order), and how many there were.

    Vitter's algorithm R: one pass, memory bounded by `size`, the same sample for the same seed.
    """
    rng = random.Random(seed)
    sample, count = [], 0
    for count, item in enumerate(items, start=1):
        if count <= size:
            sample.append((count, item))
        else:
            slot = rng.randrange(count)
            if slot < size:
                sample[slot] = (count, item)
    return [item for _, item in sorted(sample, key=lambda entry: entry[0])], count


def _sentences(pairs):
    for source, target in pairs:
        yield source
        yield target


def _write_windows(manifest, out_dir, tokenizer, parts, progress):
    """Tokenizes and writes the windows not yet written, part after part, updating the manifest after each.

    A window holds pairs of one part only, so each shard belongs to one part (`"part"` in a mixture's manifest).
    """
    settings = manifest["settings"]
    window_size = settings["pairs_per_shard"] * settings["window_shards"]
    done = manifest.setdefault("part_windows", [manifest["windows_done"]] + [0] * (len(parts) - 1))
    bar = tqdm(desc="Preparing shards", unit=" pairs", unit_scale=True, disable=not progress or None,
               initial=manifest["pairs"]["read"])
    for index, part in enumerate(parts):
        if manifest.get("parts_done", 0) > index:
            continue
        pairs = itertools.islice(part(), done[index] * window_size, None)
        while True:
            window = list(itertools.islice(pairs, window_size))
            if not window:
                break
            _write_window(manifest, out_dir, tokenizer, window, bar, index if len(parts) > 1 else None)
            done[index] += 1
            manifests.write_manifest(out_dir, manifest)
        manifest["parts_done"] = index + 1
        manifests.write_manifest(out_dir, manifest)
    bar.close()
    _finish(manifest, out_dir)


def _write_window(manifest, out_dir, tokenizer, window, bar, part):
    """One window tokenized, shuffled and written as shards, recorded in `manifest` (not yet saved)."""
    counts, shards = _window_shards(window, tokenizer, manifest["settings"], manifest["windows_done"], bar)
    for source_ids, target_ids in shards:
        name = shard_name(len(manifest["shards"]))
        files = write_shard(out_dir, name, source_ids, target_ids, ids_dtype(tokenizer.vocab_size))
        manifest["shards"].append(dict(name=name, pairs=len(source_ids), source_tokens=_tokens(source_ids),
                                       target_tokens=_tokens(target_ids), files=files,
                                       **({} if part is None else {"part": part})))
    for key, value in counts.items():
        manifest["pairs"][key] += value
    manifest["windows_done"] += 1


def tokenized_shards(pairs, tokenizer, *, max_length, seed, pairs_per_shard=PAIRS_PER_SHARD,
                     window_shards=WINDOW_SHARDS, progress=False, first_window=0) -> tuple[list, dict]:
    """`(shards, counts)`: `pairs` tokenized, filtered and dealt out into `shards.Shard`s held in memory.

    The shards are the ones `prepare_corpus` writes for the same pairs, tokenizer, max_length, seed and shard
    sizes (windows of `pairs_per_shard * window_shards` pairs, each shuffled and dealt out alike), so the same
    batches come from either (`prepared.memory_training_dataset`). `counts` as the manifest's "pairs", with
    "windows". `first_window`: the windows of the corpora before this one in a mixture (their shuffles are
    numbered on, as `prepare_corpus` numbers them).
    """
    settings = dict(max_length=max_length, seed=seed, pairs_per_shard=pairs_per_shard)
    window_size = pairs_per_shard * window_shards
    counts = dict(read=0, empty=0, overlong=0, kept=0, windows=0)
    held = []
    with tqdm(total=len(pairs), desc="Tokenizing", unit=" pairs", unit_scale=True,
              disable=not progress or None) as bar:
        for index, start in enumerate(range(0, len(pairs), window_size)):
            window_counts, parts = _window_shards(pairs[start:start + window_size], tokenizer, settings,
                                                  first_window + index, bar)
            counts["windows"] += 1
            dtype = ids_dtype(tokenizer.vocab_size)
            held += [memory_shard(source_ids, target_ids, dtype) for source_ids, target_ids in parts]
            for key, value in window_counts.items():
                counts[key] += value
    return held, counts


def _finish(manifest, out_dir):
    if not manifest["shards"]:
        raise DataError(f"No pair of the corpus fits data.max_length={manifest['settings']['max_length']} "
                        f"({manifest['pairs']}): check the corpus files, or raise data.max_length.")
    manifest["complete"] = True
    manifests.write_manifest(out_dir, manifest)
    logger.info("Prepared %d pairs in %d shards in %s; dropped %d empty and %d over-long pairs.",
                manifest["pairs"]["kept"], len(manifest["shards"]), out_dir, manifest["pairs"]["empty"],
                manifest["pairs"]["overlong"])


def _tokens(rows):
    return int(sum(len(row) for row in rows))


def _window_shards(window, tokenizer, settings, index, bar):
    """`(counts, [(source_ids, target_ids)] per shard)`: one window tokenized, filtered, shuffled, dealt out."""
    texts = [pair for pair in window if pair[0] and pair[1]]
    bar.update(len(window) - len(texts))
    source_ids, target_ids = tokenize_pairs(texts, tokenizer, bar)
    limit = settings["max_length"] - 1  # room for the EOS (source, target_out) or BOS (target_in)
    kept = np.array([i for i, (s, t) in enumerate(zip(source_ids, target_ids)) if len(s) <= limit
                     and len(t) <= limit], np.int64)
    order = np.random.default_rng([settings["seed"], index]).permutation(kept)
    parts = np.array_split(order, math.ceil(len(order) / settings["pairs_per_shard"])) if len(order) else []
    counts = dict(read=len(window), empty=len(window) - len(texts), overlong=len(texts) - len(kept),
                  kept=len(kept))
    return counts, [([source_ids[i] for i in part], [target_ids[i] for i in part]) for part in parts]


def tokenize_pairs(pairs, tokenizer, bar=None, parallel_calls=tf.data.AUTOTUNE):
    """`(source_ids, target_ids)`: lists of 1-D int32 arrays, one per pair, tokenized in parallel in tf.data.

    `parallel_calls` batches of `TOKENIZE_BATCH` pairs are tokenized at once (AUTOTUNE: as many as the cores
    keep busy); `bar` (tqdm) is advanced by each batch's pairs.
    """
    if not pairs:
        return [], []

    source_pieces, target_pieces = piece_functions(tokenizer)  # the pieces the batches frame (framing.py)

    def tokenized(sources_, targets_):
        source, target = source_pieces(sources_), target_pieces(targets_)
        return source.flat_values, source.row_lengths(), target.flat_values, target.row_lengths()

    columns = tuple(np.array(side, dtype=object) for side in zip(*pairs))
    batches = (tf.data.Dataset.from_tensor_slices(columns).batch(TOKENIZE_BATCH)
               .map(tokenized, num_parallel_calls=parallel_calls, deterministic=True)
               .prefetch(tf.data.AUTOTUNE))
    source_ids, target_ids = [], []
    for source, source_lengths, target, target_lengths in batches.as_numpy_iterator():
        source_ids += np.split(source.astype(np.int32), np.cumsum(source_lengths)[:-1])
        target_ids += np.split(target.astype(np.int32), np.cumsum(target_lengths)[:-1])
        if bar is not None:
            bar.update(len(source_lengths))
    return source_ids, target_ids
