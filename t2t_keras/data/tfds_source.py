"""Sentence pairs from TensorFlow Datasets translation builders, in either direction.

Works with any builder whose features are a ``tfds.features.Translation``, such
as ``wmt14_translate/de-en``, ``wmt_t2t_translate/de-en`` and
``ted_hrlr_translate/pt_to_en``. One language-pair config serves both
directions: the language arguments pick which side is the source.
"""

import logging

import tensorflow as tf
import tensorflow_datasets as tfds

from t2t_keras.errors import DataError

logger = logging.getLogger(__name__)


def load_tfds_pairs(
    name, split, source_lang, target_lang, data_dir=None, *, shuffle_files=False, seed=None
) -> tf.data.Dataset:
    """Loads a TFDS translation dataset as ``(source_string, target_string)`` pairs.

    The dataset is downloaded and prepared on first use (into ``data_dir``, or
    TFDS' default directory), then read from disk.

    Args:
      name: TFDS name with its config, e.g. ``"wmt14_translate/de-en"``.
      split: TFDS split, e.g. ``"train"``, ``"validation"``, ``"test"`` or a
        slice such as ``"train[:1%]"``.
      source_lang: language code of the source side, e.g. ``"en"``.
      target_lang: language code of the target side, e.g. ``"de"``.
      data_dir: where TFDS keeps prepared data; ``None`` for its default.
      shuffle_files: read the shards in a shuffled order (for training, where
        a shuffle buffer alone only mixes neighbouring examples).
      seed: seed of the shard order; ``None`` for a different order every run.

    Returns:
      A ``tf.data.Dataset`` of scalar ``tf.string`` pairs ``(source, target)``.

    Raises:
      DataError: the dataset is unknown, is not a translation dataset, does
        not hold the requested languages, or cannot be downloaded.
    """
    builder = _builder(name, data_dir)
    check_language_pair(name, translation_languages(builder, name), source_lang, target_lang)
    _download_and_prepare(builder, name)
    dataset = builder.as_dataset(
        split=split, shuffle_files=shuffle_files, read_config=tfds.ReadConfig(shuffle_seed=seed)
    )
    logger.info("Reading %s split %r as %s -> %s.", name, split, source_lang, target_lang)
    return dataset.map(
        lambda example: (example[source_lang], example[target_lang]),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def translation_languages(builder, name: str) -> tuple[str, ...]:
    """The language codes of a TFDS translation builder, read from its features."""
    languages = getattr(builder.info.features, "languages", None)
    if not languages:
        raise DataError(
            f"TFDS dataset {name!r} is not a translation dataset (its features are "
            f"{type(builder.info.features).__name__}, not Translation): pick a "
            "translation dataset such as 'wmt14_translate/de-en'."
        )
    return tuple(languages)


def check_language_pair(name: str, languages, source_lang: str, target_lang: str) -> None:
    """Raises DataError unless source and target are two different languages of ``languages``."""
    languages = tuple(languages)
    if source_lang == target_lang or {source_lang, target_lang} - set(languages):
        raise DataError(
            f"TFDS dataset {name!r} holds the languages {languages}, but "
            f"source_lang={source_lang!r}, target_lang={target_lang!r} were requested: "
            f"use two different languages among {languages} (either direction works), "
            "or choose the dataset config of the pair you want."
        )


def _download_and_prepare(builder, name: str) -> None:
    """``builder.download_and_prepare()`` with a DataError naming the dataset when it fails."""
    try:
        builder.download_and_prepare()
    except Exception as err:  # TFDS raises many kinds of download errors.
        raise DataError(
            f"Could not download or prepare TFDS dataset {name!r} into "
            f"{builder.data_dir}: {err}. Prepare it on a machine with network access "
            "and pass its data_dir, or train from text files instead."
        ) from err


def _builder(name: str, data_dir):
    """``tfds.builder`` with a DataError naming the dataset when it is unknown."""
    try:
        return tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError as err:
        raise DataError(
            f"TFDS has no dataset {name!r}: check the name, e.g. "
            "'wmt14_translate/de-en' or 'ted_hrlr_translate/pt_to_en'."
        ) from err
    except ValueError as err:  # An unknown config of a known dataset.
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(
            f"TFDS could not build {name!r}: {first_line} Check the config after the "
            "'/', e.g. 'wmt14_translate/de-en'."
        ) from err
