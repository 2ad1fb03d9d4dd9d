"""Heatmaps of attention weights: one grid of per-head maps per layer, as PNG bytes.

Figures are built with matplotlib's object API on the Agg canvas (no pyplot,
no global figure state), so they can be drawn from a training callback.
Colours use one fixed scale, 0 to 1, so heads and layers can be compared.
"""

import io
import math

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from t2t_keras.inspect.kinds import KIND_TITLES, KINDS

INCHES_PER_TOKEN = 0.17  # side of one heatmap cell
MIN_MAP_INCHES = 1.0
CHAR_INCHES = 0.6 / 72  # width of one character per point of font size (DejaVu Sans, roughly)
PAD_INCHES = 0.15
TITLE_INCHES = 0.3
COLORBAR_INCHES = 0.9  # colour bar and its label, right of the grid
COLORMAP = "viridis"


def _label_size(count):
    """Font size of axis labels: smaller as the number of tokens grows."""
    return 8 if count <= 20 else 7 if count <= 40 else 5


def _text_inches(tokens, size):
    """Room taken by the longest label of `tokens` at font size `size`, plus padding."""
    return max((len(t) for t in tokens), default=1) * size * CHAR_INCHES + PAD_INCHES


def _draw_head(axes, weights, query_tokens, key_tokens, title):
    """One head's `(queries, keys)` map with a token label on every row and column."""
    image = axes.imshow(weights, cmap=COLORMAP, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    axes.set_title(title, fontsize=9, pad=3)
    axes.set_xticks(range(len(key_tokens)), key_tokens, rotation=90, fontsize=_label_size(len(key_tokens)))
    axes.set_yticks(range(len(query_tokens)), query_tokens, fontsize=_label_size(len(query_tokens)))
    axes.tick_params(length=0, pad=1)
    return image


def _cell_layout(query_tokens, key_tokens):
    """Inches of one grid cell: `(left_label, map_width, bottom_label, map_height)`.

    The layout is computed rather than left to matplotlib's layout engines,
    which draw every figure twice: half the cost of a training-time summary.
    """
    left = _text_inches(query_tokens, _label_size(len(query_tokens)))
    bottom = _text_inches(key_tokens, _label_size(len(key_tokens)))
    width = max(MIN_MAP_INCHES, INCHES_PER_TOKEN * len(key_tokens))
    height = max(MIN_MAP_INCHES, INCHES_PER_TOKEN * len(query_tokens))
    return left, width, bottom, height


def head_grid_figure(weights, query_tokens, key_tokens, title="", columns=4):
    """A figure with one heatmap per head, sized to fit its labels.

    Args:
        weights: `(heads, queries, keys)` attention weights of one layer.
        query_tokens: labels of the rows (the tokens that attend).
        key_tokens: labels of the columns (the tokens attended to).
        title: figure title.
        columns: heads per row of the grid.

    Returns:
        a `matplotlib.figure.Figure` (Agg canvas attached).
    """
    heads = weights.shape[0]
    columns = max(1, min(columns, heads))
    rows = math.ceil(heads / columns)
    left, width, bottom, height = _cell_layout(query_tokens, key_tokens)
    cell_width, cell_height = left + width + PAD_INCHES, TITLE_INCHES + height + bottom
    top = TITLE_INCHES if title else 0.0
    figure_width = cell_width * columns + COLORBAR_INCHES
    figure_height = top + cell_height * rows + PAD_INCHES
    figure = Figure(figsize=(figure_width, figure_height))
    FigureCanvasAgg(figure)
    image = None
    for head in range(heads):
        row, column = divmod(head, columns)
        x = column * cell_width + left
        y = figure_height - top - row * cell_height - TITLE_INCHES - height
        axes = figure.add_axes((x / figure_width, y / figure_height, width / figure_width, height / figure_height))
        image = _draw_head(axes, weights[head], query_tokens, key_tokens, f"head {head}")
    _add_colorbar(figure, image, top, min(height, cell_height * rows - TITLE_INCHES - bottom))
    if title:
        figure.suptitle(title, fontsize=11, y=1 - 0.08 / figure_height, va="top")
    return figure


def _add_colorbar(figure, image, top, bar_height):
    """The heads' one colour bar (they share the 0-1 scale of `_draw_head`) in the figure's right margin, level
    with the first row's maps (under `top` inches of figure title) and `bar_height` inches tall."""
    figure_width, figure_height = figure.get_size_inches()
    bar = figure.add_axes(((figure_width - COLORBAR_INCHES + 0.1) / figure_width,
                           (figure_height - top - TITLE_INCHES - bar_height) / figure_height,
                           0.12 / figure_width, bar_height / figure_height))
    figure.colorbar(image, cax=bar).set_label("attention weight", fontsize=8)
    bar.tick_params(labelsize=7)


def figure_png(figure, dpi=100):
    """The PNG bytes of `figure`."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, facecolor="white")
    return buffer.getvalue()


def layer_title(kind, layer, text=""):
    """Figure title naming the attention kind and layer (and optionally the sentence)."""
    title = f"{KIND_TITLES[kind]}, layer {layer}"
    return f"{title}: {text}" if text else title


def layer_png(maps, kind, layer, dpi=100, columns=4):
    """PNG bytes of the per-head grid of one layer of `maps` (an `AttentionMaps`)."""
    query_tokens, key_tokens = maps.axis_tokens(kind)
    figure = head_grid_figure(maps.weights(kind)[layer], query_tokens, key_tokens,
                              layer_title(kind, layer), columns)
    return figure_png(figure, dpi)


def all_layer_pngs(maps, dpi=100, columns=4):
    """`{(kind, layer): png_bytes}` for every attention kind and layer of `maps`."""
    return {
        (kind, layer): layer_png(maps, kind, layer, dpi, columns)
        for kind in KINDS
        for layer in range(maps.weights(kind).shape[0])
    }
