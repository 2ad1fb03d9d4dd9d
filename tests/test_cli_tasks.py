"""Every command of the CLI on every task: it runs, or the library refuses it with one clear message.

Which tasks a command takes is the library's to say (`errors.check_task` where a command needs one task, an
artifact's `operations` where it needs what an artifact does); the walk holds the expected table against the
parser's own commands, so a new command fails here until the table says which tasks it takes. The runs are
`mini`, `lm-mini` and `mlm-mini`, shrunk, trained with an attention-summary step at every update: `lm-mini` and
`mlm-mini` inherit the attention summary from `mini`, and single-stack models must train past it (they have no
cross attention to draw, so it is not attached to them).
"""

import pathlib
import tempfile
from unittest import mock

from t2t_keras import cli_arguments
from t2t_keras.errors import T2TError, check_task
from tests.helpers import TestCase, cli_in_process, long_check, write_toy_corpus

TASKS = ("translation", "lm", "mlm")
PRESET = {"translation": "mini", "lm": "lm-mini", "mlm": "mlm-mini"}
# Commands in an order where each finds what it needs (serve needs export's output).
ORDER = ("describe", "prepare", "train", "average", "evaluate", "translate", "score", "qe-train", "baseline",
         "shortlist", "export", "serve", "inspect", "distill", "main")
# The tasks each command takes (what the library refuses is the rest).
TAKES = {
    "describe": TASKS, "prepare": ("translation",), "train": TASKS, "average": TASKS, "evaluate": TASKS,
    "translate": ("translation", "lm"), "score": ("translation",), "qe-train": ("translation",),
    "baseline": ("translation",),
    "shortlist": ("translation",), "export": ("translation", "lm"), "serve": ("translation", "lm"),
    "inspect": ("translation",), "distill": ("translation",), "main": ("translation",),
}
# How a refusal reads: the command's own, or what an artifact does not do (`artifacts.base.Artifact.require`).
OUTSIDE = ("import",)  # makes a run of another toolkit's checkpoint, of no task here (tests/test_pretrained_import.py)
REFUSAL = r"does not apply to .*a {task} model: it takes |an? {task} run does not (generate|score)|is a run directory"
SMALL = ("model.hidden_dim=32", "model.num_layers=1", "model.num_heads=2", "model.intermediate_dim=64",
         "model.max_length=64", "data.max_length=32", "data.vocab_size=100", "model.vocab_size=100",
         "data.batch_tokens=256", "data.shuffle_buffer=50", "training.train_steps=4", "training.steps_per_epoch=2",
         "training.checkpoint_every_steps=2", "training.warmup_steps=2", "training.average_last=2",
         "training.attention_every_steps=1", "training.attention_probes=1", "training.attention_max_extra_length=3",
         "training.mixed_precision=float32", "training.jit_compile=False", "training.fuse_elementwise=False",
         "decoding.beam_size=2", "decoding.max_beam_size=2",  # an export traces one search per beam size
         "decoding.max_extra_length=3")


class CommandTableTest(TestCase):
    def test_the_table_names_every_command_of_the_parser(self):
        commands = cli_arguments.build_parser()._subparsers._group_actions[0].choices
        self.assertEqual(set(commands), set(TAKES) | set(OUTSIDE))
        self.assertEqual(set(ORDER), set(TAKES))

    def test_the_refusal_names_the_command_the_model_and_what_it_takes(self):
        with self.assertRaisesRegex(T2TError, "t2t-keras baseline does not apply to runs/x, a lm model: it takes "
                                              "translation models"):
            check_task("baseline", "lm", "runs/x")
        check_task("export", "lm", "runs/x", takes=("translation", "lm"))


@long_check
class EveryCommandOnEveryTaskTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)
        cls.files = write_toy_corpus(cls.root / "data", train=200, dev=12, test=12)
        corpus = ("data.source=text", f"data.train_files={cls.files['train']!r}",
                  f"data.dev_files={cls.files['dev']!r}", f"data.test_files={cls.files['test']!r}")
        cls.settings = [arg for setting in corpus + SMALL for arg in ("--set", setting)]
        cls.runs = {task: cls.root / f"run-{task}" for task in TASKS}
        cls.trained = {task: cls.cli("train", "--config", PRESET[task], "--run-dir", cls.runs[task], *cls.settings)
                       for task in TASKS}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @staticmethod
    def cli(*argv):
        # `serve` opens and checks the export once it listens, then would block: here it only opens it.
        with mock.patch("t2t_keras.serving.server.serve", side_effect=lambda opened, **options: opened()) as serve:
            result = cli_in_process(*argv)
        result.served = serve.called
        return result

    def arguments(self, command, task):
        run, dev_source, dev_target = str(self.runs[task]), *self.files["dev"]
        export = self.root / f"export-{task}"
        return {
            "describe": ["--config", PRESET[task]],
            # A run of its own: the trained runs read their batches from memory (see the refusal below).
            "prepare": ["--config", PRESET[task], "--run-dir", self.root / f"prepared-{task}", *self.settings],
            "train": ["--run-dir", run],  # without --config: the run's own config; resumes, already done
            "average": ["--run-dir", run, "--last", "2"],
            "evaluate": ["--run-dir", run, "--split", "dev"],
            "translate": ["--run-dir", run, "--input", dev_source],
            "score": ["--run-dir", run, "--source", dev_source, "--target", dev_target],
            "qe-train": ["--run-dir", run, "--split", "dev"],
            "baseline": ["--run-dir", run, "--split", "dev"],
            "shortlist": ["--run-dir", run],
            "export": ["--run-dir", run, "--out", export],
            "serve": ["--saved-model", export if export.exists() else run],  # no mlm export can exist
            "inspect": ["--run-dir", run, "--text", "the cat sees a dog", "--out", self.root / f"inspect-{task}"],
            # The student: the teacher's size and vocabulary, trained on the teacher's greedy translations.
            "distill": ["--teacher", run, "--run-dir", self.root / f"student-{task}", "--config", PRESET["translation"],
                        *[arg for setting in SMALL for arg in ("--set", setting)], "--beam", "1"],
            "main": ["--config", PRESET[task], "--run-dir", run, *self.settings, "--minutes", "0"],
        }[command]

    def test_lm_and_mlm_train_past_their_attention_summary_steps(self):
        for task in TASKS:
            self.assertEqual(self.trained[task].returncode, 0, self.trained[task].stderr.decode()[-3000:])
            self.assertIn("from step 0 to 4", self.trained[task].stdout.decode())
        self.assertTrue((self.runs["translation"] / "logs" / "attention").exists())
        self.assertFalse((self.runs["lm"] / "logs" / "attention").exists())
        self.assertFalse((self.runs["mlm"] / "logs" / "attention").exists())

    def test_prepare_refuses_a_run_that_trained_in_memory(self):
        result = self.cli("prepare", "--config", PRESET["translation"], "--run-dir", self.runs["translation"],
                          *self.settings, "--set", "data.pipeline=prepared")
        self.assertEqual(result.returncode, 2, result.stderr.decode()[-3000:])
        self.assertIn("has trained on in-memory batches", result.stderr.decode())
        self.assertIn("Prepare into a new --run-dir", result.stderr.decode())
        self.assertFalse((self.runs["translation"] / "prepared").exists())

    def test_translation_only_flags_are_refused_on_lm_and_mlm_runs(self):
        terms = self.root / "terms.tsv"
        terms.write_text("cat\tKatze\n", encoding="utf-8")
        flags = {"--terminology": ("translate", "--terminology", terms), "--alignments": ("translate", "--alignments"),
                 "--markup": ("translate", "--markup"), "--constraints": ("export", "--constraints"),
                 "--jit-compile": ("export", "--jit-compile", "auto")}
        for task in ("lm", "mlm"):
            for flag, (command, *extra) in flags.items():
                with self.subTest(task=task, flag=flag):
                    out = self.root / f"refused-{task}-{flag.strip('-')}"
                    where = ["--input", self.files["dev"][0]] if command == "translate" else ["--out", out]
                    result = self.cli(command, "--run-dir", self.runs[task], *where, *extra)
                    stderr = result.stderr.decode()
                    self.assertEqual(result.returncode, 2, stderr[-3000:])
                    self.assertRegex(stderr, f"{flag}|does not apply to .*a {task} model|an? {task} run does not "
                                             "generate")
                    self.assertEqual(result.stdout.decode(), "")
                    self.assertFalse(out.exists())

    def test_every_command_runs_or_gives_the_one_refusal(self):
        for command in ORDER:
            for task in TASKS:
                with self.subTest(command=command, task=task):
                    result = self.cli(command, *self.arguments(command, task))
                    stderr = result.stderr.decode()
                    if task in TAKES[command]:
                        self.assertEqual(result.returncode, 0, stderr[-3000:])
                        self.assertEqual(result.served, command == "serve")
                    else:
                        self.assertEqual(result.returncode, 2, stderr[-3000:])
                        self.assertIn(f"t2t-keras {command}: error: ", stderr)
                        self.assertRegex(stderr, REFUSAL.format(task=task))
