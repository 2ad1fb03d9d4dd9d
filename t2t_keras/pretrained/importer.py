"""`t2t-keras import`: a Hugging Face translation checkpoint becomes an ordinary run directory.

The run holds what `train` writes (config.yaml, the tokenizer, a tf.train checkpoint
of the model in RUN/checkpoints/, step 0), so every reader of a run opens it
unchanged, and RUN/pretrained.json records where it came from: the checkpoint
directory's name, config.json's `_name_or_path`, the sha256 of each file read, the
training-only settings left out, the checkpoint's decoding defaults (those the searches do not implement
listed apart) and the chosen languages. The run's `decoding` section is those defaults
(`generation.decoding_section`), so that `translate` decodes as transformers' `generate()` does. The run is
built in a temporary directory beside RUN and renamed into place, so a refused or failed import leaves no run behind.

`precision="bfloat16"` (`import --precision bfloat16`) makes a run of bfloat16 weights (`model.weights_dtype`):
the model is built with bfloat16 variables, each tensor is written into its variable as bfloat16 (a bfloat16
checkpoint's values as stored, bit for bit; float32 ones rounded to nearest even), and the run's checkpoint holds
them, half the bytes of float32; the run decodes in bfloat16 (`decoding.precision`).
"""

import logging
import pathlib

import numpy as np
import tensorflow as tf

from t2t_keras import config as config_lib
from t2t_keras.build import build_model
from t2t_keras.data.pretrained_tokenizer import PretrainedTokenizer
from t2t_keras.data.tokenizer import check_vocab_size
from t2t_keras.errors import ConfigError, T2TError
from t2t_keras.files import staged_directory
from t2t_keras.pretrained import generation as generation_defaults
from t2t_keras.pretrained import m2m100, marian, settings, t5
from t2t_keras.pretrained.checkpoint import Checkpoint, CheckpointError
from t2t_keras.pretrained.weights import set_weights
from t2t_keras.runs import RunDirectory
from t2t_keras.special_ids import SpecialIds

logger = logging.getLogger(__name__)

FAMILIES = {marian.FAMILY: marian.convert, m2m100.FAMILY: m2m100.convert, t5.FAMILY: t5.convert}  # import --from
POSITION_TOLERANCE = 1e-4  # a stored sinusoid table against ours (float64 numpy there, float32 here)


def import_checkpoint(family, directory, run_dir, source_lang=None, target_lang=None, precision="float32"):
    """Imports the checkpoint in `directory` (of `family`: "marian", "m2m100" or "t5") as the run `run_dir`, which
    must not exist; `source_lang` and `target_lang` choose an NLLB / M2M-100 model's languages (`target_lang`:
    MADLAD-400's target tag). `precision` "bfloat16": the run's weights are bfloat16, in memory and in its
    checkpoint (`model.weights_dtype`), and it decodes with them (`decoding.precision`). Returns the run."""
    if family not in FAMILIES:
        raise T2TError(f"--from must be one of {sorted(FAMILIES)}. Received: {family!r}")
    if precision not in config_lib.WEIGHTS_DTYPES:
        raise T2TError(f"--precision must be one of {', '.join(config_lib.WEIGHTS_DTYPES)}. Received: {precision!r}")
    run_dir = pathlib.Path(run_dir)
    if run_dir.exists():
        raise T2TError(f"{run_dir} already exists: import into a new --run-dir.")
    checkpoint = Checkpoint(directory)
    imported = FAMILIES[family](checkpoint, source_lang, target_lang)
    config = _run_config(imported, checkpoint, precision)
    tokenizer = PretrainedTokenizer(imported.tokenizer)
    check_vocab_size(tokenizer.vocab_size, config.model.vocab_size)
    model = build_model(config.model)
    tensors = checkpoint.tensors()
    _check_position_tables(model, tensors, imported.position_tables)
    planned = imported.weight_map(model) if imported.weight_map is not None else None
    set_weights(model, tensors, imported.embeddings, imported.aliases, planned)
    provenance = _provenance(imported, checkpoint)
    with staged_directory(run_dir) as staging:
        run = RunDirectory(staging)
        run.save_config(config)
        tokenizer.save(run.tokenizer_file(config.data.tokenizer))
        tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(run.checkpoint_dir), 1).save(0)
        run.write_json(run.pretrained_path, provenance)
    logger.info("Imported %s (%s) into %s.", checkpoint.directory, family, run_dir)
    return RunDirectory(run_dir)


def _run_config(imported, checkpoint, precision="float32"):
    """The run's config: the model section of the checkpoint (its weights in `precision`), its tokenizer and
    languages, its decoding defaults (decoding in `precision`)."""
    generation = settings.generation_defaults(checkpoint)
    data = {"tokenizer": "pretrained", "vocab_size": imported.model["vocab_size"]}
    if imported.languages:
        data.update(source_lang=imported.languages[0], target_lang=imported.languages[1])
    decoding = generation_defaults.decoding_section(generation, _special_ids(imported), imported.model["max_length"])
    decoding["precision"] = precision
    try:
        return config_lib.from_dict({"model": {**imported.model, "weights_dtype": precision}, "data": data,
                                     "decoding": decoding})
    except ConfigError as error:
        raise CheckpointError(f"{checkpoint.directory / 'config.json'} describes a model t2t_keras cannot build: "
                              f"{error}") from None


def _special_ids(imported):
    return SpecialIds.of(imported.model["special_ids"])


def _check_position_tables(model, tensors, names):
    """A sinusoid table the checkpoint stores (older Marian checkpoints) must be the one the model computes."""
    for name in names:
        if name not in tensors:
            continue
        table = tensors[name]
        ours = np.asarray(model.source_position.encoding(table.shape[0], table.shape[1]))
        difference = float(np.max(np.abs(ours - table)))
        if difference > POSITION_TOLERANCE:
            raise CheckpointError(f"The checkpoint's {name} differs from the sinusoid t2t_keras computes for it (max "
                                  f"|difference| {difference:.3g}): its positions are laid out another way; it is "
                                  "not imported.")


def _provenance(imported, checkpoint):
    """RUN/pretrained.json: where the run came from and what the searches need to decode as the checkpoint does."""
    generation = {**settings.generation_defaults(checkpoint), **imported.generation}
    record = {"family": imported.family, "checkpoint": checkpoint.directory.resolve().name,
              "name_or_path": checkpoint.config.get("_name_or_path"),
              "transformers_version": checkpoint.config.get("transformers_version"),
              "generation": generation, "ignored_settings": settings.ignored_settings(checkpoint.config),
              "generation_not_honoured": generation_defaults.not_honoured(generation, _special_ids(imported)),
              "files": dict(sorted(checkpoint.digests.items()))}
    if imported.languages:
        record["languages"] = {"source": imported.languages[0], "target": imported.languages[1]}
    return record
