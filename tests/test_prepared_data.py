"""Prepared corpora: sharding a corpus (`data.prepare`) and reading it back in batches (`data.prepared`)."""

import collections
import dataclasses
import hashlib
import pathlib
import tempfile
import unittest
from unittest import mock

import numpy as np

from t2t_keras.data import batch_plan, prepare
from t2t_keras.data.batching import bucket_plan, make_training_dataset
from t2t_keras.data.prepare import prepare_corpus
from t2t_keras.data.prepared import prepared_lengths, prepared_training_dataset
from t2t_keras.data.shards import open_shard, shard_pairs
from t2t_keras.data.sources import as_dataset
from t2t_keras.data.tokenizers import load_tokenizer
from t2t_keras.errors import DataError
from t2t_keras.special_ids import BOS_ID, EOS_ID
from tests.helpers import TestCase, toy_config, toy_pairs, write_toy_corpus

MAX_LENGTH = 24
BATCHING = dict(batch_tokens=96, max_length=MAX_LENGTH)
SHARDING = dict(pairs_per_shard=50, window_shards=2, progress=False)


def corpus_pairs():
    """300 toy pairs (some over 24 pieces), with a few empty sides among them."""
    pairs = toy_pairs(300, seed=3, max_words=10)
    for index in (5, 77, 150):
        pairs[index] = ("", pairs[index][1])
    pairs[200] = (pairs[200][0], "   ")
    return pairs


def write_pairs(directory, pairs):
    paths = [directory / "train.en", directory / "train.de"]
    for path, side in zip(paths, zip(*pairs)):
        path.write_text("\n".join(side) + "\n", encoding="utf-8")
    return [str(p) for p in paths]


def file_digests(directory):
    """`{file name: sha256}` of the files in `directory`."""
    paths = sorted(pathlib.Path(directory).iterdir())
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in paths}


def shard_id_pairs(out_dir):
    """Every pair of every shard as `(source ids, target ids)` tuples."""
    names = [f"shard-{i:05d}" for i in range(len(prepared_lengths(out_dir)))]
    return [(tuple(s), tuple(t)) for name in names for s, t in shard_pairs(open_shard(out_dir, name))]


def batch_rows(batch):
    """The `(source ids, target ids)` pieces of each row of a batch, special ids and padding removed."""
    source, target_out = np.asarray(batch[0][0]), np.asarray(batch[1])
    rows = []
    for s, t in zip(source, target_out):
        rows.append((tuple(s[:list(s).index(EOS_ID)]), tuple(t[:list(t).index(EOS_ID)])))
    return rows


def take(dataset, count):
    return [tuple(np.asarray(x) for x in (b[0][0], b[0][1], b[1], b[2])) for b in dataset.take(count)]


class PreparedDataTest(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root = pathlib.Path(tempfile.mkdtemp())
        files = write_toy_corpus(cls.root / "corpus", train=10)
        files["train"] = write_pairs(cls.root / "corpus", corpus_pairs())
        cls.config = toy_config(files)
        cls.out = cls.root / "prepared"
        cls.manifest = prepare_corpus(cls.config, cls.out, **SHARDING)
        cls.tokenizer = load_tokenizer(cls.out / "tokenizer.model")

    def dataset(self, **overrides):
        kwargs = dict(BATCHING, seed=1)
        kwargs.update(overrides)
        return prepared_training_dataset(self.out, **kwargs)

    def epoch_batches(self, seed=1, epoch=0, worker_index=0, num_workers=1):
        plan = bucket_plan(MAX_LENGTH, BATCHING["batch_tokens"])
        return batch_plan.epoch_plan(prepared_lengths(self.out), plan, seed, epoch, worker_index=worker_index,
                                     num_workers=num_workers)

    def test_shards_hold_the_corpus_minus_the_counted_empty_and_overlong_pairs(self):
        stored = [(self.tokenizer.detokenize(np.array(s, np.int32)).numpy().decode(),
                   self.tokenizer.detokenize(np.array(t, np.int32)).numpy().decode())
                  for s, t in shard_id_pairs(self.out)]
        nonempty = [(s, t) for s, t in corpus_pairs() if s.strip() and t.strip()]
        ids = [[len(self.tokenizer.tokenize(side).numpy()) + 1 for side in pair] for pair in nonempty]
        fitting = [pair for pair, lengths in zip(nonempty, ids) if max(lengths) <= MAX_LENGTH]
        self.assertEqual(collections.Counter(stored), collections.Counter(fitting))
        counts = self.manifest["pairs"]
        self.assertEqual(counts, dict(read=300, empty=4, overlong=len(nonempty) - len(fitting), kept=len(fitting)))
        self.assertGreater(counts["overlong"], 0)
        self.assertEqual(sum(s["pairs"] for s in self.manifest["shards"]), len(fitting))
        self.assertTrue(all(s["pairs"] <= 50 for s in self.manifest["shards"]))

    def test_a_shard_is_not_a_contiguous_stretch_of_the_corpus(self):
        lines = {pair: i for i, pair in enumerate(corpus_pairs())}
        shard = open_shard(self.out, "shard-00000")
        decoded = [(self.tokenizer.detokenize(s).numpy().decode(), self.tokenizer.detokenize(t).numpy().decode())
                   for s, t in shard_pairs(shard)]
        positions = [lines[pair] for pair in decoded]
        self.assertNotEqual(positions, sorted(positions))
        self.assertGreater(max(positions), 60)  # pairs from both shards' worth of its window

    def test_tsv_corpus_gives_the_same_shards(self):
        tsv = self.root / "train.tsv"
        tsv.write_text("".join(f"{s}\t{t}\n" for s, t in corpus_pairs()), encoding="utf-8")
        data = dataclasses.replace(self.config.data, source="tsv", train_files=[str(tsv)])
        out = self.root / "from-tsv"
        prepare_corpus(dataclasses.replace(self.config, data=data), out, **SHARDING)
        shards = {k: v for k, v in file_digests(out).items() if k.startswith("shard")}
        self.assertEqual(shards, {k: v for k, v in file_digests(self.out).items() if k.startswith("shard")})

    def test_an_interrupted_preparation_resumes_to_the_same_files(self):
        out = self.root / "interrupted"
        real_write, written = prepare.write_shard, []

        def failing_write(*args):
            if len(written) == 3:  # one window (2 shards) finished, one shard of the next written
                raise KeyboardInterrupt
            written.append(args[1])
            return real_write(*args)  # the files' sizes and checksums, for the manifest

        with mock.patch.object(prepare, "write_shard", failing_write):
            with self.assertRaises(KeyboardInterrupt):
                prepare_corpus(self.config, out, **SHARDING)
        with mock.patch.object(prepare, "write_shard", side_effect=real_write) as resumed:
            prepare_corpus(self.config, out, **SHARDING)
        self.assertEqual(resumed.call_count, len(self.manifest["shards"]) - 2)  # the finished window is kept
        self.assertEqual(file_digests(out), file_digests(self.out))

    def test_a_preparation_interrupted_after_training_the_tokenizer_resumes_to_the_same_files(self):
        out = self.root / "interrupted-tokenizer"
        real_train = prepare.train_tokenizer

        def train_then_fail(*args, **kwargs):
            real_train(*args, **kwargs)  # the file is written, its checksum not yet recorded
            raise KeyboardInterrupt

        with mock.patch.object(prepare, "train_tokenizer", train_then_fail):
            with self.assertRaises(KeyboardInterrupt):
                prepare_corpus(self.config, out, **SHARDING)
        prepare_corpus(self.config, out, **SHARDING)
        self.assertEqual(file_digests(out), file_digests(self.out))

    def test_a_corpus_file_changed_after_preparation_is_refused(self):
        directory = self.root / "changing"
        directory.mkdir()
        files = write_pairs(directory, corpus_pairs())
        config = dataclasses.replace(self.config, data=dataclasses.replace(self.config.data, train_files=files))
        out = self.root / "changing-prepared"
        prepare_corpus(config, out, **SHARDING)
        write_pairs(directory, corpus_pairs()[:-1] + [("the cat", "die Katze")])
        with self.assertRaisesRegex(DataError, r"train\.en changed after .*overwrite=True"):
            prepare_corpus(config, out, **SHARDING)
        manifest = prepare_corpus(config, out, overwrite=True, **SHARDING)
        self.assertTrue(manifest["complete"])

    def test_other_settings_for_the_same_directory_are_refused(self):
        with self.assertRaisesRegex(DataError, r"pairs_per_shard=50 then, 60 now"):
            prepare_corpus(self.config, self.out, **dict(SHARDING, pairs_per_shard=60))

    def test_a_weighted_mixture_prepares_each_corpus_apart_and_each_epoch_draws_them_by_weight(self):
        (self.root / "other").mkdir()
        other = write_pairs(self.root / "other", [(f"other {i} words", f"andere {i} Worte") for i in range(90)])
        entries = [dict(source="text", train_files=self.config.data.train_files, weight=1.0),
                   dict(source="text", train_files=other, weight=3.0)]
        config = dataclasses.replace(self.config, data=dataclasses.replace(self.config.data, sources=entries))
        out = self.root / "mixture"
        manifest = prepare_corpus(config, out, tokenizer_path=self.out / "tokenizer.model", **SHARDING)
        self.assertEqual(manifest["settings"]["source"], "mixture")
        self.assertEqual(sorted({entry["part"] for entry in manifest["corpus"]}), [0, 1])
        parts = [shard["part"] for shard in manifest["shards"]]
        self.assertEqual(parts, sorted(parts))  # a shard holds one corpus
        with self.assertRaisesRegex(DataError, "mixture of 2 corpora: read it with their weights"):
            next(iter(prepared_training_dataset(out, seed=1, **BATCHING)))
        stream = prepared_training_dataset(out, seed=1, shares=[1.0, 3.0], **BATCHING)
        drawn = collections.Counter(
            "other" if self.tokenizer.detokenize(np.array(s, np.int32)).numpy().decode().startswith("other")
            else "first" for batch in stream.take(40) for s, _ in batch_rows(batch))
        self.assertAlmostEqual(drawn["other"] / sum(drawn.values()), 0.75, delta=0.1)
        uninterrupted = take(stream, 30)
        for position in (7, 29):  # past the first epoch: its batch count is planned, not assumed
            resumed = take(prepared_training_dataset(out, seed=1, shares=[1.0, 3.0], position=position, **BATCHING), 1)
            for got, want in zip(resumed[0], uninterrupted[position]):
                np.testing.assert_array_equal(got, want)

    def test_a_weighted_mixture_in_memory_gives_the_batches_of_its_preparation(self):
        from t2t_keras.data import sources
        from t2t_keras.tasks.data_route import memory_training, plans_in_memory

        (self.root / "other-memory").mkdir()
        other = write_pairs(self.root / "other-memory", [(f"more {i} words", f"mehr {i} Worte") for i in range(90)])
        entries = [dict(source="text", train_files=self.config.data.train_files, weight=1.0),
                   dict(source="text", train_files=other, weight=3.0)]
        data = dataclasses.replace(self.config.data, sources=entries, **BATCHING)
        config = dataclasses.replace(self.config, data=data)
        examples, _ = sources.training_examples(data, seed=1)
        self.assertIsInstance(examples, sources.Mixture)
        self.assertTrue(plans_in_memory(mock.Mock(read_json=lambda path: None), "translation", examples))
        out = self.root / "mixture-for-memory"
        prepare_corpus(config, out, tokenizer_path=self.out / "tokenizer.model", progress=False, seed=1)
        memory = memory_training(examples, self.tokenizer, dataclasses.replace(
            config, training=dataclasses.replace(config.training, seed=1)))
        self.assertEqual(memory.stream["shares"], [0.25, 0.75])
        prepared = take(prepared_training_dataset(out, seed=1, shares=[1.0, 3.0], **BATCHING), 30)
        for got, want in zip(take(memory.seek(0), 30), prepared):
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b)
        resumed = take(memory.seek(23), 1)[0]
        for a, b in zip(resumed, prepared[23]):
            np.testing.assert_array_equal(a, b)

    def test_a_corpus_that_fills_no_batch_is_refused_when_its_stream_is_made(self):
        with self.assertRaisesRegex(DataError, "fills no batch .*: lower data.batch_tokens, or train on more data"):
            self.dataset(batch_tokens=2**20)

    def test_an_unfinished_preparation_is_not_read(self):
        out = self.root / "unfinished"
        with mock.patch.object(prepare, "write_shard", side_effect=KeyboardInterrupt):
            with self.assertRaises(KeyboardInterrupt):
                prepare_corpus(self.config, out, **SHARDING)
        with self.assertRaisesRegex(DataError, "interrupted .* run prepare_corpus again"):
            prepared_training_dataset(out, seed=1, **BATCHING)

    def test_batches_have_the_training_structure(self):
        tokenized = make_training_dataset(as_dataset([("a", "b")]), self.tokenizer, shuffle_buffer=1, seed=0,
                                          count_dropped=False, **BATCHING)
        dataset = self.dataset()
        self.assertEqual(dataset.element_spec, tokenized.element_spec)
        plan = bucket_plan(MAX_LENGTH, BATCHING["batch_tokens"])
        sizes = dict(zip(plan.lengths, plan.batch_sizes))
        stored = collections.Counter(shard_id_pairs(self.out))
        for source, target_in, target_out, weight in take(dataset, 20):
            self.assertEqual(source.shape, (sizes[source.shape[1]], source.shape[1]))
            self.assertEqual(target_out.shape, source.shape)
            np.testing.assert_array_equal(target_in[:, 0], BOS_ID)
            np.testing.assert_array_equal(target_in[:, 1:][target_out[:, :-1] != EOS_ID],
                                          target_out[:, :-1][target_out[:, :-1] != EOS_ID])
            np.testing.assert_array_equal(weight, (target_out != 0).astype(np.float32))
            for row in batch_rows(((source, target_in), target_out, weight)):
                self.assertIn(row, stored)

    def test_a_dataset_at_position_p_continues_the_uninterrupted_stream(self):
        per_epoch = len(self.epoch_batches().batches)
        expected = take(self.dataset(), 2 * per_epoch + 4)
        for position in (0, 5, per_epoch - 1, per_epoch, per_epoch + 3, 2 * per_epoch + 1):
            resumed = take(self.dataset(position=position), 3)
            for got, want in zip(resumed, expected[position:position + 3]):
                for a, b in zip(got, want):
                    np.testing.assert_array_equal(a, b, err_msg=f"position={position}")

    def test_epochs_differ_and_have_the_planned_batch_count(self):
        first, second = self.epoch_batches(epoch=0), self.epoch_batches(epoch=1)
        histogram = batch_plan.bucket_histogram(prepared_lengths(self.out), bucket_plan(MAX_LENGTH, 96))
        count = batch_plan.batches_in_epoch(histogram, bucket_plan(MAX_LENGTH, 96), np.arange(len(histogram)))
        self.assertEqual(len(first.batches), count)
        self.assertEqual(len(second.batches), count)
        self.assertNotEqual([list(b) for _, b in first.batches], [list(b) for _, b in second.batches])

    def test_two_workers_read_disjoint_shards_that_cover_the_epoch(self):
        everything = collections.Counter(shard_id_pairs(self.out))
        read = []
        for worker in (0, 1):
            plan = self.epoch_batches(worker_index=worker, num_workers=2)
            dataset = self.dataset(worker_index=worker, num_workers=2)
            rows = [row for batch in dataset.take(len(plan.batches)) for row in batch_rows(batch)]
            leftover = [(tuple(s), tuple(t)) for s, t in self._pairs_at(plan, plan.leftover)]
            read.append(collections.Counter(rows) + collections.Counter(leftover))
        self.assertEqual(read[0] + read[1], everything)
        self.assertEqual(set(read[0]) & set(read[1]), set())
        shards = [set(batch_plan.worker_shards(6, 1, 0, w, 2)) for w in (0, 1)]
        self.assertEqual(shards[0] & shards[1], set())

    def _pairs_at(self, plan, positions):
        return [shard_pairs(open_shard(self.out, f"shard-{plan.shard_of[i]:05d}"))[plan.row_of[i]]
                for i in positions]

    def test_the_same_seed_gives_the_same_batches_another_seed_another_order(self):
        first, again, other = (take(self.dataset(seed=seed), 8) for seed in (1, 1, 2))
        for a, b in zip(first, again):
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)
        self.assertFalse(all(a[0].shape == b[0].shape and (a[0] == b[0]).all() for a, b in zip(first, other)))

    def test_a_shorter_max_length_when_reading_leaves_out_the_longer_pairs(self):
        batches = take(self.dataset(max_length=16), 30)
        self.assertTrue(all(source.shape[1] <= 16 for source, *_ in batches))
        self.assertIn(16, {source.shape[1] for source, *_ in batches})

    def test_more_workers_than_shards_is_refused(self):
        with self.assertRaisesRegex(DataError, "6 shards.*smaller data.pairs_per_shard"):
            self.dataset(worker_index=0, num_workers=7)

    def test_misaligned_files_are_refused_naming_the_shorter_file(self):
        directory = self.root / "misaligned"
        directory.mkdir()
        files = write_pairs(directory, corpus_pairs())
        pathlib.Path(files[1]).write_text("eins\nzwei\n", encoding="utf-8")
        config = dataclasses.replace(self.config, data=dataclasses.replace(self.config.data, train_files=files))
        with self.assertRaisesRegex(DataError, r"train\.de ends after 2 lines"):
            prepare_corpus(config, self.root / "misaligned-prepared", **SHARDING)

    def test_reservoir_sample_is_bounded_and_covers_the_whole_stream(self):
        sample, count = prepare.reservoir_sample(range(10_000), 100, seed=0)
        self.assertEqual((len(sample), count), (100, 10_000))
        self.assertEqual(sample, sorted(sample))
        self.assertGreater(max(sample), 5_000)
        self.assertEqual(prepare.reservoir_sample(range(10_000), 100, seed=0)[0], sample)


if __name__ == "__main__":
    unittest.main()


class GroupByGroupPlanTest(TestCase):
    """The reader plans an epoch one group of shards at a time (memory flat in the corpus size)."""

    def test_it_gives_the_whole_epoch_plan_with_pairs_waiting_across_groups(self):
        rng = np.random.default_rng(3)
        lengths = [rng.integers(1, 40, size=(int(rng.integers(50, 120)), 2)).astype(np.int32) for _ in range(11)]
        plan = bucket_plan(48, 400, num_replicas=2)
        for epoch, worker_index, num_workers in ((0, 0, 1), (1, 0, 1), (2, 1, 2)):
            whole = batch_plan.epoch_plan(lengths, plan, 7, epoch, worker_index=worker_index,
                                          num_workers=num_workers, group_shards=3)
            expected = [(width, whole.shard_of[positions].tolist(), whole.row_of[positions].tolist())
                        for width, positions in whole.batches]
            self.assertGreater(len(expected), 20)
            for start in (0, 1, len(expected) // 2, len(expected) - 1):
                got = [(width, shard_of.tolist(), row_of.tolist()) for width, shard_of, row_of in
                       batch_plan.epoch_batches(lengths.__getitem__, len(lengths), plan, 7, epoch,
                                                worker_index=worker_index, num_workers=num_workers,
                                                group_shards=3, start=start)]
                self.assertEqual(got, expected[start:], f"epoch {epoch}, worker {worker_index}, start {start}")


class MixtureSegmentsTest(unittest.TestCase):
    def test_each_epoch_draws_each_part_by_its_share_going_on_where_the_last_epoch_stopped(self):
        sizes = [50, 50, 20, 10]  # part 0: shards 0 and 1 (100 pairs); part 1: shards 2 and 3 (30 pairs)
        parts, shares = [np.array([0, 1]), np.array([2, 3])], [0.25, 0.75]
        drawn = {0: [], 1: []}
        for epoch in range(3):
            segments = batch_plan.mixture_segments(parts, sizes, shares, epoch)
            for shard, start, stop in zip(*segments):
                part = 0 if shard in (0, 1) else 1
                drawn[part] += [(int(shard), row) for row in range(start, stop)]
            self.assertEqual(int((segments.stop - segments.start).sum()), 32 + 98)  # round(share * 130) each
        cycle = {0: [(0, r) for r in range(50)] + [(1, r) for r in range(50)],
                 1: [(2, r) for r in range(20)] + [(3, r) for r in range(10)]}
        for part, rows in drawn.items():  # the parts' pairs in order, cycling: a small part repeats
            self.assertEqual(rows, [cycle[part][i % len(cycle[part])] for i in range(len(rows))])

    def test_one_corpus_is_every_shard_whole(self):
        segments = batch_plan.whole_shards([5, 7])
        self.assertEqual([s.tolist() for s in segments], [[0, 1], [0, 0], [5, 7]])


class PreparedTfdsTest(TestCase):
    """A TFDS corpus is read once, prepared once (tfds.testing.mock_data: nothing is downloaded)."""

    def test_a_tfds_corpus_is_prepared_from_one_read_and_not_read_again(self):
        import tensorflow_datasets as tfds

        from t2t_keras.data import corpus_parts

        with tempfile.TemporaryDirectory() as tmp, tfds.testing.mock_data(num_examples=60):
            config = toy_config(write_toy_corpus(pathlib.Path(tmp) / "corpus", train=10))
            config = dataclasses.replace(config, data=dataclasses.replace(
                config.data, source="tfds", tfds_name="wmt14_translate/de-en", source_lang="en", target_lang="de",
                train_files=None, max_length=64))
            out = pathlib.Path(tmp) / "prepared"
            reads = mock.patch.object(corpus_parts, "_tfds_pairs", side_effect=corpus_parts._tfds_pairs)
            with reads as read:
                manifest = prepare_corpus(config, out, **SHARDING)
            self.assertEqual(read.call_count, 2)  # the vocabulary's sample, then the shards
            self.assertEqual([entry["path"] for entry in manifest["corpus"]], ["tfds:wmt14_translate/de-en:train"])
            self.assertEqual(manifest["settings"]["source"], "tfds")
            self.assertEqual(manifest["pairs"]["read"], 60)
            self.assertEqual(sum(shard["pairs"] for shard in manifest["shards"]), manifest["pairs"]["kept"])
            with reads as read:
                again = prepare_corpus(config, out, **SHARDING)
            self.assertEqual((read.call_count, again["shards"]), (0, manifest["shards"]))
            batch = next(iter(prepared_training_dataset(out, seed=1, batch_tokens=512, max_length=64)))
            self.assertGreater(len(batch_rows(batch)), 0)
