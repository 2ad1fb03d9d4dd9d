"""Keep the best, stop early (OpenNMT-tf `export_on_best`, fairseq `--best-checkpoint-metric --patience`).

Every `training.eval_every_steps` updates (and at `training.train_steps`) `KeepBest` measures the
model on the dev split: sacreBLEU of a compiled greedy (or beam) search on a fixed sample of at
most `training.eval_sentences` dev sentences, and the dev loss (label-smoothed cross-entropy per
dev target token, the validation loss). Both go to TensorBoard (`RUN/logs/eval/`: `dev_bleu`,
`dev_loss`) and to the log. When `training.best_metric` improved, RUN/best/ is replaced
atomically by the model's weights and best.json (step, metric, value); after
`training.early_stopping_patience` evaluations without improvement the run stops.

The best value, its step and the evaluations since then live in `BestState`, saved with every
checkpoint, so a resumed run compares against the earlier best and keeps counting towards its
patience. A checkpoint is written after each evaluation, so the latest checkpoint and RUN/best/
agree on the best state.
"""

import logging
import math

import keras
import numpy as np
import sacrebleu
import tensorflow as tf
from keras import ops

from t2t_keras.decoding.generator import Generator
from t2t_keras.training.loss import token_weights

logger = logging.getLogger(__name__)

METRICS = ("bleu", "loss")
HIGHER_IS_BETTER = {"bleu": True, "loss": False}


class BestState(tf.Module):
    """The best value so far (NaN before the first evaluation), its step, and evaluations since it."""

    def __init__(self):
        super().__init__(name="best_state")
        self.value = tf.Variable(math.nan, dtype=tf.float64, trainable=False, name="value")
        self.step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="step")
        self.stale = tf.Variable(0, dtype=tf.int64, trainable=False, name="evaluations_since_best")

    def update(self, metric, value, step):
        """Records an evaluation; returns True when `value` improves on the best (the first one always does)."""
        best = float(self.value.numpy())
        better = math.isnan(best) or (value > best if HIGHER_IS_BETTER[metric] else value < best)
        if better:
            self.value.assign(value)
            self.step.assign(step)
            self.stale.assign(0)
        else:
            self.stale.assign_add(1)
        return better

    def exhausted(self, patience):
        """True when `patience` > 0 evaluations in a row brought no improvement."""
        return patience > 0 and int(self.stale.numpy()) >= patience


def sample_pairs(pairs, count, seed):
    """A fixed sample of at most `count` pairs, in corpus order (the same for a seed)."""
    pairs = list(pairs)
    if len(pairs) <= count:
        return pairs
    chosen = np.sort(np.random.default_rng(seed).choice(len(pairs), size=count, replace=False))
    return [pairs[i] for i in chosen]


class DevEvaluator:
    """`evaluator() -> {"bleu": float, "loss": float}` for the current weights of `model`.

    Args:
        model: the model being trained.
        tokenizer: the run's tokenizer.
        pairs: (source, reference) dev pairs translated for BLEU.
        dataset: the dev batches `((source, target_in), target_out, weight)`; `steps` of them are one pass.
        steps: batches in one pass over `dataset`.
        loss_fn: the `LabelSmoothedCrossEntropy` of training.
        request: the search's `GenerationRequest` (beam size 1: greedy search).
        jit_compile: compile the search with XLA.
    """

    def __init__(self, model, tokenizer, pairs, dataset, steps, loss_fn, request, jit_compile=True):
        self.sources = [source for source, _ in pairs]
        self.references = [reference for _, reference in pairs]
        self.dataset, self.steps, self.loss_fn = dataset, steps, loss_fn
        self.generator, self.request = Generator(model, tokenizer, jit_compile=jit_compile, progress=False), request
        self.model = model
        self._loss_sums = tf.function(self._batch_loss_sums, autograph=False)

    def _batch_loss_sums(self, x, y, sample_weight):
        logits = self.model(x, training=False)
        weights = token_weights(y, self.loss_fn.pad_id, sample_weight)
        return ops.sum(self.loss_fn.call(y, logits) * weights), ops.sum(weights)

    def loss(self):
        total, tokens = 0.0, 0.0
        for x, y, sample_weight in self.dataset.take(self.steps):
            loss_sum, count = self._loss_sums(x, y, sample_weight)
            total, tokens = total + float(loss_sum), tokens + float(count)
        return total / max(tokens, 1.0)

    def bleu(self):
        hypotheses = self.generator.generate(self.sources, self.request).best
        return sacrebleu.metrics.BLEU().corpus_score(hypotheses, [self.references]).score

    def __call__(self):
        return {"bleu": self.bleu(), "loss": self.loss()}


class KeepBest(keras.callbacks.Callback):
    """Evaluates every `every_steps` updates; keeps the best weights; stops after `patience` evaluations.

    Args:
        evaluate: `() -> {"bleu": ..., "loss": ...}`, e.g. a `DevEvaluator`.
        state: the `BestState` saved with the run's checkpoints.
        write_best: `(model, info)` -> None: replaces the best checkpoint (`RunDirectory.write_best`).
        every_steps: evaluate after every this many optimizer updates.
        metric: "bleu" (higher is better) or "loss" (lower is better).
        patience: stop after this many evaluations without improvement; 0 = never.
        final_step: also evaluate at this step (training.train_steps).
        log_dir: TensorBoard directory of the dev scalars, or None.
        save_checkpoint: `() -> None` called after each evaluation (the checkpoint manager's save).
    """

    def __init__(self, evaluate, state, write_best, every_steps, metric="bleu", patience=0, final_step=None,
                 log_dir=None, save_checkpoint=None):
        super().__init__()
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}. Received: metric={metric!r}")
        self.evaluate, self.state, self.write_best = evaluate, state, write_best
        self.every_steps, self.metric, self.patience, self.final_step = every_steps, metric, patience, final_step
        self.log_dir, self.save_checkpoint = log_dir, save_checkpoint
        self._writer = None
        self._last_step = None

    def on_train_begin(self, logs=None):
        if self.log_dir is not None:
            self._writer = tf.summary.create_file_writer(str(self.log_dir))

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        due = step % self.every_steps == 0 or step == self.final_step
        if due and step > 0 and step != self._last_step:  # a skipped update leaves the step unchanged
            self._last_step = step
            self._evaluate(step)

    def _evaluate(self, step):
        scores = {name: float(value) for name, value in self.evaluate().items()}
        if self._writer is not None:
            with self._writer.as_default(step=step):
                for name, value in scores.items():
                    tf.summary.scalar(f"dev_{name}", value)
            self._writer.flush()
        value = scores[self.metric]
        improved = self.state.update(self.metric, value, step)
        if improved:
            self.write_best(self.model, {"step": step, "metric": self.metric, "value": value, "scores": scores})
        logger.info("Step %d: dev BLEU %.2f, dev loss %.4f; %s", step, scores.get("bleu", math.nan),
                    scores.get("loss", math.nan), self._verdict(improved))
        if self.save_checkpoint is not None:
            self.save_checkpoint()
        if self.state.exhausted(self.patience):
            logger.info("Early stopping at step %d: dev %s has not improved for %d evaluations (best %.4f at "
                        "step %d, training.early_stopping_patience=%d).", step, self.metric, self.patience,
                        float(self.state.value.numpy()), int(self.state.step.numpy()), self.patience)
            self.model.stop_training = True

    def _verdict(self, improved):
        best, at = float(self.state.value.numpy()), int(self.state.step.numpy())
        if improved:
            return f"new best dev {self.metric} {best:.4f}, saved to best/"
        return (f"best dev {self.metric} {best:.4f} at step {at}, no improvement for "
                f"{int(self.state.stale.numpy())} evaluation(s)")

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None
