"""Tests of t2t_keras.data.batching: bucket plans and the training / evaluation pipelines."""

import collections
import os
import tempfile

import numpy as np
import tensorflow as tf

from t2t_keras.data import batching
from t2t_keras.errors import ConfigError
from t2t_keras.special_ids import BOS_ID, EOS_ID, PAD_ID
from tests.helpers import TestCase
from tests.test_tokenizer import synthetic_corpus, train_test_tokenizer

MAX_LENGTH = 12
BATCH_TOKENS = 160


class BucketPlanTest(TestCase):
    def test_default_lengths_are_geometric_up_to_max_length(self):
        self.assertEqual(
            batching.default_bucket_lengths(256), [8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
        )
        self.assertEqual(batching.default_bucket_lengths(100), [8, 12, 16, 24, 32, 48, 64, 96, 100])
        self.assertEqual(batching.default_bucket_lengths(10), [8, 10])
        self.assertEqual(batching.default_bucket_lengths(5), [5])

    def test_batch_sizes_fill_the_budget_in_replica_multiples(self):
        for num_replicas in (1, 2, 8):
            plan = batching.bucket_plan(256, 25_000, num_replicas=num_replicas)
            for length, size in zip(plan.lengths, plan.batch_sizes):
                self.assertLessEqual(size * length, 25_000)
                self.assertEqual(size % num_replicas, 0)
                # The next multiple of num_replicas would break the budget.
                self.assertGreater((size + num_replicas) * length, 25_000)
        plan = batching.bucket_plan(64, 1000, num_replicas=2)
        self.assertEqual(plan.lengths, (8, 12, 16, 24, 32, 48, 64))
        self.assertEqual(plan.batch_sizes, (124, 82, 62, 40, 30, 20, 14))

    def test_custom_boundaries_are_capped_at_max_length(self):
        plan = batching.bucket_plan(64, 640, bucket_boundaries=[10, 20, 64, 500])
        self.assertEqual(plan.lengths, (10, 20, 64))
        self.assertEqual(plan.batch_sizes, (64, 32, 10))

    def test_budget_below_one_batch_per_replica_warns(self):
        with self.assertLogs("t2t_keras.data.batching", level="WARNING") as logs:
            plan = batching.bucket_plan(64, 100, num_replicas=2)
        self.assertEqual(plan.batch_sizes[-1], 2)
        self.assertIn("Raise batch_tokens to at least 128", logs.output[0])

    def test_invalid_arguments(self):
        with self.assertRaisesRegex(ConfigError, "batch_tokens=0"):
            batching.bucket_plan(64, 0)
        with self.assertRaisesRegex(ConfigError, "num_replicas=-1"):
            batching.bucket_plan(64, 100, num_replicas=-1)
        with self.assertRaisesRegex(ConfigError, r"bucket_boundaries=\[16, 8\]"):
            batching.bucket_plan(64, 100, bucket_boundaries=[16, 8])


def _rows(ids):
    """Rows of a padded int batch as tuples without padding."""
    return [tuple(int(i) for i in row if i != PAD_ID) for row in ids]


def _real_rows(target_out):
    """Which rows of a batch hold a pair (every target ends in EOS), not fill-up padding."""
    return (target_out != PAD_ID).any(axis=1)


class PipelineTestBase(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._tmp = tempfile.TemporaryDirectory()
        cls.pairs = synthetic_corpus(num_pairs=300, seed=3)
        cls.tokenizer = train_test_tokenizer(os.path.join(cls._tmp.name, "vocab.model"))
        cls.encoded = [cls._expected_ids(source, target) for source, target in cls.pairs]

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()
        super().tearDownClass()

    @classmethod
    def _expected_ids(cls, source, target):
        """(source + [EOS], target + [EOS]) ids, computed eagerly."""
        source_ids = cls.tokenizer.tokenize(source).numpy().tolist()
        target_ids = cls.tokenizer.tokenize(target).numpy().tolist()
        return tuple(source_ids + [EOS_ID]), tuple(target_ids + [EOS_ID])

    def pairs_ds(self):
        sources, targets = zip(*self.pairs)
        return tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))

    def kept(self, max_length=MAX_LENGTH):
        """Expected (source, target_out) id tuples of the pairs within max_length."""
        return [ids for ids in self.encoded if max(map(len, ids)) <= max_length]

    def batches(self, ds):
        return list(ds.as_numpy_iterator())


class TrainingDatasetTest(PipelineTestBase):
    def make(self, **overrides):
        kwargs = dict(
            max_length=MAX_LENGTH, batch_tokens=BATCH_TOKENS, num_replicas=2,
            shuffle_buffer=64, seed=5, count_dropped=False,
        )
        kwargs.update(overrides)
        return batching.make_training_dataset(self.pairs_ds(), self.tokenizer, **kwargs)

    def test_corpus_has_overlong_pairs(self):
        self.assertBetween(len(self.kept()), 100, len(self.pairs) - 20)

    def test_batches_respect_budget_replicas_and_bucket_shapes(self):
        self.assert_batch_shapes(bucket_boundaries=None)
        self.assert_batch_shapes(bucket_boundaries=(5, 8, 10))

    def assert_batch_shapes(self, bucket_boundaries):
        plan = batching.bucket_plan(
            MAX_LENGTH, BATCH_TOKENS, num_replicas=2, bucket_boundaries=bucket_boundaries
        )
        batches = self.batches(self.make(bucket_boundaries=bucket_boundaries))
        self.assertNotEmpty(batches)
        seen_lengths = set()
        for (source, target_in), target_out, weight in batches:
            batch_size, length = source.shape
            self.assertIn(length, plan.lengths)
            self.assertEqual(batch_size, plan.batch_sizes[plan.lengths.index(length)])
            self.assertLessEqual(batch_size * length, BATCH_TOKENS)
            self.assertEqual(batch_size % 2, 0)
            for array in (target_in, target_out, weight):
                self.assertEqual(array.shape, source.shape)
            self.assertEqual((source.dtype, target_in.dtype, target_out.dtype), (np.int32,) * 3)
            self.assertEqual(weight.dtype, np.float32)
            seen_lengths.add(length)
        self.assertGreater(len(seen_lengths), 1)

    def test_eos_bos_placement_shift_and_weights(self):
        for (source, target_in), target_out, weight in self.batches(self.make()):
            source_lengths = (source != PAD_ID).sum(axis=1)
            target_lengths = (target_out != PAD_ID).sum(axis=1)
            rows = np.arange(len(source))
            self.assertAllEqual(source[rows, source_lengths - 1], [EOS_ID] * len(rows))
            self.assertAllEqual(target_out[rows, target_lengths - 1], [EOS_ID] * len(rows))
            self.assertAllEqual((source == EOS_ID).sum(axis=1), np.ones(len(rows)))
            self.assertAllEqual((target_out == EOS_ID).sum(axis=1), np.ones(len(rows)))
            self.assertAllEqual(target_in[:, 0], [BOS_ID] * len(rows))
            self.assertAllEqual((target_in == BOS_ID).sum(axis=1), np.ones(len(rows)))
            self.assertAllEqual((target_in != PAD_ID).sum(axis=1), target_lengths)
            # target_in is target_out shifted right by one, BOS in front, EOS gone.
            shifted = np.where(target_out[:, :-1] == EOS_ID, PAD_ID, target_out[:, :-1])
            self.assertAllEqual(target_in[:, 1:], shifted)
            self.assertAllEqual(weight, (target_out != PAD_ID).astype(np.float32))

    def test_examples_are_real_pairs_at_most_once(self):
        produced = []
        for (source, _), target_out, _ in self.batches(self.make()):
            produced.extend(zip(_rows(source), _rows(target_out)))
        kept = collections.Counter(self.kept())
        self.assertGreater(len(produced), len(kept) // 2)
        self.assertFalse(collections.Counter(produced) - kept)

    def test_overlong_pairs_are_counted_and_logged(self):
        expected = len(self.pairs) - len(self.kept())
        self.assertEqual(
            batching.count_overlong(self.pairs_ds(), self.tokenizer, MAX_LENGTH),
            (expected, len(self.pairs)),
        )
        with self.assertLogs("t2t_keras.data.batching", level="WARNING") as logs:
            self.make(count_dropped=True)
        self.assertIn(f"Dropping {expected} of {len(self.pairs)} pairs", logs.output[0])
        with self.assertLogs("t2t_keras.data.batching", level="WARNING") as logs:
            self.make(count_dropped=True, drop_long=False)
        self.assertIn(f"Truncating {expected} of {len(self.pairs)} pairs", logs.output[0])

    def test_infinite_dataset_is_not_counted(self):
        with self.assertLogs("t2t_keras.data.batching", level="WARNING") as logs:
            batching.make_training_dataset(
                self.pairs_ds().repeat(), self.tokenizer, max_length=MAX_LENGTH,
                batch_tokens=BATCH_TOKENS, shuffle_buffer=0, seed=0,
            )
        self.assertIn("repeats forever", logs.output[0])

    def test_same_seed_same_batches(self):
        first = self.batches(self.make())
        second = self.batches(self.make())
        other = self.batches(self.make(seed=6))
        self.assertAllEqual(first[0][0][0], second[0][0][0])
        self.assertNotAllEqual(first[0][0][0], other[0][0][0])

    def test_truncation_when_not_dropping(self):
        produced = 0
        for (source, _), target_out, _ in self.batches(self.make(drop_long=False)):
            self.assertLessEqual(source.shape[1], MAX_LENGTH)
            rows = np.arange(len(source))
            target_lengths = (target_out != PAD_ID).sum(axis=1)
            source_lengths = (source != PAD_ID).sum(axis=1)
            self.assertAllEqual(target_out[rows, target_lengths - 1], [EOS_ID] * len(rows))
            self.assertAllEqual(source[rows, source_lengths - 1], [EOS_ID] * len(rows))
            produced += len(source)
        self.assertGreater(produced, len(self.kept()))


class EvalDatasetTest(PipelineTestBase):
    def make(self, **overrides):
        kwargs = dict(
            max_length=MAX_LENGTH, batch_tokens=BATCH_TOKENS, num_replicas=2, count_dropped=False
        )
        kwargs.update(overrides)
        return batching.make_eval_dataset(self.pairs_ds(), self.tokenizer, **kwargs)

    def test_every_kept_example_appears_exactly_once(self):
        produced = []
        for (source, target_in), target_out, weight in self.batches(self.make()):
            self.assertAllEqual(weight, (target_out != PAD_ID).astype(np.float32))
            real = _real_rows(target_out)
            produced.extend(zip(_rows(source[real]), _rows(target_out[real])))
        self.assertEqual(collections.Counter(produced), collections.Counter(self.kept()))

    def test_batches_have_the_training_shapes(self):
        plan = batching.bucket_plan(MAX_LENGTH, BATCH_TOKENS, num_replicas=2)
        shapes = {(size, length) for length, size in zip(plan.lengths, plan.batch_sizes)}
        fill_up_rows = 0
        for (source, target_in), target_out, weight in self.batches(self.make()):
            for ids in (source, target_in, target_out, weight):
                self.assertIn(ids.shape, shapes)
            filler = ~_real_rows(target_out)
            # Fill-up rows are padding end to end, on every side, and only at the end of a batch.
            self.assertAllEqual(source[filler], np.zeros_like(source[filler]))
            self.assertAllEqual(target_in[filler], np.zeros_like(target_in[filler]))
            self.assertAllEqual(weight[filler], np.zeros_like(weight[filler]))
            self.assertAllEqual(filler, np.sort(filler))
            fill_up_rows += int(filler.sum())
        self.assertGreater(fill_up_rows, 0)  # The toy corpus leaves partial batches to fill.

    def test_autotuning_is_off(self):
        # Deleting an autotuned iterator waits for the autotuner's thread (up to a minute),
        # and Keras deletes the validation iterator after every evaluation.
        self.assertFalse(self.make().options().autotune.enabled)
        self.assertFalse(self.make().cache().repeat().options().autotune.enabled)

    def test_truncation_keeps_every_pair(self):
        batches = self.batches(self.make(drop_long=False))
        produced = sum(int(_real_rows(target_out).sum()) for _, target_out, _ in batches)
        self.assertEqual(produced, len(self.pairs))

    def test_order_is_deterministic(self):
        first, second = self.batches(self.make()), self.batches(self.make())
        self.assertEqual(len(first), len(second))
        for a, b in zip(first, second):
            self.assertAllEqual(a[0][0], b[0][0])
            self.assertAllEqual(a[1], b[1])

    def test_decodes_back_to_the_text(self):
        (source, _), target_out, _ = self.batches(self.make())[0]
        kept_text = set(self.pairs)
        sources = self.tokenizer.detokenize(source).numpy()
        targets = self.tokenizer.detokenize(target_out).numpy()
        for pair in zip(sources, targets):
            self.assertIn(tuple(text.decode("utf-8") for text in pair), kept_text)


if __name__ == "__main__":
    tf.test.main()
