"""The constructor arguments of a layer: its config keys, named once in its `__init__` signature."""

import inspect


def constructor_arguments(cls):
    """Names of the arguments of `cls.__init__` that `get_config` must return (`self` and `**kwargs` excluded)."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    return tuple(p.name for p in parameters if p.name != "self" and p.kind is p.POSITIONAL_OR_KEYWORD)


def store_arguments(obj, cls, values):
    """Keeps each constructor argument of `cls` as a public attribute of the same name.

    Called as `store_arguments(self, TheClass, locals())` at the top of
    `__init__`, so the argument list is written once, in the signature, and
    `get_config` can return the same names.
    """
    for name in constructor_arguments(cls):
        setattr(obj, name, values[name])
