"""Sentence pairs of a split from the configured source: a prepared corpus, text files, TSV or TFDS.

`data.sources` lists several corpora for one run, each with a `weight`: the
training stream draws from them in those proportions (deterministic for a
seed), the training split for other uses (the retrieval baseline) is their
concatenation, and dev and test come from the first one listed.
"""

import dataclasses
import logging
import typing

import numpy as np
import tensorflow as tf

from t2t_keras.data.corpus import ParallelCorpus
from t2t_keras.errors import ConfigError

logger = logging.getLogger(__name__)

TFDS_SPLITS = {"train": "train", "dev": "validation", "test": "test"}


def _libreoffice_files(data_config, split):
    from t2t_keras.data.libreoffice import prepare_libreoffice_corpus

    langs = {data_config.source_lang, data_config.target_lang}
    if "en" not in langs or len(langs) != 2:
        raise ConfigError(
            "The LibreOffice help corpus pairs English with one other language; "
            f"got data.source_lang={data_config.source_lang!r}, data.target_lang={data_config.target_lang!r}."
        )
    other = (langs - {"en"}).pop()
    return _prepared_files(prepare_libreoffice_corpus(target_lang=other), data_config, split)


def _debian_descriptions_files(data_config, split):
    from t2t_keras.data.debian_descriptions import prepare_debian_corpus

    return _prepared_files(prepare_debian_corpus(), data_config, split)  # languages checked by DataConfig


def _prepared_files(prepared, data_config, split):
    """`(files, metadata)` of `split` of a prepared corpus, in the configured direction."""
    corpus = ParallelCorpus(prepared.directory, data_config.source_lang, data_config.target_lang)
    return corpus.files(split), corpus.metadata()


# The corpora prepared and cached by t2t_keras itself: every split is there, read as text files.
PREPARED_SOURCES = {"libreoffice": _libreoffice_files, "debian_descriptions": _debian_descriptions_files}


def _configured_files(data_config, split):
    files = getattr(data_config, f"{split}_files")
    if not files:
        raise ConfigError(
            f"data.source={data_config.source!r} needs data.{split}_files "
            f"({'[source, target]' if data_config.source == 'text' else '[file.tsv]'}); it is not set."
        )
    return files


def split_files(data_config, split):
    """`(kind, files)` of one corpus's `split` on disk: "text" with [source, target] or "tsv" with [file].

    The corpora t2t_keras prepares (libreoffice, debian_descriptions) are prepared if needed and given
    as text files.

    Raises:
      ConfigError: the source is TFDS (no files on disk) or the files are not set.
    """
    kind = data_config.source
    if kind == "tfds":
        raise ConfigError("data.source='tfds' has no corpus files on disk to read line by line: use "
                          "data.source: text or tsv with data.train_files.")
    if kind in PREPARED_SOURCES:
        return "text", [str(path) for path in PREPARED_SOURCES[kind](data_config, split)[0]]
    files = _configured_files(data_config, split)
    if kind == "text" and len(files) != 2:
        raise ConfigError(f"data.{split}_files must list two files [source, target]. Received: {files!r}")
    return kind, [str(path) for path in files]


def has_split(data_config, split):
    """Whether the configured source (the first of `data.sources`) provides `split`."""
    data_config = components(data_config)[0][0]
    source = data_config.source
    return source == "tfds" or source in PREPARED_SOURCES or bool(getattr(data_config, f"{split}_files"))


def components(data_config):
    """`[(DataConfig, weight)]`: the corpora of a run, one per entry of `data.sources` (or the config itself)."""
    if not data_config.sources:
        return [(data_config, 1.0)]
    parts = []
    for entry in data_config.sources:
        entry = dict(entry)
        weight = entry.pop("weight", 1.0)
        parts.append((dataclasses.replace(data_config, sources=None, **entry), float(weight)))
    return parts


def load_pairs(data_config, split, seed=None):
    """`(pairs, provenance)`: a list of (source, target) strings, or a tf.data.Dataset for TFDS.

    With `data.sources`, the training split is every corpus's, concatenated,
    and dev and test are the first corpus's. `seed` shuffles the order in
    which TFDS reads its training files (a shuffle buffer alone mixes only
    neighbouring examples); None reads them in order.
    """
    parts = components(data_config)
    if split != "train" or len(parts) == 1:
        return _load_single(parts[0][0], split, seed if split == "train" else None)
    loaded = [_load_single(config, split, seed) for config, _ in parts]
    dataset = loaded[0][0] if isinstance(loaded[0][0], tf.data.Dataset) else as_dataset(loaded[0][0])
    for pairs, _ in loaded[1:]:
        dataset = dataset.concatenate(as_dataset(pairs))
    return dataset, {"sources": [provenance for _, provenance in loaded]}


class Mixture(typing.NamedTuple):
    """The training pairs of a weighted mixture held in memory: one list of pairs per corpus of `data.sources`.

    The in-memory road plans its batches over the corpora with their shares (`prepared.memory_training_dataset`
    with `shares`); other readers take `stream()`, the endless draw by weight, or `pairs()`, all of them once.
    """

    parts: list  # [[(source, target), ...], ...] in data.sources order
    shares: list  # the weights, normalised
    seed: typing.Optional[int]

    def stream(self):
        """The endless draw from the corpora by their shares (deterministic for the seed)."""
        streams = [as_dataset(pairs).repeat() for pairs in self.parts]
        return tf.data.Dataset.sample_from_datasets(streams, weights=list(self.shares), seed=self.seed)

    def pairs(self):
        """Every corpus's pairs once, in data.sources order."""
        return [pair for part in self.parts for pair in part]


def training_examples(data_config, seed):
    """`(examples, provenance)` of the training split: a `Mixture` for a mixture of corpora read into memory,
    the endless draw for one with a TFDS corpus, and for one corpus what `load_pairs` gives."""
    parts = components(data_config)
    if len(parts) == 1:
        return load_pairs(data_config, "train", seed)
    loaded = [_load_single(config, "train", seed) for config, _ in parts]
    shares = np.array([weight for _, weight in parts]) / sum(weight for _, weight in parts)
    for (config, _), (_, provenance), share in zip(parts, loaded, shares):
        logger.info("Training mixture: %.1f%% from %s (%s pairs).", 100 * share, config.source,
                    provenance.get("pairs", "unknown"))
    provenance = {"sources": [dict(provenance, share=float(share)) for (_, provenance), share in zip(loaded, shares)]}
    mixture = Mixture([pairs for pairs, _ in loaded], shares.tolist(), seed)
    if any(isinstance(pairs, tf.data.Dataset) for pairs in mixture.parts):  # TFDS: streamed only
        return mixture.stream(), provenance
    return mixture, provenance


def training_pairs(data_config, seed):
    """`(pairs, provenance)`: the training pairs, drawn from the corpora of `data.sources` by weight.

    The mixture repeats each corpus and samples among them with the weights
    (normalised), deterministically for `seed`; each corpus's share is logged.
    A single corpus is returned as `load_pairs` gives it.
    """
    examples, provenance = training_examples(data_config, seed)
    return (examples.stream() if isinstance(examples, Mixture) else examples), provenance


def _load_single(data_config, split, seed=None):
    from t2t_keras.data.text_files import read_parallel_files, read_tsv

    kind = data_config.source
    if kind == "tfds":
        from t2t_keras.data.tfds_source import load_tfds_pairs

        dataset = load_tfds_pairs(data_config.tfds_name, TFDS_SPLITS[split], data_config.source_lang,
                                  data_config.target_lang, shuffle_files=seed is not None, seed=seed)
        return dataset, {"source": "tfds", "name": data_config.tfds_name, "split": TFDS_SPLITS[split]}
    provenance = {"source": kind}
    if kind in PREPARED_SOURCES:
        files, provenance["corpus"] = PREPARED_SOURCES[kind](data_config, split)
    else:
        files = _configured_files(data_config, split)
    if kind == "tsv":
        pairs = read_tsv(files[0])
    else:
        if len(files) != 2:
            raise ConfigError(f"data.{split}_files must list two files [source, target]. Received: {files!r}")
        pairs = read_parallel_files(*files)
    logger.info("%s split: %d sentence pairs from %s", split, len(pairs), ", ".join(map(str, files)))
    provenance.update(files=[str(f) for f in files], pairs=len(pairs))
    return pairs, provenance


def as_dataset(pairs):
    """A tf.data.Dataset of scalar string pairs from a list of pairs, a `Mixture` (its endless draw by weight)
    or the dataset itself."""
    if isinstance(pairs, tf.data.Dataset):
        return pairs
    if isinstance(pairs, Mixture):
        return pairs.stream()
    sources, targets = zip(*pairs) if pairs else ((), ())
    return tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))


def sentences_for_vocabulary(pairs, limit=2_000_000, seed=0, pairs_per_pass=None):
    """Source and target sentences (interleaved) of a uniform sample of at most `limit / 2` pairs.

    The sample is drawn from the whole split, not its first lines, so a corpus
    sorted by origin or date gives a representative vocabulary; it is the same
    for the same seed. A dataset of unknown size is read once; an infinite one
    (a weighted mixture, itself random) gives its first `pairs_per_pass` pairs
    (as many as its corpora hold together, `mixture_pairs`), at most `limit / 2`.
    """
    count = limit // 2
    if isinstance(pairs, Mixture):  # every corpus once, as the prepared road learns a mixture's vocabulary
        pairs = pairs.pairs()
    if isinstance(pairs, tf.data.Dataset):
        if pairs_per_pass and int(pairs.cardinality()) == tf.data.INFINITE_CARDINALITY:
            count = min(count, pairs_per_pass)
        for source, target in decoded_pairs(_uniform_dataset_sample(pairs, count, seed)):
            yield source
            yield target
        return
    indices = range(len(pairs))
    if len(pairs) > count:
        indices = np.sort(np.random.default_rng(seed).choice(len(pairs), size=count, replace=False))
    for i in indices:
        yield pairs[i][0]
        yield pairs[i][1]


def mixture_pairs(provenance):
    """The pairs the corpora of a mixture hold together (from `training_pairs`' provenance); None if not a
    mixture or a corpus's size is not known (TFDS)."""
    parts = (provenance or {}).get("sources")
    if not parts or any(not isinstance(part.get("pairs"), int) for part in parts):
        return None
    return sum(part["pairs"] for part in parts)


def _uniform_dataset_sample(pairs, count, seed):
    """About `count` pairs of `pairs`, each kept with the same probability (in-graph, one pass)."""
    size = int(pairs.cardinality())
    if size == tf.data.INFINITE_CARDINALITY:
        return pairs.take(count)
    if size == tf.data.UNKNOWN_CARDINALITY:
        size = int(pairs.reduce(np.int64(0), lambda total, _: total + 1))
    if size <= count:
        return pairs
    keep = count / size

    def kept(index, pair):
        return tf.random.stateless_uniform([], tf.stack([tf.cast(seed, tf.int64), index])) < keep

    return pairs.enumerate().filter(kept).map(lambda index, pair: pair)


def as_string_pairs(pairs, count=None):
    """The (source, target) pairs as a list of Python strings, the first `count` of them if given."""
    if isinstance(pairs, tf.data.Dataset):
        if count is not None:
            pairs = pairs.take(count)
        return list(decoded_pairs(pairs))
    return list(pairs if count is None else pairs[:count])


def decoded_pairs(pairs, batch_size=4096):
    """The scalar string pairs of the dataset `pairs` as Python strings, in order. Read in batches: one step of an
    eager iterator costs as much as decoding about fifty pairs (the default corpus's 32,023 training pairs: 6.2 CPU
    seconds one by one, 0.11 in batches)."""
    for sources, targets in pairs.batch(batch_size).as_numpy_iterator():
        for source, target in zip(sources, targets):
            yield source.decode("utf-8"), target.decode("utf-8")
