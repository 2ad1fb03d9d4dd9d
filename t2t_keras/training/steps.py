"""The `train_step` and `test_step` that `fit` runs, composed from the run's options in one place.

Three options change a step: the divergence guard (training/guard.py: the update applies only when the loss and
gradients are sound), gradient accumulation (training/accumulation.py: one step takes N micro-batches and makes
one update) and several workers (training/multi_worker.py: logged values shaped `(1,)`, the symbolic build
skipped). `set_fit_steps` composes them in a fixed order: the train step is built from the model (Keras' own
step with its update guarded, or the accumulating step, guarded the same way), then the multi-worker wrapper
reshapes what that step logs. The other order would have the accumulating step replace the wrapped one and
lose the reshape.

The steps are set on the model instance, not by a subclass: the model's class (`Transformer`, the language
models) is what `model.keras` files save and reload, and a training-only subclass would have to be made for
each kind and would be saved in its place.
"""

import keras
import tensorflow as tf

from t2t_keras.keras_compat import loss_tracker, unscale_loss_for_distribution
from t2t_keras.training.accumulation import make_accumulating_train_step
from t2t_keras.training.multi_worker import logs_as_vectors, skip_build_when_built


def updater(model, guard=None):
    """`(loss, gradients, variables) -> None`: the update of a train step, guarded by `guard` when given.

    `loss` is this replica's share of the step's loss (the shares sum to the global batch's loss).
    """
    if guard is None:
        return lambda loss, gradients, variables: model.optimizer.apply_gradients(zip(gradients, variables))
    return lambda loss, gradients, variables: guard.apply(model.optimizer, loss, gradients, variables)


def make_guarded_train_step(model, guard):
    """Keras' own `train_step` (TensorFlow backend, Keras 3.15) with its update made by `guard.apply`: the same
    forward pass, loss, logged loss, gradients and metrics, so a run that never diverges trains as before."""
    update = updater(model, guard)

    def train_step(data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(x, y, y_pred, sample_weight, training=True)
            batch_size = tf.shape(next(i for i in tf.nest.flatten(x) if i is not None))[0]
            loss_tracker(model).update_state(unscale_loss_for_distribution(loss), sample_weight=batch_size)
            scaled = model.optimizer.scale_loss(loss)  # dynamic loss scaling under mixed_float16
        variables = model.trainable_weights
        update(loss, tape.gradient(scaled, variables), variables)
        return model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    return train_step


def set_fit_steps(model, loss_fn, accumulation_steps=1, multi_worker=False, guard=None):
    """Sets `model`'s steps for `fit` (built and compiled: see `trainer.compile_model`); returns `model`.

    Args:
        model: the compiled model; a step left as it is stays Keras' own.
        loss_fn: the compiled `LabelSmoothedCrossEntropy`, summed per token by the accumulating step.
        accumulation_steps: micro-batches per update; more than 1 takes groups from
            `accumulation.group_micro_batches`.
        multi_worker: several workers train together (MultiWorkerMirroredStrategy).
        guard: a `guard.DivergenceGuard` that every update goes through, or None.
    """
    if accumulation_steps == 1 and not multi_worker and guard is None:
        return model
    train_step, test_step = model.train_step, model.test_step
    if accumulation_steps > 1:
        train_step = make_accumulating_train_step(model, loss_fn, accumulation_steps, updater(model, guard))
    elif guard is not None:
        train_step = make_guarded_train_step(model, guard)
    if multi_worker:
        skip_build_when_built(model)
        train_step, test_step = logs_as_vectors(train_step), logs_as_vectors(test_step)
    # object.__setattr__: past Keras' attribute tracking, which a function does not need.
    object.__setattr__(model, "train_step", train_step)
    object.__setattr__(model, "test_step", test_step)
    return model
