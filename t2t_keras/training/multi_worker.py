"""What Keras 3 `model.fit` needs under MultiWorkerMirroredStrategy: two workarounds, and per-worker input.

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

`per_worker_batches` is what `fit` reads where each worker reads its own part of
the training stream (prepared shards: tasks/data_route.py). It needs no
workaround: Keras 3.15 takes a `tf.distribute.DistributedDataset` as it is
(`TFEpochIterator` distributes only a plain dataset), counts no batches in an
infinite one, and takes `steps_per_epoch` steps from it each epoch.
"""

from keras import ops

from t2t_keras.keras_compat import compiled_loss_and_metrics, skip_symbolic_build
from t2t_keras.training.accumulation import group_micro_batches, split_batches
from t2t_keras.training.resume import stream_without


def logs_as_vectors(step):
    """`step` (a `train_step` or `test_step`) with every logged value reshaped to `(1,)`."""
    return lambda data: {name: ops.reshape(value, (1,)) for name, value in step(data).items()}


def skip_build_when_built(model):
    """Makes `fit` skip its symbolic build of `model` once its weights, compiled loss and metrics are built."""

    def built():
        return model.built and all(c is None or c.built for c in compiled_loss_and_metrics(model))

    skip_symbolic_build(model, built)


def per_worker_batches(strategy, data, position, accumulation_steps=1, skipped=None, split=1):
    """`strategy.distribute_datasets_from_function` over each worker's batches from micro-batch `position` on.

    Args:
      strategy: the run's MultiWorkerMirroredStrategy.
      data: the task's `RunData`, with `per_worker` true.
      position: micro-batches every replica consumed (`resume.InputPosition`).
      accumulation_steps: micro-batches per update; more than 1 groups them on each worker
        (`accumulation.group_micro_batches`), so that every replica takes one group per step.
      skipped: `{start: end}` ranges left out (`resume.stream_without`).
      split: parts each batch is split into (`accumulation.split_batches`), accumulated with the others.
    """

    def dataset_fn(input_context):
        batches = stream_without(lambda at: data.training_batches(at, input_context), position, skipped or {})
        if split > 1:
            batches = split_batches(batches, split)  # each element is one replica's batch
        steps = accumulation_steps * split
        return group_micro_batches(batches, steps) if steps > 1 else batches

    return strategy.distribute_datasets_from_function(dataset_fn)
