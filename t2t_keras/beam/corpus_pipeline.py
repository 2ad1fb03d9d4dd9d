"""`prepare --runner`: the training corpus read, cleaned, filtered, de-duplicated, tokenized and written as the
shards `train` reads (`data.shards`, `data.manifest`), by a Beam pipeline.

    corpus files (each part of data.sources) -> numbered lines, a text corpus's two files joined by line number
      -> strip both sides; drop a pair with an empty side (or a line that is not UTF-8: "bad")
      -> optional length-ratio filter -> exact de-duplication (Distinct)
      -> tokenize with the run's tokenizer, in batches (BatchElements) -> drop pairs over data.max_length
      -> dealt into ceil(kept / data.pairs_per_shard) shards per part by a hash of the pair -> shards written

The kept pairs are the set `prepare` keeps (it keeps duplicates; the set is the same). Their order differs:
`prepare` shuffles windows of consecutive pairs with the seed, here a pair's shard and place in it follow the
hash of its text; the manifest's "order" says so. The reader shuffles shards and pairs every epoch either way.
"""

import hashlib
import math

import apache_beam as beam

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
    """`(part, (source, target))` of each line of a part's files: "tsv" one file, "text" two joined by line."""

    def __init__(self, index, kind, files):
        super().__init__()
        self.index, self.kind, self.files = index, kind, list(files)

    def expand(self, begin):
        if self.kind == "tsv":
            return (begin | "File" >> beam.Create(self.files) | "Lines" >> beam.FlatMap(_tsv_pairs)
                    | "Tag" >> beam.Map(lambda pair, index: (index, pair), self.index))
        sides = [begin | f"File {side}" >> beam.Create([path]) | f"Lines {side}" >> beam.FlatMap(_numbered)
                 for side, path in enumerate(self.files)]
        return ({"source": sides[0], "target": sides[1]} | "Join by line" >> beam.CoGroupByKey()
                | "Pair" >> beam.Map(_joined, self.index))


def _numbered(path):
    for number, raw in line_checks.numbered_lines(path):
        yield number, raw


def _tsv_pairs(path):
    for number, raw in line_checks.numbered_lines(path):
        yield raw.split(b"\t", 1) if b"\t" in raw else [raw, b""]


def _joined(item, index):
    _, sides = item
    return index, (next(iter(sides["source"]), b""), next(iter(sides["target"]), b""))


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
    from t2t_keras.data.prepare import tokenize_pairs

    sources, targets = tokenize_pairs([pair for _, pair in batch], _loaded(tokenizer), parallel_calls=1)
    for (index, pair), source, target in zip(batch, sources, targets):
        if len(source) > limit or len(target) > limit:
            yield beam.pvalue.TaggedOutput("overlong", index)
        else:
            yield index, _digest(pair), source, target


def _digest(pair):
    return hashlib.sha256("\t".join(pair).encode("utf-8")).hexdigest()


def _dealt(item, pairs_per_shard, per_part):
    index, digest, source, target = item
    shards = max(1, math.ceil(per_part[index] / pairs_per_shard))
    return (index, int(digest[:15], 16) % shards), (digest, source, target)


def _write(group, out_dir, tokenizer):
    """Writes one shard (named by part and bucket; `corpus_manifest` numbers them); returns its record."""
    from t2t_keras.data.shards import ids_dtype, write_shard

    (index, bucket), pairs = group
    pairs = sorted(pairs, key=lambda pair: pair[0])
    sources, targets = [pair[1] for pair in pairs], [pair[2] for pair in pairs]
    name = f"part-{index}-bucket-{bucket:05d}"
    files = write_shard(out_dir, name, sources, targets, ids_dtype(_loaded(tokenizer).vocab_size))
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
