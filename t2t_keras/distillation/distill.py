"""`t2t-keras distill`: translate the teacher's training sources with the teacher, then train the student on them.

    distill("runs/teacher", "runs/student", load_config("student-mini"), beam_size=4, minutes=30)

Every check runs before anything is written: the teacher (a translation run with a tokenizer and weights), the
student's config (the teacher's vocabulary; the corpus keys are distill's), the student's run directory (new, or
the same distillation to resume) and, on a resume, the teacher's settings recorded there. Then the translation
(`distilled.distil_shards`, resumable), the teacher's dev and test splits and its tokenizer copied into the
student's run, and the student's training through `pipeline.train_run`, the road of `t2t-keras train`: run again,
the same command skips the shards done and continues the student from its last checkpoint.
"""

import functools
import logging
from typing import NamedTuple

from t2t_keras.decoding.parameters import check_beam_size
from t2t_keras.distillation import student as students
from t2t_keras.distillation.distilled import SHARD_SENTENCES, distil_shards, recorded_search
from t2t_keras.distillation.teacher import open_teacher, teacher_settings, teacher_translate, training_sources
from t2t_keras.errors import ConfigError
from t2t_keras.pipeline import train_run
from t2t_keras.resolved_run import resolve_run
from t2t_keras.runs import open_run

logger = logging.getLogger(__name__)
DEFAULT_BEAM = 4  # §6.1's beam


class Distillation(NamedTuple):
    """A student's config and its distilled corpus, ready to train."""

    config: object  # the student's config: its corpus the distilled one, its vocabulary the teacher's
    corpus: object  # `distilled.DistilledCorpus`
    run: object  # the student's RunDirectory


class DistillResult(NamedTuple):
    corpus: object  # `distilled.DistilledCorpus`
    training: object  # `training.trainer.TrainResult`


def prepare_student(teacher, run_dir, config, overrides=(), beam_size=DEFAULT_BEAM, original_weight=None,
                    teacher_weights="auto", shard_sentences=SHARD_SENTENCES, jit_compile=None, on_shard=None,
                    where="--config", runner=None):
    """Checks everything, translates the shards not done and writes the student's run files but its checkpoints:
    a `Distillation`. `overrides` are the `--set` texts `config` was loaded with (corpus keys are refused);
    `where` names `config` in messages; `jit_compile` None is the search a distillation in `run_dir` recorded,
    else the teacher's decoding choice ("auto"); `on_shard`: see `distilled.distil_shards`; `runner`: the teacher
    translates through a Beam pipeline (`beam.teacher_pass.runner_choice`), None in this process."""
    run = open_run(run_dir)
    with run.lock("distill"):
        return _prepare_student(teacher, run, config, overrides, beam_size, original_weight, teacher_weights,
                                shard_sentences, jit_compile, on_shard, where, runner)


def _prepare_student(teacher, run, config, overrides, beam_size, original_weight, teacher_weights, shard_sentences,
                     jit_compile, on_shard, where, runner=None):
    check_beam_size(beam_size)
    if isinstance(shard_sentences, bool) or not isinstance(shard_sentences, int) or shard_sentences < 1:
        raise ConfigError(f"--shard-sentences must be a positive integer. Received: {shard_sentences!r}")
    students.check_overrides(overrides)
    students.check_original_weight(original_weight)
    teacher = open_teacher(teacher, teacher_weights)
    students.check_vocabulary(config, teacher, where)
    config = students.student_config(config, teacher, run, original_weight)
    students.check_student_run(run, config)
    sentences = training_sources(teacher)
    jit_compile = recorded_search(run) if jit_compile is None else jit_compile
    settings = teacher_settings(teacher, sentences, beam_size, shard_sentences, jit_compile)
    make_translate = functools.partial(teacher_translate, teacher, settings)
    if runner is not None:
        from t2t_keras.beam.teacher_pass import pipeline_translate

        make_translate = functools.partial(pipeline_translate, teacher, settings, run.path, runner.runner,
                                           runner.workers, runner.extra)
    corpus = distil_shards(run, sentences, settings, make_translate, on_shard)
    students.write_eval_splits(run, teacher)
    students.share_tokenizer(teacher, run, config)
    return Distillation(config, corpus, run)


def distill(teacher, run_dir, config, minutes=None, **options):
    """`prepare_student`, then the student trained for `minutes` (None: to training.train_steps) as `t2t-keras
    train` trains a run; `options` go to `prepare_student`. Returns a `DistillResult`."""
    with open_run(run_dir).lock("distill"):  # from the first check to the last checkpoint
        prepared = prepare_student(teacher, run_dir, config, **options)
        logger.info("Training the student %s on %d distilled sentences.", prepared.run.path,
                    prepared.corpus.sentences)
        return DistillResult(prepared.corpus, train_run(resolve_run(prepared.run, prepared.config), minutes=minutes))


def format_distillation(result):
    """The lines `t2t-keras distill` prints."""
    corpus, training = result.corpus, result.training
    return (f"distilled {corpus.sentences} sentences in {corpus.shards} shards into {corpus.train_files[1]} "
            f"({corpus.translated} translated now, {corpus.skipped} shards done before)\n"
            f"trained {training.run_dir} from step {training.start_step} to {training.final_step} "
            f"in {training.seconds / 60:.1f} min")
