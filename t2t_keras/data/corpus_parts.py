"""The corpora a preparation reads, one part per corpus of `data.sources` (or the one corpus): what each part
is made of (files with their checksums, or a TFDS split with its version), its pairs as a stream, its weight.

A part's `entries` are what `manifest.check_same_corpus` holds the preparation to: a changed file, or another
version of a TFDS dataset, is refused rather than mixed in.
"""

import hashlib
import json
from typing import Callable, NamedTuple

from t2t_keras.data import sources
from t2t_keras.data.manifest import file_fingerprint
from t2t_keras.data.pair_stream import stream_pairs


class CorpusPart(NamedTuple):
    source: str  # how the part is read: "text", "tsv" (files; the corpora t2t_keras fetches are text) or "tfds"
    entries: list  # fingerprints: {"path", "size", "sha256"} per file, or one for a TFDS split
    pairs: Callable  # () -> an iterator of (source, target) strings, blanks included
    weight: float  # as listed in data.sources (1.0 for a single corpus)


def training_parts(data_config) -> list[CorpusPart]:
    """The parts of the training split of `data_config`, in the order of `data.sources`."""
    return [_part(config, weight) for config, weight in sources.components(data_config)]


def _part(config, weight):
    if config.source == "tfds":
        split = sources.TFDS_SPLITS["train"]
        return CorpusPart("tfds", [tfds_fingerprint(config.tfds_name, split)],
                          lambda: _tfds_pairs(config, split), weight)
    kind, files = sources.split_files(config, "train")
    return CorpusPart(kind, [file_fingerprint(path) for path in files], lambda: stream_pairs(kind, files), weight)


def tfds_fingerprint(name, split, data_dir=None) -> dict:
    """`{"path": "tfds:NAME:SPLIT", "size": examples, "sha256": digest of the dataset's version and split info}`."""
    import tensorflow_datasets as tfds

    info = tfds.builder(name, data_dir=data_dir).info
    try:
        described = info.splits[split]
        split_info = dict(examples=int(described.num_examples), bytes=int(described.num_bytes),
                          files=[str(f).rsplit("/", 1)[-1] for f in described.filenames])
    except (KeyError, ValueError, AttributeError):  # not prepared yet (it is prepared when first read)
        split_info = {}
    held = dict(name=name, split=split, version=str(info.version), **split_info)
    return {"path": f"tfds:{name}:{split}", "size": split_info.get("examples"),
            "sha256": hashlib.sha256(json.dumps(held, sort_keys=True).encode("utf-8")).hexdigest()}


def _tfds_pairs(config, split):
    from t2t_keras.data.tfds_source import load_tfds_pairs

    dataset = load_tfds_pairs(config.tfds_name, split, config.source_lang, config.target_lang)
    for source, target in sources.decoded_pairs(dataset):
        yield source.strip(), target.strip()
