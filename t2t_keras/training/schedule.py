"""The warmup / inverse-square-root learning-rate schedule and the Adam optimizer of §5.3."""

import keras

from t2t_keras.errors import ConfigError
from t2t_keras.training.optimizer import FusedAdam


@keras.saving.register_keras_serializable(package="t2t_keras")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale · d_model^-0.5 · min(step_num^-0.5, step_num · warmup_steps^-1.5), eq. (3).

    The rate grows linearly for `warmup_steps` updates, peaks at `step_num == warmup_steps`
    with `scale · (d_model · warmup_steps)^-0.5`, and then decays with the inverse square root
    of the step number.

    Step counting: a Keras optimizer calls the schedule with its `iterations` counter, which
    is 0 during the first update. The paper's `step_num` starts at 1 (at 0 the formula gives
    a zero rate, so the first update would be wasted), hence `step_num = iterations + 1`.
    With gradient accumulation (training/accumulation.py) the optimizer still makes one
    `apply_gradients` call per update, so `warmup_steps` keeps meaning weight updates.

    All arithmetic is float32.

    Args:
        hidden_dim: d_model, the model width (512 in the base model).
        warmup_steps: the number of warmup updates (4000 in the paper).
        scale: a constant factor on the whole rate (1.0 in the paper; tensor2tensor's
            `learning_rate_constant`).

    Example:

    >>> schedule = TransformerSchedule(hidden_dim=512, warmup_steps=4000)
    >>> optimizer = keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)

    References:
        Vaswani et al., 2017, §5.3, eq. (3).
    """

    def __init__(self, hidden_dim, warmup_steps=4000, scale=1.0):
        if not isinstance(hidden_dim, int) or hidden_dim <= 0:
            raise ConfigError(f"hidden_dim must be a positive integer. Received: hidden_dim={hidden_dim}")
        if not isinstance(warmup_steps, int) or warmup_steps <= 0:
            raise ConfigError(f"warmup_steps must be a positive integer. Received: warmup_steps={warmup_steps}")
        if not scale > 0:
            raise ConfigError(f"scale must be positive. Received: scale={scale}")
        self.hidden_dim = hidden_dim
        self.warmup_steps = warmup_steps
        self.scale = float(scale)

    def __call__(self, step):
        # The counter is an int64 variable on TensorFlow and an int32 one on JAX (without x64); int32 counts far past
        # any training run on every backend.
        step_num = keras.ops.cast(keras.ops.cast(step, "int32") + 1, "float32")
        warmup = keras.ops.cast(self.warmup_steps, "float32")
        factor = self.scale * self.hidden_dim**-0.5
        return factor * keras.ops.minimum(keras.ops.rsqrt(step_num), step_num * warmup**-1.5)

    def get_config(self):
        return {
            "hidden_dim": self.hidden_dim,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
        }

    @classmethod
    def from_config(cls, config):
        # Models saved before the optimizer-side accumulation was removed carry `gradient_accumulation_steps: 1`.
        return cls(**{key: value for key, value in config.items() if key != "gradient_accumulation_steps"})


def make_optimizer(
    hidden_dim,
    warmup_steps=4000,
    scale=1.0,
    beta_1=0.9,
    beta_2=0.98,
    epsilon=1e-9,
    clipnorm=None,
    constant=None,
):
    """Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9 on the schedule of eq. (3), or at a constant rate.

    Args:
        hidden_dim: d_model.
        warmup_steps: warmup length in weight updates.
        scale: constant factor on the learning rate.
        beta_1, beta_2, epsilon: Adam's hyper-parameters (the paper's values by default).
        clipnorm: optional per-variable gradient norm clipping (not used in the paper).
        constant: a constant learning rate instead of the schedule (`training.learning_rate`; fine-tuning).

    Returns:
        A `FusedAdam`: `keras.optimizers.Adam`'s update, one fused op per weight.

    References:
        Vaswani et al., 2017, §5.3.
    """
    schedule = TransformerSchedule(hidden_dim, warmup_steps=warmup_steps, scale=scale) if constant is None else constant
    return FusedAdam(learning_rate=schedule, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, clipnorm=clipnorm)
