"""Forced decoding: the negative log-likelihood a model gives each given translation.

As OpenNMT-tf's `score`, fairseq's `--score-reference` and `marian-scorer`;
the computation is `decoding.forced.token_nll` (a run), a SavedModel's `score`
signature or CTranslate2's `score_batch`, behind the artifacts' `score`.

    artifact = open_artifact("runs/base")                 # or "exports/base", "exports/base-ct2"
    pairs = read_score_pairs("test.en", "test.de", artifact.max_length, artifact.piece_lengths)
    pairs = read_tab_separated_pairs(sys.stdin.buffer.read(), "<stdin>", ...)   # SOURCE<TAB>TARGET lines
    results = artifact.score(pairs)                       # input order; results[i].nll, .token_nll
"""

import dataclasses
import json

from t2t_keras.data.text_files import decode_text, read_user_file
from t2t_keras.errors import DataError


@dataclasses.dataclass(frozen=True)
class ScorePair:
    """One line of each file, with its 1-based line number and piece counts (EOS excluded)."""

    line: int
    source: str
    target: str
    source_pieces: int
    target_pieces: int


def read_score_pairs(source_path, target_path, max_length, piece_lengths):
    """Reads two aligned files strictly: every pair present, non-empty, UTF-8 and within `max_length`.

    Args:
        source_path, target_path: one sentence per line; line i of the target
            is the translation of line i of the source.
        max_length: the model's limit in tokens, EOS (or BOS) included.
        piece_lengths: `piece_lengths(list of str) -> list of int`, the
            tokenizer's piece counts.

    Returns:
        a list of `ScorePair`, in file order.

    Raises:
        DataError: naming the file, the line and the fix.
    """
    sources, targets = _read(source_path), _read(target_path)
    if len(sources) != len(targets):
        raise DataError(f"{source_path} has {len(sources)} lines but {target_path} has {len(targets)}: "
                        "parallel files must be aligned line by line. Fix the files so that line i of one "
                        "translates line i of the other.")
    return checked_pairs(sources, targets, (source_path, target_path), max_length, piece_lengths,
                         "Remove the pair from both files.")


def read_tab_separated_pairs(data, origin, max_length, piece_lengths):
    """`read_score_pairs` of `SOURCE<TAB>TARGET` lines (bytes, e.g. stdin; `origin` names them in errors)."""
    lines = decode_text(data, origin)
    if not lines:
        raise DataError(f"{origin} is empty: expected one SOURCE<TAB>TARGET pair per line.")
    sources, targets = [], []
    for number, line in enumerate(lines, start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise DataError(f"{origin}:{number} has {len(fields)} tab-separated fields; expected two, "
                            "SOURCE<TAB>TARGET (or give the sides as files with --source and --target).")
        sources.append(fields[0])
        targets.append(fields[1])
    return checked_pairs(sources, targets, (origin, origin), max_length, piece_lengths, "Remove that line.")


def checked_pairs(sources, targets, origins, max_length, piece_lengths, fix):
    """`ScorePair`s of aligned `sources` and `targets`, each side non-empty and within `max_length` tokens;
    `origins`: what names each side in an error, `fix`: how to drop a pair there."""
    for origin, lines in zip(origins, (sources, targets)):
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                raise DataError(f"{origin}:{number} is empty: every pair needs a source and a translation to "
                                f"score. {fix}")
    source_lengths, target_lengths = piece_lengths(sources), piece_lengths(targets)
    pairs = []
    for number, (source, target, n_source, n_target) in enumerate(
            zip(sources, targets, source_lengths, target_lengths), start=1):
        for origin, count in zip(origins, (n_source, n_target)):
            if count + 1 > max_length:
                raise DataError(f"{origin}:{number} has {count} pieces; the model accepts at most {max_length - 1} "
                                f"(plus EOS): shorten or split that pair. {fix}")
        pairs.append(ScorePair(number, source, target, int(n_source), int(n_target)))
    return pairs


def format_score(score, token_level=False, as_json=False):
    """One output line: `nll<TAB>nll_per_token[<TAB>token nlls]`, or a JSON object."""
    if as_json:
        record = {"nll": score.nll, "nll_per_token": score.nll_per_token, "tokens": len(score.token_nll)}
        if token_level:
            record["token_nll"] = score.token_nll
        return json.dumps(record)
    fields = [f"{score.nll:.4f}", f"{score.nll_per_token:.4f}"]
    if token_level:
        fields.append(" ".join(f"{value:.4f}" for value in score.token_nll))
    return "\t".join(fields)


def _read(path):
    lines = decode_text(read_user_file(path, "give the file of one sentence per line."), path)
    if not lines:
        raise DataError(f"{path} is empty: expected one sentence per line.")
    return lines
