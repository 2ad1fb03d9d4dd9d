"""Word alignments from the encoder-decoder attention of one forced-decoding pass (Pharaoh `i-j`).

The search is not changed: once a sentence is translated, the model reads the
source and the final translation once more with teacher forcing (as `score`
and training do) and the cross-attention of one decoder layer, averaged over
the chosen heads, is turned into word links. The rule, step by step:

1. Words are the whitespace tokens of the source and of the translation. Each
   word is tokenized alone and the pieces concatenated, so every piece belongs
   to exactly one word (SentencePiece and WordPiece never let a piece cross a
   space, so the pieces are those of the whole sentence). Pieces past the
   model's `max_length - 1` are cut, as translation cuts them; their words get
   no links.
2. Piece attention `A[t, s]`: decoder layer `layer` (negative counts from the
   last; default -1, the last layer: with all heads averaged it agreed best
   with eflomal and with the help's tags on the dev pages, docs/results.md),
   mean over `heads` (all when None).
   Target piece `t` takes the row of the step that predicts it (`rows="predicts"`,
   row t, the default) or of the step that reads it as input (`rows="reads"`,
   row t + 1, Chen et al. (2020)'s "shift-att"); `decoding.alignment_rows`.
   The source EOS column is left out (it soaks up attention of no word).
3. Word scores `W[j, i]`: the attention mass target word j puts on source word
   i, i.e. the sum over i's pieces, averaged over j's pieces.
4. Links: every target word links to its best source word (argmax over i); a
   source word no target word chose links to its best target word (argmax over
   j), so that no word of either side is left out where both sides have words.
"""

import typing

import numpy as np
import tensorflow as tf

from t2t_keras.config import ALIGNMENT_ROWS
from t2t_keras.decoding.batch_shapes import pad_batch
from t2t_keras.decoding.forced import DEFAULT_IDS, teacher_forcing_rows
from t2t_keras.decoding.layout import source_pieces, target_pieces
from t2t_keras.errors import T2TError

DEFAULT_LAYER = -1  # the last decoder layer: measured by bench/bench_alignment_layers.py (docs/results.md)
ROWS = ALIGNMENT_ROWS


class WordPieces(typing.NamedTuple):
    """A text's pieces and, per piece, the index of its whitespace word."""

    ids: list
    word_of_piece: list
    num_words: int


def word_pieces(tokenizer, texts, max_pieces=None, side="source"):
    """`WordPieces` of each text: each whitespace word tokenized alone (as a `side` text), pieces concatenated, cut
    to `max_pieces`."""
    words = [text.split() for text in texts]
    flat = [word for row in words for word in row]
    pieces_of = source_pieces if side == "source" else target_pieces
    pieces = pieces_of(tokenizer, tf.constant(flat, tf.string)).to_list() if flat else []
    result, start = [], 0
    for row in words:
        ids, owner = [], []
        for index, word_ids in enumerate(pieces[start:start + len(row)]):
            ids += [int(i) for i in word_ids]
            owner += [index] * len(word_ids)
        start += len(row)
        result.append(WordPieces(ids[:max_pieces], owner[:max_pieces], len(row)))
    return result


def word_scores(piece_attention, source, target):
    """`W (target words, source words)`: mass on each source word (summed over its pieces), averaged over the
    pieces of each target word. `piece_attention` `(target pieces, source pieces)`; `source`/`target` `WordPieces`."""
    attention = np.asarray(piece_attention, np.float64)[:len(target.ids), :len(source.ids)]
    by_source = np.zeros((attention.shape[0], source.num_words))
    np.add.at(by_source.T, np.asarray(source.word_of_piece, np.int64), attention.T)
    scores = np.zeros((target.num_words, source.num_words))
    counts = np.zeros(target.num_words)
    np.add.at(scores, np.asarray(target.word_of_piece, np.int64), by_source)
    np.add.at(counts, np.asarray(target.word_of_piece, np.int64), 1.0)
    return scores / np.maximum(counts, 1.0)[:, None]


def links_from_scores(scores, source_covered=None, target_covered=None):
    """Sorted `(i, j)` links: each covered target word j to its argmax source word, then each covered source word
    that no target word chose to its argmax target word. `*_covered`: booleans per word (default all)."""
    scores = np.asarray(scores, np.float64)
    num_target, num_source = scores.shape
    if num_target == 0 or num_source == 0:
        return []
    source_covered = np.ones(num_source, bool) if source_covered is None else np.asarray(source_covered, bool)
    target_covered = np.ones(num_target, bool) if target_covered is None else np.asarray(target_covered, bool)
    if not source_covered.any() or not target_covered.any():
        return []
    masked = np.where(source_covered[None, :] & target_covered[:, None], scores, -np.inf)
    links = {(int(np.argmax(masked[j])), j) for j in range(num_target) if target_covered[j]}
    chosen = {i for i, _ in links}
    links |= {(i, int(np.argmax(masked[:, i]))) for i in range(num_source) if source_covered[i] and i not in chosen}
    return sorted(links)


def covered_words(pieces):
    """Booleans per word: whether any of its pieces survived the length cut."""
    covered = np.zeros(pieces.num_words, bool)
    covered[np.asarray(pieces.word_of_piece, np.int64)] = True
    return covered


def format_pharaoh(links):
    """`"0-0 1-2 ..."`: source word i, target word j, 0-based."""
    return " ".join(f"{i}-{j}" for i, j in links)


def parse_pharaoh(text):
    """The sorted `(i, j)` links of a Pharaoh line; raises T2TError on anything but `i-j` pairs."""
    links = set()
    for item in text.split():
        i, dash, j = item.partition("-")
        if not dash or not i.isdigit() or not j.isdigit():
            raise T2TError(f"{item!r} is not a Pharaoh link: write source-target word indices as 'i-j', e.g. 0-1.")
        links.add((int(i), int(j)))
    return sorted(links)


def check_alignment_choice(model, layer, heads, rows="predicts"):
    """`(layer index >= 0, head indices)` for `model`, or a T2TError naming what is out of range."""
    if not hasattr(model, "decode_with_attention"):
        raise T2TError("Alignments come from one encoder-decoder model's cross-attention: align with a single "
                       "translation run, not an ensemble or a language model.")
    num_layers, num_heads = model.num_decoder_layers or model.num_layers, model.num_heads
    if isinstance(layer, bool) or not isinstance(layer, int) or not -num_layers <= layer < num_layers:
        raise T2TError(f"decoding.alignment_layer must be a decoder layer in [{-num_layers}, {num_layers - 1}] "
                       f"(negative counts from the last). Received: alignment_layer={layer!r}")
    heads = tuple(range(num_heads)) if heads is None else tuple(heads)
    if not heads or any(isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < num_heads for h in heads):
        raise T2TError(f"decoding.alignment_heads must be head indices in [0, {num_heads - 1}], or null for all "
                       f"heads. Received: alignment_heads={list(heads)!r}")
    if rows not in ROWS:
        raise T2TError(f"decoding.alignment_rows must be one of {ROWS}. Received: alignment_rows={rows!r}")
    return layer % num_layers, heads


def cross_attention(model, sources, targets):
    """float32 `(batch, layers, heads, T + 1, S + 1)` cross-attention of every decoder layer, with `sources` /
    `targets` lists of piece ids: the decoder reads BOS + target, the encoder source + EOS."""
    ids = getattr(model, "special_ids", None) or DEFAULT_IDS
    source_rows, target_rows, _ = teacher_forcing_rows(sources, targets, ids)
    source, target_in = (tf.constant(pad_batch(rows, length_multiple=1, pad=ids.pad))
                         for rows in (source_rows, target_rows))
    memory = model.encode(source, training=False)
    decoded = model.decode_with_attention(target_in, memory, model.source_mask(source), training=False)
    return np.stack([np.asarray(weights, np.float32) for weights in decoded.cross_weights], axis=1)


def positional_scores(num_source, num_target):
    """Word scores of a baseline that knows no words: closeness of relative positions, `-|i/S - j/T|` (centres)."""
    source = (np.arange(num_source) + 0.5) / max(num_source, 1)
    target = (np.arange(num_target) + 0.5) / max(num_target, 1)
    return -np.abs(target[:, None] - source[None, :])
