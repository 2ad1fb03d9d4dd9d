"""The backend-neutral searches of one checkout on JAX, over a file, to compare two checkouts token for token.

    PYTHONPATH=CHECKOUT python bench/inference_road/neutral_search.py prepare RUN_DIR INPUT WORK   # TensorFlow
    PYTHONPATH=CHECKOUT python bench/inference_road/neutral_search.py search WORK OUT.json         # JAX: .[backends]

`prepare` writes the run's model as WORK/model.keras (with the checkout's own layers) and the input's source ids;
`search` runs beam 4 (the run's alpha and length limit) and greedy search with `jax.jit`, batches of 32 by length,
and writes each line's output ids. Before the one search (7f08199 and earlier) the neutral searches were
`decoding.neutral_beam` / `neutral_greedy`; both are found.
"""

import json
import os
import sys
import time

import numpy as np


def prepare(run_dir, input_path, work):
    from t2t_keras.runs import load_run_model, open_run
    from t2t_keras.special_ids import EOS_ID

    run = open_run(run_dir)
    config = run.load_config()
    os.makedirs(work, exist_ok=True)
    load_run_model(run).save(f"{work}/model.keras")
    lines = open(input_path, encoding="utf-8").read().splitlines()
    rows = [ids[: config.model.max_length - 1] + [EOS_ID] for ids in run.load_tokenizer().tokenize(lines).to_list()]
    source = np.zeros((len(rows), max(map(len, rows))), "int32")
    for i, ids in enumerate(rows):
        source[i, : len(ids)] = ids
    np.savez(f"{work}/sources.npz", source=source, order=np.argsort([len(r) for r in rows], kind="stable"))
    decoding = config.decoding
    with open(f"{work}/decoding.json", "w") as f:
        json.dump(dict(alpha=decoding.alpha, max_extra_length=decoding.max_extra_length,
                       length_penalty=getattr(decoding, "length_penalty", "gnmt")), f)  # gnmt before it was a setting


def searches():
    """`compiled`, beam search and greedy search: the one search's, or the neutral copies of 7f08199 and before."""
    try:
        from t2t_keras.decoding import jit
        from t2t_keras.decoding.beams import beam_search
        from t2t_keras.decoding.greedy import greedy_decode

        return jit.compiled, beam_search, greedy_decode
    except ImportError:
        from t2t_keras.decoding import neutral_beam, neutral_greedy
        from t2t_keras.decoding.neutral_compile import compiled

        return compiled, neutral_beam.beam_search, neutral_greedy.greedy_search


def search(work, out):
    os.environ["KERAS_BACKEND"] = "jax"
    import keras

    import t2t_keras.model  # noqa: F401  (registers the layers)

    spec = json.load(open(f"{work}/decoding.json"))
    data = np.load(f"{work}/sources.npz")
    model = keras.saving.load_model(f"{work}/model.keras")
    compiled, beam, greedy = searches()
    functions = {"beam4": compiled(model, beam, beam_size=4, **spec),
                 "greedy": compiled(model, greedy, max_extra_length=spec["max_extra_length"])}
    source, order, results = data["source"], data["order"], {}
    for name, function in functions.items():
        began, rows = time.time(), {}
        for start in range(0, len(order), 32):
            index = order[start:start + 32]
            batch = source[index]
            tokens = np.asarray(function(batch[:, : int((batch != 0).sum(1).max())])["tokens"])
            for i, row in zip(index, tokens[:, 0] if tokens.ndim == 3 else tokens):
                rows[int(i)] = [int(t) for t in row if t != 0]
        results[name] = [rows[i] for i in range(len(order))]
        print(f"{name}: {time.time() - began:.1f} s", flush=True)
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    {"prepare": prepare, "search": search}[sys.argv[1]](*sys.argv[2:])
