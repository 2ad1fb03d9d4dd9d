"""The CPU fast path keeps the numbers: a mixed-bfloat16 graph step with XLA-fused elementwise ops, FusedAdam and
16-bit dropout masks trains like the float32 step (§5.3 optimizer, §5.4 dropout and label smoothing)."""

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.model import Transformer
from t2t_keras.switches.clustering import xla_auto_clustering
from t2t_keras.training.loss import LabelSmoothedCrossEntropy
from t2t_keras.training.schedule import make_optimizer
from tests.helpers import TestCase, long_check, random_ids

STEPS, BATCH = 12, 16


def losses(policy, jit, fused):
    """Per-step training losses of a small Transformer on fixed random batches."""
    keras.mixed_precision.set_global_policy(policy)
    try:
        with xla_auto_clustering(fused):  # process-wide inside the block only
            keras.utils.set_random_seed(0)
            model = Transformer(vocab_size=64, hidden_dim=32, num_layers=2, num_heads=4, intermediate_dim=64,
                                dropout=0.1, max_length=32)
            model.build()
            model.compile(optimizer=make_optimizer(32, warmup_steps=4), loss=LabelSmoothedCrossEntropy(0.1),
                          jit_compile=jit)
            source, target = random_ids(STEPS * BATCH, 12, 64, seed=1), random_ids(STEPS * BATCH, 13, 64, seed=2)
            per_step = []
            model.fit((source, target[:, :-1]), target[:, 1:], batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
                      callbacks=[keras.callbacks.LambdaCallback(
                          on_train_batch_end=lambda batch, logs: per_step.append(logs["loss"]))])
            return np.array(per_step)
    finally:
        keras.mixed_precision.set_global_policy("float32")


@long_check
class FastPathTest(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.reference = losses("float32", jit=False, fused=False)  # the plain float32 graph step

    def test_bfloat16_fused_graph_step_trains_like_float32(self):
        fast = losses("mixed_bfloat16", jit=False, fused=True)
        self.assertLess(self.reference[-1], self.reference[0])  # it learns
        # bfloat16 keeps 8 bits of mantissa: the losses agree to about 1% (relative), step for step.
        self.assertAllClose(fast, self.reference, rtol=1e-2)

    def test_fused_elementwise_ops_do_not_change_a_float32_step(self):
        self.assertAllClose(losses("float32", jit=False, fused=True), self.reference, rtol=1e-5)


if __name__ == "__main__":
    tf.test.main()
