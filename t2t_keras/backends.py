"""The Keras backends the model runs on, and the packages each needs.

The layers, the `Transformer`, the language models, the loss, the schedule and the greedy and beam searches
(`decoding/greedy.py`, `decoding/beams.py`) run on TensorFlow, JAX and PyTorch; Keras picks the backend
once, from `KERAS_BACKEND` or `keras.json`, when it is first imported. The rest of the package (data pipeline,
`t2t-keras train`, batching strings through the searches, export and serving) is TensorFlow's. `import
t2t_keras` checks that the chosen backend is installed, so a missing one is named with its install command
instead of failing deep inside Keras.
"""

import importlib.util
import json
import os

from t2t_keras.errors import BackendError

# Each backend's packages, pinned as in setup.cfg's `backends` extra (tests/test_backends.py compares them).
BACKEND_PACKAGES = {
    "tensorflow": ("tensorflow==2.21.0",),
    "jax": ("jax==0.10.2", "jaxlib==0.10.2"),
    "torch": ("torch==2.13.0",),
}
MODEL_BACKENDS = tuple(BACKEND_PACKAGES)


def requested_backend(environ=None):
    """The backend Keras will load: `KERAS_BACKEND`, else `keras.json`'s `backend`, else "tensorflow"."""
    environ = os.environ if environ is None else environ
    if environ.get("KERAS_BACKEND"):
        return environ["KERAS_BACKEND"]
    keras_dir = environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(keras_dir, "keras.json"), encoding="utf-8") as file:
            return json.load(file).get("backend", "tensorflow")
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def is_installed(module):
    """Whether `module` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def check_backend_installed(backend, installed=is_installed):
    """Raises `BackendError` naming the missing packages of `backend` and how to install them.

    Backends other than TensorFlow, JAX and PyTorch are left to Keras, which names them itself.
    """
    packages = BACKEND_PACKAGES.get(backend, ())
    missing = [package for package in packages if not installed(package.split("==")[0])]
    if missing:
        raise BackendError(
            f"KERAS_BACKEND={backend} needs {' and '.join(name.split('==')[0] for name in missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed. Install {'them' if len(missing) > 1 else 'it'} "
            f"with `pip install {' '.join(packages)}` (or `pip install 't2t_keras[backends]'` for JAX and "
            "PyTorch), or choose an installed backend with KERAS_BACKEND=tensorflow.")


def require_tensorflow_backend(what, backend):
    """Raises `BackendError` unless `backend` (Keras' active one) is TensorFlow, which `what` needs."""
    if backend != "tensorflow":
        raise BackendError(
            f"{what} runs on the TensorFlow backend only; Keras runs on {backend} here (KERAS_BACKEND={backend}). "
            "Set KERAS_BACKEND=tensorflow, or on JAX and PyTorch use the model, the loss and the schedule with "
            "model.fit, and decode token ids with t2t_keras.decoding.greedy_decode / beam_search.")
