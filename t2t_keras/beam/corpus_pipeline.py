"""`prepare --runner`: the training corpus read, cleaned, filtered, de-duplicated, tokenized and written as the
shards `train` reads (`data.shards`, `data.manifest`), by a Beam pipeline.

    corpus files (each part of data.sources) -> pairs, a text corpus's two files read side by side
      -> strip both sides; drop a pair with an empty side (or a line that is not UTF-8: "bad")
      -> optional length-ratio filter -> exact de-duplication (Distinct)
      -> tokenize with the run's tokenizer, in batches (BatchElements) -> drop pairs over data.max_length
      -> dealt into ceil(kept / data.pairs_per_shard) shards per part by a hash of the pair -> shards written

The kept pairs are the set `prepare` keeps (it keeps duplicates; the set is the same). Their order differs:
`prepare` shuffles windows of consecutive pairs with the seed, here a pair's shard and place in it follow the
hash of its text; the manifest's "order" says so. The reader shuffles shards and pairs every epoch either way.
"""

import hashlib
import itertools
import math

import apache_beam as beam
import numpy as np

from t2t_keras.beam import line_checks

TOKENIZE_BATCH = 1024  # BatchElements' largest batch of pairs tokenized at once
ORDER = "hashed"  # the manifest's "order": pairs dealt into shards by the hash of their text


def build_corpus_pipeline(pipeline, parts, tokenizer, out_dir, max_length, pairs_per_shard, max_ratio=None):
    """Adds the transforms that write the shards of `parts` (`[(kind, files)]`) into `out_dir`; returns the
    PCollection of the written shards' records and the PCollection of the counts (one dict each)."""
    read = [pipeline | f"Part {index}" >> _ReadPart(index, kind, files) for index, (kind, files) in enumerate(parts)]
    cleaned = (read | "All parts" >> beam.Flatten()
               | "Clean" >> beam.Map(_cleaned, max_ratio).with_outputs("dropped", main="kept"))
    unique = cleaned.kept | "De-duplicate" >> beam.Distinct()
    tokenized = (unique | "Batches" >> beam.BatchElements(min_batch_size=1, max_batch_size=TOKENIZE_BATCH)
                 | "Tokenize" >> beam.FlatMap(_tokenized, tokenizer, max_length - 1).with_outputs(
                     "overlong", main="fits"))
    per_part = (tokenized.fits | "Part of each" >> beam.Map(lambda item: item[0])
                | "Pairs per part" >> beam.combiners.Count.PerElement())
    shards = (tokenized.fits | "Deal" >> beam.Map(_dealt, pairs_per_shard, beam.pvalue.AsDict(per_part))
              | "Shards" >> beam.GroupByKey() | "Write shards" >> beam.Map(_write, out_dir, tokenizer))
    reasons = ((cleaned.dropped, tokenized.overlong | "Over-long" >> beam.Map(lambda _: "overlong"))
               | "Dropped" >> beam.Flatten() | "Count dropped" >> beam.combiners.Count.PerElement())
    read_count = (cleaned.kept, cleaned.dropped) | "Read" >> beam.Flatten() | beam.combiners.Count.Globally()
    duplicates = unique | "Unique" >> beam.combiners.Count.Globally()
    return shards, (read_count, reasons, duplicates)


class _ReadPart(beam.PTransform):
    """`(part, (source, target))` of each line of a part's files: "tsv" one file, "text" two read side by side
    (line N of one with line N of the other, in one pass: no shuffle to join them; a line the shorter file lacks
    is an empty side)."""

    def __init__(self, index, kind, files):
        super().__init__()
        self.index, self.kind, self.files = index, kind, list(files)

    def expand(self, begin):
        read = _tsv_pairs if self.kind == "tsv" else _text_pairs
        return (begin | "Files" >> beam.Create([tuple(self.files)])
                | "Lines" >> beam.FlatMap(_tagged, read, self.index))


def _tagged(files, read, index):
    for pair in read(files):
        yield index, pair


def _tsv_pairs(files):
    for path in files:
        for _, raw in line_checks.numbered_lines(path):
            yield tuple(raw.split(b"\t", 1)) if b"\t" in raw else (raw, b"")


def _text_pairs(files):
    sides = [(raw for _, raw in line_checks.numbered_lines(path)) for path in files]
    yield from itertools.zip_longest(*sides, fillvalue=b"")


def _cleaned(item, max_ratio):
    """`(part, (source, target))` decoded and stripped, or a tagged reason it is dropped."""
    index, raw = item
    sides = []
    for number, side in enumerate(raw, start=2):  # never line 1: a BOM is removed by the reader's decode below
        text, reason = line_checks.decoded_line(side.lstrip(b"\xef\xbb\xbf"), number)
        if reason is not None:
            return beam.pvalue.TaggedOutput("dropped", "bad")
        sides.append(text.strip())
    if not sides[0] or not sides[1]:
        return beam.pvalue.TaggedOutput("dropped", "empty")
    if max_ratio is not None and max(map(len, sides)) > max_ratio * min(map(len, sides)):
        return beam.pvalue.TaggedOutput("dropped", "ratio")
    return index, tuple(sides)


_TOKENIZERS = {}


def _loaded(tokenizer):
    """The tokenizer `(path, kind)`, loaded once per worker process."""
    if tokenizer not in _TOKENIZERS:
        from t2t_keras.data.tokenizers import load_tokenizer

        _TOKENIZERS[tokenizer] = load_tokenizer(*tokenizer)
    return _TOKENIZERS[tokenizer]


def _tokenized(batch, tokenizer, limit):
    """`(part, digest, source ids, target ids)` of each pair of `batch` that fits `limit`, the ids as the bytes of
    the shards' dtype (cheap for the runner to move; a numpy array would be pickled)."""
    from t2t_keras.data.framing import piece_functions
    from t2t_keras.data.shards import ids_dtype

    loaded = _loaded(tokenizer)
    dtype = ids_dtype(loaded.vocab_size)
    sides = [_pieces(function, [pair[side] for _, pair in batch], dtype)
             for side, function in enumerate(piece_functions(loaded))]
    for (index, pair), source, target in zip(batch, *sides):
        if len(source) > limit or len(target) > limit:
            yield beam.pvalue.TaggedOutput("overlong", index)
        else:
            yield index, _digest(pair), source.tobytes(), target.tobytes()


def _pieces(function, texts, dtype):
    """The ids of each of `texts` by the tokenizer's piece `function`, in one eager call for the batch (a tf.data
    pipeline per batch would trace its function again each time)."""
    import tensorflow as tf

    ragged = function(tf.constant(texts))
    flat = ragged.flat_values.numpy().astype(dtype)
    return np.split(flat, np.cumsum(ragged.row_lengths().numpy())[:-1])


def _digest(pair):
    return hashlib.sha256("\t".join(pair).encode("utf-8")).digest()[:16]


def _dealt(item, pairs_per_shard, per_part):
    index, digest, source, target = item
    shards = max(1, math.ceil(per_part[index] / pairs_per_shard))
    return (index, int.from_bytes(digest[:8], "big") % shards), (digest, source, target)


def _write(group, out_dir, tokenizer):
    """Writes one shard (named by part and bucket; `corpus_manifest` numbers them); returns its record."""
    from t2t_keras.data.shards import ids_dtype, write_shard

    (index, bucket), pairs = group
    pairs, dtype = sorted(pairs, key=lambda pair: pair[0]), ids_dtype(_loaded(tokenizer).vocab_size)
    sources = [np.frombuffer(pair[1], dtype) for pair in pairs]
    targets = [np.frombuffer(pair[2], dtype) for pair in pairs]
    name = f"part-{index}-bucket-{bucket:05d}"
    files = write_shard(out_dir, name, sources, targets, dtype)
    return dict(name=name, part=index, bucket=bucket, pairs=len(pairs), files=files,
                source_tokens=int(sum(len(row) for row in sources)),
                target_tokens=int(sum(len(row) for row in targets)))


def counts(read_count, reasons, unique):
    """The manifest's "pairs" from the pipeline's counts."""
    dropped = dict(reasons)
    kept = unique - dropped.get("overlong", 0)
    return dict(read=read_count, empty=dropped.get("empty", 0), overlong=dropped.get("overlong", 0), kept=kept,
                bad=dropped.get("bad", 0), ratio=dropped.get("ratio", 0),
                duplicate=read_count - sum(value for key, value in dropped.items() if key != "overlong") - unique)
