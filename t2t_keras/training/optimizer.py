"""Adam whose update of each weight is one fused TensorFlow op (on the TensorFlow backend; Keras' Adam elsewhere)."""

import keras

from t2t_keras.keras_compat import adam_slots


@keras.saving.register_keras_serializable(package="t2t_keras")
class FusedAdam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` with the same update, done by TensorFlow's fused `ResourceApplyAdam` kernel.

    Keras' Adam writes the update of each weight as about ten separate ops (two moment updates, the square root,
    the division, three variable writes); on a CPU, where every op is a separate pass over the weight, that is a
    large share of a training step. `ResourceApplyAdam` computes exactly the same rule in one pass:

        m ← m + (1 - β1)(g - m),   v ← v + (1 - β2)(g² - v),
        w ← w - lr·√(1 - β2^t)/(1 - β1^t) · m / (√v + ε).

    It is used for dense gradients of float32 weights under the TensorFlow backend (including inside
    `tf.distribute` updates and XLA); anything else (AMSGrad, sparse `IndexedSlices` gradients, other dtypes, other
    backends) takes Keras' own update. The variables and the checkpoint layout are Keras' Adam's. TensorFlow is
    imported only on the TensorFlow backend.
    """

    def update_step(self, gradient, variable, learning_rate):
        if not self._fusable(gradient, variable):
            return super().update_step(gradient, variable, learning_rate)
        import tensorflow as tf  # _fusable: the TensorFlow backend

        weight = variable.value if isinstance(variable, keras.Variable) else variable
        m, v = (slot.value for slot in adam_slots(self, variable))
        local_step = tf.cast(self.iterations + 1, tf.float32)
        beta_1 = tf.constant(self.beta_1, tf.float32)
        beta_2 = tf.constant(self.beta_2, tf.float32)
        return tf.raw_ops.ResourceApplyAdam(
            var=weight.handle, m=m.handle, v=v.handle,
            beta1_power=tf.pow(beta_1, local_step), beta2_power=tf.pow(beta_2, local_step),
            lr=tf.cast(learning_rate, tf.float32), beta1=beta_1, beta2=beta_2,
            epsilon=tf.constant(self.epsilon, tf.float32), grad=tf.cast(gradient, tf.float32), use_locking=False)

    def _fusable(self, gradient, variable):
        if keras.backend.backend() != "tensorflow" or self.amsgrad or variable.dtype != "float32":
            return False
        import tensorflow as tf

        return not isinstance(gradient, tf.IndexedSlices)
