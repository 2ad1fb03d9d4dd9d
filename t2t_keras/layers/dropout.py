"""Dropout whose mask costs half the random bits of Keras' on TensorFlow (§5.4, residual dropout)."""

import keras


@keras.saving.register_keras_serializable(package="t2t_keras")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with a cheaper mask under TensorFlow (`tf_dropout.dropout16`).

    Keras draws a float32 uniform number for every element, and on a CPU that random generation is the costliest
    elementwise op of a Transformer training step. This layer draws 16 bits per element instead: half the Philox
    work for the same masks' distribution up to the rounding of the rate to a multiple of 2^-16. The seed generator,
    its state in checkpoints and the config are Keras' own. With a `noise_shape`, or another backend (JAX, PyTorch),
    it is Keras' Dropout, and TensorFlow is not imported.
    """

    def call(self, inputs, training=False):
        if not training or self.rate <= 0 or self.noise_shape is not None or keras.backend.backend() != "tensorflow":
            return super().call(inputs, training=training)
        from t2t_keras.layers.tf_dropout import seeded_dropout16  # TensorFlow only

        return seeded_dropout16(inputs, self.rate, self.seed_generator)
