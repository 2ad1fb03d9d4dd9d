"""The CPU production road without TensorFlow: a CTranslate2 export translated, scored and served, and a Beam
pipeline's workers over it, in processes where importing TensorFlow or Keras fails (tests/refuse_tensorflow);
each answers what the same command answers in a process that has them."""

import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

from tests.helpers import cli_in_process, long_check
from tests.roads import roads

REPO = pathlib.Path(__file__).resolve().parents[1]
REFUSING = pathlib.Path(__file__).with_name("refuse_tensorflow")
SENTENCES = 8
TIMEOUT = 120


def refusing_environment():
    """This process's environment with the refusing folder first on PYTHONPATH, for a command and its children."""
    paths = [str(REFUSING), str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths))


def without_tensorflow(*args, **popen):
    """`t2t-keras ARGS` in a new process that cannot import TensorFlow or Keras (a CompletedProcess of text)."""
    return subprocess.run([sys.executable, "-m", "t2t_keras", *map(str, args)], capture_output=True, text=True,
                          env=refusing_environment(), cwd=REPO, timeout=TIMEOUT, **popen)


class CommandsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.roads = roads()
        cls.tmp = tempfile.TemporaryDirectory()
        root = pathlib.Path(cls.tmp.name)
        corpus = cls.roads.root / "corpus"
        cls.source, cls.target = root / "source.txt", root / "target.txt"
        for name, path in (("test.en", cls.source), ("test.de", cls.target)):
            lines = (corpus / name).read_text(encoding="utf-8").splitlines()[:SENTENCES]
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def assert_same_as_with_tensorflow(self, *args):
        refused = without_tensorflow(*args)
        self.assertEqual(refused.returncode, 0, refused.stderr[-3000:])
        usual = cli_in_process(*args)
        self.assertEqual(usual.returncode, 0, usual.stderr.decode()[-3000:])
        self.assertEqual(refused.stdout, usual.stdout.decode("utf-8"))
        self.assertEqual(len(refused.stdout.splitlines()), SENTENCES)
        return refused

    def test_the_refusal_holds_a_run_needs_tensorflow(self):
        """The check is real: a run directory's translation imports TensorFlow, and fails here."""
        done = without_tensorflow("translate", "--run-dir", self.roads.run_dir, "--input", self.source)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("is refused in this process", done.stderr)

    def test_translate(self):
        for args in ((), ("--beam-size", 1), ("--beam-size", 2, "--num-return", 2)):
            with self.subTest(args=args):
                self.assert_same_as_with_tensorflow("translate", "--ctranslate2", self.roads.ctranslate2, "--input",
                                                    self.source, *args)

    def test_score(self):
        self.assert_same_as_with_tensorflow("score", "--ctranslate2", self.roads.ctranslate2, "--source", self.source,
                                            "--target", self.target)

    def test_serve(self):
        self.assert_serves("--ctranslate2", self.roads.ctranslate2)

    def test_serve_versions(self):
        """TF Serving's layout, every version a CTranslate2 export: a fleet's server."""
        import shutil

        base = pathlib.Path(self.tmp.name) / "models"
        shutil.copytree(self.roads.ctranslate2, base / "1")
        self.assert_serves("--model-base-path", base, "--file-system-poll-wait-seconds", 0.1)

    def assert_serves(self, *args):
        import httpx

        from tests.test_server import end_process, port_from_log, wait_until_ready

        process = subprocess.Popen([sys.executable, "-m", "t2t_keras", "serve", *map(str, args), "--port", "0"],
                                   stderr=subprocess.PIPE, text=True, env=refusing_environment(), cwd=REPO)
        try:
            base_url = f"http://127.0.0.1:{port_from_log(process)}"
            wait_until_ready(base_url)
            lines = self.source.read_text(encoding="utf-8").splitlines()
            answer = httpx.post(f"{base_url}/v1/models/default:predict", json={"instances": lines}, timeout=TIMEOUT)
            self.assertEqual(answer.status_code, 200, answer.text)
            usual = cli_in_process("translate", "--ctranslate2", self.roads.ctranslate2, "--input", self.source)
            self.assertEqual([row["translations"] for row in answer.json()["predictions"]],
                             usual.stdout.decode("utf-8").splitlines())
            bad = httpx.post(f"{base_url}/v1/models/default:predict",
                             json={"instances": lines, "params": {"beam_size": 0}}, timeout=TIMEOUT)
            self.assertEqual(bad.status_code, 400, bad.text)  # a user's error, answered as one
            self.assertEqual(httpx.get(f"{base_url}/v1/models/default/metadata", timeout=TIMEOUT).status_code, 200)
            self.assertIn("t2t_serving_requests_total",
                          httpx.get(f"{base_url}/monitoring/prometheus/metrics", timeout=TIMEOUT).text)
        finally:
            end_process(process)

    @long_check
    def test_a_beam_pipeline_and_its_worker_processes(self):
        output = pathlib.Path(self.tmp.name) / "translated.txt"
        done = without_tensorflow("translate", "--ctranslate2", self.roads.ctranslate2, "--input", self.source,
                                  "--runner", "direct", "--workers", 2, "--output", output)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        usual = cli_in_process("translate", "--ctranslate2", self.roads.ctranslate2, "--input", self.source)
        self.assertEqual(output.read_text(encoding="utf-8"), usual.stdout.decode("utf-8"))


if __name__ == "__main__":
    unittest.main()
