"""Tag placement on the LibreOffice help test pages with markup: agreement with the human translations.

    python bench/bench_markup.py --run-dir runs/base --help-dir /tmp/help-packages [--json bench/results/markup.json]

For each pair of the default corpus's test split whose English holds inline
tags (emphasis, UI items, links, ahelp spans, line breaks, icons; see
`help_markup.py`), the English tags are placed on the words of the human
German translation from the word alignment of the two (one forced-decoding
pass of the run's model over the reference, `decoding.aligner`, layer and
heads from `--layer` / `--heads` / `--rows` or the run's `decoding.alignment_*`), and
compared with where the translators put them (`bench/tag_agreement.py`:
word F1 of each paired tag, exact matches, self-closing tags after the same
word). A baseline that knows no words aligns by relative position.
`--translate` also translates the sources with markup, as `translate --markup`
does, and checks that every tag comes out once, well nested.
"""

import argparse
import collections
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from help_test_pairs import add_arguments, load_pairs, write_json  # noqa: E402

from t2t_keras.artifacts import open_artifact  # noqa: E402
from t2t_keras.decoding.aligner import Aligner  # noqa: E402
from t2t_keras.decoding.alignment import links_from_scores, positional_scores  # noqa: E402
from t2t_keras.decoding.markup import parse_markup  # noqa: E402
from t2t_keras.decoding.tag_placement import place_tags  # noqa: E402
from tag_agreement import summarize, transfer_scores  # noqa: E402


def positional_links(sources, references):
    return [links_from_scores(positional_scores(len(s.split()), len(r.split()))) for s, r in zip(sources, references)]


def run_aligner(artifact, layer=None, heads=None, rows=None):
    """An `Aligner` over the run artifact's model; `layer`, `heads`, `rows` None take the run's
    `decoding.alignment_*`."""
    decoding = artifact.config.decoding
    return Aligner(*artifact.loaded(),
                   decoding.alignment_layer if layer is None else layer,
                   decoding.alignment_heads if heads is None else heads,
                   decoding.alignment_rows if rows is None else rows)


def translated_markup(artifact, aligner, pairs, sources):
    """`{"sentences", "tags", "tags_placed_once", "seconds"}` of translating the sources with their markup."""
    start = time.time()
    translations = artifact.generate(sources, artifact.request()).best
    placed = [place_tags(parse_markup(pair.source), translation, aligned.links) for pair, translation, aligned
              in zip(pairs, translations, aligner.align(sources, translations))]
    wanted = [collections.Counter(t.open_text for t in parse_markup(p.source).tag_list()) for p in pairs]
    found = [collections.Counter(t.open_text for t in parse_markup(text).tag_list()) for text in placed]
    return {"sentences": len(pairs), "tags": sum(sum(c.values()) for c in wanted),
            "tags_placed_once": sum(sum((w & f).values()) for w, f in zip(wanted, found)),
            "seconds": round(time.time() - start, 1)}


def report(results, pairs):
    names = sorted({name for result in results.values() for name in result["by_name"]})
    lines = [f"{len(pairs)} test pairs with markup; word F1 (exact match) per tag", "",
             "| method | tags | unmatched | F1 | exact | " + " | ".join(names) + " |",
             "|---" * (5 + len(names)) + "|"]
    for method, result in results.items():
        by_name = [f"{result['by_name'][n]['f1']:.3f} ({result['by_name'][n]['tags']})" if n in result["by_name"]
                   else "-" for n in names]
        lines.append(f"| {method} | {result['tags']} | {result['unmatched']} | {result['f1']:.3f} | "
                     f"{result['exact']:.3f} | " + " | ".join(by_name) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.add_argument("--layer", type=int, help="decoder layer (default: the run's decoding.alignment_layer)")
    parser.add_argument("--heads", help="comma-separated heads averaged (default: decoding.alignment_heads)")
    parser.add_argument("--rows", choices=("predicts", "reads"), help="default: decoding.alignment_rows")
    parser.add_argument("--translate", action="store_true", help="also translate with markup and check the tags")
    args = parser.parse_args(argv)
    pairs, sources, references = load_pairs(args)
    artifact = open_artifact(args.run_dir, model=args.model)
    heads = None if args.heads is None else [int(h) for h in args.heads.split(",")]
    aligner: Aligner = run_aligner(artifact, args.layer, heads, args.rows)
    attention_links = [pair.links for pair in aligner.align(sources, references)]
    method = f"attention, layer {aligner.layer}, heads {','.join(map(str, aligner.heads))}, rows {aligner.rows}"
    results = {method: summarize(*transfer_scores(pairs, attention_links)),
               "positional baseline": summarize(*transfer_scores(pairs, positional_links(sources, references)))}
    print(report(results, pairs))
    output = {"pairs": len(pairs), "results": results}
    if args.translate:
        output["translated"] = translated_markup(artifact, aligner, pairs, sources)
        print(json.dumps(output["translated"]))
    return write_json(args.json, output)


if __name__ == "__main__":
    sys.exit(main())
