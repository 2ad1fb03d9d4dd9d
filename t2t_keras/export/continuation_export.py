"""Writing an lm run as a continuation SavedModel (see `continuation_module`), and loading one back."""

import logging
import pathlib

import tensorflow as tf

from t2t_keras.data.tokenizer import check_vocab_size
from t2t_keras.errors import T2TError
from t2t_keras.export.continuation_module import ContinuationModule
from t2t_keras.files import check_can_write, staged_directory
from t2t_keras.runs import RunDirectory, average_run, load_run, write_inspection_files

logger = logging.getLogger(__name__)


def export_lm_run(run_dir, out_dir, average_last=None, source="auto", max_new_tokens=None, temperature=0.0,
                  top_k=0, overwrite=False):
    """Exports an lm run's model and tokenizer; `max_new_tokens` defaults to `decoding.extra_length`."""
    config = RunDirectory(run_dir).load_config()
    if config.task != "lm":
        raise T2TError(f"{run_dir} trains task {config.task!r}: a continuation export needs an lm run "
                       "(model.architecture: decoder_only). An mlm run has nothing to generate; export is for "
                       "translation and lm runs.")
    if average_last is not None:
        average_run(run_dir, average_last)
        source = "averaged"
    model, tokenizer = load_run(run_dir, source)
    out_dir = pathlib.Path(out_dir)
    check_can_write(out_dir, overwrite)
    check_vocab_size(tokenizer.vocab_size, model.vocab_size)
    module = ContinuationModule(model, tokenizer, max_new_tokens or config.decoding.extra_length, temperature, top_k)
    with staged_directory(out_dir, overwrite) as staging:
        tf.saved_model.save(module, str(staging), signatures=module.signatures())
        write_inspection_files(staging, model, tokenizer)
    logger.info("Exported a continuation SavedModel to %s", out_dir)
    return out_dir


def is_continuation_export(path):
    """Whether the SavedModel at `path` is a continuation export (its `continue` signature)."""
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

    return "continue" in tf.saved_model.load(str(path)).signatures


class SavedModelContinuer:
    """Continues prompts with a continuation SavedModel; `translate` mirrors `PromptContinuer.translate`."""

    def __init__(self, path, batch_size=32):
        import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

        self.path = str(path)
        self.saved_model = tf.saved_model.load(self.path)
        if "continue" not in self.saved_model.signatures:
            raise T2TError(f"{path} is not a continuation export (no 'continue' signature): export an lm run.")
        self.batch_size = batch_size
        self.defaults = {"max_new_tokens": int(self.saved_model.default_max_new_tokens.numpy()),
                         "temperature": float(self.saved_model.default_temperature.numpy()),
                         "top_k": int(self.saved_model.default_top_k.numpy()), "seed": -1}

    def parameters(self, max_new_tokens=None, temperature=None, top_k=None, seed=None):
        """The call's sampling parameters: the given ones, checked, and the export's defaults."""
        given = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, seed=seed)
        params = dict(self.defaults, **{k: v for k, v in given.items() if v is not None})
        for name in ("max_new_tokens", "top_k", "seed"):
            if isinstance(params[name], bool) or not isinstance(params[name], int):
                raise T2TError(f"{name} must be an integer. Received: {name}={params[name]!r}")
        if isinstance(params["temperature"], bool) or not isinstance(params["temperature"], (int, float)):
            raise T2TError(f"temperature must be a number. Received: temperature={params['temperature']!r}")
        if params["max_new_tokens"] < 1 or params["temperature"] < 0 or params["top_k"] < 0:
            raise T2TError(f"Expected max_new_tokens >= 1, temperature >= 0, top_k >= 0. Received: {params}")
        return params

    def predict(self, prompts, params):
        """`{"continuations": [str], "scores": [float]}` for a list of prompts."""
        continuations, scores = [], []
        signature = self.saved_model.signatures["continue"]
        for start in range(0, len(prompts), self.batch_size):
            out = signature(inputs=tf.constant(prompts[start:start + self.batch_size], tf.string),
                            max_new_tokens=tf.constant(params["max_new_tokens"], tf.int32),
                            temperature=tf.constant(params["temperature"], tf.float32),
                            top_k=tf.constant(params["top_k"], tf.int32), seed=tf.constant(params["seed"], tf.int32))
            continuations += [text.decode("utf-8") for text in out["continuations"].numpy()]
            scores += [float(score) for score in out["scores"].numpy()]
        return {"continuations": continuations, "scores": scores}

    def translate(self, prompts, max_new_tokens=None, temperature=None, top_k=None, seed=None):
        return self.predict(list(prompts), self.parameters(max_new_tokens, temperature, top_k, seed))["continuations"]
