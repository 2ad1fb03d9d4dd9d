"""The main job (`t2t-keras main`) end to end on a mixture of two toy corpora (the default is a mixture too):
train, average, evaluate on each corpus's test split, export, report, resume."""

import json
import pathlib
import subprocess
import sys
import tempfile

from t2t_keras.main_job import EXAMPLES
from tests.helpers import TestCase, cli_in_process, long_check, write_toy_corpus

REPO = pathlib.Path(__file__).resolve().parents[1]


@long_check
class MainJobTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        files = write_toy_corpus(pathlib.Path(cls.tmp.name) / "data", train=600)
        cls.other = write_toy_corpus(pathlib.Path(cls.tmp.name) / "other", train=200, test=30)
        cls.run_dir = pathlib.Path(cls.tmp.name) / "run"
        corpora = [{"source": "text", "train_files": f["train"], "dev_files": f["dev"], "test_files": f["test"],
                    "weight": 0.5} for f in (files, cls.other)]
        cls.settings = [
            "data.source=text", f"data.train_files={files['train']!r}", f"data.dev_files={files['dev']!r}",
            f"data.test_files={files['test']!r}", f"data.sources={json.dumps(corpora)}", "data.vocab_size=100", "data.max_length=24",
            "data.batch_tokens=384", "data.shuffle_buffer=100", "training.steps_per_epoch=10",
            "training.checkpoint_every_steps=10", "training.warmup_steps=20", "training.jit_compile=False",
            "training.attention_every_steps=10", "training.attention_probes=1", "training.average_last=2",
            "decoding.beam_size=2", "decoding.max_beam_size=2",  # the export traces one search per beam size
            "training.quality_every_minutes=0.05", "training.quality_sentences=5",  # a point every 3 s
        ]
        cls.first = cls.main(train_steps=20, in_process=True)
        cls.first_report = json.loads((cls.run_dir / "report.json").read_text())
        cls.second = cls.main(train_steps=30)  # a user's second `t2t-keras main`, in a process of its own
        cls.second_report = json.loads((cls.run_dir / "report.json").read_text())

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def main(cls, train_steps, in_process=False):
        """`t2t-keras main` on the toy corpus: a new process, or `in_process` (`cli_in_process`)."""
        settings = cls.settings + [f"training.train_steps={train_steps}"]
        command = [sys.executable, "-m", "t2t_keras", "main", "--config", "tiny", "--run-dir", str(cls.run_dir),
                   "--minutes", "5"] + [arg for setting in settings for arg in ("--set", setting)]
        if in_process:
            return cli_in_process(*command[3:])
        return subprocess.run(command, capture_output=True, timeout=900, cwd=REPO)

    def test_both_invocations_succeed(self):
        for result in (self.first, self.second):
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])

    def test_second_invocation_resumes(self):
        self.assertEqual(self.first_report["steps"], 20)
        self.assertEqual(self.first_report["steps_this_session"], 20)
        self.assertEqual(self.second_report["steps"], 30)
        self.assertEqual(self.second_report["steps_this_session"], 10)

    def test_report_has_data_sizes_and_paths(self):
        report = self.second_report
        self.assertEqual(report["data"]["test"], 40)
        self.assertEqual(report["data"]["train"], 800)  # both corpora's training pairs
        self.assertIn("tok:13a", report["test"]["signature"])
        self.assertTrue((pathlib.Path(report["export"]) / "saved_model.pb").exists())
        self.assertTrue(pathlib.Path(report["averaged_model"]).exists())

    def test_reported_scores_are_those_of_the_run(self):
        from t2t_keras.evaluation.evaluate_run import evaluate_baseline, evaluate_run

        report = self.second_report
        test = evaluate_run(self.run_dir, "test")  # the averaged model the report evaluated, decoded again
        baseline = evaluate_baseline(self.run_dir, "test")
        for name in ("bleu", "chrf"):
            self.assertEqual(report["test"][name], test[name])
            self.assertEqual(report["retrieval_baseline"][name], baseline[name])

    def test_the_other_corpus_of_the_mixture_is_scored_on_its_own_test_split(self):
        from t2t_keras.evaluation.evaluate_run import evaluate_run

        source, reference = self.other["test"]
        other = self.second_report["test_other_corpora"]
        self.assertEqual(list(other), [source])
        scores = evaluate_run(self.run_dir, "test", source=source, reference=reference)
        self.assertEqual(other[source], {"bleu": scores["bleu"], "chrf": scores["chrf"], "sentences": 30})
        self.assertIn(f"test on {source}: sacreBLEU {scores['bleu']}, chrF {scores['chrf']}",
                      self.second.stdout.decode())

    def test_reported_speed_is_the_logged_one(self):
        import tensorflow as tf

        values = []
        for path in sorted((self.run_dir / "logs" / "train").glob("events.out.tfevents.*")):
            for event in tf.compat.v1.train.summary_iterator(str(path)):
                values += [float(tf.make_ndarray(v.tensor)) for v in event.summary.value
                           if v.tag == "tokens_per_second"]
        self.assertTrue(values)
        self.assertEqual(self.second_report["target_tokens_per_second"], round(sum(values[-20:]) / len(values[-20:])))

    def test_examples_are_translated_by_the_export(self):
        examples = self.second_report["examples"]
        self.assertEqual(sorted(examples), sorted(EXAMPLES))
        self.assertTrue(all(isinstance(text, str) for text in examples.values()))

    def test_printed_report(self):
        printed = self.second.stdout.decode()
        report = self.second_report
        self.assertIn("== t2t_keras main job ==", printed)
        self.assertIn(f"sacreBLEU {report['test']['bleu']}, chrF {report['test']['chrf']}", printed)
        self.assertIn("training: 30 steps in total, 10 now in", printed)
        self.assertIn(f"{sys.executable} -m tensorboard.main --logdir {self.run_dir / 'logs'}", printed)

    def test_tensorboard_logs_include_attention_images(self):
        import tensorflow as tf

        tags = set()
        for path in (self.run_dir / "logs").rglob("events.out.tfevents.*"):
            for event in tf.compat.v1.train.summary_iterator(str(path)):
                tags.update(value.tag for value in event.summary.value)
        self.assertIn("learning_rate", tags)
        self.assertTrue(any(tag.startswith("attention") for tag in tags), sorted(tags))

    def test_report_says_where_the_time_went(self):
        timing = self.second_report["timing"]
        self.assertEqual(timing["kind"], "main")
        for part in ("start-up", "compilation", "training steps", "validation", "checkpoint saves", "averaging",
                     "evaluation", "export", "export start-up", "examples", "other"):
            self.assertIn(part, timing["parts"])
        self.assertAlmostEqual(sum(timing["parts"].values()), timing["seconds"], delta=0.1)
        self.assertEqual(timing["steps"], 10)  # the second invocation's training session
        printed = self.second.stdout.decode()
        self.assertIn(f"where the {timing['seconds'] / 60:.1f} min of this main went:", printed)
        self.assertRegex(printed, r"\n  evaluation +[0-9.]+ s +[0-9.]+%")

    def test_timing_records_of_both_invocations_are_kept(self):
        records = json.loads((self.run_dir / "timing.json").read_text())
        self.assertEqual([record["kind"] for record in records], ["train", "main", "train", "main"])
        self.assertEqual(records[-1], self.second_report["timing"])

    def test_quality_curve_is_drawn_from_its_points(self):
        plot = self.run_dir / "quality.png"
        self.assertEqual(self.second_report["quality_plot"], str(plot))
        self.assertTrue(plot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n"))
        self.assertIn(f"quality curve: {plot}", self.second.stdout.decode())
        points = json.loads((self.run_dir / "quality.json").read_text())["points"]
        minutes = [point["minutes"] for point in points]
        self.assertEqual(minutes, sorted(minutes))
        self.assertEqual(points[-1]["step"], 30)
        self.assertTrue(all(0.0 <= point["bleu"] <= 100.0 for point in points))
