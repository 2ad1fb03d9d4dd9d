"""Forced decoding: the negative log-likelihood a model gives each given translation.

As OpenNMT-tf's `score`, fairseq's `--score-reference` and `marian-scorer`;
the computation is `decoding.forced.token_nll`. A SavedModel export scores
with its `score` signature (`SavedModelTranslator` has the same
`score_batch` / `piece_lengths` / `max_length` as `RunScorer`).

    scorer = RunScorer("runs/base")                       # or SavedModelTranslator("exports/base")
    pairs = read_score_pairs("test.en", "test.de", scorer.max_length, scorer.piece_lengths)
    results = score_pairs(scorer, pairs)                  # input order; results[i].nll, .token_nll
"""

import dataclasses
import json

import numpy as np
import tensorflow as tf
import tqdm

from t2t_keras.data.text_files import decode_text
from t2t_keras.decoding.forced import teacher_forcing_rows, token_nll
from t2t_keras.decoding.translator import pad_batch, plan_batches
from t2t_keras.errors import DataError


@dataclasses.dataclass(frozen=True)
class ScorePair:
    """One line of each file, with its 1-based line number and piece counts (EOS excluded)."""

    line: int
    source: str
    target: str
    source_pieces: int
    target_pieces: int


@dataclasses.dataclass(frozen=True)
class Score:
    """Negative log-likelihood of one translation: `nll` in nats, over `len(token_nll)` tokens (EOS included)."""

    nll: float
    token_nll: list

    @property
    def nll_per_token(self):
        return self.nll / len(self.token_nll)


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
    for path, lines in ((source_path, sources), (target_path, targets)):
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                raise DataError(f"{path}:{number} is empty: every pair needs a source and a translation to "
                                "score. Remove the pair from both files.")
    source_lengths, target_lengths = piece_lengths(sources), piece_lengths(targets)
    pairs = []
    for number, (source, target, n_source, n_target) in enumerate(
            zip(sources, targets, source_lengths, target_lengths), start=1):
        for path, count in ((source_path, n_source), (target_path, n_target)):
            if count + 1 > max_length:
                raise DataError(f"{path}:{number} has {count} pieces; the model accepts at most {max_length - 1} "
                                "(plus EOS): shorten or split that pair, or remove it from both files.")
        pairs.append(ScorePair(number, source, target, int(n_source), int(n_target)))
    return pairs


def score_pairs(scorer, pairs, batch_tokens=4096, progress=None):
    """The `Score` of each pair, in input order; batches group pairs of similar length.

    Args:
        scorer: has `score_batch(sources, targets) -> (nll (n,), token_nll list of n arrays)`.
        pairs: `ScorePair`s, e.g. from `read_score_pairs`.
        batch_tokens: padded tokens per batch (source or target, the longer).
        progress: show a tqdm bar; None shows one for more than 100 pairs.
    """
    lengths = np.array([max(p.source_pieces, p.target_pieces) + 1 for p in pairs])
    scores = [None] * len(pairs)
    show = len(pairs) > 100 if progress is None else progress
    with tqdm.tqdm(total=len(pairs), unit="pair", disable=not show) as bar:
        for batch in plan_batches(lengths, batch_tokens):
            sums, per_token = scorer.score_batch([pairs[i].source for i in batch], [pairs[i].target for i in batch])
            for index, total, values in zip(batch, sums, per_token):
                scores[index] = Score(float(total), [float(v) for v in values])
            bar.update(len(batch))
    return scores


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


class RunScorer:
    """Scores with the trained model of a run directory and its tokenizer.

    Args:
        run_dir: the run.
        source: "auto", "averaged" or "latest" (see `runs.load_run_model`).
    """

    def __init__(self, run_dir, source="auto"):
        from t2t_keras.runs import load_run

        self.model, self.tokenizer = load_run(run_dir, source)
        self.max_length = self.model.max_length
        spec = tf.TensorSpec([None, None], tf.int32)
        self._nll = tf.function(lambda s, ti, to: token_nll(self.model, s, ti, to), input_signature=[spec] * 3,
                                autograph=False)

    def piece_lengths(self, sentences):
        """Piece counts of `sentences` (no EOS)."""
        if not sentences:
            return []
        return self.tokenizer.tokenize(tf.constant(sentences)).row_lengths().numpy().tolist()

    def score_batch(self, sources, targets):
        """Sums `(n,)` and per-token NLL arrays of `n` pairs."""
        ragged = [self.tokenizer.tokenize(tf.constant(side)).to_list() for side in (sources, targets)]
        # Exact widths: a width rounded up could pass a learned position table's max_length.
        source, target_in, target_out = (pad_batch(rows, 1) for rows in teacher_forcing_rows(*ragged))
        nll = self._nll(tf.constant(source), tf.constant(target_in), tf.constant(target_out)).numpy()
        lengths = [len(p) + 1 for p in ragged[1]]
        return nll.sum(axis=1), [row[:n] for row, n in zip(nll, lengths)]


def _read(path):
    with open(path, "rb") as handle:
        lines = decode_text(handle.read(), path)
    if not lines:
        raise DataError(f"{path} is empty: expected one sentence per line.")
    return lines
