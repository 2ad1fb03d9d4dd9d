"""`t2t-keras evaluate` for the language-model tasks: perplexity over the tokens each task predicts.

lm: every next token and the closing EOS of each sentence; mlm: the masked
positions only (BERT's 80/10/10 corruption with a fixed seed, so the same
text gives the same number). Sentences longer than `data.max_length` are
truncated, not dropped, so every sentence counts.
"""

import math

import keras
import numpy as np

from t2t_keras.data import monolingual
from t2t_keras.data.batching import make_eval_dataset
from t2t_keras.runs import load_run, open_run
from t2t_keras.tasks import task_of

EVALUATION_SEED = 20170612  # the masking of mlm evaluation text; fixed so runs compare on the same masks


def batch_negative_log_likelihood(model, inputs, labels, weights):
    """`(sum of -log p(label), sum of weights)` over one batch, in float64."""
    logits = model(inputs, training=False)
    nll = keras.ops.sparse_categorical_crossentropy(labels, logits, from_logits=True)  # (batch, length)
    weights = keras.ops.convert_to_numpy(weights).astype(np.float64)
    return float(np.sum(keras.ops.convert_to_numpy(nll) * weights)), float(np.sum(weights))


def evaluate_language_model(run_dir, split="test", text_file=None, model_source="auto"):
    """Perplexity of the run's lm or mlm on `split` (its `data.lm_side`) or on `text_file`; returns a dict."""
    run = open_run(run_dir)
    config = run.load_config()
    model, tokenizer = load_run(run, model_source)
    if text_file:
        sentences = monolingual.read_sentences(text_file)
    else:
        sentences, _ = monolingual.load_sentences(config.data, split)
    batches = make_eval_dataset(monolingual.as_pairs(sentences), tokenizer, max_length=config.data.max_length,
                                batch_tokens=config.data.batch_tokens, drop_long=False, count_dropped=False)
    batches = task_of(config).batches(batches, config.model.vocab_size, EVALUATION_SEED)
    total, tokens = 0.0, 0.0
    for inputs, labels, weights in batches:
        batch_total, batch_tokens = batch_negative_log_likelihood(model, inputs, labels, weights)
        total, tokens = total + batch_total, tokens + batch_tokens
    mean = total / tokens if tokens else float("nan")
    return {"task": config.task, "split": None if text_file else split, "file": text_file,
            "perplexity": math.exp(mean) if tokens else float("nan"), "nll_per_token": mean, "tokens": int(tokens)}


def evaluate_perplexity(artifact, split="test", text_file=None):
    """`evaluate_language_model` of an opened lm or mlm run (`artifacts.run.RunArtifact`), with its weights."""
    return evaluate_language_model(artifact.run, split, text_file, artifact.model_source)


def format_perplexity(result):
    where = result["file"] or f"{result['split']} split"
    return (f"{result['task']} perplexity {result['perplexity']:.2f} over {result['tokens']} tokens of {where} "
            f"(mean negative log-likelihood {result['nll_per_token']:.4f} nats per token)")
