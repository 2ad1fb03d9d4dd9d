"""A vocabulary shortlist learned from a parallel corpus: which target pieces each source piece may call for.

The score is the Dice coefficient of sentence co-occurrence,

    dice(s, t) = 2 c(s, t) / (c(s) + c(t)),

where c counts the training pairs whose source holds piece s, whose target holds
piece t, or both. Each source piece keeps its `per_source` best target pieces
(ties: more co-occurrences first, then the smaller id), and the `frequent` most
frequent target pieces are allowed in every sentence.

Why Dice rather than IBM model 1: a shortlist needs a ranking with high recall,
not calibrated translation probabilities. Dice is one pass over the corpus with
no iterations, deterministic, and its memory is the table of co-occurring piece
pairs (sparse, at most vocab x vocab), whatever the corpus size; IBM model 1's
EM keeps a posterior per aligned token pair of every sentence, or a second pass
per iteration. Dice's known weakness, underrating function pieces that occur
everywhere (their c(t) is large), is what the always-allowed frequent pieces
cover, as Marian's and CTranslate2's shortlists do with their common-token lists.

The shortlist is stored as a `.npz` file (written atomically) holding

    entries    int32 (vocab_size, per_source): row s the target ids of source piece s, PAD_ID (0) after them
    frequent   int32 (frequent,): the most frequent target ids, most frequent first
    settings   a JSON string: method, per_source, frequent, vocab_size, pairs

Special ids are not stored: decoding always allows them (`decoding.shortlist`).
"""

import io
import json
import zipfile
from typing import NamedTuple

import numpy as np
from scipy import sparse

from t2t_keras.errors import DataError
from t2t_keras.files import write_bytes_atomic
from t2t_keras.special_ids import EOS_ID, PAD_ID

METHOD = "dice"
PER_SOURCE = 50  # target pieces kept per source piece
FREQUENT = 100  # most frequent target pieces, always allowed
CHUNK_PAIRS = 4096  # pairs counted at once: memory holds one chunk's incidence matrices
FIRST_PIECE = EOS_ID + 1  # ids below are special: never stored, always allowed


class Shortlist(NamedTuple):
    """A learned shortlist: `entries` `(vocab_size, per_source)` int32 PAD-padded, `frequent` `(n,)` int32."""

    entries: np.ndarray
    frequent: np.ndarray
    settings: dict

    @property
    def vocab_size(self):
        return self.entries.shape[0]


class CooccurrenceCounts:
    """Sentence counts of source pieces, target pieces and (source, target) pairs, accumulated chunk by chunk."""

    def __init__(self, vocab_size):
        self.vocab_size = vocab_size
        self.pairs = 0
        self.source = np.zeros(vocab_size, np.int64)  # sentences holding each source piece
        self.target = np.zeros(vocab_size, np.int64)  # sentences holding each target piece
        self.target_tokens = np.zeros(vocab_size, np.int64)  # occurrences of each target piece
        self.joint = sparse.csr_matrix((vocab_size, vocab_size), dtype=np.int64)

    def add(self, sources, targets):
        """Counts pairs given as two lists of 1-D id arrays (no BOS/EOS)."""
        source, target = self._incidence(sources), self._incidence(targets)
        self.pairs += len(sources)
        self.source += np.asarray(source.sum(axis=0)).ravel()
        self.target += np.asarray(target.sum(axis=0)).ravel()
        if targets:
            self.target_tokens += np.bincount(np.concatenate(targets).astype(np.int64), minlength=self.vocab_size)
        self.joint = self.joint + (source.T @ target).astype(np.int64)

    def _incidence(self, rows):
        """`(len(rows), vocab_size)` 0/1 CSR matrix: which pieces each sentence holds."""
        lengths = [len(row) for row in rows]
        ids = np.concatenate(rows).astype(np.int64) if rows else np.zeros([0], np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise DataError(f"A piece id is outside the vocabulary of {self.vocab_size} pieces: tokenize the corpus "
                            "with the run's tokenizer.")
        sentence = np.repeat(np.arange(len(rows)), lengths)
        matrix = sparse.csr_matrix((np.ones(len(ids), np.int64), (sentence, ids)), shape=(len(rows), self.vocab_size))
        matrix.sum_duplicates()
        matrix.data[:] = 1
        return matrix


def learn_shortlist(id_pairs, vocab_size, per_source=PER_SOURCE, frequent=FREQUENT):
    """The `Shortlist` of a corpus given as an iterable of `(source_ids, target_ids)` 1-D arrays."""
    _check_sizes(per_source, frequent)
    counts = CooccurrenceCounts(vocab_size)
    chunk = []
    for pair in id_pairs:
        chunk.append(pair)
        if len(chunk) == CHUNK_PAIRS:
            counts.add(*map(list, zip(*chunk)))
            chunk = []
    if chunk:
        counts.add(*map(list, zip(*chunk)))
    if counts.pairs == 0:
        raise DataError("The corpus holds no sentence pairs: a shortlist is learned from the training corpus.")
    settings = {"method": METHOD, "per_source": per_source, "frequent": frequent, "vocab_size": vocab_size,
                "pairs": counts.pairs}
    return Shortlist(_best_targets(counts, per_source), _most_frequent(counts.target_tokens, frequent), settings)


def _check_sizes(per_source, frequent):
    for name, value in (("per_source", per_source), ("frequent", frequent)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise DataError(f"{name} must be an integer >= 0. Received: {name}={value!r}")
    if per_source == 0 and frequent == 0:
        raise DataError("per_source and frequent are both 0: the shortlist would allow the special ids only.")


def _best_targets(counts, per_source):
    """`(vocab_size, per_source)` int32: each source piece's best target pieces by Dice, PAD after them."""
    joint = counts.joint.tocoo()
    keep = joint.col >= FIRST_PIECE
    rows, cols, together = joint.row[keep], joint.col[keep], joint.data[keep]
    dice = 2.0 * together / (counts.source[rows] + counts.target[cols])
    order = np.lexsort((cols, -together, -dice, rows))  # by row, then best first
    rows, cols = rows[order], cols[order]
    starts = np.searchsorted(rows, np.arange(counts.vocab_size))
    rank = np.arange(len(rows)) - starts[rows]
    kept = rank < per_source
    entries = np.full((counts.vocab_size, per_source), PAD_ID, np.int32)
    entries[rows[kept], rank[kept]] = cols[kept]
    return entries


def _most_frequent(target_tokens, frequent):
    """The `frequent` most frequent target pieces that occur (ties: smaller id first), most frequent first."""
    tokens = target_tokens.copy()
    tokens[:FIRST_PIECE] = 0
    order = np.lexsort((np.arange(len(tokens)), -tokens))
    return order[:frequent][tokens[order[:frequent]] > 0].astype(np.int32)


def save_shortlist(path, shortlist):
    """Writes `shortlist` to `path` (.npz) atomically."""
    buffer = io.BytesIO()
    np.savez(buffer, entries=shortlist.entries.astype(np.int32), frequent=shortlist.frequent.astype(np.int32),
             settings=np.array(json.dumps(shortlist.settings, sort_keys=True)))
    write_bytes_atomic(path, buffer.getvalue())


def load_shortlist(path, vocab_size, fix="learn it again"):
    """The `Shortlist` in `path`, checked against a `vocab_size`-piece vocabulary.

    Raises:
        DataError: naming the file and `fix`, for a missing, empty, corrupt or mismatched file.
    """
    try:
        with np.load(path, allow_pickle=False) as stored:
            entries, frequent = stored["entries"], stored["frequent"]
            settings = json.loads(str(stored["settings"]))
    except FileNotFoundError:
        raise DataError(f"{path} does not exist: {fix}.") from None
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as err:
        raise DataError(f"{path} is not a shortlist file ({type(err).__name__}: {err}): {fix}.") from None
    problem = _problem(entries, frequent, vocab_size)
    if problem:
        raise DataError(f"{path} {problem}: {fix}.")
    return Shortlist(entries.astype(np.int32), frequent.astype(np.int32), settings)


def _problem(entries, frequent, vocab_size):
    """What is wrong with stored arrays, or None."""
    if entries.ndim != 2 or frequent.ndim != 1 or not np.issubdtype(entries.dtype, np.integer) \
            or not np.issubdtype(frequent.dtype, np.integer):
        return f"holds arrays of the wrong shapes (entries {entries.shape}, frequent {frequent.shape})"
    if entries.shape[0] != vocab_size:
        return (f"was learned for a vocabulary of {entries.shape[0]} pieces, not this model's {vocab_size}")
    every = np.concatenate([entries.ravel(), frequent])
    if len(every) and (every.min() < 0 or every.max() >= vocab_size):
        return f"holds ids outside the vocabulary [0, {vocab_size})"
    if not np.any(every >= FIRST_PIECE):
        return "is empty: it allows no piece beyond the special ids"
    return None


def corpus_id_pairs(pairs, tokenizer, chunk=CHUNK_PAIRS):
    """`(source_ids, target_ids)` int32 arrays of `(source, target)` strings (a list or a tf.data.Dataset)."""
    import tensorflow as tf

    from t2t_keras.data.sources import decoded_pairs

    if isinstance(pairs, tf.data.Dataset):
        pairs = decoded_pairs(pairs)
    batch = []
    for pair in pairs:
        batch.append(pair)
        if len(batch) == chunk:
            yield from _tokenized(batch, tokenizer)
            batch = []
    if batch:
        yield from _tokenized(batch, tokenizer)


def _tokenized(batch, tokenizer):
    sides = [tokenizer.tokenize(list(side)) for side in zip(*batch)]
    split = [np.split(side.flat_values.numpy(), side.row_splits.numpy()[1:-1]) for side in sides]
    return zip(*split)


def prepared_id_pairs(directory):
    """`(source_ids, target_ids)` of every pair of a prepared corpus (`data.prepare`), shard by shard."""
    from t2t_keras.data.manifest import load_complete_manifest
    from t2t_keras.data.shards import open_shard, shard_pairs, verify_shards

    shards = load_complete_manifest(directory)["shards"]
    verify_shards(directory, shards)
    for shard in shards:
        yield from shard_pairs(open_shard(directory, shard["name"]))
