"""`translate --alignments` and `translate --markup`: translations with word alignments, or with the source's
inline tags placed in them (`decoding.alignment`, `decoding.tag_placement`).

Each output line is the translation (with `--markup`, the translation with the
tags) and, with `--alignments`, a TAB and the Pharaoh links `i-j` (source word
i, target word j, 0-based, words split at whitespace; with `--markup`, the
words of the text without its tags).

A run translates with its `Translator` and aligns with the same model; a text
SavedModel export translates with its signatures and aligns with the Keras
model it keeps in `assets.extra/` (`runs.load_export`), layer and heads from
the flags or the defaults (an export keeps no `decoding` config).
"""

from t2t_keras.decoding.aligner import Aligner
from t2t_keras.decoding.alignment import DEFAULT_LAYER, format_pharaoh
from t2t_keras.decoding.markup import parse_markup
from t2t_keras.decoding.tag_placement import place_tags
from t2t_keras.errors import check_applicable
from t2t_keras.evaluation.evaluate_run import run_translator
from t2t_keras.runs import load_export, open_run


def run_aligner(run, translator, layer=None, heads=None, rows=None):
    """An `Aligner` over the translator's model; `layer`, `heads`, `rows` None take the run's
    `decoding.alignment_*`."""
    decoding = open_run(run).load_config().decoding
    return Aligner(translator.model, translator.tokenizer,
                   decoding.alignment_layer if layer is None else layer,
                   decoding.alignment_heads if heads is None else heads,
                   decoding.alignment_rows if rows is None else rows)


def run_pipeline(run, layer=None, heads=None, rows=None, model_source="auto", ensemble=(), **translator_options):
    """`(translate, aligner)` of a run: `translator_options` go to `evaluate_run.run_translator`."""
    check_applicable(["an ensemble"] if ensemble else [], "alignments, which read one model's attention: "
                                                          "translate with one --run-dir")
    translator = run_translator(run, model_source, **translator_options)
    return translator.translate, run_aligner(run, translator, layer, heads, rows)


def export_pipeline(export, layer=None, heads=None, rows=None, **options):
    """`(translate, aligner)` of an opened text SavedModel export (`export.opening.open_export`)."""
    model, tokenizer = load_export(export.path)
    aligner = Aligner(model, tokenizer, DEFAULT_LAYER if layer is None else layer, heads, rows or "predicts")
    return (lambda lines: export.translate(lines, **options)), aligner


def parse_lines(lines, origin="<stdin>"):
    """The `MarkedText` of each line; the first bad one is a `MarkupError` naming its line and tag."""
    return [parse_markup(line, f"{origin}:{number}") for number, line in enumerate(lines, start=1)]


def aligned_translations(pipeline, lines, markup=False, alignments=True, origin="<stdin>"):
    """Output lines of `translate --alignments` / `--markup` for `lines` (see the module docstring).

    `pipeline`: a callable returning `(translate, aligner)` (`run_pipeline`, `export_pipeline`), called once
    the markup of every line has been checked.
    """
    marked = parse_lines(lines, origin) if markup else None
    sources = [m.plain for m in marked] if markup else list(lines)
    translate, aligner = pipeline()
    translations = translate(sources)
    out = []
    for index, (translation, pair) in enumerate(zip(translations, aligner.align(sources, translations))):
        text = place_tags(marked[index], translation, pair.links) if markup else translation
        out.append(f"{text}\t{format_pharaoh(pair.links)}" if alignments else text)
    return out
