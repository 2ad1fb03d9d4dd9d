"""Token-budget, length-bucketed batches of ``((source, target_in), target_out, sample_weight)``.

The paper (section 5.1) batches sentence pairs "by approximate sequence length",
about 25,000 source and 25,000 target tokens per batch. Here pairs are grouped
into a few length buckets; each bucket pads to its upper length and uses the
largest batch that keeps ``batch_size * length <= batch_tokens`` per side, so
XLA only ever sees one shape per bucket.

Sequences follow the model's framing (`framing.py`): source = pieces + [eos],
target_in = [decoder_start] + pieces, target_out = pieces + [eos], padded with
pad; the package's fixed ids (pad 0, bos 2, eos 3) unless `special_ids` says otherwise.
"""

import dataclasses
import logging
from typing import Callable, NamedTuple, Optional, Sequence

import tensorflow as tf
from tqdm import tqdm

from t2t_keras.data.framing import Framing, piece_functions
from t2t_keras.errors import ConfigError

logger = logging.getLogger(__name__)

_SMALLEST_BUCKET = 8


@dataclasses.dataclass(frozen=True)
class BucketPlan:
    """Padded length and batch size of each length bucket.

    A pair of length ``n`` (the longer of source and target_out, EOS included)
    goes to the first bucket with ``n <= lengths[i]`` and is padded to
    ``lengths[i]``; that bucket's batches hold ``batch_sizes[i]`` pairs.
    """

    lengths: tuple[int, ...]
    batch_sizes: tuple[int, ...]


class OverlongCount(NamedTuple):
    """How many of ``total`` pairs are longer than ``max_length``."""

    overlong: int
    total: int


def default_bucket_lengths(max_length: int) -> list[int]:
    """Geometric bucket lengths 8, 12, 16, 24, 32, 48, ... below ``max_length``, then ``max_length``."""
    lengths = []
    length = _SMALLEST_BUCKET
    while length < max_length:
        lengths.extend(n for n in (length, length * 3 // 2) if n < max_length)
        length *= 2
    return lengths + [max_length]


def bucket_plan(
    max_length: int,
    batch_tokens: int,
    *,
    bucket_boundaries: Optional[Sequence[int]] = None,
    num_replicas: int = 1,
) -> BucketPlan:
    """The buckets and their batch sizes, computed without TensorFlow.

    Args:
      max_length: longest sequence kept, BOS/EOS included.
      batch_tokens: token budget per side of a (global) batch, padding included.
      bucket_boundaries: increasing bucket lengths; those below ``max_length``
        are kept and ``max_length`` is added. ``None`` for
        ``default_bucket_lengths(max_length)``.
      num_replicas: every batch size is a multiple of it, so batches split
        evenly across replicas.

    Returns:
      A ``BucketPlan``. A bucket's batch size is the largest multiple of
      ``num_replicas`` within the budget, and at least ``num_replicas`` (a
      warning is logged when even that exceeds the budget).
    """
    _check_positive(max_length=max_length, batch_tokens=batch_tokens, num_replicas=num_replicas)
    if bucket_boundaries is None:
        lengths = default_bucket_lengths(max_length)
    else:
        lengths = [n for n in _checked_boundaries(bucket_boundaries) if n < max_length] + [max_length]
    batch_sizes = [max(num_replicas, batch_tokens // n // num_replicas * num_replicas) for n in lengths]
    over_budget = [n for n, size in zip(lengths, batch_sizes) if n * size > batch_tokens]
    if over_budget:
        logger.warning(
            "batch_tokens=%d is below num_replicas=%d times the bucket lengths %s: those "
            "batches hold %d pairs and exceed the budget. Raise batch_tokens to at least %d.",
            batch_tokens, num_replicas, over_budget, num_replicas, num_replicas * max_length,
        )
    return BucketPlan(tuple(lengths), tuple(batch_sizes))


def make_training_dataset(
    pairs_ds: tf.data.Dataset, tokenizer, *, shuffle_buffer: int, seed: int, **batching
) -> tf.data.Dataset:
    """Shuffled, tokenized, length-bucketed training batches for ``model.fit``.

    Args:
      pairs_ds: dataset of scalar ``tf.string`` pairs ``(source, target)``.
      tokenizer: a ``Tokenizer`` (anything with an in-graph ``tokenize``).
      shuffle_buffer: size of the shuffle buffer of sentence pairs (0 or 1: no shuffling).
      seed: seed of the shuffle, reshuffled every epoch.
      **batching: how pairs become batches, the keywords of ``batches``: ``max_length`` (longest source or
        target sequence, BOS/EOS included), ``batch_tokens`` (token budget per side of a (global) batch,
        padding included), ``bucket_boundaries`` (see ``bucket_plan``), ``num_replicas`` (batch sizes are
        multiples of it; partial batches are dropped), ``drop_long`` (drop pairs longer than ``max_length``;
        if False, truncate them), ``count_dropped`` (one extra pass over ``pairs_ds`` to log how many pairs
        are too long; skip it for infinite datasets), ``special_ids`` (the model's ``SpecialIds``, which frame
        and pad the pairs; None: the fixed ids).

    Returns:
      A dataset of ``((source, target_in), target_out, sample_weight)``:
      int32 ``(batch, length)`` ids and float32 weights that are 0 exactly on
      padding. ``length`` is always one of ``bucket_plan(...).lengths``.
    """
    return batches(pairs_ds, tokenizer, **batching).batched(_shuffled(pairs_ds, shuffle_buffer, seed),
                                                            drop_remainder=True)


def make_eval_dataset(pairs_ds: tf.data.Dataset, tokenizer, **batching) -> tf.data.Dataset:
    """Validation batches: the training format, in a fixed order, with no pair left out.

    Same ``batching`` keywords and output as ``make_training_dataset``, without shuffling.
    The last, partial batch of each bucket is kept and filled up with rows of
    padding (weight 0), so every pair within ``max_length`` counts exactly
    once per pass and every batch has its bucket's training shape: XLA compiles
    no extra shapes for validation.

    tf.data autotuning is off for these batches. Keras drops the validation
    iterator after every evaluation, and deleting an iterator waits for the
    autotuner's thread to wake up, which sleeps up to a minute between rounds:
    that stalled training for 40-60 s at many epoch ends on 2 CPU cores.
    """
    road = batches(pairs_ds, tokenizer, **batching)
    options = tf.data.Options()
    options.autotune.enabled = False
    return road.batched(pairs_ds, drop_remainder=False).map(_filled_up(road.plan, road.pad)).with_options(options)


def batches(
    pairs_ds: tf.data.Dataset,
    tokenizer,
    *,
    max_length: int,
    batch_tokens: int,
    bucket_boundaries: Optional[Sequence[int]] = None,
    num_replicas: int = 1,
    drop_long: bool = True,
    count_dropped: bool = True,
    special_ids=None,
) -> "Batches":
    """Both pipelines' ``Batches``: the buckets of these settings, and how a dataset of pairs becomes examples
    framed by ``special_ids`` (dropping or truncating pairs over ``max_length``). If ``count_dropped``, logs how
    many pairs of ``pairs_ds`` are too long."""
    framing = Framing.of(special_ids)
    plan = bucket_plan(max_length, batch_tokens, bucket_boundaries=bucket_boundaries, num_replicas=num_replicas)
    if count_dropped:
        _log_overlong(pairs_ds, tokenizer, max_length, drop_long)
    return Batches(plan, framing.pad, lambda pairs: _encoded(pairs, tokenizer, max_length, drop_long, framing))


class Batches(NamedTuple):
    """The bucket plan, the padding id and the encoding of both pipelines (`batches`)."""

    plan: BucketPlan
    pad: int
    encode: Callable[[tf.data.Dataset], tf.data.Dataset]  # pairs -> framed examples within max_length

    def batched(self, pairs, *, drop_remainder):
        """`pairs` encoded and grouped into the plan's padded batches."""
        return _batched(self.encode(pairs), self.plan, self.pad, drop_remainder=drop_remainder)


def count_overlong(pairs_ds: tf.data.Dataset, tokenizer, max_length: int, *, batch_size: int = 1024) -> OverlongCount:
    """Counts pairs whose source or target, with EOS/BOS, is longer than ``max_length``."""
    source_pieces, target_pieces = piece_functions(tokenizer)

    def overlong_in_batch(sources, targets):
        source_lengths = source_pieces(sources).row_lengths() + 1
        target_lengths = target_pieces(targets).row_lengths() + 1
        too_long = tf.maximum(source_lengths, target_lengths) > max_length
        return tf.reduce_sum(tf.cast(too_long, tf.int64)), tf.size(sources, out_type=tf.int64)

    batches = pairs_ds.batch(batch_size).map(overlong_in_batch, num_parallel_calls=tf.data.AUTOTUNE)
    cardinality = int(batches.cardinality())
    overlong = total = 0
    progress = tqdm(
        batches.as_numpy_iterator(), total=cardinality if cardinality >= 0 else None,
        desc="Measuring pair lengths", unit="batch", disable=None,
    )
    for batch_overlong, batch_total in progress:
        overlong += int(batch_overlong)
        total += int(batch_total)
    return OverlongCount(overlong, total)


def _shuffled(pairs_ds, shuffle_buffer, seed) -> tf.data.Dataset:
    """``pairs_ds`` reshuffled every epoch from ``seed``; as it is if ``shuffle_buffer`` is 0 or 1."""
    if shuffle_buffer > 1:
        return pairs_ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    return pairs_ds


def _log_overlong(pairs_ds, tokenizer, max_length, drop_long) -> None:
    """Logs how many pairs the pipeline will drop (or truncate) for length."""
    if pairs_ds.cardinality() == tf.data.INFINITE_CARDINALITY:
        logger.warning("Not counting over-long pairs: the dataset repeats forever.")
        return
    overlong, total = count_overlong(pairs_ds, tokenizer, max_length)
    if overlong:
        logger.warning(
            "%s %d of %d pairs longer than max_length=%d tokens.",
            "Dropping" if drop_long else "Truncating", overlong, total, max_length,
        )
    else:
        logger.info("All %d pairs fit in max_length=%d tokens.", total, max_length)


def _encoded(pairs_ds, tokenizer, max_length, drop_long, framing) -> tf.data.Dataset:
    """``(source, target_in, target_out)`` 1-D int32 ids framed by ``framing``, all within ``max_length``."""
    source_of, target_of = piece_functions(tokenizer)

    def encode(source, target):
        source_pieces = source_of(source)
        target_pieces = target_of(target)
        if not drop_long:  # Keep room for the eos / decoder start.
            source_pieces = source_pieces[: max_length - 1]
            target_pieces = target_pieces[: max_length - 1]
        eos = tf.constant([framing.eos], tf.int32)
        start = tf.constant([framing.decoder_start], tf.int32)
        return (
            tf.concat([source_pieces, eos], axis=0),
            tf.concat([start, target_pieces], axis=0),
            tf.concat([target_pieces, eos], axis=0),
        )

    examples = pairs_ds.map(encode, num_parallel_calls=tf.data.AUTOTUNE)
    if drop_long:
        examples = examples.filter(lambda *ids: _pair_length(*ids) <= max_length)
    return examples


def _pair_length(source, target_in, target_out):
    """The longer of source and target, BOS/EOS included."""
    del target_in  # Same length as target_out.
    return tf.maximum(tf.shape(source)[0], tf.shape(target_out)[0])


def _batched(examples, plan: BucketPlan, pad: int, *, drop_remainder: bool) -> tf.data.Dataset:
    """Groups examples into the plan's buckets, pads each batch to its bucket length with `pad`."""
    batches = examples.bucket_by_sequence_length(
        element_length_func=_pair_length,
        # A bucket holds lengths below its boundary and is padded to boundary - 1.
        bucket_boundaries=[length + 1 for length in plan.lengths],
        # The bucket after the last boundary never receives anything: the
        # examples are already within max_length.
        bucket_batch_sizes=list(plan.batch_sizes) + [plan.batch_sizes[-1]],
        padding_values=pad,
        pad_to_bucket_boundary=True,
        drop_remainder=drop_remainder,
    )

    def to_keras_inputs(source, target_in, target_out):
        """``((source, target_in), target_out, sample_weight)`` with weight 0 on padding."""
        sample_weight = tf.cast(tf.not_equal(target_out, pad), tf.float32)
        return (source, target_in), target_out, sample_weight

    return batches.map(to_keras_inputs, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def _filled_up(plan: BucketPlan, pad: int):
    """A map function that pads a partial batch with all-padding rows (`pad`, weight 0) to its bucket's batch
    size."""
    size_of_length = [0] * (max(plan.lengths) + 1)
    for length, batch_size in zip(plan.lengths, plan.batch_sizes):
        size_of_length[length] = batch_size
    size_of_length = tf.constant(size_of_length, tf.int32)

    def fill_up(inputs, target_out, sample_weight):
        missing = size_of_length[tf.shape(target_out)[1]] - tf.shape(target_out)[0]

        def filled(x, value):
            return tf.pad(x, [[0, missing], [0, 0]], constant_values=tf.cast(value, x.dtype))

        return tuple(filled(x, pad) for x in inputs), filled(target_out, pad), filled(sample_weight, 0)

    return fill_up


def _checked_boundaries(boundaries: Sequence[int]) -> list[int]:
    """``boundaries`` as ints, after checking they are positive and increasing."""
    values = [int(n) for n in boundaries]
    if not values or values[0] < 1 or any(b <= a for a, b in zip(values, values[1:])):
        raise ConfigError(
            f"bucket_boundaries must be positive and strictly increasing. Received: "
            f"bucket_boundaries={list(boundaries)}. Use e.g. [8, 16, 32, 64]."
        )
    return values


def _check_positive(**values) -> None:
    """Raises ConfigError naming the first argument that is not a positive int."""
    for name, value in values.items():
        if int(value) != value or value < 1:
            raise ConfigError(f"{name} must be a positive integer. Received: {name}={value!r}.")
