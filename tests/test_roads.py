"""Every road a user takes, walked once per suite run on one tiny run (`tests.roads`): trained and exported through
the command line, translated through each artifact kind, scored, and served by `t2t-keras serve` as a process.

The long checks test each road in depth; these tests catch a change that breaks one of them in the quick suite.
"""

import os
import signal
import subprocess
import sys
import unittest

import httpx

from tests.helpers import cli_in_process
from tests.roads import MAX_BEAM_SIZE, TRAIN_STEPS, roads
from tests.test_server import HOST, TIMEOUT, end_process, port_from_log, wait_until_ready

SENTENCES = 8  # lines of the toy test split translated on each road


class TranslateEveryKindTest(unittest.TestCase):
    """`t2t-keras translate` through the run directory, the SavedModel, the CTranslate2 export and the LiteRT file
    gives the same lines."""

    @classmethod
    def setUpClass(cls):
        cls.roads = roads()
        cls.source = cls.roads.root / "test-source.txt"
        lines = cls.roads.sentences.read_text(encoding="utf-8").splitlines()[:SENTENCES]
        cls.source.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def translate(self, flag, path, *args):
        done = cli_in_process("translate", flag, path, "--input", self.source, *args)
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        lines = done.stdout.decode("utf-8").splitlines()
        self.assertEqual(len(lines), SENTENCES, done.stdout.decode())
        return lines

    def test_the_run_trained_to_its_last_step_and_translates_with_words(self):
        import tensorflow as tf

        latest = tf.train.latest_checkpoint(str(self.roads.run_dir / "checkpoints"))
        self.assertTrue(latest and latest.endswith(f"-{TRAIN_STEPS}"), latest)
        lines = self.translate("--run-dir", self.roads.run_dir)
        self.assertGreater(len({line for line in lines if line.strip()}), SENTENCES // 2, lines)

    def test_the_saved_model_and_the_litert_file_translate_as_the_run(self):
        of_run = self.translate("--run-dir", self.roads.run_dir)
        self.assertEqual(self.translate("--saved-model", self.roads.saved_model), of_run)
        self.assertEqual(self.translate("--litert", self.roads.litert), of_run)

    def test_the_ctranslate2_export_searches_greedily_as_the_saved_model(self):
        # Its beam search normalises by another length penalty (docs/serving.md): greedy search has none.
        expected = self.translate("--saved-model", self.roads.saved_model, "--beam-size", 1)
        self.assertEqual(self.translate("--ctranslate2", self.roads.ctranslate2, "--beam-size", 1), expected)
        self.assertEqual(len(self.translate("--ctranslate2", self.roads.ctranslate2)), SENTENCES)


class ScoreTest(unittest.TestCase):
    """`t2t-keras score` of the run: SOURCE<TAB>TARGET lines on stdin score as the same pairs in two files."""

    def test_stdin_pairs_score_as_two_files(self):
        found = roads()
        sources, targets = found.sentences, found.sentences.with_suffix(".de")
        pairs = list(zip(*(path.read_text(encoding="utf-8").splitlines()[:SENTENCES] for path in (sources, targets))))
        stdin = "".join(f"{source}\t{target}\n" for source, target in pairs).encode("utf-8")
        from_stdin = cli_in_process("score", "--run-dir", found.run_dir, stdin=stdin)
        self.assertEqual(from_stdin.returncode, 0, from_stdin.stderr.decode())
        files = [found.root / "score.en", found.root / "score.de"]
        for path, side in zip(files, zip(*pairs)):
            path.write_text("\n".join(side) + "\n", encoding="utf-8")
        from_files = cli_in_process("score", "--run-dir", found.run_dir, "--source", files[0], "--target", files[1])
        self.assertEqual(from_files.returncode, 0, from_files.stderr.decode())
        self.assertEqual(len(from_stdin.stdout.decode().splitlines()), SENTENCES)
        self.assertEqual(from_stdin.stdout, from_files.stdout)

    def test_one_side_alone_is_refused(self):
        done = cli_in_process("score", "--run-dir", roads().run_dir, "--source", "x.en")
        self.assertEqual(done.returncode, 2)
        self.assertIn("--source and --target go together", done.stderr.decode())


class ServeEveryKindTest(unittest.TestCase):
    """`t2t-keras serve` as a process, of the SavedModel and of the CTranslate2 export: it answers `:predict` with
    what `translate` prints for the same export, and exits 0 on SIGTERM."""

    @classmethod
    def setUpClass(cls):
        cls.roads = roads()
        cls.sentences = cls.roads.sentences.read_text(encoding="utf-8").splitlines()[:3]

    def served(self, flag, path, params):
        process = subprocess.Popen([sys.executable, "-m", "t2t_keras", "serve", flag, str(path), "--port", "0",
                                    "--max-wait-ms", "1"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                   text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        try:
            base = f"http://{HOST}:{port_from_log(process)}"
            wait_until_ready(base)
            answer = httpx.post(f"{base}/v1/models/default:predict", timeout=TIMEOUT,
                                json={"instances": self.sentences, "params": params})
            self.assertEqual(answer.status_code, 200, answer.text)
            process.send_signal(signal.SIGTERM)
            self.assertEqual(process.wait(timeout=TIMEOUT), 0)
            return [row["translations"] for row in answer.json()["predictions"]]
        finally:
            end_process(process)

    def expected(self, flag, path, *args):
        done = cli_in_process("translate", flag, path, *args, stdin="\n".join(self.sentences).encode() + b"\n")
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        return done.stdout.decode("utf-8").splitlines()

    def test_serve_the_saved_model(self):
        path = self.roads.saved_model
        self.assertEqual(self.served("--saved-model", path, {"beam_size": MAX_BEAM_SIZE}),
                         self.expected("--saved-model", path, "--beam-size", MAX_BEAM_SIZE))

    def test_serve_the_ctranslate2_export(self):
        path = self.roads.ctranslate2
        self.assertEqual(self.served("--ctranslate2", path, {"beam_size": 1}),
                         self.expected("--ctranslate2", path, "--beam-size", 1))


if __name__ == "__main__":
    unittest.main()
