"""The constructor arguments of a layer: its config keys, named once in its `__init__` signature."""

import inspect


def constructor_arguments(cls):
    """Names of the arguments of `cls.__init__` that `get_config` must return (`self` and `**kwargs` excluded)."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    return tuple(p.name for p in parameters if p.name != "self" and p.kind is p.POSITIONAL_OR_KEYWORD)
