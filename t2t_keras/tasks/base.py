"""`Task`: what a kind of job says about itself, and the one data setup every task goes through.

A task answers the questions the trainer, the commands and the exports ask
(fairseq's `FairseqTask`, reduced to what this package needs):

    examples(data_config, split)   the split's sentence pairs: a list, or a tf.data.Dataset of string pairs
    batches(batches, ...)          the model's (inputs, labels, weights) from the pipeline's pair batches
    example_inputs(ids)            what the model takes, for building it on a dummy batch
    weighted_metrics               metrics count only the positions the sample weights mark
    attention_summary              it has the encoder, decoder and cross attention the TensorBoard summary draws
    output                         what `translate` gives: "translation", "continuation" or None
    default_request(decoding)      the `GenerationRequest` a run's `decoding` config makes (tasks with an output)
    build_generator(model, ...)    the `decoding.generator.Generator` its runs generate with (tasks with an output)

`load_data` is written once, here: tokenizer, training and validation
batches, provenance, for every task. The training batches come from memory
or from prepared shards (`data_route`); `RunData.training_batches(position)`
starts them at a resume position either way.
"""

import dataclasses
import logging
from typing import NamedTuple

from t2t_keras.data import sources
from t2t_keras.data.batching import make_eval_dataset, make_training_dataset
from t2t_keras.data.tokenizer import check_vocab_size
from t2t_keras.data.tokenizers import load_tokenizer, train_tokenizer
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.tasks.data_route import (
    FILE_SHARDING,
    MEMORY,
    PREPARED,
    choose_route,
    memory_training,
    plans_in_memory,
    prepared_training,
)

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class RunData:
    """The datasets `model.fit` takes, and what the run records about them."""

    tokenizer: object  # a tokenizer of data.tokenizer (data/tokenizers.py)
    train: object  # tf.data.Dataset of the task's (inputs, labels, sample_weight) batches, repeated; None where
    # each worker reads its own (`per_worker`)
    dev: object  # the same, repeated over one finite pass, or None
    dev_steps: int  # batches in one pass over `dev`
    provenance: dict  # where each split came from (RUN/data.json)
    dev_pairs: list = None  # the dev (source, target) string pairs of a translation run, else None
    stream: dict = None  # what the training stream's positions depend on (RUN/input_stream.json)
    seek: object = None  # (position, input_context=None) -> `train` from that micro-batch on, without reading
    # those before (prepared shards); or None

    @property
    def per_worker(self):
        """Whether each worker reads only its own part (prepared shards on several workers): `fit` then takes
        `strategy.distribute_datasets_from_function` over `training_batches(position, input_context)`."""
        return (self.stream or {}).get("sharding") == FILE_SHARDING

    def training_batches(self, position, input_context=None):
        """The training batches from micro-batch `position` on: sought (planned batches, from prepared or
        in-memory shards), or `train` with the first `position` skipped (streamed batches: they are read again
        through the input pipeline, not the model).

        `input_context` (a `tf.distribute.InputContext`; only where `per_worker`): the batches of that worker,
        one per replica (`data_route.prepared_training`).
        """
        if self.seek is not None:
            return self.seek(position) if input_context is None else self.seek(position, input_context)
        return self.train.skip(position) if position > 0 else self.train


class _Training(NamedTuple):
    """A road's training part of `RunData`."""

    tokenizer: object
    train: object
    seek: object
    stream: dict
    provenance: dict


def prepare_tokenizer(run, config, train_examples, provenance=None):
    """The run's tokenizer: loaded from the run directory, or trained on the training examples and saved.

    `provenance`: the examples' (`Task.examples`); a mixture's vocabulary is learned on as many of its pairs as
    its corpora hold together, not on `sentences_for_vocabulary`'s limit of an endless stream."""
    kind, path = config.data.tokenizer, run.checked_tokenizer_file(config.data.tokenizer)
    if path.exists():
        tokenizer = load_tokenizer(path, kind)
    else:
        logger.info("Training a %d-piece shared %s vocabulary on the training split.", config.data.vocab_size, kind)
        sentences = sources.sentences_for_vocabulary(train_examples, seed=config.training.seed,
                                                     pairs_per_pass=sources.mixture_pairs(provenance))
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

    def default_request(self, decoding):
        """The `GenerationRequest` of a run's `decoding` config section."""
        return GenerationRequest.from_config(decoding)

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

    def load_data(self, run, config, num_replicas=1, num_workers=1):
        """`RunData`: the splits loaded, the tokenizer prepared, training and validation batches built.

        The training batches take the road `data_route.choose_route` picks for `num_workers` workers
        training together (`num_replicas` replicas in all).
        """
        route = choose_route(run, config, num_workers)
        if route.name == PREPARED:
            training = self._prepared_training(run, config, num_replicas, num_workers)
        else:
            training = self._memory_training(run, config, num_replicas, num_workers)
        dev_examples, dev_origin = self._dev_examples(config.data)
        dev, dev_steps = self._dev_batches(dev_examples, training.tokenizer, config, num_replicas)
        return RunData(training.tokenizer, training.train, dev, dev_steps,
                       self.provenance(training.provenance, dev_origin),
                       None if dev_examples is None else self.dev_pairs(dev_examples), training.stream, training.seek)

    def _memory_training(self, run, config, num_replicas, num_workers):
        """The training split read into memory, its tokenizer, and its batches: planned over the pairs tokenized
        once (`data_route.memory_training`), or tokenized as they stream (`data_route.plans_in_memory`)."""
        data, seed = config.data, config.training.seed
        examples, provenance = self.examples(data, "train", seed)
        tokenizer = prepare_tokenizer(run, config, examples, provenance)
        if plans_in_memory(run, self.name, examples):
            memory = memory_training(examples, tokenizer, config, num_replicas, num_workers)

            def seek(position):
                return self.batches(memory.seek(position), config.model.vocab_size, seed)

            return _Training(tokenizer, seek(0), seek, memory.stream, provenance)
        train = make_training_dataset(sources.as_dataset(examples), tokenizer, shuffle_buffer=data.shuffle_buffer,
                                      seed=seed, **_batching(config, num_replicas)).repeat()
        return _Training(tokenizer, self.batches(train, config.model.vocab_size, seed), None, {"pipeline": MEMORY},
                         provenance)

    def _prepared_training(self, run, config, num_replicas, num_workers):
        """RUN/prepared/ prepared (or checked), its tokenizer, and batches read from its shards by seeking.

        On several workers `train` is None: each worker's batches need its `tf.distribute.InputContext`.
        """
        prepared = prepared_training(run, config, num_replicas, num_workers)

        def seek(position, input_context=None):
            return self.batches(prepared.seek(position, input_context), config.model.vocab_size,
                                config.training.seed)

        return _Training(prepared.tokenizer, seek(0) if num_workers == 1 else None, seek, prepared.stream,
                         prepared.provenance)

    def _dev_examples(self, data):
        if self.has_split(data, "dev"):
            return self.examples(data, "dev")
        logger.warning("No validation data: set data.dev_files to validate during training.")
        return None, None

    def _dev_batches(self, dev_examples, tokenizer, config, num_replicas):
        """`(dev, dev_steps)`: one pass of validation batches, cached and repeated; `(None, 0)` without a dev split."""
        if dev_examples is None:
            return None, 0
        dev = make_eval_dataset(sources.as_dataset(dev_examples), tokenizer, **_batching(config, num_replicas))
        dev = self.batches(dev, config.model.vocab_size, config.training.seed + 1).cache()
        dev_steps = sum(1 for _ in dev)  # one full pass; also fills the cache
        return dev.repeat(), dev_steps  # every validation then reads exactly one pass


def _batching(config, num_replicas):
    """The batching arguments of a run's config; the model's special ids frame the pairs (data/framing.py)."""
    data = config.data
    return dict(max_length=data.max_length, batch_tokens=data.batch_tokens, num_replicas=num_replicas,
                special_ids=config.model.special_ids)
