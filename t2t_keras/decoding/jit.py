"""A search (or any function of a model) compiled where the backend compiles it whole: `jax.jit` on JAX.

    search = compiled(model, beam_search.beam_search, beam_size=4)
    result = search(source)  # on JAX: one compilation per source shape, then the compiled program

On JAX the model's weights are arguments of the compiled function (through a `keras.StatelessScope`), not
constants baked into it, so the program stays small and sees the weights the model holds at each call. PyTorch and
TensorFlow run the function as it is (on TensorFlow, `tf.function(jit_compile=True)` compiles a search:
`sharding.compiled_search`).

Who calls it: people who use the library on JAX (docs/code.md, "On JAX and PyTorch", shows it beside `fit`).
Nothing in the package does: the commands and the run's generator run on TensorFlow. `tests/test_backends.py`
checks it on each backend (`tests/backend_child.py`); `bench/bench_backends.py` measures searches through it.
"""

import functools

import keras


def compiled(model, function, **options):
    """`function(model, inputs, **options)` as a function of `inputs`, compiled with `jax.jit` on JAX.

    `options` are fixed (Python values that may choose shapes); `inputs` may be a tensor or a tuple of them.
    """
    bound = functools.partial(function, model, **options)
    if keras.backend.backend() != "jax":
        return bound
    import jax  # the JAX backend

    variables = list(model.variables)

    def stateless(values, inputs):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return bound(inputs)

    program = jax.jit(stateless)
    return lambda inputs: program([variable.value for variable in variables], inputs)
