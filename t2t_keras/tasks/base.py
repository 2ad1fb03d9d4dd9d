"""`Task`: what a kind of job says about itself, and the one data setup every task goes through.

A task answers the questions the trainer, the commands and the exports ask
(fairseq's `FairseqTask`, reduced to what this package needs):

    examples(data_config, split)   the split's sentence pairs: a list, or a tf.data.Dataset of string pairs
    batches(batches, ...)          the model's (inputs, labels, weights) from the pipeline's pair batches
    example_inputs(ids)            what the model takes, for building it on a dummy batch
    weighted_metrics               metrics count only the positions the sample weights mark
    attention_summary              it has the encoder, decoder and cross attention the TensorBoard summary draws
    output                         what `translate` gives: "translation", "continuation" or None

`load_data` is written once, here: tokenizer, training and validation
batches, provenance, for every task.
"""

import dataclasses
import logging

from t2t_keras.data import sources
from t2t_keras.data.batching import make_eval_dataset, make_training_dataset
from t2t_keras.data.tokenizer import check_vocab_size
from t2t_keras.data.tokenizers import load_tokenizer, train_tokenizer

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class RunData:
    """The datasets `model.fit` takes, and what the run records about them."""

    tokenizer: object  # a tokenizer of data.tokenizer (data/tokenizers.py)
    train: object  # tf.data.Dataset of the task's (inputs, labels, sample_weight) batches, repeated
    dev: object  # the same, repeated over one finite pass, or None
    dev_steps: int  # batches in one pass over `dev`
    provenance: dict  # where each split came from (RUN/data.json)
    dev_pairs: list = None  # the dev (source, target) string pairs of a translation run, else None


def prepare_tokenizer(run, config, train_examples):
    """The run's tokenizer: loaded from the run directory, or trained on the training examples and saved."""
    kind, path = config.data.tokenizer, run.tokenizer_file(config.data.tokenizer)
    if path.exists():
        tokenizer = load_tokenizer(path, kind)
    else:
        logger.info("Training a %d-piece shared %s vocabulary on the training split.", config.data.vocab_size, kind)
        sentences = sources.sentences_for_vocabulary(train_examples, seed=config.training.seed)
        tokenizer = train_tokenizer(kind, sentences, path, config.data.vocab_size, seed=config.training.seed)
    check_vocab_size(tokenizer.vocab_size, config.model.vocab_size)
    return tokenizer


class Task:
    """The interface; see the module docstring. Subclasses set the class attributes and `examples`."""

    name = None  # the config's `training.task`
    weighted_metrics = False
    attention_summary = False
    output = None

    def examples(self, data_config, split, seed=None):
        """`(pairs, provenance)` of a split: string pairs, as a list or a tf.data.Dataset."""
        raise NotImplementedError

    def has_split(self, data_config, split):
        return sources.has_split(data_config, split)

    def batches(self, batches, vocab_size, seed):
        """The task's `(inputs, labels, weights)` from `((source, target_in), target_out, weights)` batches."""
        return batches

    def example_inputs(self, ids):
        """The model's inputs for a batch of token ids `ids` (encoder-decoder: the same ids on both sides)."""
        return ids

    def provenance(self, train, dev):
        return {"train": train, "dev": dev}

    def dev_pairs(self, dev_examples):
        """The dev pairs a translation run evaluates during training (keep-best); None for other tasks."""
        return None

    def load_data(self, run, config, num_replicas=1):
        """`RunData`: the splits loaded, the tokenizer prepared, training and validation batches built."""
        data, seed = config.data, config.training.seed
        train_examples, train_origin = self.examples(data, "train", seed)
        dev_examples, dev_origin = None, None
        if self.has_split(data, "dev"):
            dev_examples, dev_origin = self.examples(data, "dev")
        else:
            logger.warning("No validation data: set data.dev_files to validate during training.")
        tokenizer = prepare_tokenizer(run, config, train_examples)
        batching = dict(max_length=data.max_length, batch_tokens=data.batch_tokens, num_replicas=num_replicas)
        train = make_training_dataset(sources.as_dataset(train_examples), tokenizer,
                                      shuffle_buffer=data.shuffle_buffer, seed=seed, **batching).repeat()
        train = self.batches(train, config.model.vocab_size, seed)
        dev, dev_steps = None, 0
        if dev_examples is not None:
            dev = make_eval_dataset(sources.as_dataset(dev_examples), tokenizer, **batching)
            dev = self.batches(dev, config.model.vocab_size, seed + 1).cache()
            dev_steps = sum(1 for _ in dev)  # one full pass; also fills the cache
            dev = dev.repeat()  # every validation then reads exactly one pass
        return RunData(tokenizer, train, dev, dev_steps, self.provenance(train_origin, dev_origin),
                       None if dev_examples is None else self.dev_pairs(dev_examples))
