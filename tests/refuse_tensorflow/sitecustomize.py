"""Put on PYTHONPATH, this folder makes importing TensorFlow or Keras fail in every Python process started with
it (a command, the servers and Beam workers it starts), while they still count as installed: what
tests/test_without_tensorflow.py runs the CTranslate2 road under."""

import importlib.abc
import importlib.machinery
import sys

REFUSED = ("tensorflow", "keras", "tf_keras", "tensorflow_text")
MESSAGE = "is refused in this process (tests/refuse_tensorflow)"


class _Refusing(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the refused packages, so that `importlib.util.find_spec` sees them, and fails when one is imported."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED:
            return importlib.machinery.ModuleSpec(name, self)
        return None

    def create_module(self, spec):
        raise ImportError(f"{spec.name} {MESSAGE}")

    def exec_module(self, module):
        raise ImportError(f"{module.__name__} {MESSAGE}")


sys.meta_path.insert(0, _Refusing())
