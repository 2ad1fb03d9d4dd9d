"""Exceptions raised for bad input. Each message names the problem and the fix."""


class T2TError(ValueError):
    """Base class of every error t2t_keras raises for bad input."""


class ConfigError(T2TError):
    """A configuration key or value is invalid."""


class DataError(T2TError):
    """Input data is missing, malformed or inconsistent (file and line named)."""


class VocabularyError(T2TError):
    """A tokenizer vocabulary does not match the model."""
