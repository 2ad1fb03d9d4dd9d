"""`t2t-keras inspect`: the attention of a trained run on one sentence, as PNG heatmaps and an HTML page."""

import dataclasses
import pathlib

from t2t_keras.decoding.request import DEFAULTS
from t2t_keras.errors import T2TError, check_task
from t2t_keras.inspect.attention import extract_attention
from t2t_keras.inspect.heatmaps import all_layer_pngs
from t2t_keras.inspect.html_view import write_html
from t2t_keras.runs import load_export, load_run, open_run

HTML_NAME = "attention.html"


@dataclasses.dataclass
class InspectResult:
    """What `inspect_run` wrote.

    Attributes:
        html: path of the interactive page.
        images: `{(kind, layer): path}` of the PNG heatmaps, one per attention kind and layer.
        maps: the `AttentionMaps` they show.
    """

    html: pathlib.Path
    images: dict
    maps: object


def image_name(kind, layer):
    """File name of the heatmap grid of one attention kind and layer, e.g. `cross_layer_0.png`."""
    return f"{kind}_layer_{layer}.png"


def _load_model_and_tokenizer(path, checkpoint):
    """A translation run's model and tokenizer (its `checkpoint` weights), or those a text export keeps."""
    if path is None:
        raise T2TError("Give the run directory or the text export to inspect (path=...).")
    run = open_run(path)
    if not run.exists():
        return load_export(path)
    check_task("inspect", run.load_config().task, run.path)
    return load_run(run, source=checkpoint)


def inspect_run(path=None, text=None, out=None, reference=None, checkpoint="auto",
                max_extra_length=DEFAULTS.max_extra_length, dpi=100):
    """Writes the attention of a trained model on `text` to the directory `out`.

    The translation inspected is the model's own greedy hypothesis, or
    `reference` when given. `out` receives one PNG per attention kind and layer
    (`encoder_layer_0.png`, `decoder_self_layer_0.png`, `cross_layer_0.png`,
    ...; each a grid of per-head heatmaps) and `attention.html`, a
    self-contained interactive page.

    Args:
        path: a translation run directory (its model and tokenizer are used), or
            a text export of `t2t-keras export`: its signatures return
            translations only, so the Keras model and tokenizer it keeps in
            `assets.extra/` are used.
        text: the source sentence.
        out: output directory, created if needed.
        reference: a target sentence to inspect instead of the model's translation.
        checkpoint: which weights of the run: "auto", "averaged" or "latest"
            (see `runs.load_run_model`).
        max_extra_length: output limit of the greedy translation (input length + this).
        dpi: resolution of the PNG files.

    Returns:
        `InspectResult`.
    """
    if not text or not str(text).strip():
        raise T2TError(f"Give a source sentence to inspect. Received: text={text!r}")
    if out is None:
        raise T2TError("Give an output directory (out=...).")
    model, tokenizer = _load_model_and_tokenizer(path, checkpoint)
    maps = extract_attention(model, tokenizer, text, reference, max_extra_length)
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    images = _write_heatmaps(maps, out, dpi)
    html = write_html(maps, out / HTML_NAME, title=f"Attention of {pathlib.Path(path).name}")
    return InspectResult(html=html, images=images, maps=maps)


def _write_heatmaps(maps, out, dpi):
    """One PNG of per-head heatmaps per attention kind and layer in `out`: `{(kind, layer): path}`."""
    images = {}
    for (kind, layer), png in all_layer_pngs(maps, dpi).items():
        images[(kind, layer)] = out / image_name(kind, layer)
        images[(kind, layer)].write_bytes(png)
    return images
