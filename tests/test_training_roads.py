"""The two roads of a translation corpus give the same training (tasks/data_route.py).

A corpus prepared into shards on disk (`t2t-keras prepare`) and the same pairs tokenized into shards held in
memory (the in-memory road of a small corpus) are batched by one planner (`data/batch_plan.py`): with the same
tokenizer and seed they give the same batches in the same order, so the same training. Both resume by seeking.
"""

import pathlib
import shutil
import tempfile
from unittest import mock

import numpy as np

from t2t_keras.config import replace
from t2t_keras.errors import DataError
from t2t_keras.runs import RunDirectory
from t2t_keras.tasks import data_route, task_of
from t2t_keras.training import resume
from tests.helpers import TestCase, long_check, write_toy_corpus
from tests.test_prepared_training import STEPS, batch_arrays, checkpoint_values, prepared_config


@long_check
class SameBatchesOnBothRoadsTest(TestCase):
    @classmethod
    def setUpClass(cls):
        from t2t_keras.resolved_run import resolve_run
        from t2t_keras.training.trainer import train

        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)
        cls.files = write_toy_corpus(cls.root / "data", train=200, dev=8, test=4)
        cls.prepared = prepared_config(cls.files)
        cls.memory = replace(cls.prepared, data={"pipeline": "memory"})
        cls.prepared_run, cls.memory_run = RunDirectory(cls.root / "prepared"), RunDirectory(cls.root / "memory")
        data_route.prepare_run(cls.prepared, cls.prepared_run.path)
        tokenizer = cls.prepared_run.tokenizer_file(cls.prepared.data.tokenizer)
        cls.memory_run.path.mkdir()
        shutil.copy(tokenizer, cls.memory_run.tokenizer_file(cls.memory.data.tokenizer))  # the same vocabulary
        cls.results = [train(resolve_run(run.path, config), verbose=0) for config, run in
                       ((cls.prepared, cls.prepared_run), (cls.memory, cls.memory_run))]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def load(self, config, run):
        return task_of(config).load_data(run, config)

    def test_the_same_pairs_give_the_same_batches_in_the_same_order_over_two_epochs(self):
        prepared = self.load(self.prepared, self.prepared_run)
        memory = self.load(self.memory, self.memory_run)
        self.assertEqual((prepared.stream["pipeline"], memory.stream["pipeline"]), ("prepared", "memory"))
        per_epoch = sum(1 for _ in _one_epoch(self.prepared_run, self.prepared))
        self.assertGreater(per_epoch, 2)
        pairs = zip(prepared.training_batches(0).take(2 * per_epoch), memory.training_batches(0).take(2 * per_epoch))
        count = 0
        for count, (from_shards, from_memory) in enumerate(pairs, start=1):
            for got, want in zip(batch_arrays(from_memory), batch_arrays(from_shards)):
                np.testing.assert_array_equal(got, want, err_msg=f"batch {count - 1}")
        self.assertEqual(count, 2 * per_epoch)

    def test_training_on_either_road_ends_with_the_same_weights(self):
        self.assertEqual([result.final_step for result in self.results], [STEPS, STEPS])
        on_shards = checkpoint_values(self.prepared_run.path, STEPS)
        in_memory = checkpoint_values(self.memory_run.path, STEPS)
        self.assertEqual(sorted(in_memory), sorted(on_shards))
        for name, value in in_memory.items():
            self.assertAllClose(value, on_shards[name], atol=1e-6, rtol=0, msg=name)

    def test_the_in_memory_road_resumes_by_seeking(self):
        memory = self.load(self.memory, self.memory_run)
        uninterrupted = list(memory.training_batches(0).take(6))
        resumed = next(iter(memory.training_batches(5)))
        for got, want in zip(batch_arrays(resumed), batch_arrays(uninterrupted[5])):
            np.testing.assert_array_equal(got, want)

    def test_a_corpus_changed_under_an_in_memory_run_is_refused_on_resume(self):
        data_dir = self.root / "changed-data"
        shutil.copytree(pathlib.Path(self.memory.data.train_files[0]).parent, data_dir)
        config = replace(self.memory, data={"train_files": [str(data_dir / pathlib.Path(f).name)
                                                            for f in self.memory.data.train_files]})
        with open(config.data.train_files[1], "a", encoding="utf-8") as handle:
            handle.write("ein neuer Satz\n")
        with open(config.data.train_files[0], "a", encoding="utf-8") as handle:
            handle.write("a new sentence\n")
        stream = self.load(config, self.memory_run).stream
        with self.assertRaisesRegex(DataError, "another training stream .*corpus="):
            resume.check_input_stream(self.memory_run, stream, STEPS)


class StreamedRoadTest(TestCase):
    def test_a_run_begun_on_streamed_batches_keeps_them(self):
        with tempfile.TemporaryDirectory() as tmp:
            run = RunDirectory(tmp)
            self.assertTrue(data_route.plans_in_memory(run, "translation", [("a", "b")]))
            run.write_json(run.input_stream_path, {"pipeline": "memory"})  # a run begun on streamed batches
            with mock.patch.object(RunDirectory, "checkpoint_paths", return_value=[str(run.path / "ckpt-4")]):
                self.assertFalse(data_route.plans_in_memory(run, "translation", [("a", "b")]))
                run.write_json(run.input_stream_path, {"pipeline": "memory", "batches": "planned"})
                self.assertTrue(data_route.plans_in_memory(run, "translation", [("a", "b")]))

    def test_tfds_mixtures_and_language_models_stream(self):
        with tempfile.TemporaryDirectory() as tmp:
            run = RunDirectory(tmp)
            self.assertFalse(data_route.plans_in_memory(run, "lm", [("a", "b")]))
            self.assertFalse(data_route.plans_in_memory(run, "translation", object()))  # a tf.data.Dataset


def _one_epoch(run, config):
    from t2t_keras.data import batch_plan
    from t2t_keras.data.batching import bucket_plan
    from t2t_keras.data.prepared import prepared_lengths

    lengths = prepared_lengths(run.prepared_dir)
    plan = bucket_plan(config.data.max_length, config.data.batch_tokens)
    return batch_plan.epoch_plan(lengths, plan, config.training.seed, 0).batches
