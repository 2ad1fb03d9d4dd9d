"""Resident memory of `serve --model-base-path` across version swaps, under a client that never pauses.

    python bench/bench_model_versions.py [--format ctranslate2] [--versions 4] [--hidden-dim 512] [--layers 6]
                                         [--precision bfloat16]

Exports `--versions` random models of one shape (a toy 100-piece vocabulary, so the weights are the layers'),
serves the first from a base path in a `t2t-keras serve` process, then renames each next one into the base path
(copied under a temporary name first, as one deploys with TF Serving) while a client sends requests without
pause. After each swap it prints the server's resident memory (VmRSS) and its peak so far (VmHWM), and the
requests answered and failed meanwhile. Memory returns to one model's size when the RSS after a swap is the RSS
before it, give or take the allocator, and the peak is about one model above it (two are loaded during a swap).
"""

import argparse
import collections
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import httpx

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = pathlib.Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
TIMEOUT = 300.0
SENTENCES = ["the cat sees the big dog", "a small red house", "the old man eats bread under the tree"]


def memory_mb(pid):
    """`(VmRSS, VmHWM)` of process `pid`, MB."""
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return tuple(int(fields[name].split()[0]) // 1024 for name in ("VmRSS", "VmHWM"))


def make_exports(directory, count, export_format, hidden_dim, layers, precision="float32"):
    """`count` exports of random models of one shape, each from its own seed."""
    import keras

    from t2t_keras.data.tokenizer import train_sentencepiece
    from t2t_keras.decoding.request import GenerationRequest
    from t2t_keras.model import Transformer
    from tests.helpers import toy_pairs

    tokenizer = train_sentencepiece([s for pair in toy_pairs(400) for s in pair], directory / "vocab.model", 100)
    request = GenerationRequest(beam_size=1, max_extra_length=10)
    exports = []
    for seed in range(1, count + 1):
        keras.utils.set_random_seed(seed)
        model = Transformer(vocab_size=100, hidden_dim=hidden_dim, num_layers=layers, num_heads=8,
                            intermediate_dim=4 * hidden_dim, max_length=64, dropout=0.0)
        model.build()
        out = directory / f"export-{seed}"
        if export_format == "ctranslate2":
            from t2t_keras.export.ctranslate2_export import export_ctranslate2

            export_ctranslate2(model, tokenizer, out, request=request)
        else:
            from t2t_keras.export.saved_model import export_translator

            # recorded as `t2t-keras export` records, so the server chooses its kernels as it would for them
            export_translator(model, tokenizer, out, max_beam_size=1, request=request, precision=precision,
                              weights={"source": "random", "seed": seed})
        exports.append(out)
        print(f"exported version {seed}: {sum(p.stat().st_size for p in out.rglob('*') if p.is_file()) >> 20} MB",
              flush=True)
    return exports


class Client:
    """Sends requests without pause in a thread; counts the answered and the failed ones."""

    def __init__(self, base_url):
        self.answered = self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(base_url,), daemon=True)
        self._thread.start()

    def _run(self, base_url):
        with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
            while not self._stop.is_set():
                try:
                    ok = client.post("/v1/models/default:predict", json={"instances": SENTENCES}).status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.answered += ok
                self.failed += not ok

    def stop(self):
        self._stop.set()
        self._thread.join(TIMEOUT)


def wait_for(condition, what):
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def states(base_url):
    answer = httpx.get(base_url + "/v1/models/default", timeout=TIMEOUT)
    if answer.status_code != 200:
        return {}
    return {status["version"]: status["state"] for status in answer.json()["model_version_status"]}


def start_server(base):
    command = [sys.executable, "-m", "t2t_keras", "serve", "--model-base-path", str(base), "--port", "0",
               "--file-system-poll-wait-seconds", "0.5"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT)
    for line in process.stderr:
        match = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
        if match:
            log = collections.deque(maxlen=50)  # read on, so that the server never blocks on a full pipe
            threading.Thread(target=log.extend, args=(process.stderr,), daemon=True).start()
            return process, f"http://{HOST}:{match.group(1)}"
    raise SystemExit("the server did not start")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", choices=("ctranslate2", "saved_model"), default="ctranslate2")
    parser.add_argument("--versions", type=int, default=4)
    parser.add_argument("--hidden-dim", type=int, default=512)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--precision", choices=("float32", "bfloat16"), default="float32",
                        help="a SavedModel's weights and arithmetic")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        exports = make_exports(tmp, args.versions, args.format, args.hidden_dim, args.layers, args.precision)
        base = tmp / "models"
        base.mkdir()
        shutil.copytree(exports[0], base / "1")
        process, base_url = start_server(base)
        try:
            wait_for(lambda: httpx.get(base_url + "/healthz", timeout=TIMEOUT).status_code == 200, "version 1")
            client = Client(base_url)
            wait_for(lambda: client.answered >= 20, "answers")
            print("stage        RSS MB  peak MB  answered  failed", flush=True)
            print("version 1    {:6d}  {:7d}  {:8d}  {:6d}".format(*memory_mb(process.pid), client.answered,
                                                                     client.failed), flush=True)
            for number, export in enumerate(exports[1:], start=2):
                shutil.copytree(export, base / f"incoming-{number}")
                os.rename(base / f"incoming-{number}", base / str(number))
                wait_for(lambda: states(base_url).get(str(number - 1)) == "END", f"version {number}")
                answered = client.answered
                wait_for(lambda: client.answered >= answered + 20, "answers after the swap")
                print("version {:<4d} {:6d}  {:7d}  {:8d}  {:6d}".format(number, *memory_mb(process.pid),
                                                                         client.answered, client.failed), flush=True)
            client.stop()
        finally:
            process.terminate()
            process.wait(TIMEOUT)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # tests.helpers' toy corpus
    main()
