"""A new run with fewer layers than the trained run it starts from (`train --init-from RUN --set model.num_layers=N`
or `model.num_decoder_layers=N`): which of RUN's layers each new layer takes.

"Shrink and fine-tune" (Shleifer & Rush, 2020): a smaller student starts from some of a trained model's layers,
not from random weights, and trains on. Each stack (encoder, decoder, a language model's single stack) keeps
layers evenly spaced from its first to its last (3 → 2: layers 0 and 2; 6 → 2: 0 and 5; 6 → 3: 0, 2 and 5), and
everything else (embeddings, final layer norms) as it was. Layers can only be dropped: a model with more layers
than RUN has layers with nothing to start from (its config is refused when it is resolved: `resolved_run.adopt`).

    kept_layers(3, 2)   # [0, 2]
"""

import re

import numpy as np

_BLOCK = re.compile(r"^(?P<stack>.*/(?:encoder|decoder))/block_(?P<index>\d+)/(?P<rest>.*)$")


def kept_layers(trained, new):
    """The `new` layer indices of a stack of `trained` layers, evenly spaced from the first to the last."""
    if not 1 <= new <= trained:
        raise ValueError(f"A stack of {trained} layers cannot give {new}: layers can only be dropped.")
    return [int(i) for i in np.round(np.linspace(0, trained - 1, new))] if new > 1 else [0]


def _blocks(paths):
    """`{stack: number of blocks}` of the variable paths."""
    counts = {}
    for path in paths:
        match = _BLOCK.match(path)
        if match:
            counts[match["stack"]] = max(counts.get(match["stack"], 0), int(match["index"]) + 1)
    return counts


def source_paths(new_paths, trained_paths):
    """`({new path: trained path}, {stack: kept layers})`: where each variable of the new model starts from; the
    second holds only the stacks that lost layers."""
    new, trained = _blocks(new_paths), _blocks(trained_paths)
    kept = {stack: kept_layers(trained.get(stack, count), count) for stack, count in new.items()}
    mapping = {}
    for path in new_paths:
        match = _BLOCK.match(path)
        mapping[path] = (f"{match['stack']}/block_{kept[match['stack']][int(match['index'])]}/{match['rest']}"
                         if match else path)
    return mapping, {stack: layers for stack, layers in kept.items() if len(layers) < trained.get(stack, 0)}


def is_dropped(path, kept):
    """Whether the trained model's variable `path` lies in a layer that `kept` (`source_paths`) leaves out."""
    match = _BLOCK.match(path)
    return bool(match) and match["stack"] in kept and int(match["index"]) not in kept[match["stack"]]
