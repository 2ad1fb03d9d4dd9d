"""The teacher of a distillation: a trained translation run, checked, and the exact settings it translates with.

`teacher_settings` is what the teacher's translations depend on: the run, its weights (which, their steps and a
sha256 of the checkpoint files), the tokenizer file, the search (beam size, alpha, length penalty, output limit),
the model's maximum length, the decoding precision and XLA, the batch budget, and the source corpus (count and
sha256). `distilled.py` records it in the student's run and refuses to resume with anything else.
"""

import hashlib
import os
import pathlib
from typing import NamedTuple

from t2t_keras.checksums import checkpoint_files, file_sha256
from t2t_keras.data import sources
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.errors import DataError, T2TError, check_task
from t2t_keras.runs import load_run_model, open_run, run_weights
from t2t_keras.tasks import task_of

BATCH_TOKENS = 4096  # source tokens per translated batch (the generator's default)


class Teacher(NamedTuple):
    """A checked teacher run."""

    run: object  # its RunDirectory
    config: object  # its saved config
    weights: object  # `runs.Weights`: the weights it translates with
    tokenizer_path: pathlib.Path  # its tokenizer file, which the student shares


def open_teacher(path, weights="auto"):
    """The `Teacher` at `path` with the weights `weights` names (`runs.run_weights`), or a T2TError saying what is
    missing: a run directory, a translation model, a tokenizer file, weights."""
    run = open_run(path)
    if not run.exists():
        raise T2TError(f"--teacher {run.path} is not a run directory (no config.yaml): give the run directory of a "
                       "trained translation model.")
    config = run.load_config()
    check_task("distill", config.task, run.path)  # a teacher translates its training sources
    if run.pretrained_path.exists():
        raise T2TError(f"--teacher {run.path} is a checkpoint made a run by t2t-keras import, which has no training "
                       "corpus of its own for the teacher to translate. Fine-tune it on your corpus first (t2t-keras "
                       f"train --init-from {run.path} --run-dir TUNED --set data.source=text --set data.train_files="
                       "[SRC,TGT] ...) and distil from TUNED.")
    tokenizer = run.tokenizer_file(config.data.tokenizer)
    if not tokenizer.exists():
        raise T2TError(f"--teacher {run.path} has no tokenizer file ({tokenizer.name}), which its student shares: "
                       "train the teacher first (its first t2t-keras train writes it).")
    try:
        chosen = run_weights(run, weights)
    except (T2TError, FileNotFoundError) as error:
        raise T2TError(f"--teacher {run.path} has no weights to translate with: {error}") from None
    return Teacher(run, config, chosen, tokenizer)


def training_sources(teacher):
    """The source sentences of the teacher's training split, as its config reads them (files, TSV, TFDS, the
    default corpus, every corpus of a mixture), in order."""
    pairs, _ = sources.load_pairs(teacher.config.data, "train")
    sentences = [source for source, _ in sources.as_string_pairs(pairs)]
    if not sentences:
        raise DataError(f"The training split of --teacher {teacher.run.path} holds no sentence: nothing to distil.")
    return sentences


def weights_sha256(weights):
    """sha256 over the files of the checkpoint `weights.checkpoint` (its index and data files), by name."""
    digest = hashlib.sha256()
    for path in sorted(checkpoint_files(weights.checkpoint)):
        digest.update(f"{path.name} {file_sha256(path)}\n".encode("utf-8"))
    return digest.hexdigest()


def sentences_sha256(sentences):
    digest = hashlib.sha256()
    for sentence in sentences:
        digest.update(sentence.encode("utf-8") + b"\n")
    return digest.hexdigest()


def teacher_settings(teacher, sentences, beam_size, shard_sentences, jit_compile=None):
    """What the teacher's translations of `sentences` depend on: a JSON-able dict (see the module docstring).

    `jit_compile` None ("auto") is the generator's choice per batch (`FastPath.decoding_jit`).
    """
    decoding, weights = teacher.config.decoding, teacher.weights
    params = GenerationRequest.from_config(decoding).updated(beam_size=beam_size)
    return {
        "teacher": str(teacher.run.path.resolve()),
        "weights": {"source": weights.source, "checkpoint": os.path.relpath(weights.checkpoint, teacher.run.path),
                    "steps": list(weights.steps), "sha256": weights_sha256(weights)},
        "tokenizer": {"kind": teacher.config.data.tokenizer, "sha256": file_sha256(teacher.tokenizer_path)},
        "beam_size": params.beam_size, "alpha": params.alpha, "length_penalty": params.length_penalty,
        "stopping": decoding.stopping,
        "max_extra_length": params.max_extra_length, "max_length": teacher.config.model.max_length,
        "precision": decoding.precision,
        "jit_compile": "auto" if jit_compile is None or jit_compile == "auto" else bool(jit_compile),
        "batch_tokens": BATCH_TOKENS, "shard_sentences": shard_sentences,
        "sources": {"sentences": len(sentences), "sha256": sentences_sha256(sentences)},
    }


def teacher_translate(teacher, settings):
    """The teacher's `translate(lines) -> translations` with `settings` (`teacher_settings`): its generator over
    both CPU cores by default (the teacher's decoding.shards); the distillation shows its own progress bar."""
    model = load_run_model(teacher.run, teacher.weights.source)
    request = GenerationRequest(settings["beam_size"], settings["alpha"], settings["length_penalty"],
                                settings["max_extra_length"], settings["stopping"])
    generator = task_of(teacher.config).build_generator(
        model, teacher.run.load_tokenizer(), batch_tokens=settings["batch_tokens"],
        jit_compile=settings["jit_compile"], shards=teacher.config.decoding.shards, precision=settings["precision"],
        progress=False)
    return lambda lines: generator.generate(lines, request).best
