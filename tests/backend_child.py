"""One Keras backend's side of tests/test_backends.py, in a process of its own.

    python -m tests.backend_child --backend jax DIR

Keras reads `KERAS_BACKEND` once, when it is first imported, so each backend needs its own process. The child sets
it, imports the model's modules, and from what the TensorFlow parent wrote into DIR (`spec.json`, `arrays.npz`,
`.keras` files, `initial.weights.h5`) computes the models' outputs, the greedy and beam-4 searches, the loss and
the schedule, and the losses of a few `model.fit` steps, noting after each part whether
TensorFlow has been imported. It re-saves the Transformer as DIR/BACKEND.keras and writes its results to
DIR/BACKEND.json.

`model_outputs` and `training_losses` import Keras lazily and hold nothing backend-specific, so the parent runs
the same functions on TensorFlow for its reference numbers.
"""

import argparse
import json
import os
import pathlib
import sys


def as_list(value):
    """A backend tensor (or anything numpy takes) as nested lists, for JSON."""
    import keras
    import numpy as np

    return np.asarray(keras.ops.convert_to_numpy(value)).tolist()


def searches(model, source, spec):
    """The greedy and beam searches of `source` (compiled on JAX), as lists."""
    from t2t_keras.decoding.beams import beam_search
    from t2t_keras.decoding.greedy import greedy_decode
    from t2t_keras.decoding.jit import compiled

    extra = spec["max_extra_length"]
    greedy = compiled(model, greedy_decode, max_extra_length=extra)(source)
    beam = compiled(model, beam_search, beam_size=4, alpha=0.6, max_extra_length=extra, num_return=2)(source)
    return {"greedy_tokens": as_list(greedy["tokens"]), "greedy_scores": as_list(greedy["scores"]),
            "beam_tokens": as_list(beam["tokens"]), "beam_scores": as_list(beam["scores"])}


def model_outputs(model, work, arrays, spec):
    """Logits of `model` (the saved Transformer) and the saved language models, the searches, the loss and the
    schedule."""
    import keras

    from t2t_keras.decoding.jit import compiled
    from t2t_keras.training.loss import LabelSmoothedCrossEntropy
    from t2t_keras.training.schedule import TransformerSchedule

    def logits(model, inputs):  # compiled on JAX: one program instead of op-by-op dispatch
        return as_list(compiled(model, lambda model, inputs: model(inputs))(inputs))

    results = {"logits": logits(model, (arrays["source"], arrays["target_in"]))}
    results.update(searches(model, arrays["source"], spec))
    for name in ("causal_lm", "masked_lm"):
        results[f"{name}_logits"] = logits(keras.saving.load_model(work / f"{name}.keras"), arrays["lm_tokens"])
    loss = LabelSmoothedCrossEntropy(epsilon=0.1)
    results["loss"] = float(as_list(loss(arrays["loss_labels"], arrays["loss_logits"])))
    schedule = TransformerSchedule(**spec["schedule"])
    results["schedule"] = [float(as_list(schedule(step))) for step in spec["schedule_steps"]]
    return results


def training_losses(work, arrays, spec):
    """The loss of each of a few `model.fit` steps from `initial.weights.h5` on the batches of `arrays`."""
    import keras
    import numpy as np

    from t2t_keras.model import Transformer
    from t2t_keras.training.loss import LabelSmoothedCrossEntropy
    from t2t_keras.training.schedule import make_optimizer

    model = Transformer(**spec["transformer"], dropout=0.0)
    model.build()
    model.load_weights(work / "initial.weights.h5")
    model.compile(make_optimizer(spec["transformer"]["hidden_dim"], warmup_steps=spec["warmup_steps"]),
                  loss=LabelSmoothedCrossEntropy(epsilon=0.1))
    running = []  # Keras logs the mean loss of the epoch so far after each batch
    record = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: running.append(logs["loss"]))
    model.fit((arrays["train_source"], arrays["train_target_in"]), arrays["train_target_out"],
              batch_size=spec["train_batch_size"], epochs=1, shuffle=False, verbose=0, callbacks=[record])
    counts = np.arange(1, len(running) + 1)
    return (counts * np.array(running) - np.concatenate([[0.0], (counts * np.array(running))[:-1]])).tolist()


def tensorflow_search_refusal():
    """The message with which `t2t_keras.decoding` refuses its TensorFlow-only translator here ('' if it does
    not)."""
    try:
        from t2t_keras.decoding import Generator  # noqa: F401
    except Exception as error:  # the test checks the type's name and the message
        return f"{type(error).__name__}: {error}"
    return ""


def run_checks(work):
    """Everything above on this process's backend, as a JSON-ready dict."""
    import keras
    import numpy as np

    import t2t_keras.adapters  # noqa: F401
    import t2t_keras.build  # noqa: F401
    import t2t_keras.config  # noqa: F401
    import t2t_keras.decoding.beams  # noqa: F401
    import t2t_keras.decoding.greedy  # noqa: F401
    import t2t_keras.decoding.jit  # noqa: F401
    import t2t_keras.keras_compat  # noqa: F401
    import t2t_keras.language_models  # noqa: F401
    import t2t_keras.layers  # noqa: F401
    import t2t_keras.model  # noqa: F401
    import t2t_keras.training.loss  # noqa: F401
    import t2t_keras.training.metrics  # noqa: F401
    import t2t_keras.training.schedule  # noqa: F401

    imported = {"after_import": "tensorflow" in sys.modules}
    arrays = dict(np.load(work / "arrays.npz"))
    spec = json.loads((work / "spec.json").read_text())
    model = keras.saving.load_model(work / "transformer.keras")
    results = model_outputs(model, work, arrays, spec)
    imported["after_model_and_searches"] = "tensorflow" in sys.modules
    results["training_losses"] = training_losses(work, arrays, spec)
    imported["after_fit"] = "tensorflow" in sys.modules
    results["refusal"] = tensorflow_search_refusal()
    # Last: Keras' own serializer imports TensorFlow when it is installed (to recognise a tf.TensorShape).
    model.save(work / f"{keras.backend.backend()}.keras")  # for the parent to load on TensorFlow
    return {**results, "tensorflow_imported": imported}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", required=True, choices=("jax", "torch", "tensorflow"))
    parser.add_argument("work", type=pathlib.Path)
    args = parser.parse_args(argv)
    os.environ["KERAS_BACKEND"] = args.backend  # before anything imports Keras
    import keras

    results = run_checks(args.work)
    results["backend"] = keras.backend.backend()
    (args.work / f"{args.backend}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
