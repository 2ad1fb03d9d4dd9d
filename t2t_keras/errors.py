"""Exceptions raised for bad input. Each message names the problem and the fix."""


class T2TError(ValueError):
    """Base class of every error t2t_keras raises for bad input."""


class ConfigError(T2TError):
    """A configuration key or value is invalid."""


class DataError(T2TError):
    """Input data is missing, malformed or inconsistent (file and line named)."""


class VocabularyError(T2TError):
    """A tokenizer vocabulary does not match the model."""


def check_applicable(given, what):
    """Refuses the options named in `given` (flags or arguments the caller set), which do not apply to `what`."""
    if given:
        raise T2TError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to {what}.")


class BackendError(T2TError):
    """The Keras backend asked for is not installed, or does not run what was asked of it."""


class RunBusyError(T2TError):
    """Another live process is writing the run directory (`run_lock.RunLock`): its id, host and command named."""


class DiskFullError(T2TError):
    """A file could not be written for lack of space (ENOSPC, EDQUOT): the path, the space needed and free named."""


class MissingPathError(T2TError, FileNotFoundError):
    """A path the user gave, or a file a run must hold, does not exist: the path and the fix named. Also a
    `FileNotFoundError`, so that code catching that still does."""


class PathExistsError(T2TError, FileExistsError):
    """An output the user named exists and may not be replaced: the path and the fix named. Also a
    `FileExistsError`."""


class CorruptFileError(T2TError):
    """A file no longer holds what was recorded when it was written (checksum): the file and both checksums named."""


def check_task(command, task, where, takes=("translation",)):
    """Refuses `command` on a model of `task` it does not take (`takes`), with the same words for every command."""
    if task not in takes:
        raise T2TError(f"t2t-keras {command} does not apply to {where}, a {task} model: it takes "
                       f"{' and '.join(takes)} models. For an lm or mlm run, t2t-keras evaluate reports its "
                       "perplexity.")
