"""One tiny translation run, trained and exported once per suite run as every artifact kind, for the tests that
walk the roads a user takes (train, export, translate through each kind, serve).

    python -m tests.roads DIR     # builds the cache in DIR (what `tests.runner` starts first)
    roads()                        # in a test: the cache's `Roads`, built here when no runner built it

The runner makes one directory per suite run, names it in `T2T_TEST_ROADS` for its workers and builds it in a
process of its own beside the first modules; it removes the directory at the end. A test that needs the roads
waits on the cache's lock while the build runs, then reads it; it never changes what it reads. Without the
runner (`python -m unittest tests.test_roads`) the first test builds the cache into a temporary directory of its
process. A build that failed leaves no `ready` mark: the next reader builds again, and its error shows in its test.

Every step goes through the command line (`t2t_keras.cli.main`), as a user's would: the toy corpus of
`tests.helpers.write_toy_corpus`, `t2t-keras train` on the tiny preset for 40 updates, then `t2t-keras export` as a
SavedModel, a CTranslate2 directory and a LiteRT file.
"""

import contextlib
import fcntl
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time
from typing import NamedTuple

ROADS_ENV = "T2T_TEST_ROADS"  # the cache directory the runner built (or is building) for this suite run
READY = "ready.json"  # written last, atomically: the cache is complete
TRAIN_STEPS = 200
MAX_BEAM_SIZE = 2  # the exports trace one search per beam size up to this
SETTINGS = {  # `--set` pairs on the tiny preset, besides the corpus files
    "data.vocab_size": 100, "data.max_length": 24, "data.batch_tokens": 384, "data.shuffle_buffer": 100,
    "data.dev_files": "null", "training.train_steps": TRAIN_STEPS, "training.steps_per_epoch": 100,
    "training.checkpoint_every_steps": 100, "training.checkpoint_every_minutes": 600, "training.warmup_steps": 50,
    "training.learning_rate_scale": 1.0, "training.jit_compile": False, "decoding.beam_size": MAX_BEAM_SIZE,
}


class Roads(NamedTuple):
    """Paths of the cached run and its exports, and the sentences the tests translate."""

    root: pathlib.Path
    run_dir: pathlib.Path
    saved_model: pathlib.Path
    ctranslate2: pathlib.Path
    litert: pathlib.Path
    sentences: pathlib.Path  # the toy corpus's test sources, one per line

    @classmethod
    def under(cls, root):
        root = pathlib.Path(root)
        return cls(root, root / "run", root / "saved_model", root / "ctranslate2", root / "model.tflite",
                   root / "corpus" / "test.en")


_LOCAL = []  # the directory of this process's own cache, when no runner made one


def roads():
    """The suite run's `Roads`, built first if they are not yet (waiting while another process builds them)."""
    directory = os.environ.get(ROADS_ENV)
    if not directory:
        if not _LOCAL:
            import atexit

            _LOCAL.append(tempfile.mkdtemp(prefix="t2t-test-roads-"))
            atexit.register(shutil.rmtree, _LOCAL[0], ignore_errors=True)
        directory = _LOCAL[0]
    return build(directory)


def build(directory):
    """Builds the cache in `directory` unless it is complete; returns its `Roads`. Holds the cache's lock meanwhile,
    so that readers in other processes wait for it."""
    found = Roads.under(directory)
    found.root.mkdir(parents=True, exist_ok=True)
    with _locked(found.root / ".lock"):
        if not (found.root / READY).exists():
            _build(found)
    return found


@contextlib.contextmanager
def _locked(path):
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(found):
    from t2t_keras.files import write_text_atomic
    from tests.helpers import cli_in_process, write_toy_corpus

    for stale in (found.run_dir, found.saved_model, found.ctranslate2, found.litert):  # of a failed build
        shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
    files = write_toy_corpus(found.root / "corpus", train=400)
    settings = {"data.source": "text", "data.train_files": files["train"], "data.test_files": files["test"],
                **SETTINGS}
    pairs = [f"{key}={value!r}" if isinstance(value, list) else f"{key}={value}" for key, value in settings.items()]
    seconds = {}
    steps = [
        ("train", ["train", "--config", "tiny", "--run-dir", found.run_dir, *_each("--set", pairs)]),
        ("saved_model", ["export", "--run-dir", found.run_dir, "--out", found.saved_model,
                         "--max-beam-size", MAX_BEAM_SIZE]),
        ("ctranslate2", ["export", "--run-dir", found.run_dir, "--format", "ctranslate2", "--out",
                         found.ctranslate2]),
        ("litert", ["export", "--run-dir", found.run_dir, "--format", "litert", "--out", found.litert,
                    "--max-beam-size", MAX_BEAM_SIZE]),
    ]
    for name, args in steps:
        began = time.monotonic()
        done = cli_in_process(*args)
        if done.returncode != 0:
            raise RuntimeError(f"Building the test roads failed at `t2t-keras {' '.join(map(str, args))}`:\n"
                               f"{done.stdout.decode()}{done.stderr.decode()}")
        seconds[name] = round(time.monotonic() - began, 1)
    write_text_atomic(found.root / READY, json.dumps({"seconds": seconds}) + "\n")


def _each(flag, values):
    return [item for value in values for item in (flag, value)]


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    print(f"test roads ready in {build(sys.argv[1]).root}", flush=True)
