"""The `train_step` and `test_step` that `fit` runs, composed from the run's options in one place.

Two options change a step: gradient accumulation (training/accumulation.py: one step takes N micro-batches
and makes one update) and several workers (training/multi_worker.py: logged values shaped `(1,)`, the
symbolic build skipped). `set_fit_steps` composes them in a fixed order: accumulation first builds the step
from the model, then the multi-worker wrapper reshapes what that step logs. The other order would have the
accumulating step replace the wrapped one and lose the reshape.

The steps are set on the model instance, not by a subclass: the model's class (`Transformer`, the language
models) is what `model.keras` files save and reload, and a training-only subclass would have to be made for
each kind and would be saved in its place.
"""

from t2t_keras.training.accumulation import make_accumulating_train_step
from t2t_keras.training.multi_worker import logs_as_vectors, skip_build_when_built


def set_fit_steps(model, loss_fn, accumulation_steps=1, multi_worker=False):
    """Sets `model`'s steps for `fit` (built and compiled: see `trainer.compile_model`); returns `model`.

    Args:
        model: the compiled model; a step left as it is stays Keras' own.
        loss_fn: the compiled `LabelSmoothedCrossEntropy`, summed per token by the accumulating step.
        accumulation_steps: micro-batches per update; more than 1 takes groups from
            `accumulation.group_micro_batches`.
        multi_worker: several workers train together (MultiWorkerMirroredStrategy).
    """
    if accumulation_steps == 1 and not multi_worker:
        return model
    train_step, test_step = model.train_step, model.test_step
    if accumulation_steps > 1:
        train_step = make_accumulating_train_step(model, loss_fn, accumulation_steps)
    if multi_worker:
        skip_build_when_built(model)
        train_step, test_step = logs_as_vectors(train_step), logs_as_vectors(test_step)
    # object.__setattr__: past Keras' attribute tracking, which a function does not need.
    object.__setattr__(model, "train_step", train_step)
    object.__setattr__(model, "test_step", test_step)
    return model
