"""A run directory copied or moved elsewhere goes on where it stopped (`config_paths`).

A run names the files inside it relative to itself (a student's RUN/distilled/) and every other file absolute, so
a copy finds its own files wherever it lies, and no path depends on the directory a command started in. A corpus
outside the run that moved is named again with `--set data.*_files`: a run that has trained accepts the new place,
and resuming checks that the files hold the same corpus. A distillation knows its teacher by checksums, so a moved
teacher resumes it, and a preparation knows its corpus and tokenizer by checksums too.

The runs are `mini`, shrunk, trained 4 updates on a toy corpus beside them; each test works on its own copy, with
the originals renamed away so that nothing can read them.
"""

import contextlib
import json
import os
import pathlib
import shutil
import tempfile

import yaml

from t2t_keras import config_paths
from t2t_keras.config import load_config
from t2t_keras.errors import ConfigError
from t2t_keras.resolved_run import resolve_run
from t2t_keras.runs import RunDirectory
from tests.helpers import TestCase, cli_in_process, long_check, write_toy_corpus

SMALL = ("model.hidden_dim=32", "model.num_layers=1", "model.num_heads=2", "model.intermediate_dim=64",
         "model.max_length=64", "data.max_length=32", "data.vocab_size=100", "model.vocab_size=100",
         "data.batch_tokens=256", "data.shuffle_buffer=50", "training.train_steps=4", "training.steps_per_epoch=2",
         "training.checkpoint_every_steps=2", "training.warmup_steps=2", "training.mixed_precision=float32",
         "training.jit_compile=False", "training.fuse_elementwise=False", "decoding.beam_size=1",
         "decoding.max_extra_length=3")
SPLITS = ("train", "dev", "test")


def settings(*values):
    return [arg for value in values for arg in ("--set", value)]


def corpus(data_dir):
    """The --set settings naming the toy corpus in `data_dir`."""
    return settings(*(f"data.{split}_files=[{str(data_dir / (split + '.en'))!r}, {str(data_dir / (split + '.de'))!r}]"
                      for split in SPLITS))


@contextlib.contextmanager
def working_directory(path):
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


@long_check
class MovedRunTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.old = pathlib.Path(cls.tmp.name) / "old"
        write_toy_corpus(cls.old / "data", train=200, dev=12, test=12)
        small = settings("data.source=text", *SMALL)
        cls.distill_args = ["--config", "mini", *settings(*SMALL), "--beam", "1"]
        cls.made = [
            cli_in_process("train", "--config", "mini", "--run-dir", cls.old / "teacher", *small,
                           *corpus(cls.old / "data")),
            cli_in_process("distill", "--teacher", cls.old / "teacher", "--run-dir", cls.old / "student",
                           *cls.distill_args),
            cli_in_process("prepare", "--config", "mini", "--run-dir", cls.old / "prepared", *small,
                           *corpus(cls.old / "data")),
            cli_in_process("train", "--run-dir", cls.old / "prepared"),
        ]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        for made in self.made:
            self.assertEqual(made.returncode, 0, made.stderr.decode()[-3000:])
        self.new = pathlib.Path(self.tmp.name) / f"new-{self._testMethodName}"
        shutil.copytree(self.old, self.new)
        self.gone = self.old.with_name("gone")
        self.old.rename(self.gone)  # nothing may read the old place
        self.addCleanup(self.gone.rename, self.old)

    def assertRan(self, result, *expected):
        self.assertEqual(result.returncode, 0, result.stderr.decode()[-3000:])
        for text in expected:
            self.assertIn(text, result.stdout.decode() + result.stderr.decode())

    def test_a_run_names_its_own_files_relative_to_itself_and_the_others_absolute(self):
        student = yaml.safe_load((self.new / "student" / "config.yaml").read_text(encoding="utf-8"))["data"]
        self.assertEqual(student["train_files"], ["distilled/train.src", "distilled/train.tgt"])
        self.assertEqual(student["dev_files"], ["distilled/dev.src", "distilled/dev.tgt"])
        teacher = yaml.safe_load((self.new / "teacher" / "config.yaml").read_text(encoding="utf-8"))["data"]
        self.assertEqual(teacher["train_files"], [str(self.old / "data" / name) for name in ("train.en", "train.de")])

    def test_a_copied_student_trains_on_and_evaluates_from_its_new_place(self):
        config = RunDirectory(self.new / "student").load_config()
        self.assertEqual(config.data.train_files, [str(self.new / "student" / "distilled" / f"train{side}")
                                                   for side in (".src", ".tgt")])
        self.assertRan(cli_in_process("train", "--run-dir", self.new / "student", *settings("training.train_steps=6")),
                       "from step 4 to 6")
        self.assertRan(cli_in_process("evaluate", "--run-dir", self.new / "student", "--split", "dev"), "BLEU")

    def test_a_teacher_whose_corpus_moved_goes_on_from_its_new_place_and_its_student_resumes_distilling(self):
        teacher, student = self.new / "teacher", self.new / "student"
        lost = cli_in_process("train", "--run-dir", teacher)
        self.assertEqual(lost.returncode, 2)
        self.assertIn("does not exist: check the data path. A run whose corpus moved goes on from its new place: "
                      "--set data.train_files=", lost.stderr.decode())
        with self.assertLogs("t2t_keras.resolved_run", "WARNING") as logs:
            moved = cli_in_process("train", "--run-dir", teacher, *corpus(self.new / "data"))
        self.assertRan(moved, "from step 4 to 4")
        self.assertIn(f"reads its corpus from a new place ({self.old / 'data' / 'train.en'} -> "
                      f"{self.new / 'data' / 'train.en'}", "\n".join(logs.output))
        saved = yaml.safe_load((teacher / "config.yaml").read_text(encoding="utf-8"))["data"]
        self.assertEqual(saved["test_files"], [str(self.new / "data" / "test.en"), str(self.new / "data" / "test.de")])
        self.assertRan(cli_in_process("distill", "--teacher", teacher, "--run-dir", student, *self.distill_args),
                       "(0 translated now, 1 shards done before)")
        record = json.loads((student / "distilled" / "distill.json").read_text(encoding="utf-8"))
        self.assertEqual(record["settings"]["teacher"], str(teacher.resolve()))

    def test_a_corpus_that_changed_as_it_moved_is_refused_on_resume_and_the_run_is_left_as_it_was(self):
        teacher = self.new / "teacher"
        files = {path: path.read_bytes() for path in teacher.iterdir() if path.suffix in (".json", ".yaml")}
        with open(self.new / "data" / "train.de", "a", encoding="utf-8") as handle:
            handle.write("ein neuer Satz\n")
        with open(self.new / "data" / "train.en", "a", encoding="utf-8") as handle:
            handle.write("a new sentence\n")
        refused = cli_in_process("train", "--run-dir", teacher, *corpus(self.new / "data"),
                                 *settings("training.train_steps=6", "training.mixed_precision=mixed_bfloat16"))
        self.assertEqual(refused.returncode, 2)
        self.assertIn("trained 4 steps on another training stream (corpus=", refused.stderr.decode())
        self.assertEqual(RunDirectory(teacher).checkpoint_paths()[-1].rsplit("-", 1)[1], "4")
        self.assertIn(teacher / "config.yaml", files)  # still naming the corpus's old place
        self.assertEqual({path: path.read_bytes() for path in files}, files)

    def test_a_new_place_without_the_files_is_refused_and_not_written_to_the_run(self):
        teacher = self.new / "teacher"
        saved = (teacher / "config.yaml").read_bytes()
        refused = cli_in_process("train", "--run-dir", teacher, *corpus(self.new / "nowhere"))
        self.assertEqual(refused.returncode, 2)
        self.assertIn("does not exist", refused.stderr.decode())
        self.assertEqual((teacher / "config.yaml").read_bytes(), saved)

    def test_another_corpus_is_still_refused_as_another_data_config(self):
        other = self.new / "other"
        write_toy_corpus(other, train=20, dev=4, test=4)
        fewer = settings(*(f"data.{split}_files=[{str(other / (split + '.en'))!r}]" for split in SPLITS))
        refused = cli_in_process("train", "--run-dir", self.new / "teacher", *fewer)
        self.assertEqual(refused.returncode, 2)
        self.assertIn("was created with a different data config", refused.stderr.decode())

    def test_a_prepared_run_moved_with_its_corpus_resumes_on_its_shards(self):
        prepared = self.new / "prepared"
        with self.assertLogs("t2t_keras", "INFO") as logs:
            self.assertRan(cli_in_process("train", "--run-dir", prepared, *corpus(self.new / "data"),
                                          *settings("training.train_steps=6")), "from step 4 to 6")
        self.assertIn("Training batches: prepared shards", "\n".join(logs.output))
        self.assertIn("was prepared from the same files at", "\n".join(logs.output))
        manifest = json.loads((prepared / "prepared" / "manifest.json").read_text(encoding="utf-8"))
        self.assertEqual([entry["path"] for entry in manifest["corpus"]],
                         [str((self.new / "data" / name).resolve()) for name in ("train.en", "train.de")])

    def test_preparing_a_corpus_that_changed_as_it_moved_is_refused_and_the_run_is_left_as_it_was(self):
        prepared = self.new / "prepared"
        files = [prepared / "config.yaml", prepared / "prepared" / "manifest.json"]
        before = [path.read_bytes() for path in files]
        with open(self.new / "data" / "train.en", "a", encoding="utf-8") as handle:
            handle.write("a new sentence\n")
        with open(self.new / "data" / "train.de", "a", encoding="utf-8") as handle:
            handle.write("ein neuer Satz\n")
        refused = cli_in_process("prepare", "--config", prepared / "config.yaml", "--run-dir", prepared,
                                 *corpus(self.new / "data"))
        self.assertEqual(refused.returncode, 2)
        self.assertIn("restore what changed", refused.stderr.decode())
        self.assertEqual([path.read_bytes() for path in files], before)

    def test_a_run_s_config_yaml_given_as_a_config_file_finds_the_run_s_files(self):
        with working_directory(self.new / "data"):
            config = load_config(str(self.new / "student" / "config.yaml"))
        self.assertEqual(config.data.dev_files, [str(self.new / "student" / "distilled" / f"dev{side}")
                                                 for side in (".src", ".tgt")])


class ConfigPathsTest(TestCase):
    def test_inside_the_run_relative_outside_absolute_and_back(self):
        with tempfile.TemporaryDirectory() as tmp, working_directory(tmp):
            run = pathlib.Path(tmp) / "runs" / "student"
            data = {"train_files": [str(run / "distilled" / "train.src"), "corpus/train.de"], "dev_files": None,
                    "sources": [{"source": "text", "train_files": ["runs/student/distilled/a.src"], "weight": 1.0}]}
            saved = config_paths.for_run(data, run)
            self.assertEqual(saved["train_files"], ["distilled/train.src", os.path.join(tmp, "corpus", "train.de")])
            self.assertEqual(saved["sources"][0]["train_files"], ["distilled/a.src"])
            self.assertIsNone(saved["dev_files"])
            elsewhere = pathlib.Path(tmp) / "moved"
            read = config_paths.in_run(saved, elsewhere)
            self.assertEqual(read["train_files"], [str(elsewhere / "distilled" / "train.src"),
                                                   os.path.join(tmp, "corpus", "train.de")])
            self.assertEqual(read["sources"][0]["train_files"], [str(elsewhere / "distilled" / "a.src")])

    def test_a_path_an_older_run_holds_relative_to_where_it_was_trained_is_still_read_from_there(self):
        with tempfile.TemporaryDirectory() as tmp, working_directory(tmp):
            pathlib.Path("corpus").mkdir()
            pathlib.Path("corpus/train.en").write_text("a\n", encoding="utf-8")
            read = config_paths.in_run({"train_files": ["corpus/train.en"]}, pathlib.Path(tmp) / "run")
            self.assertEqual(read["train_files"], [os.path.join(tmp, "corpus", "train.en")])

    def test_a_config_file_s_relative_paths_are_read_from_its_folder_where_they_are_there(self):
        with tempfile.TemporaryDirectory() as tmp, working_directory(tmp):
            folder = pathlib.Path(tmp) / "configs"
            (folder / "corpus").mkdir(parents=True)
            (folder / "corpus" / "train.en").write_text("a\n", encoding="utf-8")
            read = config_paths.in_folder({"train_files": ["corpus/train.en", "elsewhere/train.de"]}, folder)
            self.assertEqual(read["train_files"], [str(folder / "corpus" / "train.en"), "elsewhere/train.de"])

    def test_moved_lists_the_paths_that_changed_and_nothing_when_anything_else_did(self):
        old = {"source": "text", "train_files": ["/a/x.en", "/a/x.de"], "dev_files": ["/a/d.en", "/a/d.de"]}
        new = {**old, "train_files": ["/b/x.en", "/b/x.de"]}
        self.assertEqual(config_paths.moved(old, new), [("/a/x.en", "/b/x.en"), ("/a/x.de", "/b/x.de")])
        self.assertEqual(config_paths.moved(old, old), [])
        self.assertIsNone(config_paths.moved(old, {**new, "source": "tsv"}))
        self.assertIsNone(config_paths.moved(old, {**old, "train_files": ["/b/x.tsv"]}))


class StreamedRunTest(TestCase):
    def test_only_a_run_whose_resume_checks_its_corpus_takes_the_corpus_at_a_new_place(self):
        def config(folder):
            return load_config("tiny", ["data.source=text", f"data.train_files=[{folder}/a.en, {folder}/a.de]"])

        with tempfile.TemporaryDirectory() as tmp:
            run = RunDirectory(pathlib.Path(tmp) / "run")
            run.path.mkdir()
            run.save_config(config("/old"))
            run.write_json(run.input_stream_path, {"pipeline": "memory"})  # streamed batches: no corpus digest
            with self.assertRaisesRegex(ConfigError, "this one has not, so put the files back where its config.yaml"):
                resolve_run(run, config("/new"))
            run.write_json(run.input_stream_path, {"pipeline": "memory", "corpus": "0123"})  # planned batches
            with self.assertLogs("t2t_keras.resolved_run", "WARNING"):
                self.assertEqual(resolve_run(run, config("/new")).config.data.train_files, ["/new/a.en", "/new/a.de"])
            self.assertEqual(run.load_config().data.train_files, ["/old/a.en", "/old/a.de"])  # until training saves
