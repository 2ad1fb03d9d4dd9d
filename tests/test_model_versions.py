"""Model versions (`serve --model-base-path`): a new version is loaded beside the served one, checked and swapped in
without a request failing; a broken one is skipped; the old one is let go once its requests are answered.

Stub versions show the state machine with nothing left to a clock (a batch waits while a "hold" file exists);
tiny SavedModel and CTranslate2 exports show the swap under a client that never pauses.
"""

import functools
import gc
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import unittest
import weakref

import httpx
import keras

from t2t_keras.artifacts import open_artifact
from t2t_keras.data.tokenizer import train_sentencepiece
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.errors import CorruptFileError, T2TError
from t2t_keras.export.saved_model import export_translator
from t2t_keras.serving.server import create_app
from t2t_keras.serving.version_source import Version, VersionDirectory, check_base_path, version_directories
from tests.helpers import TestCase, cli_in_process, long_check, tiny_transformer, toy_pairs
from tests.serving_stub import StubTranslator
from tests.test_server import HOST, TIMEOUT, end_process, port_from_log, start_server, wait_until, wait_until_ready

try:
    import ctranslate2
except ImportError:  # pragma: no cover - the package is a declared dependency
    ctranslate2 = None

ROOT = pathlib.Path(__file__).resolve().parents[1]
POLL_SECONDS = 0.05
PREDICT = "/v1/models/toy:predict"
SENTENCES = [pair[0] for pair in toy_pairs(4, seed=11)]
MAX_REQUESTS = 5000  # the client under load stops here at the latest


def write_version(base, number, tag=None, **files):
    """A stub version directory `base/number` holding the `files` (name -> text) and its tag."""
    directory = pathlib.Path(base) / str(number)
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in dict(files, tag=tag or f"v{number}").items():
        (directory / name).write_text(text)
    return directory


class TaggedStub(StubTranslator):
    """The stub translator, whose translations end with its version's tag (`A@v2`)."""

    def __init__(self, directory, hold):
        super().__init__(hold)
        self.path = str(directory)
        self.tag = (directory / "tag").read_text()
        self.task = (directory / "task").read_text() if (directory / "task").exists() else "translation"

    def generate(self, lines, request):
        generation = super().generate(lines, request)
        return generation._replace(texts=[[f"{nbest[0]}@{self.tag}"] for nbest in generation.texts])


def open_stub(directory, hold):
    """A `TaggedStub`, whose batches wait on `hold` if the directory has a `held` file (its check's does not)."""
    if (directory / "broken").exists():
        raise CorruptFileError(f"{directory}/broken is damaged: its sha256 differs from the recorded one.")
    return TaggedStub(directory, hold if (directory / "held").exists() else None)


class StubVersions(VersionDirectory):
    """Numbered stub directories, opened by `open_stub`."""

    def __init__(self, base_path, hold):
        super().__init__(base_path, POLL_SECONDS)
        self.hold = hold

    def aspired(self):
        version = super().aspired()
        if version is None:
            return None
        return Version(version.number, functools.partial(open_stub, pathlib.Path(version.export), self.hold))


def states(base_url):
    """`{version: state}` from `GET /v1/models/toy`."""
    answer = httpx.get(base_url + "/v1/models/toy", timeout=TIMEOUT).json()
    return {status["version"]: status["state"] for status in answer["model_version_status"]}


def translate(base_url, sentences, version=None):
    path = PREDICT if version is None else f"/v1/models/toy/versions/{version}:predict"
    return httpx.post(base_url + path, json={"instances": sentences}, timeout=TIMEOUT)


def texts(answer):
    return [row["translations"] for row in answer.json()["predictions"]]


class VersionDirectoryTest(unittest.TestCase):
    """The policy over the base path: the newest stable version, a failed one skipped until it changes."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.base = pathlib.Path(tmp.name)
        self.source = VersionDirectory(self.base, POLL_SECONDS)

    def test_a_version_is_aspired_once_its_files_stay_unchanged_between_two_polls(self):
        write_version(self.base, 1)
        self.assertIsNone(self.source.aspired())  # seen once
        self.assertEqual(self.source.aspired(), Version(1, str(self.base / "1")))
        write_version(self.base, 2, **{"saved_model.pb": "half"})
        self.assertEqual(self.source.aspired().number, 1)
        (self.base / "2" / "variables").mkdir()
        (self.base / "2" / "variables" / "data").write_text("still being copied")
        self.assertEqual(self.source.aspired().number, 1)  # changed since the last poll
        self.assertEqual(self.source.aspired().number, 2)

    def test_empty_and_unnumbered_directories_are_no_versions(self):
        (self.base / "3").mkdir()
        write_version(self.base, "tmp-4")
        (self.base / "5").write_text("a file, not a directory")
        self.assertEqual(version_directories(self.base), {3: self.base / "3"})
        self.source.aspired()
        self.assertIsNone(self.source.aspired())

    def test_a_version_is_opened_from_its_own_directory_name(self):
        write_version(self.base, "007")
        self.source.aspired()
        self.assertEqual(self.source.aspired(), Version(7, str(self.base / "007")))

    def test_a_failed_version_is_skipped_until_its_files_change(self):
        write_version(self.base, 1)
        write_version(self.base, 2)
        self.source.aspired()
        self.assertEqual(self.source.aspired().number, 2)
        self.source.failed(2)
        self.assertEqual(self.source.aspired().number, 1)
        self.assertEqual(self.source.aspired().number, 1)
        write_version(self.base, 2, tag="repaired")
        self.source.aspired()  # the change is seen
        self.assertEqual(self.source.aspired().number, 2)

    def test_removing_the_newest_version_aspires_to_the_one_below(self):
        write_version(self.base, 1)
        write_version(self.base, 2)
        self.source.aspired()
        self.assertEqual(self.source.aspired().number, 2)
        shutil.rmtree(self.base / "2")
        self.assertEqual(self.source.aspired().number, 1)

    def test_bad_settings_are_refused_with_the_fix(self):
        with self.assertRaisesRegex(T2TError, "poll wait must be > 0 .*Received: poll_seconds=0"):
            VersionDirectory(self.base, 0)
        with self.assertRaisesRegex(T2TError, "is not a directory: give the model base path"):
            check_base_path(self.base / "missing")
        refused = cli_in_process("serve", "--model-base-path", self.base / "missing", "--port", "0")
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn(b"is not a directory", refused.stderr)


class StubVersionsTest(unittest.TestCase):
    """The state machine, seen through the REST API, with stub versions whose batches the test holds."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.base = pathlib.Path(tmp.name) / "models"
        self.base.mkdir()
        self.hold = pathlib.Path(tmp.name) / "hold"
        self.addCleanup(self.hold.unlink, missing_ok=True)  # runs first: nothing stays held

    def serve(self):
        app = create_app(StubVersions(self.base, self.hold), model_name="toy", max_wait_ms=0)
        server, thread, base_url = start_server(app)

        def stop():
            server.should_exit = True
            thread.join(TIMEOUT)

        self.addCleanup(stop)
        return app, base_url

    def test_a_request_in_flight_finishes_on_the_old_version_which_is_then_let_go(self):
        write_version(self.base, 1, held="")
        app, base_url = self.serve()
        wait_until_ready(base_url)
        old = weakref.ref(app.state.model.versions.find(1).artifact)
        self.hold.touch()
        results = {}
        first = threading.Thread(target=lambda: results.update(first=translate(base_url, ["a"])))
        first.start()
        wait_until(lambda: app.state.model.versions.find(1).in_flight == 1, "the request did not start")
        write_version(self.base, 2)  # not held: its check runs while version 1's batch waits
        wait_until(lambda: states(base_url) == {"2": "AVAILABLE", "1": "UNLOADING"}, "version 2 was not swapped in")
        second = threading.Thread(target=lambda: results.update(second=translate(base_url, ["b"])))
        second.start()
        wait_until(lambda: app.state.model.versions.find(2).in_flight == 1, "the second request did not start")
        self.assertEqual(translate(base_url, ["c"], version=1).status_code, 404)  # unloading: no new requests
        self.hold.unlink()
        first.join(TIMEOUT)
        second.join(TIMEOUT)
        self.assertEqual(texts(results["first"]), ["A@v1"])
        self.assertEqual(texts(results["second"]), ["B@v2"])
        wait_until(lambda: states(base_url)["1"] == "END", "version 1 was not unloaded")
        gc.collect()
        self.assertIsNone(old(), "version 1's export is still referenced after it was unloaded")

    def failed_version_2(self, **written):
        """Serves version 1, writes version 2 with `written` (see `write_version`), waits until it was tried and
        failed; returns the base URL and version 2's status."""
        write_version(self.base, 1)
        _, base_url = self.serve()
        wait_until_ready(base_url)
        write_version(self.base, 2, **written)
        wait_until(lambda: states(base_url).get("2") == "END", "version 2 was not tried")
        status = httpx.get(base_url + "/v1/models/toy/versions/2", timeout=TIMEOUT).json()["model_version_status"]
        return base_url, status

    def test_a_broken_version_is_skipped_and_the_old_one_keeps_answering(self):
        base_url, status = self.failed_version_2(broken="")
        self.assertEqual(status[0]["status"]["error_code"], "DATA_LOSS")
        self.assertIn("broken is damaged", status[0]["status"]["error_message"])
        self.assertEqual(states(base_url)["1"], "AVAILABLE")
        self.assertEqual(texts(translate(base_url, ["a"])), ["A@v1"])
        self.assertEqual(translate(base_url, ["a"], version=2).status_code, 404)
        (self.base / "2" / "broken").unlink()  # repaired: its files changed, so it is tried again
        wait_until(lambda: states(base_url) == {"2": "AVAILABLE", "1": "END"}, "the repaired version did not load")
        self.assertEqual(texts(translate(base_url, ["a"])), ["A@v2"])

    def test_versions_are_addressed_by_number_while_loaded(self):
        write_version(self.base, 4)
        _, base_url = self.serve()
        wait_until_ready(base_url)
        self.assertEqual(texts(translate(base_url, ["a"], version=4)), ["A@v4"])
        for version in ("1", "x"):
            answer = translate(base_url, ["a"], version=version)
            self.assertEqual(answer.status_code, 404)
            self.assertIn("Servable not found", answer.json()["error"])
        metadata = httpx.get(base_url + "/v1/models/toy/versions/4/metadata", timeout=TIMEOUT).json()
        self.assertEqual(metadata["model_spec"]["version"], "4")
        self.assertEqual(httpx.get(base_url + "/v1/models/toy/versions/3", timeout=TIMEOUT).status_code, 404)

    def test_the_server_loads_until_a_first_version_appears(self):
        _, base_url = self.serve()
        self.assertEqual(httpx.get(base_url + "/healthz", timeout=TIMEOUT).json(), {"status": "loading"})
        self.assertEqual(httpx.get(base_url + "/v1/models/toy", timeout=TIMEOUT).status_code, 404)
        self.assertEqual(translate(base_url, ["a"]).status_code, 503)
        write_version(self.base, 1)
        wait_until_ready(base_url)
        self.assertEqual(texts(translate(base_url, ["a"])), ["A@v1"])

    def test_a_version_of_another_task_fails_its_check(self):
        base_url, status = self.failed_version_2(task="lm")
        self.assertIn("is a lm export, and this model serves translation", status[0]["status"]["error_message"])
        self.assertEqual(texts(translate(base_url, ["a"])), ["A@v1"])


def copy_slowly(source, destination, pause):
    """Copies a directory file by file, pausing after each, as a copy into the base path that takes a while."""
    for path in sorted(pathlib.Path(source).rglob("*")):
        target = pathlib.Path(destination) / path.relative_to(source)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        threading.Event().wait(pause)


class Client:
    """Sends `SENTENCES` again and again without pause, in a thread; keeps each answer's status and texts."""

    def __init__(self, base_url):
        self.base_url = base_url
        self.answers = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        with httpx.Client(base_url=self.base_url, timeout=TIMEOUT) as client:
            for _ in range(MAX_REQUESTS):
                if self._stop.is_set():
                    return
                try:
                    answer = client.post(PREDICT, json={"instances": SENTENCES})
                except httpx.HTTPError as error:  # kept as a failed answer: the test names it
                    self.answers.append((None, repr(error)))
                    continue
                if answer.status_code != 200:
                    self.answers.append((answer.status_code, answer.text))
                    continue
                self.answers.append((200, [row["translations"] for row in answer.json()["predictions"]]))

    def wait_for(self, count):
        wait_until(lambda: len(self.answers) >= count or not self._thread.is_alive(), "the client got no answers")

    def stop(self):
        self._stop.set()
        self._thread.join(TIMEOUT)
        return list(self.answers)


def toy_tokenizer(directory):
    """A 100-piece SentencePiece model of the toy corpus, the vocabulary of the exports swapped in."""
    return train_sentencepiece([s for pair in toy_pairs(200) for s in pair], directory / "vocab.model", vocab_size=100)


class SwapUnderLoadBase:
    """A client that never pauses while version 2 is copied in: no request fails, the answers switch once; then a
    damaged version 3 is skipped. Subclasses make the exports (`export(model, tokenizer, out)`) and damage one."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = pathlib.Path(cls.tmp.name)
        tokenizer = toy_tokenizer(root)
        cls.exports, cls.expected = [], []
        for seed in (1, 2):  # two random models: two sets of translations
            keras.utils.set_random_seed(seed)
            export = cls.export(tiny_transformer(vocab_size=100, max_length=32), tokenizer, root / f"export-{seed}")
            cls.exports.append(export)
            artifact = open_artifact(export)
            cls.expected.append(artifact.generate(SENTENCES, artifact.defaults).best)
            del artifact
        assert cls.expected[0] != cls.expected[1], "the two versions translate alike: the test could not tell them"

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.base = pathlib.Path(self.tmp.name) / f"models-{self.id().rsplit('.', 1)[-1]}"
        self.base.mkdir()
        shutil.copytree(self.exports[0], self.base / "1")

    def assert_switched_once(self, answers):
        """Every answer is 200 and one version's; version 1's answers all come before version 2's."""
        self.assertTrue(all(status == 200 for status, _ in answers), [a for a in answers if a[0] != 200][:3])
        versions = [self.expected.index(rows) + 1 if rows in self.expected else None for _, rows in answers]
        self.assertNotIn(None, versions)
        switch = versions.index(2)
        self.assertGreater(switch, 0)
        self.assertEqual(versions, [1] * switch + [2] * (len(versions) - switch))

    def test_a_new_version_is_swapped_in_under_load_and_a_damaged_one_skipped(self):
        app = create_app(VersionDirectory(self.base, POLL_SECONDS), model_name="toy", max_wait_ms=1)
        server, thread, base_url = start_server(app)
        self.addCleanup(thread.join, TIMEOUT)
        self.addCleanup(setattr, server, "should_exit", True)
        wait_until_ready(base_url)
        old = weakref.ref(app.state.model.versions.find(1).artifact)
        client = Client(base_url)
        client.wait_for(3)
        copy_slowly(self.exports[1], self.base / "2", POLL_SECONDS / 2)
        wait_until(lambda: states(base_url) == {"2": "AVAILABLE", "1": "END"}, "version 2 was not swapped in")
        client.wait_for(len(client.answers) + 3)
        self.assert_switched_once(client.stop())
        gc.collect()
        self.assertIsNone(old(), "version 1's export is still referenced after it was unloaded")

        shutil.copytree(self.exports[0], self.base / "3")
        self.damage(self.base / "3")
        wait_until(lambda: states(base_url).get("3") == "END", "version 3 was not tried")
        self.assertNotEqual(app.state.model.versions.versions[3].error[0], "OK")
        self.assertEqual(states(base_url)["2"], "AVAILABLE")
        self.assertEqual(texts(translate(base_url, SENTENCES)), self.expected[1])


class SavedModelSwapTest(SwapUnderLoadBase, TestCase):
    @staticmethod
    def export(model, tokenizer, out):
        return export_translator(model, tokenizer, out, max_beam_size=1,
                                 request=GenerationRequest(beam_size=1, max_extra_length=6))

    def damage(self, directory):
        """Flips bytes of the weights, keeping their size: the checksum record catches it."""
        data = next((directory / "variables").glob("variables.data-*"))
        content = bytearray(data.read_bytes())
        content[-8:] = bytes(255 - b for b in content[-8:])
        data.write_bytes(bytes(content))


@unittest.skipIf(ctranslate2 is None, "ctranslate2 is not installed: pip install ctranslate2==4.8.5")
class CTranslate2SwapTest(SwapUnderLoadBase, TestCase):
    @staticmethod
    def export(model, tokenizer, out):
        from t2t_keras.export.ctranslate2_export import export_ctranslate2

        export_ctranslate2(model, tokenizer, out, request=GenerationRequest(beam_size=1, max_extra_length=6))
        return out

    def damage(self, directory):
        """Cuts the model file short: CTranslate2 cannot read it."""
        model = directory / "model.bin"
        model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])


@long_check
@unittest.skipIf(ctranslate2 is None, "ctranslate2 is not installed: pip install ctranslate2==4.8.5")
class ServeCommandVersionsTest(CTranslate2SwapTest):
    """`t2t-keras serve --model-base-path` in its own process, on CTranslate2 exports: the CPU production path."""

    def test_a_new_version_is_swapped_in_under_load_and_a_damaged_one_skipped(self):
        command = [sys.executable, "-m", "t2t_keras", "serve", "--model-base-path", str(self.base), "--port", "0",
                   "--model-name", "toy", "--max-wait-ms", "1", "--file-system-poll-wait-seconds", str(POLL_SECONDS)]
        process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), cwd=ROOT)
        try:
            base_url = f"http://{HOST}:{port_from_log(process)}"
            log = []  # read on, so that the server never blocks on a full pipe
            threading.Thread(target=lambda: log.extend(process.stderr), daemon=True).start()
            wait_until_ready(base_url)
            client = Client(base_url)
            client.wait_for(3)
            copy_slowly(self.exports[1], self.base / "2", POLL_SECONDS / 2)
            wait_until(lambda: states(base_url) == {"2": "AVAILABLE", "1": "END"}, "version 2 was not swapped in")
            client.wait_for(len(client.answers) + 3)
            self.assert_switched_once(client.stop())
            shutil.copytree(self.exports[0], self.base / "3")
            self.damage(self.base / "3")
            wait_until(lambda: states(base_url).get("3") == "END", "version 3 was not tried")
            self.assertEqual(texts(translate(base_url, SENTENCES)), self.expected[1])
            process.send_signal(signal.SIGINT)
            self.assertEqual(process.wait(timeout=TIMEOUT), 0)
        finally:
            end_process(process)


def resident_mb(pid):
    """The resident memory (VmRSS) of process `pid`, MB."""
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return int(fields["VmRSS"].split()[0]) / 1024


class MemoryAfterSwapBase:
    """`t2t-keras serve --model-base-path` in its own process, versions of a 30M-weight model swapped in under a
    client that never pauses: after each swap the server's resident memory is back to about one model's, not two
    (during a swap two are loaded). Subclasses make the exports (`export(model, tokenizer, out)`) and say where
    their weights are (`weights_bytes(export)`)."""

    HIDDEN_DIM, LAYERS = 512, 4  # about 30M weights, 120 MB: what an allocator keeping the old version would hold
    KEPT = 0.4  # the most of one model's weights a swap may leave behind (allocator slack, TensorFlow's caches)

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = pathlib.Path(cls.tmp.name)
        tokenizer = toy_tokenizer(root)
        cls.exports = []
        for seed in (1, 2, 3):
            keras.utils.set_random_seed(seed)
            model = tiny_transformer(vocab_size=100, max_length=32, hidden_dim=cls.HIDDEN_DIM, num_layers=cls.LAYERS,
                                     num_heads=8, intermediate_dim=4 * cls.HIDDEN_DIM)
            cls.exports.append(cls.export(model, tokenizer, root / f"export-{seed}"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_memory_returns_to_one_models_size_after_each_swap(self):
        base = pathlib.Path(self.tmp.name) / "models"
        shutil.copytree(self.exports[0], base / "1")
        command = [sys.executable, "-m", "t2t_keras", "serve", "--model-base-path", str(base), "--port", "0",
                   "--model-name", "toy", "--file-system-poll-wait-seconds", str(POLL_SECONDS)]
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("TF_ENABLE_ONEDNN", "TF_ONEDNN"))}
        process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                   env=dict(environ, TF_CPP_MIN_LOG_LEVEL="2"), cwd=ROOT)
        try:
            base_url = f"http://{HOST}:{port_from_log(process)}"
            threading.Thread(target=lambda: list(process.stderr), daemon=True).start()  # never a full pipe
            wait_until_ready(base_url)
            client = Client(base_url)
            client.wait_for(20)
            one_model = resident_mb(process.pid)
            limit = one_model + self.KEPT * self.weights_bytes(self.exports[0]) / 2 ** 20
            for number in (2, 3):
                copy_slowly(self.exports[number - 1], base / str(number), POLL_SECONDS / 2)
                wait_until(lambda: states(base_url).get(str(number - 1)) == "END", f"version {number} not in")
                client.wait_for(len(client.answers) + 20)
                after = resident_mb(process.pid)
                self.assertLess(after, limit, f"after the swap to version {number}: {after:.0f} MB resident, "
                                              f"{one_model:.0f} MB with one version")
            self.assertTrue(all(status == 200 for status, _ in client.stop()))
        finally:
            end_process(process)


@long_check
class SavedModelMemoryTest(MemoryAfterSwapBase, TestCase):
    """float32 exports, recorded as `t2t-keras export` records them: the server runs TensorFlow's own kernels."""

    PRECISION = "float32"

    @classmethod
    def export(cls, model, tokenizer, out):
        return export_translator(model, tokenizer, out, max_beam_size=1, precision=cls.PRECISION,
                                 weights={"source": "latest"}, request=GenerationRequest(beam_size=1,
                                                                                         max_extra_length=6))

    @staticmethod
    def weights_bytes(export):
        return sum(path.stat().st_size for path in (export / "variables").glob("variables.data-*"))


@long_check
class BFloat16SavedModelMemoryTest(SavedModelMemoryTest):
    """bfloat16 exports: the server keeps oneDNN's kernels for them (switches/kernels.py), and oneDNN's allocator."""

    PRECISION = "bfloat16"


@long_check
@unittest.skipIf(ctranslate2 is None, "ctranslate2 is not installed: pip install ctranslate2==4.8.5")
class CTranslate2MemoryTest(MemoryAfterSwapBase, TestCase):
    export = staticmethod(CTranslate2SwapTest.export)

    @staticmethod
    def weights_bytes(export):
        return (export / "model.bin").stat().st_size
