"""Search loops that drop their done sentences from the batch (graph mode, with a growing cache).

A batch searches until its last sentence is done, and a plain loop computes every sentence at every step, done or
not: batched 32 at a time by length, the default corpus's test split generates 61% of the tokens its longest
sentences imply. Here a step decodes only the sentences still searching (the *active* ones), as CTranslate2 does.
The results of each sentence (its n-best list, or its tokens) stay at full batch size and every step writes the
active sentences' rows back; the rest of the state (the alive hypotheses, the decoder cache, the source mask, the
length limits) holds the active sentences only and shrinks when one is done. A sentence's search reads nothing of
another's, so the results are those of the plain loop. Its shapes change from step to step, so the loop runs in
graph mode, not with XLA, like the growing cache it comes with.
"""

import tensorflow as tf


def compacting_loop(step, state, results, bound, sentence_inputs, row_inputs, width=1, done="done"):
    """Runs `state = step(state, **sentence_inputs, **row_inputs)` on the active sentences until none is left, at
    most `bound` times; returns the `results` entries of the final state, one row per sentence of the batch.

    Args:
        step: one search step over the active sentences; its state's bool `(active,)` entry named by `done`
            marks those done after it; a beam search's also has int32 `beams` `(active, width)`, the beam each new
            hypothesis extends, and its cache is not yet reordered by them.
        state: the initial state: a scalar `step`, the decoder `cache` (`width` rows a sentence, see
            `common.new_cache`), and per-sentence tensors.
        results: names of the entries kept for every sentence (`done` among them).
        sentence_inputs, row_inputs: step arguments with a row per sentence (the length limits) or per decoder row
            (the source mask, a forced prefix).
        width: decoder rows per sentence (the beam size; a Python int or a scalar tensor).
    """
    loop = {
        "active": tf.range(tf.shape(state[done])[0]),
        "results": {key: state[key] for key in results},
        "live": {key: value for key, value in state.items() if key not in results},
        "sentence_inputs": sentence_inputs,
        "row_inputs": row_inputs,
    }

    def body(loop):
        active = loop["active"]
        view = {**loop["live"], **{key: tf.gather(value, active) for key, value in loop["results"].items()}}
        new = step(view, **loop["sentence_inputs"], **loop["row_inputs"])
        written = {key: tf.tensor_scatter_nd_update(value, active[:, None], new[key])
                   for key, value in loop["results"].items()}
        keep = tf.cast(tf.where(tf.logical_not(new[done]))[:, 0], tf.int32)
        return ({**_compacted(loop, new, keep, width), "active": tf.gather(active, keep), "results": written},)

    def searching(loop):
        return tf.size(loop["active"]) > 0

    (loop,) = tf.while_loop(searching, body, (loop,), maximum_iterations=bound, shape_invariants=(_invariants(loop),))
    return loop["results"]


def _compacted(loop, new, keep, width):
    """The live state, the decoder cache and the inputs of the sentences in `keep` (indices into the active ones).

    A beam search's self-attention cache is gathered at every step, each hypothesis's rows taken from the beam it
    extends (`new["beams"]`); the rest (a greedy search's whole cache) only at the steps where a sentence is done.
    """
    live = {key: tf.gather(new[key], keep) for key in loop["live"] if key not in ("step", "cache")}
    rows = _rows(keep, width)
    cache, reordered = new["cache"], "beams" in new
    if reordered:
        cache = [{**layer, "self": _gather(layer["self"], _rows(keep, width, tf.gather(new["beams"], keep)))}
                 for layer in cache]

    def shrink():
        return ([{part: value if reordered and part == "self" else _gather(value, rows)
                  for part, value in layer.items()} for layer in cache],
                _gather(loop["sentence_inputs"], keep), _gather(loop["row_inputs"], rows))

    def same():
        return cache, loop["sentence_inputs"], loop["row_inputs"]

    cache, sentence_inputs, row_inputs = tf.cond(tf.size(keep) < tf.size(loop["active"]), shrink, same)
    return {"live": {**live, "step": new["step"], "cache": cache}, "sentence_inputs": sentence_inputs,
            "row_inputs": row_inputs}


def _rows(keep, width, beams=None):
    """int32 decoder rows of the sentences in `keep`: beam `beams[i, k]` (default: k) of sentence `keep[i]`, for
    each of the `width` beams, sentence by sentence."""
    beams = tf.range(width)[None, :] if beams is None else beams
    return tf.reshape(keep[:, None] * width + beams, (-1,))


def _gather(structure, rows):
    return tf.nest.map_structure(lambda tensor: tf.gather(tensor, rows), structure)


def _invariants(loop):
    """The loop's shapes, with the active rows left open, and the length axis of the self-attention keys/values
    `(rows, heads, length, dim)`, which grows."""
    def open_rows(tensor):
        return tf.TensorShape([None, *tensor.shape[1:]])

    def open_self(tensor):
        return tf.TensorShape([None, tensor.shape[1], None, tensor.shape[3]])

    live = {key: tf.nest.map_structure(open_rows, value) for key, value in loop["live"].items() if key != "cache"}
    live["step"] = loop["live"]["step"].shape
    live["cache"] = [{part: tf.nest.map_structure(open_self if part == "self" else open_rows, value)
                      for part, value in layer.items()} for layer in loop["live"]["cache"]]
    return {
        "active": tf.TensorShape([None]),
        "results": tf.nest.map_structure(lambda tensor: tensor.shape, loop["results"]),
        "live": live,
        "sentence_inputs": tf.nest.map_structure(open_rows, loop["sentence_inputs"]),
        "row_inputs": tf.nest.map_structure(open_rows, loop["row_inputs"]),
    }
