"""Everything between the config and `model.fit`'s inputs: pairs, vocabulary, batched datasets."""

import dataclasses
import logging

from t2t_keras.data import sources
from t2t_keras.data.batching import make_eval_dataset, make_training_dataset
from t2t_keras.data.tokenizer import check_vocab_size
from t2t_keras.data.tokenizers import load_tokenizer, train_tokenizer

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class RunData:
    tokenizer: object  # a tokenizer of data.tokenizer (data/tokenizers.py)
    train: object  # tf.data.Dataset of ((source, target_in), target_out, sample_weight), repeated
    dev: object  # the same, finite, or None
    dev_steps: int  # batches in one pass over `dev`
    provenance: dict
    dev_pairs: list = None  # the dev (source, target) pairs, or None


def prepare_tokenizer(run, config, train_pairs):
    """The run's tokenizer: loaded from the run directory, or trained on the training split and saved."""
    kind, path = config.data.tokenizer, run.tokenizer_file(config.data.tokenizer)
    if path.exists():
        tokenizer = load_tokenizer(path, kind)
    else:
        logger.info("Training a %d-piece shared %s vocabulary on the training split.", config.data.vocab_size, kind)
        sentences = sources.sentences_for_vocabulary(train_pairs, seed=config.training.seed)
        tokenizer = train_tokenizer(kind, sentences, path, config.data.vocab_size, seed=config.training.seed)
    check_vocab_size(tokenizer.vocab_size, config.model.vocab_size)
    return tokenizer


def prepare_data(run, config, num_replicas=1):
    """Loads the splits, prepares the tokenizer and builds the training and validation datasets."""
    data = config.data
    train_pairs, train_origin = sources.training_pairs(data, seed=config.training.seed)
    dev_pairs, dev_origin = None, None
    if sources.has_split(data, "dev"):
        dev_pairs, dev_origin = sources.load_pairs(data, "dev")
    else:
        logger.warning("No validation data: set data.dev_files to validate during training.")
    tokenizer = prepare_tokenizer(run, config, train_pairs)
    batching = dict(max_length=data.max_length, batch_tokens=data.batch_tokens, num_replicas=num_replicas)
    train = make_training_dataset(sources.as_dataset(train_pairs), tokenizer, shuffle_buffer=data.shuffle_buffer,
                                  seed=config.training.seed, **batching).repeat()
    dev, dev_steps = None, 0
    if dev_pairs is not None:
        dev = make_eval_dataset(sources.as_dataset(dev_pairs), tokenizer, **batching).cache()
        dev_steps = sum(1 for _ in dev)  # one full pass; also fills the cache
        dev = dev.repeat()  # every validation then reads exactly one pass
    return RunData(tokenizer, train, dev, dev_steps, {"train": train_origin, "dev": dev_origin},
                   sources.as_string_pairs(dev_pairs) if dev_pairs is not None else None)
