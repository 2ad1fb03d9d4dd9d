"""Sentence pairs of a split from the configured source: default corpus, text files, TSV or TFDS."""

import logging

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
    prepared = prepare_libreoffice_corpus(target_lang=other)
    corpus = ParallelCorpus(prepared.directory, data_config.source_lang, data_config.target_lang)
    return corpus.files(split), corpus.metadata()


def _configured_files(data_config, split):
    files = getattr(data_config, f"{split}_files")
    if not files:
        raise ConfigError(
            f"data.source={data_config.source!r} needs data.{split}_files "
            f"({'[source, target]' if data_config.source == 'text' else '[file.tsv]'}); it is not set."
        )
    return files


def has_split(data_config, split):
    """Whether the configured source provides `split` (text and TSV sources name their files)."""
    return data_config.source in ("tfds", "libreoffice") or bool(getattr(data_config, f"{split}_files"))


def load_pairs(data_config, split):
    """`(pairs, provenance)`: a list of (source, target) strings, or a tf.data.Dataset for TFDS."""
    from t2t_keras.data.text_files import read_parallel_files, read_tsv

    kind = data_config.source
    if kind == "tfds":
        from t2t_keras.data.tfds_source import load_tfds_pairs

        dataset = load_tfds_pairs(data_config.tfds_name, TFDS_SPLITS[split], data_config.source_lang,
                                  data_config.target_lang)
        return dataset, {"source": "tfds", "name": data_config.tfds_name, "split": TFDS_SPLITS[split]}
    provenance = {"source": kind}
    if kind == "libreoffice":
        files, provenance["corpus"] = _libreoffice_files(data_config, split)
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
    """A tf.data.Dataset of scalar string pairs from a list of pairs (or the dataset itself)."""
    if isinstance(pairs, tf.data.Dataset):
        return pairs
    sources, targets = zip(*pairs) if pairs else ((), ())
    return tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))


def sentences_for_vocabulary(pairs, limit=2_000_000):
    """Source and target sentences (interleaved) for training the shared vocabulary."""
    if isinstance(pairs, tf.data.Dataset):
        for source, target in pairs.take(limit // 2).as_numpy_iterator():
            yield source.decode("utf-8")
            yield target.decode("utf-8")
        return
    for source, target in pairs[: limit // 2]:
        yield source
        yield target


def as_string_pairs(pairs, count=None):
    """The (source, target) pairs as a list of Python strings, the first `count` of them if given."""
    if isinstance(pairs, tf.data.Dataset):
        if count is not None:
            pairs = pairs.take(count)
        return [(s.decode("utf-8"), t.decode("utf-8")) for s, t in pairs.as_numpy_iterator()]
    return list(pairs if count is None else pairs[:count])
