"""What every view of attention heads shares: one colour per head, and the entropy of a head's attention.

The TensorBoard statistics (`summary`), the HTML page (`html_view`) and the
lines of the paper's figures (`attention_lines`) all use these, so a head has the same
colour and the same entropy everywhere.
"""

import numpy as np

# One colour per head, as in the paper's figures (matplotlib's tab10, then tab20's lighter shades).
HEAD_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94")


def head_color(head):
    """The colour of head `head` (colours repeat after `len(HEAD_COLORS)` heads)."""
    return HEAD_COLORS[head % len(HEAD_COLORS)]


def entropy(weights):
    """Entropy (nats) of each attention distribution over the last axis; 0 · log 0 counts as 0."""
    weights = np.asarray(weights, np.float64)
    logs = np.log(np.where(weights > 0, weights, 1.0))
    return -np.sum(weights * logs, axis=-1)


def head_entropy(weights):
    """Mean entropy (nats) of each head's attention distributions.

    Args:
        weights: `(layers, heads, queries, keys)` attention weights of one sentence
            (an `AttentionMaps.weights(kind)`), each row summing to 1.

    Returns:
        float64 `(layers, heads)`: the mean over queries of `-Σ_k w log w`. 0 is a head
        that puts all its weight on one key; `log(keys)` one that attends uniformly.
    """
    weights = np.asarray(weights, np.float64)
    if weights.ndim != 4:
        raise ValueError(f"weights must be (layers, heads, queries, keys). Received: shape={weights.shape}")
    return np.mean(entropy(weights), axis=-1)
