"""The quality curve drawn: dev BLEU and training loss against wall-clock minutes (RUN/quality.png).

The points are those `training.quality.QualityCurve` wrote to RUN/quality.json while the run trained. Drawn with
matplotlib's object API on the Agg canvas, as the heatmaps are, and written atomically.
"""

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from t2t_keras.files import write_bytes_atomic
from t2t_keras.inspect.heatmaps import figure_png

BLEU_COLOUR, LOSS_COLOUR = "tab:blue", "tab:orange"


def quality_figure(points, title):
    """A figure of `points` (dicts with `minutes`, `bleu` and `loss`): BLEU on the left axis, loss on the right."""
    figure = Figure(figsize=(7, 4))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    minutes = [point["minutes"] for point in points]
    axes.plot(minutes, [point["bleu"] for point in points], "o-", color=BLEU_COLOUR)
    axes.set_xlabel("wall-clock minutes of training")
    axes.set_ylabel("dev BLEU (sacreBLEU, greedy)", color=BLEU_COLOUR)
    axes.set_xlim(left=0)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    with_loss = [(point["minutes"], point["loss"]) for point in points if point.get("loss") is not None]
    if with_loss:
        loss_axes = axes.twinx()
        loss_axes.plot(*zip(*with_loss), "s--", color=LOSS_COLOUR, markersize=4)
        loss_axes.set_ylabel("training loss", color=LOSS_COLOUR)
    axes.set_title(title, fontsize=10)
    figure.tight_layout()
    return figure


def write_quality_plot(points, path, title="Dev BLEU against wall-clock minutes"):
    """Draws `points` into the PNG file `path` (replaced atomically); returns `path`."""
    write_bytes_atomic(path, figure_png(quality_figure(points, title)))
    return path
