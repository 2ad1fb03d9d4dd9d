"""Training batches from a prepared corpus, with exact resume by seeking (`prepared_training_dataset`).

The same reader serves a corpus tokenized into shards held in memory (`memory_training_dataset`), the
in-memory road of a small corpus: one batch planner for both roads, so the same pairs give the same batches.

The batches have the structure of `batching.make_training_dataset`'s:
``((source, target_in), target_out, sample_weight)``, int32 ids padded with
the model's pad to a bucket length of `batching.bucket_plan`, float32 weights 0
exactly on padding; source = pieces + [eos], target_in = [decoder_start] +
pieces, target_out = pieces + [eos] (`framing.py`: the model's special ids, the
package's fixed ones by default). The shards hold the pieces alone.

Resume design: each epoch's batches are planned in NumPy from the stored
lengths alone (`batch_plan`), one group of shards at a time so that memory
stays flat in the corpus size, and the batch at ``position`` is located by
arithmetic on a per-shard bucket histogram. The stream then starts at that
batch of that epoch, gathering its pairs by index from memory-mapped shards:
nothing consumed before is read again, and starting costs one epoch's plan
whatever ``position`` is. tf.data's own iterator checkpoints were the
alternative; they store shuffle buffers (large), tie the checkpoint to the
pipeline's graph, and do not let a run resume on another worker count.
A Python generator (`tf.data.Dataset.from_generator`) runs the plan; it only
slices NumPy arrays, a few vectorized calls per batch, and tf.data prefetches
ahead of the model.
"""

import collections
import logging
import pathlib
from typing import Callable, NamedTuple

import numpy as np
import tensorflow as tf

from t2t_keras.data import batch_plan
from t2t_keras.data.batching import bucket_plan
from t2t_keras.data.framing import Framing
from t2t_keras.data.manifest import load_complete_manifest
from t2t_keras.data.shards import ShardFile, held_gather, read_lengths
from t2t_keras.errors import DataError

logger = logging.getLogger(__name__)

GROUP_SHARDS = 4  # shards whose pairs are shuffled together each epoch


def prepared_training_dataset(out_dir, *, seed, batch_tokens, max_length, num_replicas=1, worker_index=0,
                              num_workers=1, position=0, bucket_boundaries=None,
                              group_shards=GROUP_SHARDS, shares=None, special_ids=None) -> tf.data.Dataset:
    """The repeated stream of training batches of the corpus prepared in `out_dir`, from batch `position` on.

    Args:
      out_dir: a directory that `prepare.prepare_corpus` finished.
      seed: seed of the shard order and the shuffle (the same on every worker).
      batch_tokens, max_length, num_replicas, bucket_boundaries: as for `batching.bucket_plan`;
        `max_length` may be below the preparation's, never usefully above it.
      worker_index, num_workers: this worker reads only the shards at positions
        `worker_index + k * num_workers` of each epoch's shard order.
      position: batches this worker already consumed; the stream starts at the next one.
      group_shards: shards whose pairs are shuffled together.
      shares: a weighted mixture's weight per corpus (data.sources order); None for one corpus.
      special_ids: the model's `SpecialIds`, which frame and pad the pieces; None for the package's fixed ids.

    Returns:
      An infinite `tf.data.Dataset`; its auto-sharding is off (the sharding is by file, here).

    Raises:
      DataError: the preparation is missing or unfinished, or has fewer shards than workers.
    """
    return _dataset(_DirectoryShards(out_dir), seed=seed, max_length=max_length, batch_tokens=batch_tokens,
                    num_replicas=num_replicas, worker_index=worker_index, num_workers=num_workers,
                    position=position, bucket_boundaries=bucket_boundaries, group_shards=group_shards,
                    shares=shares, framing=Framing.of(special_ids))


def memory_training_dataset(shards, *, seed, batch_tokens, max_length, num_replicas=1, position=0,
                            bucket_boundaries=None, group_shards=GROUP_SHARDS, parts=None,
                            shares=None, special_ids=None) -> tf.data.Dataset:
    """`prepared_training_dataset` over `shards.Shard`s held in memory (`prepare.tokenized_shards`).

    The same shards and arguments give the same batches as their prepared directory does. A weighted mixture:
    `parts` names each shard's corpus (0, 1, ... in data.sources order) and `shares` their weights.
    """
    return _dataset(_MemoryShards(shards, max_length, parts), seed=seed, max_length=max_length,
                    batch_tokens=batch_tokens, num_replicas=num_replicas, worker_index=0, num_workers=1,
                    position=position, bucket_boundaries=bucket_boundaries, group_shards=group_shards, shares=shares,
                    framing=Framing.of(special_ids))


def _dataset(shards, *, seed, max_length, batch_tokens, num_replicas, worker_index, num_workers, position,
             bucket_boundaries, group_shards, shares=None, framing=Framing.of()):
    plan = bucket_plan(max_length, batch_tokens, bucket_boundaries=bucket_boundaries, num_replicas=num_replicas)
    stream = _BatchStream(shards, seed=seed, plan=plan, worker_index=worker_index, num_workers=num_workers,
                          group_shards=group_shards, shares=shares, framing=framing)
    stream.count(0)  # an epoch that fills no batch is refused here, not from inside the generator
    ids = tf.TensorSpec([None, None], tf.int32)
    dataset = tf.data.Dataset.from_generator(
        lambda: stream.batches(position),
        output_signature=((ids, ids), ids, tf.TensorSpec([None, None], tf.float32)))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.prefetch(tf.data.AUTOTUNE).with_options(options)


def prepared_lengths(out_dir) -> list:
    """The ``(pairs, 2)`` source and target piece counts of every shard of `out_dir`, in shard order."""
    manifest = load_complete_manifest(out_dir)
    return [read_lengths(out_dir, shard["name"]) for shard in manifest["shards"]]


class _DirectoryShards:
    """The shards of a finished preparation: a shard's lengths read when its group is planned, its ids
    memory-mapped when first gathered, so that what is held does not grow with the corpus."""

    def __init__(self, out_dir):
        self.out_dir = pathlib.Path(out_dir)
        manifest = load_complete_manifest(out_dir)
        self.names = [shard["name"] for shard in manifest["shards"]]
        self.sizes = [shard["pairs"] for shard in manifest["shards"]]
        self.parts = [shard.get("part", 0) for shard in manifest["shards"]]  # which corpus of a mixture
        self.max_length = manifest["settings"]["max_length"]
        self.where = f"{out_dir} (prepared with max_length={self.max_length})"

    def __len__(self):
        return len(self.names)

    def lengths_of(self, index):
        return read_lengths(self.out_dir, self.names[index])

    def open(self, index):
        return ShardFile(self.out_dir, self.names[index])


class _MemoryShards:
    """Shards held in memory, tokenized with `max_length`."""

    def __init__(self, shards, max_length, parts=None):
        self.held, self.max_length = list(shards), max_length
        self.sizes = [len(shard.lengths) for shard in self.held]
        self.parts = list(parts) if parts is not None else [0] * len(self.held)  # which corpus of a mixture
        self.where = f"the corpus tokenized in memory (max_length={max_length})"

    def __len__(self):
        return len(self.held)

    def lengths_of(self, index):
        return self.held[index].lengths

    def open(self, index):
        shard = self.held[index]
        return _Held(shard.lengths, lambda rows, width: held_gather(shard, rows, width))


class _BatchStream:
    """The epoch plans of one worker and the batches they name, gathered from the shards.

    An epoch is a list of stretches of shards (`batch_plan.Segments`): every shard whole for one corpus, or
    the draw of each corpus by its share for a weighted mixture (`batch_plan.mixture_segments`).
    """

    def __init__(self, shards, *, seed, plan, worker_index, num_workers, group_shards, shares=None,
                 framing=Framing.of()):
        if max(plan.lengths) > shards.max_length:
            logger.warning("%s holds no pair longer than that, although batches may be %d long.",
                           shards.where, max(plan.lengths))
        if not 0 <= worker_index < num_workers <= len(shards):
            raise DataError(f"{shards.where} has {len(shards)} shards; worker_index={worker_index} of "
                            f"num_workers={num_workers} needs 0 <= worker_index < num_workers <= shards. "
                            "Prepare it again with a smaller data.pairs_per_shard so every worker has shards, "
                            "or train it in memory (data.pipeline: memory).")
        self.shards, self.shares = shards, _checked_shares(shares, shards)
        self.seed, self.plan, self.group_shards = seed, plan, group_shards
        self.worker_index, self.num_workers, self.framing = worker_index, num_workers, framing
        self.opened, self.histograms = collections.OrderedDict(), {}

    def segments(self, epoch):
        if self.shares is None:
            return batch_plan.whole_shards(self.shards.sizes)
        part_shards = [np.flatnonzero(np.array(self.shards.parts) == part) for part in range(len(self.shares))]
        return batch_plan.mixture_segments(part_shards, self.shards.sizes, self.shares, epoch)

    def segment_lengths(self, segments, index):
        return self.shards.lengths_of(segments.shard[index])[segments.start[index]:segments.stop[index]]

    def count(self, epoch):
        """Batches this worker reads in `epoch`."""
        key = 0 if self.shares is None else epoch  # a single corpus' epochs are alike
        if key not in self.histograms:
            segments = self.segments(epoch)
            self.histograms = {key: batch_plan.bucket_histogram(
                (self.segment_lengths(segments, i) for i in range(len(segments.shard))), self.plan)}
        mine = batch_plan.worker_shards(len(self.histograms[key]), self.seed, epoch, self.worker_index,
                                        self.num_workers)
        return batch_plan.checked_count(batch_plan.batches_in_epoch(self.histograms[key], self.plan, mine), self.plan)

    def batches(self, position):
        """Yields the batches from `position` on, forever."""
        epoch, index = batch_plan.locate_in_epochs(position, self.count,
                                                   constant=self.shares is None and self.num_workers == 1)
        while True:
            segments = self.segments(epoch)
            for width, segment, row in batch_plan.epoch_batches(
                    lambda i: self.segment_lengths(segments, i), len(segments.shard), self.plan, self.seed, epoch,
                    worker_index=self.worker_index, num_workers=self.num_workers, group_shards=self.group_shards,
                    start=index):
                yield self.batch(segments.shard[segment], segments.start[segment] + row, width)
            epoch, index = epoch + 1, 0

    def batch(self, shard_of, row_of, width):
        """``((source, target_in), target_out, sample_weight)`` of the pairs ``(shard_of[i], row_of[i])``."""
        source = np.zeros([len(row_of), width], np.int32)
        target = np.zeros([len(row_of), width], np.int32)
        source_lengths = np.zeros(len(row_of), np.int64)
        target_lengths = np.zeros(len(row_of), np.int64)
        for index in np.unique(shard_of):
            here = np.flatnonzero(shard_of == index)
            shard = self.shard(index)
            source[here], target[here] = shard.gather(row_of[here], width)
            source_lengths[here], target_lengths[here] = shard.lengths[row_of[here]].T
        return framed(source, target, source_lengths, target_lengths, self.framing)

    def shard(self, index):
        """Shard `index` opened; the shards of the last two groups stay open, so what is held stays bounded."""
        if index in self.opened:
            self.opened.move_to_end(index)
        else:
            self.opened[index] = self.shards.open(index)
            while len(self.opened) > 2 * self.group_shards:
                closing = self.opened.popitem(last=False)[1]
                getattr(closing, "close", lambda: None)()
        return self.opened[index]


class _Held(NamedTuple):
    """A shard held in memory, with `ShardFile`'s reading interface."""

    lengths: np.ndarray
    gather: Callable


def _checked_shares(shares, shards):
    """The mixture's shares normalised, or None for one corpus; a DataError when they do not fit the shards."""
    parts = max(shards.parts) + 1 if len(shards) else 1
    if shares is None or len(shares) == 1:
        if parts > 1:
            raise DataError(f"{shards.where} holds a mixture of {parts} corpora: read it with their weights "
                            "(data.sources, as prepared).")
        return None
    if len(shares) != parts or min(shares) <= 0:
        raise DataError(f"{shards.where} holds {parts} corpora, and {len(shares)} weights were given "
                        f"({list(shares)}): give one positive weight per corpus of data.sources, as prepared.")
    return [float(share) / sum(shares) for share in shares]


def framed(source, target, source_lengths, target_lengths, framing):
    """The batch of `framing` (`framing.Framing`) from pieces right-padded with 0 (`(batch, width)`, each row's
    pieces at most `width - 1`): eos after the source's and the target_out's pieces, decoder_start before
    target_in's, padding `framing.pad`; weights 1 on target_out's tokens."""
    rows, columns = np.arange(len(source)), np.arange(source.shape[1])[None, :]
    source = np.where(columns < source_lengths[:, None], source, framing.pad).astype(np.int32)
    target = np.where(columns < target_lengths[:, None], target, framing.pad).astype(np.int32)
    source[rows, source_lengths] = framing.eos
    target_in = np.concatenate([np.full([len(target), 1], framing.decoder_start, np.int32), target[:, :-1]], axis=1)
    target_out = target
    target_out[rows, target_lengths] = framing.eos
    sample_weight = (target_out != framing.pad).astype(np.float32)
    return (source, target_in), target_out, sample_weight
