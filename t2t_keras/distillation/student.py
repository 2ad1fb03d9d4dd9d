"""The student of a distillation: an ordinary run of its own config, on the teacher's vocabulary and translations.

What the student takes from its teacher:

- the vocabulary: its config must have the teacher's (`data.tokenizer`, `data.vocab_size`, `model.vocab_size`,
  and the special ids and source vocabulary size the tokenizer numbers with: `model.special_ids`,
  `model.source_vocab_size`, which a teacher started from an imported checkpoint has of its own),
  and the teacher's tokenizer file is copied into its run before it trains (as `train --init-from` does), so each
  id means the same piece in both; the weights are its own (its shape differs);
- its corpus: `data.source: text` on the distilled files (`distilled.train_files`), the languages of the
  teacher, and dev and test the teacher's splits, written beside them (RUN/distilled/dev.src, ...);
  with an original weight W, a mixture (`data.sources`) of the distilled corpus (weight 1) and the teacher's own
  corpora (weight W, shared by their weights).

Everything else (model, training, decoding) is the student's config.
"""

import json
import math
import pathlib
import shlex

from t2t_keras.config import parse_override, replace
from t2t_keras.data import sources
from t2t_keras.data.text_files import write_lines
from t2t_keras.distillation.distilled import SIDES, train_files
from t2t_keras.errors import ConfigError, T2TError
from t2t_keras.files import write_bytes_atomic
from t2t_keras.resolved_run import command_config, corpus_moved
from t2t_keras.runs import open_run

# The data keys distill sets: the student's corpus is the teacher's translations.
CORPUS_KEYS = ("source", "source_lang", "target_lang", "train_files", "dev_files", "test_files", "tfds_name", "sources")
VOCABULARY_KEYS = (("data", "tokenizer"), ("data", "vocab_size"), ("model", "vocab_size"))
# How the tokenizer numbers its pieces, besides the vocabulary: a run of an imported checkpoint has its own.
NUMBERING_KEYS = (("model", "special_ids"), ("model", "source_vocab_size"))
EVAL_SPLITS = ("dev", "test")


def check_overrides(overrides):
    """Refuses `--set data.KEY` for the keys of the student's corpus, which distill decides."""
    given = sorted({key for text in overrides for section, values in parse_override(text).items()
                    if section == "data" for key in values} & set(CORPUS_KEYS))
    if given:
        raise ConfigError(f"{', '.join('--set data.' + key for key in given)}: distill decides the student's corpus "
                          "(the teacher's translations, and its dev and test splits). Mix in the teacher's own "
                          "corpus with --original-weight W, or train on other data with t2t-keras train.")


def check_original_weight(weight):
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float))
                               or not math.isfinite(weight) or weight <= 0):
        raise ConfigError("--original-weight must be a positive number: the share of the teacher's own corpus "
                          f"against the distilled corpus's 1. Received: {weight!r}")


def check_vocabulary(config, teacher, where):
    """Refuses a student `config` (named `where`) whose vocabulary is not the teacher's."""
    values = {(section, key): (_flag_value(getattr(getattr(config, section), key)),
                               _flag_value(getattr(getattr(teacher.config, section), key)))
              for section, key in VOCABULARY_KEYS + NUMBERING_KEYS}
    differing = {name: pair for name, pair in values.items() if pair[0] != pair[1]}
    if differing:
        details = "; ".join(f"{s}.{k}={ours} in {where}, {theirs} in the teacher"
                            for (s, k), (ours, theirs) in differing.items())
        named = VOCABULARY_KEYS + tuple(name for name in NUMBERING_KEYS if name in differing)
        flags = " ".join(f"--set {shlex.quote(f'{s}.{k}={values[s, k][1]}')}" for s, k in named)
        raise ConfigError(
            f"The student's vocabulary differs from its teacher's ({details}): a student shares the teacher's "
            f"tokenizer ({teacher.tokenizer_path}). Pick a --config of the teacher's vocabulary, or set it: {flags}.")


def _flag_value(value):
    """A config value as `--set` takes it (YAML: a word, a number, null, a mapping in braces)."""
    return value if isinstance(value, str) else json.dumps(value.to_dict() if hasattr(value, "to_dict") else value)


def eval_files(run, split):
    """`[sources, targets]` of the teacher's `split` in RUN/distilled/ (absolute paths)."""
    return [str((run.distilled_dir / f"{split}{side}").resolve()) for side in SIDES]


def student_config(config, teacher, run, original_weight=None):
    """`config` with the student's corpus (see the module docstring); its vocabulary checked by the caller."""
    theirs = teacher.config.data
    splits = {f"{split}_files": eval_files(run, split) if sources.has_split(theirs, split) else None
              for split in EVAL_SPLITS}
    distilled = dict(source="text", train_files=train_files(run), **splits)
    data = dict(distilled, source_lang=theirs.source_lang, target_lang=theirs.target_lang, sources=None)
    if original_weight is not None:
        data["sources"] = [dict(distilled, weight=1.0)] + _original_entries(theirs, original_weight)
    return replace(config, data=data)


def chosen_student_config(run_dir, config=None, overrides=(), original_weight=None, preset="student-mini"):
    """`(config, where, original_weight)` of `distill`: `config`'s (a preset or a YAML file), else the student run's
    own (resumed with the original weight it was distilled with, unless `original_weight` is given), else
    `preset`'s."""
    run = open_run(run_dir)
    chosen = command_config(run, config, overrides, new_run=preset)
    if config is not None:
        return chosen, f"--config {config}", original_weight
    if not run.exists():
        return chosen, f"--config {preset}", original_weight
    weight = original_weight if original_weight is not None else recorded_original_weight(chosen)
    return chosen, f"the config of {run.path}", weight


def recorded_original_weight(config):
    """The --original-weight a student's saved `config` was distilled with (None: the distilled corpus alone): the
    weights of its `data.sources` after the distilled corpus's, added up as `_original_entries` shared them out
    (rounded, so that sharing the sum out again gives the saved weights)."""
    if not config.data.sources:
        return None
    return round(math.fsum(weight for _, weight in sources.components(config.data)[1:]), 12)


def _original_entries(data_config, weight):
    """The teacher's corpora as `data.sources` entries whose weights add up to `weight`."""
    parts = sources.components(data_config)
    total = sum(share for _, share in parts)
    entries = []
    for part, share in parts:
        entry = {"source": part.source, "weight": weight * share / total}
        if part.train_files is not None:
            entry["train_files"] = list(part.train_files)
        if part.source == "tfds":
            entry["tfds_name"] = part.tfds_name
        entries.append(entry)
    return entries


def check_student_run(run, config):
    """Refuses a student run directory that holds another run: one that is no distillation, or a student of
    another model or data config."""
    if not run.exists():
        return
    if not run.distillation_path.exists():
        raise T2TError(f"{run.path} already holds a run that is not a distillation: distil into a new --run-dir.")
    saved = run.load_config()
    changed = [section for section in ("model", "data") if getattr(saved, section) != getattr(config, section)
               and not (section == "data" and corpus_moved(run, saved.data, config.data))]
    if changed:
        raise ConfigError(f"{run.path} holds a student of another {' and '.join(changed)} config: resume it with "
                          "the same --config, --set and --original-weight, or distil into a new --run-dir.")


def write_eval_splits(run, teacher):
    """The teacher's dev and test splits as text files in RUN/distilled/ (those not written yet)."""
    for split in EVAL_SPLITS:
        paths = eval_files(run, split)
        if not sources.has_split(teacher.config.data, split) or all(map(_exists, paths)):
            continue
        pairs, _ = sources.load_pairs(teacher.config.data, split)
        for path, side in zip(paths, zip(*sources.as_string_pairs(pairs))):
            write_lines(path, side)


def _exists(path):
    return pathlib.Path(path).exists()


def share_tokenizer(teacher, run, config):
    """Copies the teacher's tokenizer file into the student's run; one already there must be the same."""
    ours, theirs = run.tokenizer_file(config.data.tokenizer), teacher.tokenizer_path.read_bytes()
    if ours.exists() and ours.read_bytes() != theirs:
        raise ConfigError(f"{ours} differs from the tokenizer of the teacher {teacher.run.path}: distil into a new "
                          "--run-dir.")
    if not ours.exists():
        write_bytes_atomic(ours, theirs)
