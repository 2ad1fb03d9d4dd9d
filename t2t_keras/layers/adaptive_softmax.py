"""Adaptive softmax (Grave et al., 2017): a full vocabulary distribution at a fraction of the cost."""

import keras
from keras import ops

from t2t_keras.layers.dense import Dense


@keras.saving.register_keras_serializable(package="t2t_keras")
class AdaptiveSoftmax(keras.layers.Layer):
    """log p(w | h) over the whole vocabulary with a head and smaller tail clusters.

    The ids below `cutoffs[0]` (the frequent tokens: SentencePiece numbers
    pieces by score, roughly by frequency) form the head, which also holds
    one entry per tail cluster; cluster `i` covers `[cutoffs[i],
    cutoffs[i + 1])` (the last one ends at `vocab_size`) and sees `h` through a
    projection to `hidden_dim / tail_factor**(i + 1)` dimensions:

        log p(w) = log p_head(w)                                  w in the head
        log p(w) = log p_head(cluster i) + log p_i(w | cluster i)  w in cluster i

    Every cluster is computed for every position (no gathers, so shapes stay
    static for XLA): the saving comes from the tails' reduced dimensions. With
    no cutoffs it is a full softmax over one projection.

    Args:
        vocab_size: V.
        cutoffs: increasing ids in `(0, vocab_size)` where the clusters start.
        tail_factor: each cluster's projection is this many times narrower than the previous.

    Call arguments:
        hidden: `(..., hidden_dim)`.

    Returns:
        float32 log-probabilities `(..., vocab_size)`, normalised over the
        vocabulary (so a log-softmax leaves them unchanged).

    References:
        Grave et al., 2017, "Efficient softmax approximation for GPUs".
    """

    def __init__(self, vocab_size, cutoffs=(), tail_factor=4, **kwargs):
        super().__init__(**kwargs)
        cutoffs = [int(c) for c in cutoffs]
        if any(b <= a for a, b in zip([0] + cutoffs, cutoffs + [vocab_size])):
            raise ValueError(f"cutoffs must increase strictly within (0, vocab_size={vocab_size}). "
                             f"Received: cutoffs={cutoffs}")
        if tail_factor < 1:
            raise ValueError(f"tail_factor must be >= 1. Received: tail_factor={tail_factor}")
        self.vocab_size = vocab_size
        self.cutoffs = cutoffs
        self.tail_factor = tail_factor

    def _dense(self, units, name):
        return Dense(units, use_bias=False, dtype=self.dtype_policy, name=name)

    def build(self, input_shape):
        hidden_dim = input_shape[-1]
        bounds = self.cutoffs + [self.vocab_size]
        self.head = self._dense(bounds[0] + len(self.cutoffs), "head")
        self.head.build(input_shape)
        self.tails = []
        for i, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
            width = max(1, hidden_dim // self.tail_factor ** (i + 1))
            projection, output = self._dense(width, f"tail_{i}_projection"), self._dense(end - start, f"tail_{i}")
            projection.build(input_shape)
            output.build(tuple(input_shape[:-1]) + (width,))
            setattr(self, f"tail_{i}_projection", projection)  # one attribute each: checkpoints follow them
            setattr(self, f"tail_{i}", output)
            self.tails.append((projection, output))

    def call(self, hidden):
        head = ops.log_softmax(ops.cast(self.head(hidden), "float32"), axis=-1)  # (..., cutoffs[0] + clusters)
        shortlist = self.cutoffs[0] if self.cutoffs else self.vocab_size
        parts = [head[..., :shortlist]]
        for i, (projection, output) in enumerate(self.tails):
            tail = ops.log_softmax(ops.cast(output(projection(hidden)), "float32"), axis=-1)
            parts.append(head[..., shortlist + i:shortlist + i + 1] + tail)
        return ops.concatenate(parts, axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update({"vocab_size": self.vocab_size, "cutoffs": list(self.cutoffs), "tail_factor": self.tail_factor})
        return config
