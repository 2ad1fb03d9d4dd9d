"""`prepare --runner`: the training corpus read, cleaned, filtered, de-duplicated, tokenized and written as the
shards `train` reads (`data.shards`, `data.manifest`), by a Beam pipeline.

    corpus files (each part of data.sources) -> blocks of BLOCK_PAIRS pairs, a text corpus's two files read side
      by side -> strip both sides; drop a pair with an empty side (or a line that is not UTF-8: "bad")
      -> optional length-ratio filter -> each pair to one of BUCKETS buckets by the hash of its text
      -> per bucket (GroupByKey): exact de-duplication, tokenization with the run's tokenizer in batches, pairs
         over data.max_length dropped -> dealt into ceil(kept / data.pairs_per_shard) shards per part by the same
         hash -> per shard (GroupByKey): written

The pipeline's elements are blocks of pairs, never single pairs: Beam's local runner spends tens of microseconds
on each element of each step, which for millions of pairs cost more than the work (bench/results/pipeline.md).
The kept pairs are the set `prepare` keeps (it keeps duplicates; the set is the same). Their order differs:
`prepare` shuffles windows of consecutive pairs with the seed, here a pair's shard and place in it follow the
hash of its text; the manifest's "order" says so. The reader shuffles shards and pairs every epoch either way.
"""

import collections
import hashlib
import itertools
import math

import apache_beam as beam
import numpy as np

from t2t_keras.beam import line_checks

BLOCK_PAIRS = 10_000  # pairs an element of the read carries
BUCKETS = 64  # groups de-duplicated and tokenized apart (spread over the workers)
TOKENIZE_BATCH = 1024  # pairs tokenized in one call
ORDER = "hashed"  # the manifest's "order": pairs dealt into shards by the hash of their text
COUNTS = ("read", "empty", "bad", "ratio", "duplicate", "overlong", "kept")


def build_corpus_pipeline(pipeline, parts, tokenizer, out_dir, max_length, pairs_per_shard, max_ratio=None):
    """Adds the transforms that write the shards of `parts` (`[(kind, files)]`) into `out_dir`; returns the
    PCollection of the written shards' records and the PCollection of the counts (one dict: `COUNTS`)."""
    read = [pipeline | f"Part {index}" >> _ReadPart(index, kind, files) for index, (kind, files) in enumerate(parts)]
    cleaned = (read | "All parts" >> beam.Flatten()
               | "Clean" >> beam.FlatMap(_cleaned_block, max_ratio).with_outputs("counts", main="buckets"))
    kept = (cleaned.buckets | "Buckets" >> beam.GroupByKey()
            | "De-duplicate and tokenize" >> beam.FlatMap(_bucket, tokenizer, max_length - 1).with_outputs(
                "counts", main="rows"))
    per_part = (kept.rows | "Pairs of each part" >> beam.Map(lambda item: (item[0], len(item[1])))
                | "Pairs per part" >> beam.CombinePerKey(sum))
    shards = (kept.rows | "Deal" >> beam.FlatMap(_dealt, pairs_per_shard, beam.pvalue.AsDict(per_part))
              | "Shards" >> beam.GroupByKey() | "Write shards" >> beam.Map(_write, out_dir, tokenizer))
    counted = ((cleaned.counts, kept.counts) | "All counts" >> beam.Flatten()
               | "Counts" >> beam.CombineGlobally(_summed))
    return shards, counted


def _summed(counters):
    total = collections.Counter({name: 0 for name in COUNTS})
    for counter in counters:
        total.update(counter)
    return dict(total)


class _ReadPart(beam.PTransform):
    """`(part, [(source, target), ...])` blocks of a part's lines: "tsv" one file, "text" two read side by side
    (line N of one with line N of the other, in one pass: no shuffle to join them; a line the shorter file lacks
    is an empty side)."""

    def __init__(self, index, kind, files):
        super().__init__()
        self.index, self.kind, self.files = index, kind, list(files)

    def expand(self, begin):
        read = _tsv_pairs if self.kind == "tsv" else _text_pairs
        return (begin | "Files" >> beam.Create([tuple(self.files)])
                | "Blocks" >> beam.FlatMap(_blocks, read, self.index))


def _blocks(files, read, index):
    """`(part, [(source, target), ...])`: the pairs of `files`, BLOCK_PAIRS at a time."""
    pairs = read(files)
    while block := list(itertools.islice(pairs, BLOCK_PAIRS)):
        yield index, block


def _tsv_pairs(files):
    for path in files:
        for _, raw in line_checks.numbered_lines(path):
            yield tuple(raw.split(b"\t", 1)) if b"\t" in raw else (raw, b"")


def _text_pairs(files):
    sides = [(raw for _, raw in line_checks.numbered_lines(path)) for path in files]
    yield from itertools.zip_longest(*sides, fillvalue=b"")


def _cleaned_block(block, max_ratio):
    """`((part, bucket), [pair, ...])` of the pairs of `block` kept by `_cleaned`, one element per bucket, and the
    block's counts (tagged "counts")."""
    index, raw_pairs = block
    counts, buckets = collections.Counter(read=len(raw_pairs)), collections.defaultdict(list)
    for raw in raw_pairs:
        pair, reason = _cleaned(raw, max_ratio)
        if reason is None:
            buckets[_digest(pair)[0] % BUCKETS].append(pair)
        else:
            counts[reason] += 1
    yield from (((index, bucket), pairs) for bucket, pairs in buckets.items())
    yield beam.pvalue.TaggedOutput("counts", dict(counts))


def _cleaned(raw, max_ratio):
    """`(pair, None)`: the two sides decoded and stripped, or `(None, reason)` where the pair is dropped."""
    sides = []
    for number, side in enumerate(raw, start=2):  # never line 1: a BOM is removed by the reader's decode below
        text, reason = line_checks.decoded_line(side.lstrip(b"\xef\xbb\xbf"), number)
        if reason is not None:
            return None, "bad"
        sides.append(text.strip())
    if not sides[0] or not sides[1]:
        return None, "empty"
    if max_ratio is not None and max(map(len, sides)) > max_ratio * min(map(len, sides)):
        return None, "ratio"
    return tuple(sides), None


def _bucket(group, tokenizer, limit):
    """`(part, [(digest, source ids, target ids), ...])` of one bucket's distinct pairs that fit `limit`, and its
    counts (tagged "counts": duplicates and over-long pairs)."""
    (index, _), blocks = group
    seen, read = {}, 0
    for pairs in blocks:
        read += len(pairs)
        seen.update(dict.fromkeys(pairs))
    unique = list(seen)  # in the order first seen
    rows = []
    for start in range(0, len(unique), TOKENIZE_BATCH):
        rows.extend(_tokenized(unique[start:start + TOKENIZE_BATCH], tokenizer, limit))
    yield index, rows
    yield beam.pvalue.TaggedOutput("counts", {"duplicate": read - len(unique), "overlong": len(unique) - len(rows),
                                              "kept": len(rows)})


_TOKENIZERS = {}


def _loaded(tokenizer):
    """The tokenizer `(path, kind)`, loaded once per worker process."""
    if tokenizer not in _TOKENIZERS:
        from t2t_keras.data.tokenizers import load_tokenizer

        _TOKENIZERS[tokenizer] = load_tokenizer(*tokenizer)
    return _TOKENIZERS[tokenizer]


def _tokenized(pairs, tokenizer, limit):
    """`(digest, source ids, target ids)` of each of `pairs` that fits `limit`, the ids as the bytes of the shards'
    dtype (cheap for the runner to move; a numpy array would be pickled)."""
    from t2t_keras.data.framing import piece_functions
    from t2t_keras.data.shards import ids_dtype

    loaded = _loaded(tokenizer)
    dtype = ids_dtype(loaded.vocab_size)
    sides = [_pieces(function, [pair[side] for pair in pairs], dtype)
             for side, function in enumerate(piece_functions(loaded))]
    for pair, source, target in zip(pairs, *sides):
        if len(source) <= limit and len(target) <= limit:
            yield _digest(pair), source.tobytes(), target.tobytes()


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
    """`((part, shard), [row, ...])` of one bucket's rows, one element per shard they go to."""
    index, rows = item
    shards = max(1, math.ceil(per_part[index] / pairs_per_shard))
    dealt = collections.defaultdict(list)
    for row in rows:
        dealt[int.from_bytes(row[0][:8], "big") % shards].append(row)
    return (((index, shard), shard_rows) for shard, shard_rows in dealt.items())


def _write(group, out_dir, tokenizer):
    """Writes one shard (named by part and bucket; `corpus_manifest` numbers them); returns its record."""
    from t2t_keras.data.shards import ids_dtype, write_shard

    (index, bucket), blocks = group
    pairs = sorted(itertools.chain.from_iterable(blocks), key=lambda pair: pair[0])
    dtype = ids_dtype(_loaded(tokenizer).vocab_size)
    sources = [np.frombuffer(pair[1], dtype) for pair in pairs]
    targets = [np.frombuffer(pair[2], dtype) for pair in pairs]
    name = f"part-{index}-bucket-{bucket:05d}"
    files = write_shard(out_dir, name, sources, targets, dtype)
    return dict(name=name, part=index, bucket=bucket, pairs=len(pairs), files=files,
                source_tokens=int(sum(len(row) for row in sources)),
                target_tokens=int(sum(len(row) for row in targets)))


def counts(counted):
    """The manifest's "pairs" from the pipeline's counts (`COUNTS`)."""
    return {name: counted[name] for name in ("read", "empty", "overlong", "kept", "bad", "ratio", "duplicate")}
