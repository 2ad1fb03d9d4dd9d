"""`Aligner`: word alignments of sentences and their translations with one model (rule: `decoding.alignment`)."""

import typing

import numpy as np

from t2t_keras.decoding.alignment import (
    DEFAULT_LAYER,
    check_alignment_choice,
    covered_words,
    cross_attention,
    links_from_scores,
    word_pieces,
    word_scores,
)


class AlignedPair(typing.NamedTuple):
    """One sentence pair's word scores `(target words, source words)` and links `[(i, j), ...]`."""

    scores: np.ndarray
    links: list


def piece_rows(attention, target_length, rows):
    """The rows of `attention` `(..., T + 1, S)` that stand for the `target_length` target pieces."""
    start = 0 if rows == "predicts" else 1
    return attention[..., start:start + target_length, :]


class Aligner:
    """Aligns source sentences with their translations through a model's cross-attention.

    Args:
        model: a `Transformer` (one model: an ensemble has no single attention).
        tokenizer: the run's tokenizer (`tokenize(strings) -> RaggedTensor`).
        layer: decoder layer whose attention is read; negative counts from the last.
        heads: head indices averaged; None: all heads.
        rows: "predicts" (a target piece takes the attention of the step that outputs it) or "reads".
        batch_size: sentence pairs per forward pass.
    """

    def __init__(self, model, tokenizer, layer=DEFAULT_LAYER, heads=None, rows="predicts", batch_size=16):
        self.layer, self.heads = check_alignment_choice(model, layer, heads, rows)
        self.model, self.tokenizer, self.rows, self.batch_size = model, tokenizer, rows, batch_size
        self.max_pieces = model.max_length - 1  # as translation cuts a source (`Generator.source_rows`)

    def attention(self, sources, targets):
        """Yields per pair `(source WordPieces, target WordPieces, attention)`, the attention `(layers, heads, T,
        S)` of every decoder layer and head, target pieces by `rows`, the source EOS left out (a generator: one
        batch's maps are held at a time)."""
        source_pieces = word_pieces(self.tokenizer, sources, self.max_pieces)
        target_pieces = word_pieces(self.tokenizer, targets, self.max_pieces, side="target")
        for start in range(0, len(source_pieces), self.batch_size):
            chunk = slice(start, start + self.batch_size)
            weights = cross_attention(self.model, [p.ids for p in source_pieces[chunk]],
                                      [p.ids for p in target_pieces[chunk]])
            for row, source, target in zip(weights, source_pieces[chunk], target_pieces[chunk]):
                yield source, target, piece_rows(row, len(target.ids), self.rows)[..., :len(source.ids)]

    def align(self, sources, targets):
        """An `AlignedPair` per sentence pair, from the aligner's layer and heads."""
        if len(sources) != len(targets):
            raise ValueError(f"Need one translation per sentence. Received: {len(sources)} sentences and "
                             f"{len(targets)} translations.")
        return [aligned_pair(attention[self.layer, list(self.heads)].mean(axis=0), source, target)
                for source, target, attention in self.attention(sources, targets)]


def aligned_pair(piece_attention, source, target):
    """The `AlignedPair` of a `(T, S)` piece attention map and the two sides' `WordPieces`."""
    scores = word_scores(piece_attention, source, target)
    return AlignedPair(scores, links_from_scores(scores, covered_words(source), covered_words(target)))
