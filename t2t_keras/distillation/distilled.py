"""The teacher's translations on disk, in numbered shards written one at a time, so that a distillation resumes.

    STUDENT/distilled/part-00000.src, .tgt   shard 0: its source sentences and the teacher's translations, line
                                             by line (`settings["shard_sentences"]` sentences a shard)
    STUDENT/distilled/train.src, .tgt        every shard's lines, concatenated once the last shard is written: the
                                             student's training files
    STUDENT/distilled/distill.json           the teacher's settings (`teacher.teacher_settings`), the shards done
                                             with the sha256 of their files, and whether the corpus is complete

Every file is written atomically, and a shard enters distill.json only once both its files are written. A shard
recorded there whose files still hold what was recorded is done: a resumed distillation skips it and translates
the others. A resume with other settings (another teacher or other weights, beam, alpha, corpus, shard size...) is
refused before anything is written, since its shards would mix two searches' outputs. The teacher is known by the
checksums of its weights and tokenizer: one that moved to another directory resumes the distillation.
"""

import logging
from typing import NamedTuple

from tqdm import tqdm

from t2t_keras.checksums import file_sha256
from t2t_keras.data.text_files import write_lines
from t2t_keras.errors import T2TError
from t2t_keras.files import write_bytes_atomic

logger = logging.getLogger(__name__)

SHARD_SENTENCES = 2000  # sentences a shard: about a minute of the mini teacher's beam search on two CPU cores
SIDES = (".src", ".tgt")
TRAIN_STEM = "train"  # train.src, train.tgt: the concatenated shards
WHERE_KEYS = ("teacher",)  # settings that say where the teacher lies: recorded, not compared on resume


class DistilledCorpus(NamedTuple):
    """What a distillation's translation step did."""

    train_files: list  # [sources, the teacher's translations]: the student's training files
    sentences: int  # sentences of the corpus
    shards: int  # shards of the corpus
    translated: int  # sentences this call translated
    skipped: int  # shards found done and skipped


def shard_files(run, index):
    """`[sources, translations]` paths of shard `index` in RUN/distilled/."""
    return [run.distilled_dir / f"part-{index:05d}{side}" for side in SIDES]


def train_files(run):
    """`[sources, translations]`: the student's training files, absolute, as its config names them."""
    return [str((run.distilled_dir / f"{TRAIN_STEM}{side}").resolve()) for side in SIDES]


def recorded_search(run):
    """The `jit_compile` setting a distillation in `run` recorded (True, False or "auto"), None where there is none:
    a resume keeps the search its shards were translated with."""
    record = run.read_json(run.distillation_path)
    return None if record is None else record["settings"].get("jit_compile")


def load_record(run, settings):
    """RUN/distilled/distill.json when it was written with `settings`; a new record (not yet written) when there is
    none; a T2TError naming the settings that differ and the fix otherwise."""
    record = run.read_json(run.distillation_path)
    if record is None:
        return {"settings": settings, "shards": {}, "complete": False}
    recorded = record["settings"]
    differing = sorted(key for key in set(recorded) | set(settings)
                       if recorded.get(key) != settings.get(key) and key not in WHERE_KEYS)
    if differing:
        details = "; ".join(f"{key}: {recorded.get(key)!r} recorded, {settings.get(key)!r} now" for key in differing)
        raise T2TError(
            f"{run.distilled_dir} holds a distillation with other settings ({details}): its shards would mix two "
            f"searches' outputs. Resume it with what {run.distillation_path} records (the same --teacher with the "
            f"same weights, --beam {recorded['beam_size']}, the same --shard-sentences), or distil into a new "
            "--run-dir.")
    moved = {key: settings[key] for key in WHERE_KEYS if key in settings and recorded.get(key) != settings[key]}
    if moved:  # the teacher is known by its weights' and tokenizer's checksums, wherever it lies now
        logger.info("The teacher of %s is now at %s (recorded: %s).", run.distilled_dir, moved.get("teacher"),
                    recorded.get("teacher"))
        recorded.update(moved)
        run.write_json(run.distillation_path, record)
    return record


def _is_done(run, record, index):
    """Whether shard `index` is recorded and its files still hold what was recorded."""
    entry = record["shards"].get(str(index))
    paths = shard_files(run, index)
    return entry is not None and all(path.exists() for path in paths) and \
        [file_sha256(path) for path in paths] == entry["sha256"]


def _write_shard(run, record, index, sentences, translations):
    """Writes shard `index` (sources, then translations) and records it in distill.json."""
    paths = shard_files(run, index)
    write_lines(paths[0], sentences)
    write_lines(paths[1], translations)
    record["shards"][str(index)] = {"sentences": len(sentences), "sha256": [file_sha256(path) for path in paths]}
    record["complete"] = False
    run.write_json(run.distillation_path, record)


def distil_shards(run, sentences, settings, make_translate, on_shard=None):
    """Translates the shards of `sentences` not yet done into RUN/distilled/ (a progress bar over the corpus),
    then concatenates them into the training files; returns a `DistilledCorpus`.

    `make_translate()` gives the teacher's `translate(lines) -> translations`; it is called only when a shard is
    left to translate.
    `on_shard(index)` is called after each shard written (a hook for progress reports and tests).
    """
    record = load_record(run, settings)
    size = settings["shard_sentences"]
    count = -(-len(sentences) // size)
    todo = [index for index in range(count) if not _is_done(run, record, index)]
    left = sum(len(sentences[index * size:(index + 1) * size]) for index in todo)
    translate = make_translate() if todo else None
    with tqdm(total=len(sentences), initial=len(sentences) - left, desc="Distilling", unit=" sentences",
              disable=None) as bar:  # on a terminal
        for index in todo:
            chunk = sentences[index * size:(index + 1) * size]
            _write_shard(run, record, index, chunk, translate(chunk))
            bar.update(len(chunk))
            logger.info("Distilled shard %d of %d (%d sentences).", index + 1, count, len(chunk))
            if on_shard is not None:
                on_shard(index)
    _concatenate(run, record, count)
    return DistilledCorpus(train_files(run), len(sentences), count, left, count - len(todo))


def _concatenate(run, record, count):
    """train.src and train.tgt from the shards, unless a complete corpus already holds them."""
    paths = [run.distilled_dir / f"{TRAIN_STEM}{side}" for side in SIDES]
    if record["complete"] and all(path.exists() for path in paths):
        return
    for side, path in enumerate(paths):
        write_bytes_atomic(path, b"".join(shard_files(run, index)[side].read_bytes() for index in range(count)))
    record["complete"] = True
    run.write_json(run.distillation_path, record)
