"""Attention drawn as lines, as in the paper's Figures 3-5 (notebook 02 draws them).

The figures use matplotlib's object API on the Agg canvas, like `inspect.heatmaps`,
so they can be saved without a display; in Jupyter, `display(figure)` shows them.
"""

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from t2t_keras.inspect.heads import head_color

MIN_WEIGHT = 0.02  # lines below this weight are not drawn: they would be invisible anyway
ROW_INCHES = 0.22


def attention_lines_figure(weights, query_tokens, key_tokens, heads=None, query=None, title="",
                           min_weight=MIN_WEIGHT):
    """Attention as lines from the tokens that attend (left) to the tokens attended to (right).

    The drawing of the paper's Figures 3-5: one line per (query, key, head), in the head's
    colour, with opacity equal to the weight. Figure 3 shows one query token and all heads
    (`query=index`); Figures 4 and 5 show every token for one or two heads (`heads=[h]`).

    Args:
        weights: `(heads, queries, keys)` attention weights of one layer.
        query_tokens: labels of the left column (`queries` of them).
        key_tokens: labels of the right column (`keys` of them).
        heads: indices of the heads to draw; None draws all.
        query: index of the only query token to draw, or None for all.
        title: figure title.
        min_weight: weights below this are not drawn.

    Returns:
        a `matplotlib.figure.Figure` (Agg canvas attached); its axes hold one
        `Line2D` per drawn line, labelled `head {h}`.
    """
    weights = _checked_weights(weights, query_tokens, key_tokens)
    heads = list(range(weights.shape[0])) if heads is None else list(heads)
    queries = list(range(len(query_tokens))) if query is None else [query]
    rows = max(len(query_tokens), len(key_tokens))
    figure, axes = _empty_figure(rows, title)
    y_query = _positions(len(query_tokens), rows)
    y_key = _positions(len(key_tokens), rows)
    _draw_lines(axes, weights, heads, queries, y_query, y_key, min_weight)
    _draw_labels(axes, query_tokens, key_tokens, y_query, y_key, query)
    _finish(figure, axes, rows, title)
    return figure


def _checked_weights(weights, query_tokens, key_tokens):
    """`weights` as float64 `(heads, queries, keys)`; ValueError if they do not match the token labels."""
    weights = np.asarray(weights, np.float64)
    if weights.ndim != 3 or weights.shape[1:] != (len(query_tokens), len(key_tokens)):
        raise ValueError(
            f"weights must be (heads, {len(query_tokens)} queries, {len(key_tokens)} keys). "
            f"Received: shape={weights.shape}"
        )
    return weights


def _empty_figure(rows, title):
    """A figure (Agg canvas) sized for `rows` token rows and its axes, leaving room for `title` if any."""
    figure = Figure(figsize=(4.5, 0.6 + ROW_INCHES * rows))
    FigureCanvasAgg(figure)
    axes = figure.add_axes((0.25, 0.02, 0.5, 0.96 - (0.4 if title else 0.1) / figure.get_figheight()))
    return figure, axes


def _draw_lines(axes, weights, heads, queries, y_query, y_key, min_weight):
    """One line per (head, query, key) with weight >= `min_weight`: the head's colour, the weight as opacity."""
    for h in heads:
        color = head_color(h)
        for q in queries:
            for k in np.flatnonzero(weights[h, q] >= min_weight):
                axes.plot([0, 1], [y_query[q], y_key[k]], color=to_rgba(color, min(1.0, weights[h, q, k])),
                          linewidth=2, label=f"head {h}")


def _draw_labels(axes, query_tokens, key_tokens, y_query, y_key, query):
    """The query tokens right-aligned on the left (the drawn `query` in bold), the key tokens on the right."""
    for y, token, index in zip(y_query, query_tokens, range(len(query_tokens))):
        weight = "bold" if query is not None and index == query else "normal"
        axes.text(-0.03, y, token, ha="right", va="center", fontsize=9, family="monospace", fontweight=weight)
    for y, token in zip(y_key, key_tokens):
        axes.text(1.03, y, token, ha="left", va="center", fontsize=9, family="monospace")


def _finish(figure, axes, rows, title):
    """Limits that fit the rows (first token at the top), no axis lines, and the title if any."""
    axes.set_xlim(0, 1)
    axes.set_ylim(rows - 0.5, -0.5)
    axes.axis("off")
    if title:
        figure.suptitle(title, fontsize=10)


def _positions(count, rows):
    """Row positions of `count` tokens, centred in a column of `rows` rows."""
    return np.arange(count) + (rows - count) / 2.0
