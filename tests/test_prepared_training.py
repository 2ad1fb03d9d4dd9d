"""Training from prepared shards (`data.pipeline`, tasks/data_route.py): the road chosen, exact resume, refusals.

The exact-resume test follows tests/test_exact_training.py's SIGKILL test with the prepared road: a run killed
mid-training (after an update its last checkpoint does not hold) and started again ends with the weights of an
uninterrupted run. The uninterrupted run and the resumed one train in this process; the killed one in a child.
"""

import dataclasses
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from unittest import mock

import numpy as np
import tensorflow as tf
import yaml

from t2t_keras.config import load_config, replace
from t2t_keras.errors import ConfigError, DataError
from t2t_keras.runs import RunDirectory
from t2t_keras.tasks import base, data_route, task_of
from t2t_keras.training import resume
from tests.helpers import TestCase, long_check, toy_config, write_toy_corpus

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARD_PAIRS, RESUME_AT = 40, 3  # the two-worker test: shards of 40 pairs, a resume at micro-batch 3
STEPS, KILL_AT = 8, 5  # checkpoints every 2 steps: the killed run's newest is step 4

# Trains the config (YAML file argv[1]) into argv[2] and SIGKILLs itself after update argv[3].
KILLED_RUN = """
import os, signal, sys
import keras
from t2t_keras.config import load_config
from t2t_keras.resolved_run import resolve_run
from t2t_keras.training.trainer import train

class KillAfter(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == int(sys.argv[3]):
            os.kill(os.getpid(), signal.SIGKILL)

train(resolve_run(sys.argv[2], load_config(sys.argv[1])), callbacks=[KillAfter()], verbose=0)
"""


def worker_main(config_path, run_dir):
    """One of two workers (TF_CONFIG): trains 2 updates, then prints as JSON its input pipeline's id, the padded
    (source, target_out) rows of its batches in epoch 0, and those of its stream resumed at RESUME_AT."""
    import json

    from t2t_keras.resolved_run import resolve_run
    from t2t_keras.training.multi_worker import per_worker_batches
    from t2t_keras.training.trainer import train

    config = load_config(config_path)
    result = train(resolve_run(run_dir, config), verbose=0)
    strategy = result.model.distribute_strategy
    data = task_of(config).load_data(RunDirectory(run_dir), config, strategy.num_replicas_in_sync, 2)
    read, pipelines = data.training_batches, []

    def training_batches(position, input_context):
        pipelines.append(input_context.input_pipeline_id)
        return read(position, input_context)

    data.training_batches = training_batches
    batches = iter(per_worker_batches(strategy, data, 0))
    rows = [local_rows(strategy, next(batches)) for _ in worker_epoch(config, run_dir, pipelines[0]).batches]
    resumed = local_rows(strategy, next(iter(per_worker_batches(strategy, data, RESUME_AT))))
    print(json.dumps(dict(worker=pipelines[0], rows=rows, resumed=resumed, final_step=result.final_step)))


def local_rows(strategy, batch):
    (source, _), target_out, _ = batch
    return [[np.asarray(part).tolist() for part in strategy.experimental_local_results(side)]
            for side in (source, target_out)]


def worker_epoch(config, run_dir, worker, num_workers=2):
    """`batch_plan.EpochPlan` of epoch 0 of `worker`: batches of `data.batch_tokens / 2` tokens (one replica each)."""
    from t2t_keras.data import batch_plan
    from t2t_keras.data.batching import bucket_plan
    from t2t_keras.data.prepared import prepared_lengths

    plan = bucket_plan(config.data.max_length, config.data.batch_tokens // num_workers, num_replicas=1)
    return batch_plan.epoch_plan(prepared_lengths(RunDirectory(run_dir).prepared_dir), plan, config.training.seed,
                                 0, worker_index=worker, num_workers=num_workers)


def prepared_config(files, **training):
    config = toy_config(files, **dict(dict(train_steps=STEPS, steps_per_epoch=4, checkpoint_every_steps=2,
                                           mixed_precision="float32"), **training))
    return replace(config, data={"pipeline": "prepared"})


def checkpoint_values(run_dir, step, worker_dir=""):
    path = str(pathlib.Path(run_dir) / "checkpoints" / worker_dir / f"ckpt-{step}")
    return {name: tf.train.load_variable(path, name) for name, _ in tf.train.list_variables(path)
            if name.split("/")[0] in ("model", "random_state", "input_position")}


def batch_arrays(batch):
    (source, target_in), target_out, weight = batch
    return [np.asarray(x) for x in (source, target_in, target_out, weight)]


class PipelineConfigTest(TestCase):
    def test_unknown_value_names_the_allowed_ones(self):
        with self.assertRaisesRegex(ConfigError, r"data.pipeline must be one of \['auto', 'memory', 'prepared'\]"):
            load_config("tiny", ["data.pipeline=disk"])

    def test_prepared_with_lm_or_mlm_is_refused_as_translation_only(self):
        for preset in ("lm-mini", "mlm-mini"):
            with self.assertRaisesRegex(ConfigError, "data.pipeline=prepared is for translation runs for now"):
                load_config(preset, ["data.pipeline=prepared"])

    def test_prepared_takes_tfds_and_mixtures(self):
        from t2t_keras.data import sources

        tfds = load_config("tiny", ["data.pipeline=prepared", "data.source=tfds"])
        self.assertEqual((tfds.data.pipeline, tfds.data.source), ("prepared", "tfds"))
        mixture = load_config("tiny", ["data.pipeline=prepared", "data.sources=[{source: text, train_files: [a, b], "
                                                                 "weight: 1}, {source: tfds, weight: 3}]"])
        self.assertEqual(mixture.data.pipeline, "prepared")
        self.assertEqual([(part.source, weight) for part, weight in sources.components(mixture.data)],
                         [("text", 1.0), ("tfds", 3.0)])


class RouteChoiceTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)
        cls.files = write_toy_corpus(cls.root / "data", train=60, dev=4, test=4)
        cls.config = toy_config(cls.files)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def route(self, config, name="run", num_workers=1):
        with self.assertLogs("t2t_keras.tasks.data_route", "INFO") as logs:
            route = data_route.choose_route(RunDirectory(self.root / name), config, num_workers)
        self.assertEqual(len(logs.output), 1, logs.output)
        self.assertIn(route.reason, logs.output[0])
        return route

    def test_auto_keeps_a_small_corpus_in_memory_and_prepares_a_large_one(self):
        self.assertEqual(self.route(self.config), ("memory", "data.pipeline=auto: the training files hold 0.0 MB, "
                                                              "at most 256"))
        with mock.patch.object(data_route, "PREPARE_THRESHOLD_BYTES", 1000):
            route = self.route(self.config)
        self.assertEqual(route.name, "prepared")
        self.assertIn("more than 0", route.reason)

    def test_auto_keeps_tfds_the_default_corpus_lm_and_several_workers_in_memory(self):
        configs = {
            "tfds": replace(self.config, data={"source": "tfds"}),
            "libreoffice": replace(self.config, data={"source": "libreoffice"}),
            "task lm": load_config("lm-mini"),
        }
        with mock.patch.object(data_route, "PREPARE_THRESHOLD_BYTES", 0):
            for what, config in configs.items():
                route = self.route(config)
                self.assertEqual(route.name, "memory", what)
                self.assertIn(what.split()[-1], route.reason)
            self.assertEqual(self.route(self.config, num_workers=2).name, "memory")

    def test_auto_prepares_a_mixture_whose_files_are_large(self):
        entry = dict(source="text", train_files=self.files["train"])
        mixture = replace(self.config, data={"sources": [dict(entry, weight=1.0), dict(entry, weight=2.0)]})
        self.assertEqual(self.route(mixture).name, "memory")
        with mock.patch.object(data_route, "PREPARE_THRESHOLD_BYTES", 1000):
            self.assertEqual(self.route(mixture).name, "prepared")

    def test_prepared_on_several_workers_needs_a_finished_preparation(self):
        with self.assertRaisesRegex(ConfigError, "on 2 workers reads a corpus prepared beforehand.*t2t-keras prepare"):
            data_route.choose_route(RunDirectory(self.root / "run"), replace(self.config, data={"pipeline":
                                                                                                  "prepared"}), 2)

    def test_a_run_with_a_finished_preparation_uses_it_under_auto(self):
        manifest = data_route.prepare_run(self.config, self.root / "prepared-run")
        self.assertTrue(manifest["complete"])
        self.assertTrue((self.root / "prepared-run" / "config.yaml").exists())
        route = self.route(self.config, "prepared-run")
        self.assertEqual(route.name, "prepared")
        self.assertIn("holds a prepared corpus", route.reason)

    def test_prepare_refuses_a_memory_config(self):
        with self.assertRaisesRegex(ConfigError, "data.pipeline=memory: .* Set data.pipeline=auto"):
            data_route.prepare_run(replace(self.config, data={"pipeline": "memory"}), self.root / "memory-run")
        self.assertFalse((self.root / "memory-run").exists())


class StreamRecordTest(TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.run_dir = RunDirectory(self.tmp.name)
        self.stream = dict(pipeline="prepared", seed=1, batch_tokens=96, max_length=24, num_replicas=1,
                           num_workers=1, bucket_boundaries=None, group_shards=4, manifest="abc")
        resume.check_input_stream(self.run_dir, self.stream, 0)

    def tearDown(self):
        self.tmp.cleanup()

    def test_another_preparation_is_refused_on_resume(self):
        with self.assertRaisesRegex(DataError, r"trained 4 steps on another training stream \(manifest='abc' then, "
                                               r"'def' now\).*new --run-dir"):
            resume.check_input_stream(self.run_dir, dict(self.stream, manifest="def"), 4)

    def test_another_replica_count_is_logged_as_not_exact(self):
        with self.assertLogs("t2t_keras.training.resume", "WARNING") as logs:
            resume.check_input_stream(self.run_dir, dict(self.stream, num_replicas=2), 4)
        self.assertIn("num_replicas=1 then, 2 now", logs.output[0])
        self.assertEqual(self.run_dir.read_json(self.run_dir.input_stream_path)["num_replicas"], 2)

    def test_another_worker_count_is_logged_as_not_exact(self):
        with self.assertLogs("t2t_keras.training.resume", "WARNING") as logs:
            resume.check_input_stream(self.run_dir, dict(self.stream, num_workers=2, sharding="file"), 4)
        self.assertIn("num_workers=1 then, 2 now, sharding=None then, 'file' now", logs.output[0])

    def test_a_new_start_records_the_stream_without_checking(self):
        resume.check_input_stream(self.run_dir, dict(self.stream, pipeline="memory"), 0)
        self.assertEqual(self.run_dir.read_json(self.run_dir.input_stream_path)["pipeline"], "memory")


class PreparedTrainingTest(TestCase):
    @classmethod
    def setUpClass(cls):
        from t2t_keras.resolved_run import resolve_run
        from t2t_keras.training.trainer import train

        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)
        cls.files = write_toy_corpus(cls.root / "data", train=200, dev=8, test=4)
        cls.config = prepared_config(cls.files)
        assert cls.config.model.dropout > 0, "exact resume must be shown with dropout on"
        cls.reference = cls.root / "reference"
        seek = data_route.prepared_training_dataset
        with mock.patch.object(data_route, "prepared_training_dataset", side_effect=seek) as cls.sought, \
                mock.patch.object(base, "make_training_dataset", side_effect=AssertionError("in memory")):
            cls.result = train(resolve_run(cls.reference, cls.config), verbose=0)
        cls.reference_values = checkpoint_values(cls.reference, STEPS)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_training_reads_its_batches_from_the_shards(self):
        self.assertEqual(self.result.final_step, STEPS)
        self.assertTrue(all(call.args[0] == self.reference / "prepared" for call in self.sought.call_args_list))
        self.assertEqual([call.kwargs["position"] for call in self.sought.call_args_list], [0, 0])
        run = RunDirectory(self.reference)
        self.assertEqual(run.read_json(run.input_stream_path)["pipeline"], "prepared")
        self.assertEqual(run.read_json(run.data_path)["train"]["prepared"], str(run.prepared_dir))
        self.assertTrue(data_route.is_prepared(run.prepared_dir))

    def test_a_stream_started_at_p_is_the_uninterrupted_stream_from_p(self):
        data = task_of(self.config).load_data(RunDirectory(self.reference), self.config)
        uninterrupted = list(data.training_batches(0).take(7))
        for position in (3, 6):
            resumed = next(iter(data.training_batches(position)))
            for got, want in zip(batch_arrays(resumed), batch_arrays(uninterrupted[position])):
                np.testing.assert_array_equal(got, want)

    @long_check
    def test_sigkilled_run_started_again_ends_like_an_uninterrupted_run(self):
        from t2t_keras.resolved_run import resolve_run
        from t2t_keras.training.trainer import train

        run_dir, config_path = self.root / "killed", self.root / "prepared.yaml"
        config_path.write_text(yaml.safe_dump(self.config.to_dict()))
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        killed = subprocess.run([sys.executable, "-c", KILLED_RUN, str(config_path), str(run_dir), str(KILL_AT)],
                                cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(killed.returncode, -9, killed.stderr[-3000:])
        self.assertEqual(RunDirectory(run_dir).checkpoint_paths()[-1].rsplit("-", 1)[1], "4")
        resumed = train(resolve_run(run_dir, self.config), verbose=0)
        self.assertEqual((resumed.start_step, resumed.final_step), (4, STEPS))
        values = checkpoint_values(run_dir, STEPS)
        self.assertEqual(sorted(values), sorted(self.reference_values))
        self.assertTrue([name for name in values if name.startswith("random_state/")], "dropout state is not saved")
        for name, value in values.items():
            self.assertAllClose(value, self.reference_values[name], atol=1e-6, rtol=0, msg=name)

    def test_a_corpus_changed_after_preparation_is_refused_when_training_starts_again(self):
        from t2t_keras.resolved_run import resolve_run
        from t2t_keras.training.trainer import train

        data = self.root / "changing"
        shutil.copytree(self.root / "data", data)
        files = {split: [str(data / pathlib.Path(path).name) for path in paths] for split, paths in self.files.items()}
        config = dataclasses.replace(self.config, data=dataclasses.replace(self.config.data,
                                                                           train_files=files["train"]))
        data_route.prepare_run(config, self.root / "changing-run")
        with open(files["train"][1], "a", encoding="utf-8") as handle:
            handle.write("ein neuer Satz\n")
        with self.assertRaisesRegex(DataError, r"train\.de changed after .* restore what changed .* new --run-dir"):
            train(resolve_run(self.root / "changing-run", config), verbose=0)


def trimmed(row):
    return tuple(np.trim_zeros(np.asarray(row), "b").tolist())


@long_check
class MultiWorkerTest(TestCase):
    """Under MultiWorkerMirroredStrategy each worker reads its own shards, one batch per replica and step."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)
        config = prepared_config(write_toy_corpus(cls.root / "data", train=300, dev=4, test=4), train_steps=2,
                                 steps_per_epoch=2, gradient_accumulation_steps=2, strategy="multi_worker")
        # No validation (it would double the workers' time); shards small enough for two workers.
        config = replace(config, data={"dev_files": None, "pairs_per_shard": SHARD_PAIRS})
        cls.config, cls.run_dir = config, RunDirectory(cls.root / "run")
        cls.manifest = data_route.prepare_run(config, cls.run_dir.path)
        cls.data = task_of(config).load_data(cls.run_dir, config, num_replicas=2, num_workers=2)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_two_workers_train_and_read_disjoint_shards_that_cover_the_epoch(self):
        import json

        from t2t_keras.data.shards import open_shard, shard_pairs
        from t2t_keras.special_ids import EOS_ID
        from tests.cluster import cluster_ports, run_workers

        config_path = self.root / "prepared.yaml"
        config_path.write_text(yaml.safe_dump(self.config.to_dict()))
        workers = [f"127.0.0.1:{port}" for port in cluster_ports(2)]
        command = [sys.executable, "-m", "tests.test_prepared_training", "--worker", str(config_path),
                   str(self.run_dir.path)]
        envs = [dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_CONFIG=json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})) for index in range(2)]
        outputs = run_workers([command] * 2, envs, REPO, timeout=300)
        for returncode, _, err in outputs:
            self.assertEqual(returncode, 0, err[-3000:])
        got = sorted((json.loads(out.strip().splitlines()[-1]) for _, out, _ in outputs), key=lambda g: g["worker"])
        self.assertEqual([g["worker"] for g in got], [0, 1])
        self.assertEqual([g["final_step"] for g in got], [2, 2])
        stream = self.run_dir.read_json(self.run_dir.input_stream_path)
        self.assertEqual((stream["sharding"], stream["num_workers"]), ("file", 2))
        chief = checkpoint_values(self.run_dir.path, 2)
        other = checkpoint_values(self.run_dir.path, 2, ".worker-1")
        self.assertEqual(int(chief["input_position/.ATTRIBUTES/VARIABLE_VALUE"]), 4)  # 2 updates of 2 micro-batches
        for name, value in chief.items():
            self.assertAllClose(value, other[name], atol=1e-6, msg=name)

        shards = [shard_pairs(open_shard(self.run_dir.prepared_dir, shard["name"]))
                  for shard in self.manifest["shards"]]
        self.assertGreaterEqual(len(shards), 4)

        def with_eos(shard, row):
            source, target = shards[shard][row]
            return tuple(source.tolist()) + (EOS_ID,), tuple(target.tolist()) + (EOS_ID,)

        served = []
        for worker, output in enumerate(got):  # one local replica per worker
            served.append([(trimmed(s), trimmed(t)) for (sources,), (targets,) in output["rows"]
                           for s, t in zip(sources, targets)])
            self.assertEqual(output["resumed"], output["rows"][RESUME_AT], f"worker {worker} resumed")
        self.assertTrue(served[0] and served[1])
        self.assertFalse(set(served[0]) & set(served[1]), "a pair went to both workers")
        leftover = []
        for worker in range(2):
            epoch = worker_epoch(self.config, self.run_dir.path, worker)
            leftover += [with_eos(epoch.shard_of[i], epoch.row_of[i]) for i in epoch.leftover]
        every_pair = [with_eos(shard, row) for shard in range(len(shards)) for row in range(len(shards[shard]))]
        self.assertEqual(len(every_pair), self.manifest["pairs"]["kept"])
        self.assertCountEqual(served[0] + served[1] + leftover, every_pair)

    def test_a_worker_stream_sought_at_p_is_its_stream_from_p_times_its_local_replicas(self):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4)
        uninterrupted = list(self.data.training_batches(0, context).take(8))
        self.assertIsNone(self.data.train)
        self.assertTrue(self.data.per_worker)
        for position in (1, 3):
            resumed = next(iter(self.data.training_batches(position, context)))
            for got, want in zip(batch_arrays(resumed), batch_arrays(uninterrupted[2 * position])):
                np.testing.assert_array_equal(got, want)
        tokens = max(np.size(batch[0][0]) for batch in uninterrupted)
        self.assertLessEqual(tokens, self.config.data.batch_tokens // 4)  # a replica's share of data.batch_tokens

    def test_fewer_shards_than_workers_is_a_data_error_naming_the_fix(self):
        workers = len(self.manifest["shards"]) + 1
        context = tf.distribute.InputContext(num_input_pipelines=workers, input_pipeline_id=0,
                                             num_replicas_in_sync=workers)
        with self.assertRaisesRegex(DataError, f"has {workers - 1} shards.*smaller data.pairs_per_shard"):
            self.data.training_batches(0, context)


if __name__ == "__main__" and "--worker" in sys.argv:
    worker_main(*sys.argv[sys.argv.index("--worker") + 1:][:2])
