"""Workarounds that let Keras 3 `model.fit` run under MultiWorkerMirroredStrategy.

Keras 3.15 breaks `fit` under MultiWorkerMirroredStrategy in two places
(keras-team/keras#20585):

1. before training it averages one batch across workers to build the model
   symbolically, which fails on per-replica values;
2. it reduces every logged metric with `strategy.reduce("MEAN", v, axis=0)`,
   which fails on the scalars `train_step` returns.

`skip_build_when_built` skips (1) for a model whose weights, loss and metrics
are already built (the trainer builds them), and `logs_as_vectors` makes the
logged values of a step shape `(1,)` so (2) averages them across workers.
`training.steps.set_fit_steps` applies both to one model instance, and only when
several workers train together.
"""

from keras import ops

from t2t_keras.keras_compat import compiled_loss_and_metrics, skip_symbolic_build


def logs_as_vectors(step):
    """`step` (a `train_step` or `test_step`) with every logged value reshaped to `(1,)`."""
    return lambda data: {name: ops.reshape(value, (1,)) for name, value in step(data).items()}


def skip_build_when_built(model):
    """Makes `fit` skip its symbolic build of `model` once its weights, compiled loss and metrics are built."""

    def built():
        return model.built and all(c is None or c.built for c in compiled_loss_and_metrics(model))

    skip_symbolic_build(model, built)
