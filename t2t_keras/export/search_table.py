"""The searches an in-graph export holds, by beam size: one `SearchTable` for every export module.

A signature takes the beam size as a tensor, but what a search traces may depend on it. Two layouts:

* `per_size` (XLA, LiteRT: the beam size fixes shapes): one search per beam size from 1 to `max_beam_size`,
  and with `nbest` a second one per size above 1 for the full n-best list (early stopping depends on the list's
  length);
* graph mode: greedy search and one beam search for every larger size, its beam size (and, with `nbest`, its
  n-best length) given as tensors.

Each search is made once, when first chosen, by `make(beam_size, num_return)` (None: given as tensors after the
common arguments), and chosen in the graph by `select` (`tf.switch_case`) or, where the runtime has no Case op
(LiteRT), by `select_by_conds` (a chain of `tf.cond`, each search in a branch of its own). The table is a plain
object: saving a module does not look inside it, so each search is saved once, inside the signatures that call it.
"""

import functools

import tensorflow as tf


class SearchTable:
    """A module's searches by `(beam_size, num_return)` (see the module docstring).

    Args:
        make: `make(beam_size, num_return) -> search`, a function of the common arguments (and then, for a key with
            None, the beam size and n-best length tensors).
        max_beam_size: the largest beam size the export takes.
        per_size: one search per beam size (True), or greedy and one for every larger size (False).
        nbest: the searches return n-best lists of any length (else the best hypothesis only).
    """

    def __init__(self, make, max_beam_size, per_size, nbest=False):
        self.make, self.max_beam_size, self.per_size, self.nbest = make, max_beam_size, per_size, nbest
        self.keys = _keys(max_beam_size, per_size, nbest)
        self._searches = {}

    @property
    def made(self):
        """The keys whose searches have been made (traced by the signatures that called them)."""
        return list(self._searches)

    def search(self, key):
        """The search of `key`, made on first use."""
        if key not in self._searches:
            self._searches[key] = self.make(*key)
        return self._searches[key]

    def index(self, beam_size, num_return=1):
        """int32 position in `keys` of the search that serves `beam_size` and `num_return` (scalar tensors)."""
        if not self.per_size:
            return tf.cast(beam_size > 1, tf.int32)
        if not self.nbest:
            return tf.clip_by_value(beam_size, 1, self.max_beam_size) - 1
        return tf.where(beam_size <= 1, 0, 1 + 2 * (beam_size - 2) + tf.cast(num_return > 1, tf.int32))

    def branches(self, arguments, beam_size, num_return=1, wrap=None):
        """Every search as a function of nothing, on `arguments` (and the sizes where its key leaves them open),
        each through `wrap` (e.g. sharding) if given."""
        wrap = wrap or (lambda search: search)
        return [functools.partial(wrap(self.search(key)), *arguments,
                                  *((beam_size,) + ((num_return,) if self.nbest else ()) if key[0] is None else ()))
                for key in self.keys]

    def select(self, arguments, beam_size, num_return=1, wrap=None):
        """The outputs of the search that serves `beam_size` and `num_return`, chosen with `tf.switch_case`."""
        return tf.switch_case(self.index(beam_size, num_return), self.branches(arguments, beam_size, num_return,
                                                                               wrap))

    def select_by_conds(self, arguments, beam_size):
        """The outputs of the search of `beam_size` (per size), chosen by a chain of `tf.cond`: the runtimes
        without a Case op (LiteRT's `IF`)."""

        def from_size(size):  # the search of `beam_size`, known to be >= size
            run = functools.partial(self.search((size, 1)), *arguments)
            if size == self.max_beam_size:
                return run()
            return tf.cond(beam_size <= size, run, lambda: from_size(size + 1))

        return from_size(1)


def _keys(max_beam_size, per_size, nbest):
    if not per_size:
        return [(1, 1), (None, None if nbest else 1)]
    if not nbest:
        return [(size, 1) for size in range(1, max_beam_size + 1)]
    return [(1, 1)] + [(size, count) for size in range(2, max_beam_size + 1) for count in (1, size)]
