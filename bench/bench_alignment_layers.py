"""Which decoder layer and heads give the best word alignments: agreement with eflomal and with the help's tags.

    pip install eflomal   # bench-only dependency (optional: without it, only the tag agreement is measured)
    python bench/bench_alignment_layers.py --run-dir runs/base --help-dir /tmp/help-packages [--json out.json]

For every decoder layer, with all heads averaged and with each head alone,
and for both rows a target piece can take (`predicts`: the step that outputs
it; `reads`: the step that reads it), the alignments of `decoding.aligner`
are measured against:

- eflomal (Östling and Tiedemann, 2016; a Bayesian IBM-model aligner, fast and
  among the best statistical aligners, pip-installable): trained on the run's
  training pairs plus the test pairs (lowercased whitespace words) and run in
  both directions; links both directions give are *sure*, links either gives
  *possible*. AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|) on the run's test split
  (`--split dev`: dev; or its first `--limit-plain` pairs), lower is better.
- the LibreOffice help test (or dev) pairs with markup: word F1 of the tags
  placed on the human translation (as `bench_markup.py`), higher is better.

Choose on `--split dev`, then measure the choice on test with `bench_markup.py`:
a head picked among many on the pairs it is measured on flatters itself.
"""

import argparse
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from help_test_pairs import add_arguments, load_pairs, write_json  # noqa: E402

from t2t_keras.decoding.aligner import Aligner, aligned_pair  # noqa: E402
from t2t_keras.decoding.alignment import ROWS, parse_pharaoh  # noqa: E402
from t2t_keras.evaluation.evaluate_run import load_eval_pairs  # noqa: E402
from tag_agreement import summarize, transfer_scores  # noqa: E402
from t2t_keras.runs import load_run  # noqa: E402


def choices_of(model):
    """`(layer, heads)` choices: each layer with all heads (None) and with each head alone."""
    layers, heads = model.num_decoder_layers or model.num_layers, model.num_heads
    return [(layer, None) for layer in range(layers)] + [(layer, (h,)) for layer in range(layers) for h in range(heads)]


def choice_links(aligner, sources, targets, choices):
    """`{choice: [links per pair]}`, the attention of every layer and head computed once per pair."""
    found = {choice: [] for choice in choices}
    for source, target, attention in aligner.attention(sources, targets):
        for layer, heads in choices:
            weights = attention[layer] if heads is None else attention[layer, list(heads)]
            found[(layer, heads)].append(aligned_pair(weights.mean(axis=0), source, target).links)
    return found


def eflomal_links(sources, targets, extra_pairs):
    """`(sure, possible)` link sets per pair: eflomal's two directions intersected and joined."""
    import eflomal

    def words(lines):
        return [" ".join(line.lower().split()) for line in lines]

    with tempfile.TemporaryDirectory() as tmp:
        forward, reverse = f"{tmp}/fwd", f"{tmp}/rev"
        eflomal.Aligner().align(words(sources + [s for s, _ in extra_pairs]),
                                words(targets + [t for _, t in extra_pairs]),
                                links_filename_fwd=forward, links_filename_rev=reverse, quiet=True)
        directions = [[set(parse_pharaoh(line)) for line in open(path, encoding="utf-8")] for path in (forward,
                                                                                                      reverse)]
    return [(f & r, f | r) for f, r in zip(*(d[:len(sources)] for d in directions))]


def aer(predicted, reference):
    """Alignment error rate of link lists against `(sure, possible)` sets, over the whole corpus."""
    hits_sure = hits_possible = size = sure_size = 0
    for links, (sure, possible) in zip(predicted, reference):
        links = set(links)
        hits_sure, hits_possible = hits_sure + len(links & sure), hits_possible + len(links & possible)
        size, sure_size = size + len(links), sure_size + len(sure)
    return 1.0 - (hits_sure + hits_possible) / max(size + sure_size, 1)


def measure(model, tokenizer, args):
    pairs, sources, references = load_pairs(args)
    plain = load_eval_pairs(args.run_dir, args.split)[:args.limit_plain]
    reference = None
    try:
        reference = eflomal_links([s for s, _ in plain], [t for _, t in plain], load_eval_pairs(args.run_dir, "train"))
    except ImportError:
        print("eflomal is not installed (pip install eflomal): measuring the tag agreement only", file=sys.stderr)
    rows = []
    for row_choice in ROWS:
        aligner = Aligner(model, tokenizer, rows=row_choice)
        choices = choices_of(model)
        tags = choice_links(aligner, sources, references, choices)
        agreement = choice_links(aligner, [s for s, _ in plain], [t for _, t in plain], choices) if reference else {}
        for choice in choices:
            result = summarize(*transfer_scores(pairs, tags[choice]))
            rows.append({"rows": row_choice, "layer": choice[0], "heads": "all" if choice[1] is None else choice[1][0],
                         "tag_f1": result["f1"], "tag_exact": result["exact"],
                         "aer": aer(agreement[choice], reference) if reference else None})
    return {"markup_pairs": len(pairs), "plain_pairs": len(plain), "rows": rows}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.add_argument("--limit-plain", type=int, help="AER on the first N test pairs only")
    args = parser.parse_args(argv)
    model, tokenizer = load_run(args.run_dir, args.model)
    result = measure(model, tokenizer, args)
    print(f"{result['markup_pairs']} markup pairs, {result['plain_pairs']} plain pairs for AER\n")
    print("| rows | layer | heads | AER vs eflomal | tag F1 | tag exact |\n|---|---|---|---|---|---|")
    for row in result["rows"]:
        aer_text = "-" if row["aer"] is None else f"{row['aer']:.3f}"
        print(f"| {row['rows']} | {row['layer']} | {row['heads']} | {aer_text} | {row['tag_f1']:.3f} | "
              f"{row['tag_exact']:.3f} |")
    return write_json(args.json, result)


if __name__ == "__main__":
    sys.exit(main())
