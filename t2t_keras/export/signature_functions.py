"""The tf.functions behind an export's signatures, held where saving does not look for functions.

`tf.saved_model.save` traces every tf.function it finds among a module's attributes once more, in its own
context, besides the concrete functions the signatures were made from: a module that keeps them as attributes
saves each function twice, the searches inside them too. A loaded export holds every saved graph node, and its
memory grows with them (a translation export of the main job's model: 105,607 nodes, 1.9 GB resident after
loading; docs/results.md, "Exports"). Kept in a `SignatureFunctions`, a plain object
that saving does not track, only the signatures' concrete functions are saved; a module reaches them as
`module.functions.NAME`.

`function` makes them without AutoGraph: their loops and branches are `tf.while_loop` and `tf.cond` already,
and AutoGraph's conversion of every Python function they call only adds to the time an export takes to trace.
"""

import tensorflow as tf


def function(python_function, input_signature, **options):
    """`tf.function(python_function, input_signature=..., autograph=False, **options)`."""
    return tf.function(python_function, input_signature=input_signature, autograph=False, **options)


def scalar_specs(**dtypes):
    """The scalar `tf.TensorSpec`s of a signature's parameters, by name in order: `scalar_specs(beam_size=tf.int32)`."""
    return tuple(tf.TensorSpec([], dtype, name=name) for name, dtype in dtypes.items())


class SignatureFunctions:
    """A namespace of a module's tf.functions (`module.functions.translate_ids`, ...), not tracked by saving."""
