"""Every use of private Keras API in the package, each behind a small function saying what public API is missing
(and the one internal TensorFlow name Keras itself relies on for the same purpose, `maybe_merge_call`).

tests/test_keras_compat.py checks that each private name still exists with the shape used here, and fails with a
message naming the function to update when a Keras release changes one. Verified with Keras 3.15.
"""

import contextlib
import gc


def loss_tracker(model):
    """The `Mean` metric behind the logged `loss` of a compiled `model`.

    Missing public API: a custom `train_step` cannot report its loss the way Keras' own step does (`compute_loss`
    updates this tracker itself, but computes the loss from one forward pass; accumulation has several).
    """
    return model._loss_tracker


def unscale_loss_for_distribution(loss):
    """`loss` times the replica count under a `tf.distribute` strategy, as Keras logs its own step's loss.

    Missing public API: Keras scales a replica's loss by 1/replicas and undoes it for its loss tracker with this
    private helper (keras.src.losses.loss); a custom step that feeds `loss_tracker` must do the same.
    """
    from keras.src.losses.loss import unscale_loss_for_distribution as unscale

    return unscale(loss)


def compiled_loss_and_metrics(model):
    """The `CompileLoss` and `CompileMetrics` of a compiled `model` (None before `compile`), each with `.built`.

    Missing public API: whether `compile`'s loss and metrics containers are built.
    """
    return model._compile_loss, model._compile_metrics


def skip_symbolic_build(model, skip):
    """Makes `fit` and `evaluate` skip their symbolic build of `model` (one batch traced) whenever `skip()` is true.

    Missing public API: the build `fit` runs before its first step (`Trainer._maybe_symbolic_build`) cannot be
    turned off for a model that is already built.
    """
    build = model._maybe_symbolic_build

    def maybe_symbolic_build(iterator=None, data_batch=None):
        if not skip():
            build(iterator=iterator, data_batch=data_batch)

    object.__setattr__(model, "_maybe_symbolic_build", maybe_symbolic_build)


def adam_slots(optimizer, variable):
    """The first and second moment variables of a built Keras `Adam` for `variable`.

    Missing public API: an `Adam` subclass with its own update kernel reads the moments Keras' Adam keeps.
    """
    index = optimizer._get_variable_index(variable)
    return optimizer._momentums[index], optimizer._velocities[index]


def maybe_merge_call(fn, strategy, *args):
    """`fn(strategy, *args)`: in cross-replica context through `merge_call` where `strategy` synchronises that way
    (MirroredStrategy on CPUs), else directly in replica context.

    Missing public API: TensorFlow's `tf.__internal__.distribute.interim.maybe_merge_call`, through which Keras' own
    optimizers and `LossScaleOptimizer` make an update conditional under tf.distribute (a `tf.cond` whose branch
    calls `merge_call` is refused in replica context). Not Keras' but TensorFlow's internal name; kept here with the
    other private names the package relies on.
    """
    import tensorflow as tf

    return tf.__internal__.distribute.interim.maybe_merge_call(fn, strategy, *args)


def replace_layer(model, old, new, attributes):
    """Sets each attribute in `attributes` of the built `model` to the layer `new`; `old` is no longer tracked.

    Missing public API: a built layer locks its tracker, and setting an attribute adds a layer without removing
    the one it replaces (whose weights would still be saved). Keras' own `quantize` unlocks it the same way.
    """
    model._tracker.unlock()
    try:
        model._layers.remove(old)
        for attribute in attributes:
            setattr(model, attribute, new)
    finally:
        model._tracker.lock()


def sublayers(layer):
    """Every layer inside `layer`, at any depth (not `layer` itself).

    Missing public API: `Model.layers` lists the top level only; the adapters (adapters.py) go on `Dense` layers
    inside attention and feed-forward layers.
    """
    return list(layer._flatten_layers(include_self=False))


def base_kernel(dense):
    """The kernel variable of a `Dense` layer with a LoRA adapter; its public `kernel` is the merged tensor.

    Missing public API: with LoRA enabled `Dense.kernel` returns `W + (alpha / rank) A B`, not the variable `W`.
    """
    return dense._kernel


@contextlib.contextmanager
def one_garbage_collection():
    """Runs one `gc.collect()` when the block ends instead of the one Keras runs for every variable it deletes.

    Missing public API: `Layer.__delattr__` collects after each deleted variable; quantizing a model deletes one
    per Dense layer (32 in `tiny`), and each full collection takes 0.1 s in a fresh process and about 0.5 s in
    one holding many objects (a test worker). The variables are freed by the single collection just the same.
    The replacement is process-wide inside the block (a `gc.collect()` from another thread is skipped; Python's
    automatic collection is unaffected) and undone when it ends, also on an error.
    """
    collect = gc.collect
    gc.collect = lambda *args, **kwargs: 0
    try:
        yield
    finally:
        gc.collect = collect
        gc.collect()

