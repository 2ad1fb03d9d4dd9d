"""Every epoch's batches of a prepared corpus as a pure function of the shards' lengths and the seed.

Epoch ``e`` of worker ``w`` (of ``W``):

1. the shards in a seeded order, ``permutation(seed, e)``; the worker takes the
   shards at positions ``w, w + W, w + 2W, ...`` of it (file-level sharding);
2. its shards in groups of ``group_shards``, the pairs of each group shuffled
   together (seeded by seed, epoch, worker and group), the groups one after
   another: the epoch's stream of pairs;
3. that stream into length buckets (`batching.bucket_plan`), as
   `tf.data.Dataset.bucket_by_sequence_length` does it: a bucket emits a batch
   the moment it holds its batch size; the partial buckets left at the end of
   the epoch are dropped, and pairs longer than ``max_length`` are skipped.

Only lengths are needed, never token ids. A bucket's batches in an epoch are
``floor(pairs in the bucket / its batch size)`` whatever the order, so the
batches an epoch has follow from a per-shard histogram of buckets, and the
epoch and index of batch ``position`` are found by arithmetic (`locate`):
resuming costs one epoch's plan (NumPy over that epoch's lengths), however
far the run has gone.
"""

from typing import NamedTuple

import numpy as np

from t2t_keras.errors import DataError


class EpochPlan(NamedTuple):
    """One epoch of one worker: its pairs in stream order, and the batches over them.

    ``shard_of[i]`` and ``row_of[i]`` locate the i-th pair of the stream (shard
    index, row in that shard); a batch is ``(padded length, stream positions)``;
    ``leftover`` are the stream positions of kept pairs that filled no batch.
    """

    shard_of: np.ndarray
    row_of: np.ndarray
    batches: list
    leftover: np.ndarray


class Segments(NamedTuple):
    """Stretches of shards that make an epoch's pairs: rows ``start[i]:stop[i]`` of shard ``shard[i]``."""

    shard: np.ndarray
    start: np.ndarray
    stop: np.ndarray


def whole_shards(sizes) -> Segments:
    """Every shard whole, in index order: the epoch of a single corpus."""
    sizes = np.asarray(sizes, np.int64)
    return Segments(np.arange(len(sizes)), np.zeros(len(sizes), np.int64), sizes)


def mixture_segments(part_shards, sizes, shares, epoch) -> Segments:
    """The stretches of a weighted mixture's epoch ``epoch``.

    An epoch draws ``round(share * E)`` pairs from each part, ``E`` being the pairs of all parts together.
    A part's pairs are taken in a cycle over its shards (in index order; the preparation shuffled them), from
    where the previous epoch stopped: a part drawn above its size repeats, one drawn below it is seen over
    several epochs. ``part_shards[p]`` are the shard indices of part ``p``, ``sizes`` every shard's pairs.
    """
    sizes = np.asarray(sizes, np.int64)
    total = int(sum(sizes[shards].sum() for shards in part_shards))
    pieces = []
    for shards, share in zip(part_shards, shares):
        ends = np.cumsum(sizes[shards])
        cycle, quota = int(ends[-1]), int(round(share * total))
        begin = epoch * quota
        while quota > 0:
            offset = begin % cycle
            index = int(np.searchsorted(ends, offset, side="right"))
            start = offset - (ends[index] - sizes[shards[index]])
            take = min(quota, int(sizes[shards[index]] - start))
            pieces.append((shards[index], start, start + take))
            begin, quota = begin + take, quota - take
    shard, start, stop = (np.array(column, np.int64) for column in zip(*pieces)) if pieces else ([],) * 3
    return Segments(shard, start, stop)


def worker_shards(num_shards, seed, epoch, worker_index=0, num_workers=1) -> np.ndarray:
    """The shard indices worker ``worker_index`` reads in ``epoch``, in reading order."""
    order = np.random.default_rng([seed, epoch]).permutation(num_shards)
    return order[worker_index::num_workers]


def pair_lengths(lengths: np.ndarray) -> np.ndarray:
    """The padded length each pair needs: the longer of source + EOS and target + EOS."""
    return lengths.max(axis=1).astype(np.int64) + 1


def bucket_histogram(shard_lengths, plan) -> np.ndarray:
    """``(shards, buckets)`` int64: how many pairs of each shard fall in each bucket (over-long ones in none)."""
    buckets = len(plan.lengths)
    rows = [np.bincount(np.searchsorted(plan.lengths, pair_lengths(lengths)), minlength=buckets + 1)[:buckets]
            for lengths in shard_lengths]
    return np.array(rows, np.int64).reshape(len(rows), buckets)


def batches_in_epoch(histogram, plan, shards) -> int:
    """The number of batches an epoch over ``shards`` has (independent of the order of its pairs)."""
    return int((histogram[shards].sum(axis=0) // np.array(plan.batch_sizes)).sum())


def locate_in_epochs(position, count_of, constant) -> tuple[int, int]:
    """``(epoch, index)`` of batch ``position`` when epoch ``e`` has ``count_of(e)`` batches (the same for every
    epoch if ``constant``: found by division, else by counting epochs up to it)."""
    if constant:
        count = count_of(0)
        return position // count, position % count
    epoch = 0
    while True:
        count = count_of(epoch)
        if position < count:
            return epoch, position
        position, epoch = position - count, epoch + 1


def locate(position, histogram, plan, seed, worker_index=0, num_workers=1) -> tuple[int, int]:
    """``(epoch, index)``: batch ``position`` of the repeated stream is batch ``index`` of ``epoch``."""
    num_shards = len(histogram)
    epoch = 0
    if num_workers == 1:  # every epoch reads every shard: the same count each time
        count = checked_count(batches_in_epoch(histogram, plan, np.arange(num_shards)), plan)
        return position // count, position % count
    while True:
        shards = worker_shards(num_shards, seed, epoch, worker_index, num_workers)
        count = checked_count(batches_in_epoch(histogram, plan, shards), plan)
        if position < count:
            return epoch, position
        position -= count
        epoch += 1


def epoch_plan(shard_lengths, plan, seed, epoch, *, worker_index=0, num_workers=1, group_shards=4) -> EpochPlan:
    """The batches of ``epoch`` for one worker, from the shards' ``(pairs, 2)`` length arrays."""
    shards = worker_shards(len(shard_lengths), seed, epoch, worker_index, num_workers)
    shard_of, row_of, lengths = [], [], []
    for group_index, start in enumerate(range(0, len(shards), group_shards)):
        group = shards[start:start + group_shards]
        order = np.random.default_rng([seed, epoch, worker_index, group_index + 1]).permutation(
            sum(len(shard_lengths[s]) for s in group))
        shard_of.append(np.concatenate([np.full(len(shard_lengths[s]), s, np.int64) for s in group])[order])
        row_of.append(np.concatenate([np.arange(len(shard_lengths[s]), dtype=np.int64) for s in group])[order])
        lengths.append(np.concatenate([pair_lengths(shard_lengths[s]) for s in group])[order])
    shard_of, row_of, lengths = np.concatenate(shard_of), np.concatenate(row_of), np.concatenate(lengths)
    batches, leftover = _bucketed(lengths, plan)
    return EpochPlan(shard_of, row_of, batches, leftover)


def epoch_batches(lengths_of, num_shards, plan, seed, epoch, *, worker_index=0, num_workers=1, group_shards=4,
                  start=0):
    """Yields ``(padded length, shard_of, row_of)`` for the batches of `epoch_plan`, from batch ``start`` on.

    The same batches in the same order as `epoch_plan` gives, planned one group of shards at a time:
    ``lengths_of(shard)`` is asked for a group's lengths when the group is reached, and only that group
    and the pairs still waiting in partial buckets are held, so memory does not grow with the corpus.
    """
    shards = worker_shards(num_shards, seed, epoch, worker_index, num_workers)
    waiting = [np.zeros([0, 2], np.int32) for _ in plan.lengths]  # (shard, row) of the pairs in each bucket
    emitted = 0
    for group_index, first in enumerate(range(0, len(shards), group_shards)):
        group = shards[first:first + group_shards]
        lengths = [lengths_of(s) for s in group]
        order = np.random.default_rng([seed, epoch, worker_index, group_index + 1]).permutation(
            sum(len(part) for part in lengths))
        pairs = np.stack([np.concatenate([np.full(len(part), s, np.int32) for s, part in zip(group, lengths)]),
                          np.concatenate([np.arange(len(part), dtype=np.int32) for part in lengths])], axis=1)[order]
        bucket = np.searchsorted(plan.lengths, np.concatenate([pair_lengths(part) for part in lengths])[order])
        del lengths, order  # what is held while the group's batches are read: its pairs and their buckets
        ready = []  # (stream position of the pair that fills the batch, padded length, members)
        for index, (length, size) in enumerate(zip(plan.lengths, plan.batch_sizes)):
            positions = np.flatnonzero(bucket == index)
            members = np.concatenate([waiting[index], pairs[positions]])
            arrived = np.concatenate([np.full(len(waiting[index]), -1, np.int64), positions])
            full = len(members) // size * size
            ready += [(arrived[k + size - 1], length, members[k:k + size]) for k in range(0, full, size)]
            waiting[index] = members[full:]
        del pairs, bucket
        for _, length, members in sorted(ready, key=lambda batch: batch[0]):
            if emitted >= start:
                yield length, members[:, 0], members[:, 1]
            emitted += 1


def _bucketed(lengths, plan):
    """``([(padded length, positions)] in emission order, leftover positions)`` of a stream of pair lengths."""
    bucket = np.searchsorted(plan.lengths, lengths)
    chunks, emitted_at, leftover = [], [], []
    for index, (length, size) in enumerate(zip(plan.lengths, plan.batch_sizes)):
        positions = np.flatnonzero(bucket == index)
        full = len(positions) // size * size
        leftover.append(positions[full:])
        for chunk in positions[:full].reshape(-1, size):
            chunks.append((length, chunk))
            emitted_at.append(chunk[-1])  # a bucket emits when its last pair arrives
    order = np.argsort(np.array(emitted_at, np.int64), kind="stable")
    return [chunks[i] for i in order], np.sort(np.concatenate(leftover))


def checked_count(count, plan):
    """`count`, the batches of an epoch; a DataError naming the fix when it is 0."""
    if count == 0:
        raise DataError(
            f"An epoch of the training corpus fills no batch (batch sizes {list(plan.batch_sizes)} per bucket "
            f"of lengths {list(plan.lengths)}): lower data.batch_tokens, or train on more data."
        )
    return count
