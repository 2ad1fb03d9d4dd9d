"""translate, score and prepare `--runner`: the corpus as an Apache Beam pipeline (`t2t_keras.beam`) on the tiny run
of `tests.roads` and its CTranslate2 export.

Quick: the local runner in this process (CTranslate2: no model start-up to speak of): the same lines as the
single-process command, one output file per input of a glob, bad lines to the dead-letter file, --max-errors, the
refusals made before a pipeline starts, batches that fail their first try still giving each line once, and what a
failed run leaves behind. Long (`bash bench/checks/run tests.test_beam_pipelines`): 1 and 2 worker processes, for
the run directory and the CTranslate2 export; the SavedModel and the LiteRT file; batches failing in two worker
processes; a worker process killed mid-pipeline; distill's teacher pass through a pipeline.
"""

import argparse
import hashlib
import json
import os
import pathlib
import shutil
import signal
import tempfile
import unittest

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from t2t_keras.beam import commands, line_pipeline, pipeline_paths
from t2t_keras.beam.artifact_handler import ArtifactHandler
from tests.helpers import cli_in_process, long_check, write_toy_corpus
from tests.roads import roads

SENTENCES = 12  # lines of the toy test split a test translates


def _lines(path):
    return pathlib.Path(path).read_text(encoding="utf-8").splitlines()


class PipelineCase(unittest.TestCase):
    """A temporary directory with the first test sentences of the roads' corpus in `sentences.txt`."""

    @classmethod
    def setUpClass(cls):
        cls.roads = roads()
        cls.sentences = _lines(cls.roads.sentences)[:SENTENCES]

    def setUp(self):
        self.directory = pathlib.Path(tempfile.mkdtemp(prefix="t2t-beam-test-"))
        self.addCleanup(shutil.rmtree, self.directory, ignore_errors=True)
        self.source = self.write("sentences.txt", self.sentences)

    def write(self, name, lines, raw=None):
        path = self.directory / name
        path.write_bytes(raw if raw is not None else ("\n".join(lines) + "\n").encode("utf-8"))
        return path

    def cli(self, *args, code=0):
        done = cli_in_process(*args)
        self.assertEqual(done.returncode, code, done.stdout.decode() + done.stderr.decode())
        return done

    def single(self, flag, path, source):
        """What `translate` without --runner prints for `source`."""
        return self.cli("translate", flag, path, "--input", source).stdout.decode("utf-8").splitlines()

    def pipeline(self, flag, path, source, output, *args, code=0):
        return self.cli("translate", flag, path, "--input", source, "--output", output, "--runner", "direct",
                        *args, code=code)


class TranslatePipelineTest(PipelineCase):

    def test_the_local_runner_writes_the_lines_the_single_process_prints(self):
        ctranslate2 = str(self.roads.ctranslate2)
        output = self.directory / "out.txt"
        self.pipeline("--ctranslate2", ctranslate2, self.source, output)
        self.assertEqual(_lines(output), self.single("--ctranslate2", ctranslate2, self.source))
        self.assertEqual((self.directory / "out.txt.errors.jsonl").read_text(), "")

    def test_a_glob_of_several_inputs_gives_a_directory_of_one_file_each(self):
        ctranslate2 = str(self.roads.ctranslate2)
        shutil.move(self.source, self.directory / "one.txt")
        self.write("two.txt", list(reversed(self.sentences[:5])))
        self.pipeline("--ctranslate2", ctranslate2, self.directory / "*.txt", self.directory / "out")
        self.assertEqual(sorted(os.listdir(self.directory / "out")), ["one.txt", "two.txt"])
        for name in ("one.txt", "two.txt"):
            self.assertEqual(_lines(self.directory / "out" / name),
                             self.single("--ctranslate2", ctranslate2, self.directory / name), name)

    def test_bad_lines_go_to_the_dead_letter_file_and_the_others_are_translated(self):
        ctranslate2 = str(self.roads.ctranslate2)
        good = self.sentences[:3]
        raw = b"\n".join([good[0].encode(), b"caf\xe9 \xff", good[1].encode(), b"a\x00b", b"x" * 20_000,
                          good[2].encode()]) + b"\n"
        source, output = self.write("mixed.txt", None, raw), self.directory / "out.txt"
        self.pipeline("--ctranslate2", ctranslate2, source, output)
        expected = self.single("--ctranslate2", ctranslate2, self.write("good.txt", good))
        self.assertEqual(_lines(output), [expected[0], "", expected[1], "", "", expected[2]])
        records = [json.loads(line) for line in _lines(str(output) + ".errors.jsonl")]
        self.assertEqual([(record["file"], record["line"]) for record in records],
                         [(str(source), 2), (str(source), 4), (str(source), 5)])
        self.assertIn("UTF-8", records[0]["reason"])
        self.assertIn("NUL", records[1]["reason"])
        self.assertIn("20000 characters", records[2]["reason"])

    def test_more_bad_lines_than_max_errors_fail_with_a_message_and_no_output(self):
        source = self.write("bad.txt", None, b"\xff\n\xfe\n" + self.sentences[0].encode() + b"\n")
        output = self.directory / "out.txt"
        done = self.pipeline("--ctranslate2", str(self.roads.ctranslate2), source, output, "--max-errors", "1",
                             code=2)
        self.assertIn("2 lines could not be used, more than --max-errors 1", done.stderr.decode())
        self.assertFalse(output.exists())
        self.assertEqual(len(_lines(str(output) + ".errors.jsonl")), 2)
        self.pipeline("--ctranslate2", str(self.roads.ctranslate2), source, output, "--max-errors", "2",
                      "--overwrite")
        self.assertEqual(len(_lines(output)), 3)


class RefusalTest(PipelineCase):
    """What a pipeline would fail on late is refused before it starts, in one line."""

    def refused(self, *args):
        done = self.cli("translate", *args, code=2)
        message = done.stderr.decode()
        self.assertEqual(len(message.strip().splitlines()), 1, message)
        return message

    def test_a_missing_artifact(self):
        message = self.refused("--ctranslate2", str(self.directory / "nowhere"), "--input", str(self.source),
                               "--output", str(self.directory / "out.txt"), "--runner", "direct")
        self.assertIn("nowhere does not exist", message)

    def test_a_glob_matching_nothing(self):
        message = self.refused("--ctranslate2", str(self.roads.ctranslate2), "--input",
                               str(self.directory / "*.none"), "--output", str(self.directory / "out.txt"),
                               "--runner", "direct")
        self.assertIn("matches no file", message)

    def test_an_existing_output_without_overwrite(self):
        output = self.write("out.txt", ["kept"])
        message = self.refused("--ctranslate2", str(self.roads.ctranslate2), "--input", str(self.source),
                               "--output", str(output), "--runner", "direct")
        self.assertIn("--overwrite", message)
        self.assertEqual(_lines(output), ["kept"])

    def test_a_flag_no_command_knows_is_refused_without_runner(self):
        done = self.cli("translate", "--ctranslate2", str(self.roads.ctranslate2), "--input", str(self.source),
                        "--temp_location=/tmp", code=2)
        self.assertIn("unrecognized arguments: --temp_location=/tmp", done.stderr.decode())


class FirstTryFails(ArtifactHandler):
    """An `ArtifactHandler` whose `run_inference` raises the first time it sees a batch holding an even-length line
    not seen before (a mark file per line in `marks`, so that every worker process agrees): each such line's first
    try fails, its next one does not."""

    def __init__(self, marks, **arguments):
        super().__init__(**arguments)
        self.marks = marks

    def run_inference(self, batch, model, inference_args=None):
        marks = [os.path.join(self.marks, hashlib.sha256(line.encode("utf-8")).hexdigest())
                 for line in batch if len(line) % 2 == 0]
        unseen = [mark for mark in marks if not os.path.exists(mark)]
        for mark in unseen:
            open(mark, "w").close()
        if unseen:
            raise RuntimeError(f"injected failure on a batch of {len(batch)} lines")
        return super().run_inference(batch, model, inference_args)


class FlakyHandlerTest(PipelineCase):
    """Batches that fail their first try (as a worker lost mid-bundle would) are tried again: each line once."""

    def run_flaky(self, *flags):
        marks, output = self.directory / "marks", self.directory / "out.txt"
        marks.mkdir()
        arguments = dict(path=str(self.roads.ctranslate2), max_batch_size=4)
        handler = FirstTryFails(str(marks), **arguments)
        retry = FirstTryFails(str(marks), **dict(arguments, max_batch_size=1))
        plan = pipeline_paths.plan_files(str(self.source), str(output))
        with beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner", *flags])) as pipeline:
            line_pipeline.build_line_pipeline(pipeline, plan, handler, retry)
        self.assertGreater(len(os.listdir(marks)), 0)  # some batches did fail once
        self.assertEqual(_lines(output), self.single("--ctranslate2", str(self.roads.ctranslate2), self.source))
        self.assertEqual((self.directory / "out.txt.errors.jsonl").read_text(), "")

    def test_each_line_is_written_once_when_first_tries_fail(self):
        self.run_flaky()

    @long_check
    def test_each_line_is_written_once_when_first_tries_fail_in_two_worker_processes(self):
        self.run_flaky("--direct_num_workers=2", "--direct_running_mode=multi_processing")


class KillsItsWorker(ArtifactHandler):
    """An `ArtifactHandler` that kills the worker process it runs in (SIGKILL, as the kernel's out-of-memory killer
    does) when a batch holds `line`, `times` times in all: the process that creates the next mark file
    `mark`.0, `mark`.1, ... (O_EXCL) writes its id there and dies; never the process `spared` (the test's own)."""

    def __init__(self, mark, line, spared, times=1, **arguments):
        super().__init__(**arguments)
        self.mark, self.line, self.spared, self.times = mark, line, spared, times

    def run_inference(self, batch, model, inference_args=None):
        batch = list(batch)
        if self.line in batch and os.getpid() != self.spared:
            for number in range(self.times):
                try:
                    handle = os.open(f"{self.mark}.{number}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    continue
                os.write(handle, str(os.getpid()).encode())
                os.close(handle)
                os.kill(os.getpid(), signal.SIGKILL)
        return super().run_inference(batch, model, inference_args)


@long_check
class KilledWorkerTest(PipelineCase):
    """A worker process of the local runner killed mid-pipeline. Beam's local runner does not give the lost bundle
    to another worker, so the command runs the pipeline again from the start: the output is that of a run without
    faults, each line once, in order. A worker lost again fails the command with a one-line message saying so and
    what to do, and no file of the run is left."""

    arguments = property(lambda self: dict(path=str(self.roads.ctranslate2), max_batch_size=4))

    def setUp(self):
        super().setUp()
        self.run_command(ArtifactHandler(**self.arguments), self.directory / "fault-free.txt")
        self.fault_free = _lines(self.directory / "fault-free.txt")
        self.work = self.directory / "killed"
        self.work.mkdir()
        shutil.copy(self.source, self.work / "sentences.txt")
        self.source = self.work / "sentences.txt"

    def run_command(self, handler, output, workers=2):
        args = argparse.Namespace(input=str(self.source), output=str(output), overwrite=False, runner="direct",
                                  workers=workers, max_errors=None)
        return commands.run_lines(args, handler.path, handler, "sentence")

    def killed(self, times):
        """The ids of the worker processes killed, each checked to be gone and none of them this process."""
        ids = [int((self.work / f"mark.{number}").read_text()) for number in range(times)]
        for killed in ids:
            self.assertNotEqual(killed, os.getpid())
            with self.assertRaises(ProcessLookupError):
                os.kill(killed, 0)
        return ids

    def test_a_killed_worker_costs_a_rerun_and_the_output_is_the_fault_free_one(self):
        self.assertEqual(self.fault_free, self.single("--ctranslate2", str(self.roads.ctranslate2), self.source))
        output = self.work / "out.txt"
        handler = KillsItsWorker(str(self.work / "mark"), self.sentences[5], os.getpid(), **self.arguments)
        with self.assertLogs("t2t_keras.beam.commands", "WARNING") as logs:
            self.run_command(handler, output)
        self.killed(1)
        self.assertIn("running the pipeline again from the start", "\n".join(logs.output))
        self.assertEqual(_lines(output), self.fault_free)
        self.assertEqual((self.work / "out.txt.errors.jsonl").read_text(), "")

    def test_a_worker_lost_again_fails_the_command_in_one_line_and_leaves_no_file(self):
        from t2t_keras.errors import T2TError

        handler = KillsItsWorker(str(self.work / "mark"), self.sentences[5], os.getpid(), times=2, **self.arguments)
        with self.assertRaises(T2TError) as raised:
            self.run_command(handler, self.work / "out.txt")
        self.killed(2)
        message = str(raised.exception)
        self.assertIn("A worker process of the pipeline stopped mid-run", message)
        self.assertIn("Run the same command again", message)
        self.assertEqual(sorted(os.listdir(self.work)), ["mark.0", "mark.1", "sentences.txt"])
        self.run_command(handler, self.work / "out.txt")  # the same command: the marks spare the workers now
        self.assertEqual(_lines(self.work / "out.txt"), self.fault_free)


class FailedRunTest(PipelineCase):
    """What a failed run wrote is removed, so that the same command runs again; --overwrite keeps whole outputs."""

    def written(self, plan):
        for path in (*plan.outputs, plan.errors):
            pathlib.Path(path).write_text("whole\n")
            pathlib.Path(path).with_name(f".{pathlib.Path(path).name}.123.456.part").write_text("half")

    def test_one_output(self):
        plan = pipeline_paths.plan_files(str(self.source), str(self.directory / "out.txt"))
        self.written(plan)
        pipeline_paths.remove_written(plan, overwrite=False)
        self.assertEqual(os.listdir(self.directory), ["sentences.txt"])

    def test_a_directory_of_outputs_with_and_without_overwrite(self):
        self.write("two.txt", self.sentences[:2])
        out = self.directory / "out"
        for overwrite in (True, False):
            plan = pipeline_paths.plan_files(str(self.directory / "*.txt"), str(out), overwrite=overwrite)
            pipeline_paths.clear_previous(plan)
            self.written(plan)
            pipeline_paths.remove_written(plan, overwrite=overwrite)
            if overwrite:
                self.assertEqual(sorted(os.listdir(out)), ["sentences.txt", "two.txt"])
                self.assertEqual(_lines(out / "two.txt"), ["whole"])
                shutil.rmtree(out)
        self.assertEqual(sorted(os.listdir(self.directory)), ["sentences.txt", "two.txt"])


class ScorePipelineTest(PipelineCase):

    def test_score_writes_the_scores_the_single_process_prints_and_dead_letters_a_missing_side(self):
        pairs = self.directory / "pairs.tsv"
        translations = self.single("--ctranslate2", str(self.roads.ctranslate2), self.source)
        good = [f"{s}\t{t}" for s, t in zip(self.sentences[:4], translations[:4]) if t.strip()]
        pairs.write_text("\n".join(good[:2] + [f"{self.sentences[5]}\t"] + good[2:]) + "\n", encoding="utf-8")
        output = self.directory / "scores.txt"
        self.cli("score", "--ctranslate2", self.roads.ctranslate2, "--input", pairs, "--output", output,
                 "--runner", "direct")
        single = self.cli("score", "--ctranslate2", self.roads.ctranslate2,
                          "--input", self.write("good.tsv", good)).stdout.decode().splitlines()
        self.assertEqual(_lines(output), single[:2] + [""] + single[2:])
        records = [json.loads(line) for line in _lines(str(output) + ".errors.jsonl")]
        self.assertEqual([record["line"] for record in records], [3])
        self.assertIn("target missing", records[0]["reason"])


class PreparePipelineTest(unittest.TestCase):
    """prepare --runner keeps the set of tokenized pairs prepare keeps, with a manifest the training road takes."""

    @classmethod
    def setUpClass(cls):
        cls.directory = pathlib.Path(tempfile.mkdtemp(prefix="t2t-beam-prepare-"))
        files = write_toy_corpus(cls.directory / "corpus", train=240)["train"]
        with open(files[0], "a", encoding="utf-8") as source, open(files[1], "a", encoding="utf-8") as target:
            pairs = list(zip(_lines(files[0])[:4], _lines(files[1])[:4]))
            for one, other in pairs + [("", "nur Ziel"), ("the cat " * 40, "die Katze")]:
                source.write(one + "\n")
                target.write(other + "\n")  # four duplicates, an empty side, an over-long source
        cls.settings = ["--config", "tiny", "--set", "data.source=text", "--set", f"data.train_files={files!r}",
                        "--set", "data.vocab_size=100", "--set", "data.max_length=24", "--set",
                        "data.pairs_per_shard=80", "--set", "data.dev_files=null"]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.directory, ignore_errors=True)

    def prepared(self, name, *args):
        done = cli_in_process("prepare", "--run-dir", self.directory / name, *self.settings, *args)
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        from t2t_keras.data.manifest import read_manifest
        from t2t_keras.data.shards import open_shard, shard_pairs

        directory = self.directory / name / "prepared"
        manifest = read_manifest(directory)
        pairs = [(tuple(source.tolist()), tuple(target.tolist())) for shard in manifest["shards"]
                 for source, target in shard_pairs(open_shard(directory, shard["name"]))]
        return manifest, pairs

    def test_the_same_pairs_and_a_manifest_the_training_road_takes(self):
        from t2t_keras.runs import RunDirectory
        from t2t_keras.tasks.data_route import prepare_run_corpus

        single, single_pairs = self.prepared("single")
        piped, piped_pairs = self.prepared("piped", "--runner", "direct")
        self.assertEqual(set(piped_pairs), set(single_pairs))
        self.assertEqual(len(piped_pairs), len(set(piped_pairs)))  # de-duplicated
        self.assertEqual(piped["pairs"]["duplicate"], len(single_pairs) - len(piped_pairs))
        self.assertGreaterEqual(piped["pairs"]["duplicate"], 4)  # at least the four repeated pairs
        self.assertEqual((piped["pairs"]["empty"], piped["pairs"]["overlong"]),
                         (single["pairs"]["empty"], single["pairs"]["overlong"]))
        self.assertEqual(piped["order"], "hashed")
        self.assertEqual(piped["tokenizer"]["sha256"], single["tokenizer"]["sha256"])
        self.assertGreater(len(piped["shards"]), 1)
        run = RunDirectory(self.directory / "piped")
        accepted = prepare_run_corpus(run, run.load_config())  # what train calls first: checks, no rewrite
        self.assertEqual(accepted["shards"], piped["shards"])

    def test_a_length_ratio_filter_keeps_fewer_of_the_same_pairs(self):
        _, all_pairs = self.prepared("unfiltered", "--runner", "direct")
        filtered, pairs = self.prepared("ratio", "--runner", "direct", "--max-length-ratio", "1.1")
        self.assertGreater(filtered["pairs"]["ratio"], 0)
        self.assertLess(len(pairs), len(all_pairs))
        self.assertLessEqual(set(pairs), set(all_pairs))


@long_check
class DistillTeacherPassTest(PipelineCase):
    """distill --runner: the teacher's pass through the pipeline writes the translations the in-process pass writes."""

    def test_the_same_distilled_corpus(self):
        from t2t_keras.beam.teacher_pass import runner_choice
        from t2t_keras.config import load_config
        from t2t_keras.distillation.distill import prepare_student

        student = ["model.hidden_dim=16", "model.num_heads=4", "model.intermediate_dim=32", "data.vocab_size=100",
                   "model.num_layers=2", "model.num_decoder_layers=1", "data.max_length=24"]
        corpora = []
        for name, runner in (("in-process", None), ("pipeline", runner_choice("direct", 2))):
            done = prepare_student(self.roads.run_dir, self.directory / name, load_config("tiny", student),
                                   overrides=tuple(student), beam_size=2, shard_sentences=400, jit_compile=False,
                                   runner=runner)
            corpora.append([_lines(path) for path in done.corpus.train_files])
        self.assertEqual(len(corpora[1][1]), len(corpora[1][0]))
        self.assertEqual(corpora[1], corpora[0])


@long_check
class WorkerProcessesTest(PipelineCase):
    """The local runner with 1 and 2 worker processes writes the single process's lines, for a run directory and
    a CTranslate2 export; in the command's own process, for a SavedModel and a LiteRT file."""

    def check(self, flag, path, workers):
        output = self.directory / f"out-{workers}.txt"
        self.pipeline(flag, path, self.source, output, "--workers", str(workers), "--direct_running_mode",
                      "multi_processing")
        self.assertEqual(_lines(output), self.single(flag, path, self.source), f"{flag} at {workers} workers")

    def test_a_run_directory(self):
        for workers in (1, 2):
            self.check("--run-dir", str(self.roads.run_dir), workers)

    def test_a_ctranslate2_export(self):
        for workers in (1, 2):
            self.check("--ctranslate2", str(self.roads.ctranslate2), workers)

    def test_a_saved_model_and_a_litert_file_in_the_commands_process(self):
        for flag, path in (("--saved-model", self.roads.saved_model), ("--litert", self.roads.litert)):
            output = self.directory / f"out{flag}.txt"
            self.pipeline(flag, str(path), self.source, output)
            self.assertEqual(_lines(output), self.single(flag, str(path), self.source), flag)


class SharedCoresTest(PipelineCase):
    """The local runner's worker processes share the machine's cores: each opens its model on its share, and a
    CTranslate2 export runs one search a core, so that a call's lines keep every search busy."""

    def test_each_worker_decodes_on_its_share_of_the_cores(self):
        from t2t_keras.beam.runner_options import worker_threads
        from t2t_keras.switches.decisions import Decisions

        cores = Decisions.before_tensorflow().cores
        self.assertIsNone(worker_threads("direct", 1))  # the command's own process: every core
        self.assertIsNone(worker_threads("dataflow", 8))  # a cluster's worker has its machine
        self.assertEqual(worker_threads("direct", 2), max(1, cores // 2))
        handler = ArtifactHandler(str(self.roads.ctranslate2), threads=1)
        opened = handler.load_model().artifact
        self.assertEqual((opened.translator.num_translators, opened._options["intra_threads"]), (1, 1))

    def test_a_ctranslate2_call_is_split_among_its_searches(self):
        from t2t_keras.artifacts.ctranslate2 import CTranslate2Artifact

        artifact = CTranslate2Artifact(self.roads.ctranslate2, batch_size=32, threads=2)
        self.assertEqual((artifact.translator.num_translators, artifact._options["intra_threads"]), (2, 1))
        self.assertEqual([artifact._call_batch(lines) for lines in (1, 8, 63, 64, 1000)], [1, 4, 32, 32, 32])
        request = artifact.request()
        alone = [artifact.generate([line], request).best[0] for line in self.sentences]
        self.assertEqual(list(artifact.generate(self.sentences, request).best), alone)


if __name__ == "__main__":
    unittest.main()
