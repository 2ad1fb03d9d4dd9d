# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exporting and serving a trained model
#
# A trained run becomes one SavedModel directory that holds the SentencePiece tokenizer, the
# weights and the beam search (§6.1) in its graph: strings in, translations out. This notebook
# exports a run, loads the export in a separate Python process that imports only TensorFlow and
# TF-Text, serves it over HTTP with TensorFlow Serving's REST API, and times a batch.

# %% [markdown]
# ## Parameters
#
# | variable | default | meaning |
# |---|---|---|
# | `T2T_NOTEBOOK_RUN_DIR` | `runs/notebook` | the trained run (e.g. from notebook 01) |
# | `T2T_NOTEBOOK_EXPORT_DIR` | `RUN_DIR/export` | the SavedModel to write (replaced if present) |
# | `T2T_NOTEBOOK_SENTENCES` | `8` | dev sentences translated by each route |
# | `T2T_NOTEBOOK_BATCH` | `32` | test sentences in the timed batch |
# | `T2T_NOTEBOOK_MAX_BEAM_SIZE` | `8` | largest beam size the export accepts (one traced search per size) |

# %%
import os
import pathlib

RUN_DIR = os.environ.get("T2T_NOTEBOOK_RUN_DIR", "runs/notebook")
EXPORT_DIR = pathlib.Path(os.environ.get("T2T_NOTEBOOK_EXPORT_DIR") or pathlib.Path(RUN_DIR, "export"))
SENTENCES = int(os.environ.get("T2T_NOTEBOOK_SENTENCES", "8"))
BATCH = int(os.environ.get("T2T_NOTEBOOK_BATCH", "32"))
MAX_BEAM_SIZE = int(os.environ.get("T2T_NOTEBOOK_MAX_BEAM_SIZE", "8"))

# %% [markdown]
# ## Export
#
# `export_run` takes the run's model (averaged checkpoints when up to date, else the newest
# checkpoint) and tokenizer, and writes the SavedModel atomically: the directory is complete or
# absent. The decoding defaults of `serving_default` come from the run's config.

# %%
import json
import subprocess
import sys
import tempfile
import time

import numpy as np

from t2t_keras.evaluation.evaluate_run import load_eval_pairs
from t2t_keras.export.saved_model import export_run

began = time.perf_counter()
export_run(RUN_DIR, EXPORT_DIR, max_beam_size=MAX_BEAM_SIZE, overwrite=True)
print(f"exported {EXPORT_DIR} in {time.perf_counter() - began:.0f} s")
for path in sorted(EXPORT_DIR.rglob("*")):
    if path.is_file():
        print(f"  {path.relative_to(EXPORT_DIR)}  {path.stat().st_size / 1e6:.2f} MB")
sentences = [source for source, _ in load_eval_pairs(RUN_DIR, "dev")[:SENTENCES]]

# %% [markdown]
# ## Loading it without `t2t_keras`
#
# The export needs TensorFlow and TF-Text (whose import registers the SentencePiece ops), nothing
# else: this script runs in a fresh Python process and reports which `t2t_keras` modules it loaded.

# %%
STANDALONE = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops the export uses

export_dir, sentences = sys.argv[1], json.loads(sys.argv[2])
translate = tf.saved_model.load(export_dir).signatures["serving_default"]
outputs = translate(inputs=tf.constant(sentences, tf.string))
print(json.dumps({
    "translations": [text.decode("utf-8") for text in outputs["translations"].numpy()],
    "scores": outputs["scores"].numpy().tolist(),
    "packages": sorted(name for name in sys.modules if name.split(".")[0] == "t2t_keras"),
}))
"""
process = subprocess.run([sys.executable, "-c", STANDALONE, str(EXPORT_DIR.resolve()), json.dumps(sentences)],
                         capture_output=True, text=True, cwd=tempfile.gettempdir())
if process.returncode:
    raise RuntimeError(f"the standalone script failed:\n{process.stderr[-3000:]}")
standalone = json.loads(process.stdout.splitlines()[-1])
print("t2t_keras modules imported:", standalone["packages"])
for source, target in zip(sentences, standalone["translations"]):
    print(f"{source}\n  → {target}")

# %% [markdown]
# Inside Python, `open_artifact` opens the same export (a `SavedModelArtifact`): `request` checks
# decoding parameters against what the export accepts, and `generate` calls the `translate`
# signature in batches and returns a `Generation`, per sentence an n-best list with scores.

# %%
from t2t_keras.artifacts import open_artifact

artifact = open_artifact(EXPORT_DIR)
print("defaults:", artifact.defaults, "| max beam size:", artifact.max_beam_size)
print("signatures:", sorted(artifact.signature_defs()))
request = artifact.request()
generation = artifact.generate(sentences, request)
in_process = {"translations": generation.best, "scores": [nbest[0] for nbest in generation.scores]}


def same(a, b):
    """Equal translations, and scores equal up to float32 rounding."""
    return a["translations"] == b["translations"] and np.allclose(a["scores"], b["scores"], atol=1e-4)


print("same as the standalone process:", same(in_process, standalone))

# %% [markdown]
# ## The REST server
#
# `t2t_keras.serving.server.serve` speaks TensorFlow Serving's REST API: `POST
# /v1/models/NAME:predict` with `{"instances": [...]}`, plus `GET /v1/models/NAME`, `.../metadata`
# and `/healthz`. It runs here as a subprocess on a free port of 127.0.0.1, and stops at the end of
# the notebook.

# %%
import socket
import urllib.error
import urllib.request

SERVE = "import sys; from t2t_keras.serving.server import serve; serve(sys.argv[1], port=int(sys.argv[2]))"

with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    PORT = probe.getsockname()[1]
URL = f"http://127.0.0.1:{PORT}"
server_log = pathlib.Path(RUN_DIR, "serve.log")
with open(server_log, "wb") as log:
    server = subprocess.Popen([sys.executable, "-c", SERVE, str(EXPORT_DIR), str(PORT)], stdout=log,
                              stderr=subprocess.STDOUT)


def call(path, payload=None):
    """`(status, JSON answer)` of a GET, or of a POST of `payload`."""
    data = None if payload is None else json.dumps(payload).encode("utf-8")
    request = urllib.request.Request(URL + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:  # 4xx and 5xx answers carry {"error": ...}
        return error.code, json.load(error)


deadline = time.monotonic() + 300  # it listens at once; /healthz answers 200 once the export is loaded and warm
while True:
    if server.poll() is not None:
        raise RuntimeError(f"the server exited with {server.returncode}:\n{server_log.read_text()[-3000:]}")
    try:
        if call("/healthz")[0] == 200:
            break
    except OSError:  # not listening yet
        if time.monotonic() > deadline:
            raise
    time.sleep(0.5)
print(f"serving at {URL}")
print(call("/v1/models/default"))

# %%
status, answer = call("/v1/models/default:predict", {"instances": sentences})
print("HTTP", status)
print(json.dumps(answer, ensure_ascii=False, indent=1)[:1500])
rest = {"translations": [p["translations"] for p in answer["predictions"]],
        "scores": [p["scores"] for p in answer["predictions"]]}
print("same as in process:", same(rest, in_process))

# %% [markdown]
# Decoding parameters can change per request, and bad requests get a 400 that says what is wrong:

# %%
print(call("/v1/models/default:predict", {"instances": sentences[:1], "params": {"beam_size": 2, "num_return": 2}}))
print(call("/v1/models/default:predict", {"instances": [42]}))

# %% [markdown]
# ## Timing a batch
#
# The first call with a new batch shape traces the search; the timed call is the second. Over HTTP
# the server adds JSON and its request batcher (up to 32 sentences per SavedModel call).

# %%
batch = [source for source, _ in load_eval_pairs(RUN_DIR, "test")[:BATCH]]
routes = {
    "in process": lambda: artifact.generate(batch, request),
    "REST": lambda: call("/v1/models/default:predict", {"instances": batch}),
}
for name, route in routes.items():
    route()
    began = time.perf_counter()
    route()
    seconds = time.perf_counter() - began
    print(f"{name:>10}: {len(batch)} sentences in {seconds:.2f} s, {len(batch) / seconds:.1f} sentences/s")

# %% [markdown]
# ## Stopping the server
#
# SIGTERM drains the server: it answers the requests it has accepted, refuses new ones with 503
# (`/healthz` says "draining"), stops the batcher and exits 0.

# %%
server.terminate()
server.wait(timeout=60)
print("server exit code:", server.returncode)
print(server_log.read_text()[-1000:])
