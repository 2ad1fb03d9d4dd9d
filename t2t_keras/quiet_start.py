"""TensorFlow's start-up lines kept off a command's output, unless the user asks for them.

Importing TensorFlow 2.21 writes lines of its own C++ runtime to the process's stderr before anything of ours:
absl's "All log messages before absl::InitializeLog() ..." warning, "oneDNN custom operations are on" (once per
library that loads it: twice), "Could not find cuda drivers on your machine" on a machine without a GPU.
`TF_CPP_MIN_LOG_LEVEL` hides some of them and not the others, which absl writes before it reads any setting.

    import_tensorflow_quietly(verbose=args.verbose)   # once the command's switches are set, before its work

`import_tensorflow_quietly` imports TensorFlow, and lets it look for GPUs, with file descriptor 2 sent to a
temporary file (`native_lines_dropped`), and writes back every line that is not one of the known start-up lines
(`STARTUP_LINES`), so a real warning or error still shows; if the import fails, everything it wrote is written back
before the error. LiteRT's first call logs one INFO line the same way; `artifacts.litert` drops it while
TensorFlow's INFO lines are hidden. Nothing is hidden when the
user asked to see it: `--verbose`, or a `TF_CPP_MIN_LOG_LEVEL` of their own in the environment.
"""

import contextlib
import os
import sys
import tempfile

LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL"
QUIET_LOG_LEVEL = "2"  # TensorFlow's C++ warnings and errors only
STARTUP_LINES = (  # what importing TensorFlow writes on a healthy machine, GPU or not
    "All log messages before absl::InitializeLog() is called are written to STDERR",
    "oneDNN custom operations are on",
    "Could not find cuda drivers on your machine",
    "failed call to cuInit",
    "cpu_feature_guard.cc",
    "To enable the following instructions:",
    "Unable to register cuDNN factory", "Unable to register cuFFT factory", "Unable to register cuBLAS factory",
    "computation placer already registered",
)


def wants_quiet(verbose, environ=None):
    """Whether TensorFlow's start-up lines are dropped: not with `verbose`, nor when the user set the log level."""
    environ = os.environ if environ is None else environ
    return not verbose and LOG_LEVEL not in environ


def import_tensorflow_quietly(verbose=False, environ=None):
    """Imports TensorFlow (if no one has), dropping its known start-up lines unless `wants_quiet` says no."""
    environ = os.environ if environ is None else environ
    if "tensorflow" in sys.modules or not wants_quiet(verbose, environ):
        import tensorflow  # noqa: F401

        return
    environ[LOG_LEVEL] = QUIET_LOG_LEVEL
    with native_lines_dropped(STARTUP_LINES):
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")  # where "failed call to cuInit" comes, on a machine without one


def is_startup_line(line):
    """Whether `line` (text) is one of TensorFlow's known start-up lines."""
    return any(known in line for known in STARTUP_LINES)


def info_hidden(environ=None):
    """Whether TensorFlow's INFO lines are hidden (`TF_CPP_MIN_LOG_LEVEL` 1 or more), as after a quiet start."""
    level = (os.environ if environ is None else environ).get(LOG_LEVEL, "")
    return level.isdigit() and int(level) >= 1


@contextlib.contextmanager
def native_lines_dropped(known):
    """Runs the block with file descriptor 2 sent to a temporary file, then writes back every line that holds none
    of the strings `known`; if the block raises, everything it wrote first."""
    with tempfile.TemporaryFile() as captured:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            yield
        except BaseException:
            _restore(saved, captured, keep=lambda line: True)
            raise
        _restore(saved, captured, keep=lambda line: not any(text in line for text in known))


def _restore(saved, captured, keep):
    """Gives file descriptor 2 back and writes to it the captured lines that `keep` keeps."""
    os.dup2(saved, 2)
    os.close(saved)
    captured.seek(0)
    lines = captured.read().decode("utf-8", errors="replace").splitlines(keepends=True)
    kept = "".join(line for line in lines if keep(line))
    if kept:
        sys.stderr.write(kept)
        sys.stderr.flush()
