"""Workarounds that let Keras 3 `model.fit` run under MultiWorkerMirroredStrategy.

Keras 3.15 breaks `fit` under MultiWorkerMirroredStrategy in two places
(keras-team/keras#20585):

1. before training it averages one batch across workers to build the model
   symbolically, which fails on per-replica values;
2. it reduces every logged metric with `strategy.reduce("MEAN", v, axis=0)`,
   which fails on the scalars `train_step` returns.

`patch_for_multi_worker` skips (1) for a model whose weights, loss and metrics
are already built (the trainer builds them) and makes logged values shape
`(1,)` so (2) averages them across workers. It patches one model instance
only, and only when several workers train together.
"""

from keras import ops


def _as_vectors(logs):
    return {name: ops.reshape(value, (1,)) for name, value in logs.items()}


def patch_for_multi_worker(model):
    """Applies both workarounds to `model` (built and compiled); returns it."""
    original_build = model._maybe_symbolic_build

    def maybe_symbolic_build(iterator=None, data_batch=None):
        compiled = [getattr(model, name, None) for name in ("_compile_loss", "_compile_metrics")]
        if model.built and all(c is None or c.built for c in compiled):
            return
        original_build(iterator=iterator, data_batch=data_batch)

    train_step, test_step = model.train_step, model.test_step
    object.__setattr__(model, "_maybe_symbolic_build", maybe_symbolic_build)
    object.__setattr__(model, "train_step", lambda data: _as_vectors(train_step(data)))
    object.__setattr__(model, "test_step", lambda data: _as_vectors(test_step(data)))
    return model
