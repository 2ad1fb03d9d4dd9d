"""The LibreOffice help test pairs with inline markup, shared by `bench_markup.py` and `bench_alignment_layers.py`.

The help packages are unpacked under `--help-dir` (as `t2t_keras.data.libreoffice.fetch_packages` leaves
them: DIR/libreoffice-help-en-us, DIR/libreoffice-help-<lang>), downloaded with `apt-get download` when
missing. The pairs are those of the default corpus's test (or dev) split whose English holds a tag
(`help_markup.marked_split_pairs`; `--split dev` takes the dev pages, to choose settings on
them before measuring on test).
"""

import json
import pathlib

from help_markup import marked_split_pairs

from t2t_keras.data import help_html, libreoffice
from t2t_keras.decoding.markup import parse_markup


def add_arguments(parser):
    parser.add_argument("--run-dir", required=True, help="a trained translation run (English to --lang)")
    parser.add_argument("--help-dir", default="help-packages",
                        help="where the unpacked help packages are, or are downloaded to (default: ./help-packages)")
    parser.add_argument("--lang", default="de", help="the run's target language (default de)")
    parser.add_argument("--model", default="auto", help="which weights of the run (auto, latest, best, ...)")
    parser.add_argument("--split", default="test", choices=("dev", "test"),
                        help="the help pages measured: the corpus's test split (default), or dev to choose on")
    parser.add_argument("--limit", type=int, help="use only the first N pairs")
    parser.add_argument("--json", help="also write the results to this JSON file")


def help_roots(help_dir, lang):
    """The English and the `lang` help roots under `help_dir`, fetched first when missing."""
    help_dir = pathlib.Path(help_dir)
    names = [libreoffice.SOURCE_PACKAGE, libreoffice.package_name(lang)]
    roots = [help_html.find_help_root(help_dir / name) if (help_dir / name).is_dir() else None for name in names]
    if None in roots:
        libreoffice.fetch_packages(names, help_dir)
        roots = [help_html.find_help_root(help_dir / name) for name in names]
    return roots


def load_pairs(args):
    """`(pairs, sources, references)`: the marked test pairs and the plain text of both sides."""
    pairs = marked_split_pairs(*help_roots(args.help_dir, args.lang), args.split)[:args.limit]
    sources = [parse_markup(pair.source, pair.page).plain for pair in pairs]
    references = [parse_markup(pair.target, pair.page).plain for pair in pairs]
    return pairs, sources, references


def write_json(path, data):
    """Writes `data` to `path` (nothing when `path` is None); returns 0, the scripts' exit status."""
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
    return 0
