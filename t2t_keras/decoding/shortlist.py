"""Decoding over a vocabulary shortlist: per batch, the target ids the output projection covers.

A shortlist (learned by `data.shortlist`) gives each source piece a few target
pieces it may call for, and a list of frequent target pieces allowed
everywhere. For a batch, the searched vocabulary is the union of

* the entries of every source piece in the batch,
* the frequent pieces,
* the model's special ids (pad, unk, bos, eos and the decoder's start) and id 0,

as int32 ids sorted ascending (so id 0 comes first), padded with 0 to
a multiple of `SIZE_MULTIPLE` (at most the vocabulary size): a 0 after the first slot is padding. The padding keeps
the number of distinct shapes small: an XLA-compiled search compiles once per
size, and a batch's size is one of vocab_size / SIZE_MULTIPLE buckets.

The searches (`greedy_decode`, `beam_search`, given `output_ids`) compute the
logits of these ids only (`Transformer.project`), give the padding slots -inf,
take the log-softmax and the top candidates over them, and map the chosen
positions back to full-vocabulary ids with a gather, so the tokens they return
are ids of the whole vocabulary. Log-probabilities are normalised over the
shortlist (as Marian does); with every id allowed the search is the full one.
"""

import tensorflow as tf

from t2t_keras.errors import T2TError
from t2t_keras.special_ids import SpecialIds

SIZE_MULTIPLE = 256  # the searched vocabulary is padded to a multiple of this (one compiled shape per size)
PADDING = 0  # the searched vocabulary's padding value, always among its ids (`common.shortlist_slots`)


def always_searched(special_ids=None):
    """The ids every searched vocabulary holds: the padding value and the model's special ids (`SpecialIds`;
    None: the package's fixed ones), sorted."""
    return tuple(sorted({PADDING, *(special_ids or SpecialIds()).to_dict().values()}))


def batch_vocabulary(entries, frequent, source, vocab_size, size_multiple=SIZE_MULTIPLE, special_ids=None):
    """The searched vocabulary of a batch: int32 `(S,)` ids, sorted, then `PADDING`.

    Args:
        entries: int `(vocab_size, per_source)` shortlist table, rows padded with the padding id 0.
        frequent: int `(n,)` target ids always allowed.
        source: int `(batch, source_len)` source ids of the batch (a special id's entries hold nothing).
        vocab_size: the model's vocabulary size, a Python int.
        size_multiple: S is the union's size rounded up to a multiple of this, at most `vocab_size`.
        special_ids: the model's `SpecialIds`, always searched (`always_searched`).
    """
    source = tf.convert_to_tensor(source, tf.int32)
    candidates = tf.concat([tf.reshape(tf.gather(tf.cast(entries, tf.int32), source), [-1]),
                            tf.cast(frequent, tf.int32), tf.constant(always_searched(special_ids), tf.int32)], axis=0)
    hits = tf.math.unsorted_segment_max(tf.ones_like(candidates), candidates, vocab_size)  # (vocab,): 1 or min int
    ids = tf.cast(tf.where(hits > 0)[:, 0], tf.int32)  # ascending
    count = tf.size(ids)
    size = tf.minimum(-(-count // size_multiple) * size_multiple, vocab_size)
    return tf.pad(ids, [[0, size - count]], constant_values=PADDING)


class ShortlistTable:
    """A shortlist as constant tensors, and the searched vocabulary of each batch.

    Args:
        shortlist: has `entries` `(vocab_size, per_source)` and `frequent` `(n,)` int arrays
            (`data.shortlist.Shortlist`).
        vocab_size: the model's vocabulary size; must be the table's row count.
        special_ids: the model's `SpecialIds` (None: the package's fixed ones), always searched.
        size_multiple: see `batch_vocabulary`.
    """

    def __init__(self, shortlist, vocab_size, special_ids=None, size_multiple=SIZE_MULTIPLE):
        if shortlist.entries.shape[0] != vocab_size:
            raise T2TError(f"The shortlist has {shortlist.entries.shape[0]} rows, the model {vocab_size} "
                             "pieces: learn the shortlist with the model's tokenizer.")
        self.entries = tf.constant(shortlist.entries, tf.int32)
        self.frequent = tf.constant(shortlist.frequent, tf.int32)
        self.vocab_size, self.special_ids = vocab_size, special_ids
        self.size_multiple = size_multiple

    def output_ids(self, source):
        """`batch_vocabulary` of the source batch `source`."""
        return batch_vocabulary(self.entries, self.frequent, source, self.vocab_size, self.size_multiple,
                                self.special_ids)
