"""The dev batches `fit` validates on: with one replica, a plain iterator of them, not a multi-device one.

Keras makes a new iterator of the validation data for every validation pass and drops the previous one. A plain
`tf.data.Dataset` it distributes first (`strategy.experimental_distribute_dataset`), and iterating that makes a
multi-device iterator: a host-side buffer that feeds each replica from a dataset of its own, built with
TensorFlow's default options (tf.data autotuning on, whatever the dev batches' own options say), behind a prefetch
thread. Dropping it joins those threads. In the main job on 2 cores (bfloat16 CPU, 2026-12-03) one to three of
each run's ten validation passes took 20-55 s where the rest took about 1 s; a stack sampled during a slow pass
had the main thread in that join (`EpochIterator.reset` -> `RootDataset::Iterator::~Iterator` ->
`UnboundedThreadPool::LogicalThreadWrapper::~LogicalThreadWrapper`).

With one replica on one worker there is nothing to spread: the dev batches go to `fit` as a distributed dataset
made per replica without fetching to a device (`InputReplicationMode.PER_REPLICA`, `experimental_fetch_to_device`
off), whose iterator is the dev batches' own, autotuning off as `make_eval_dataset` (data/batching.py) sets it,
and dropping it waits for no thread. The batches, their order and the validation's figures are the same. With
several replicas the dev batches are split across them as before.
"""

import tensorflow as tf

from t2t_keras.training.strategy import worker_count


def validation_input(strategy, dev):
    """What `fit` takes as `validation_data` for the dev batches `dev` (None: None) under `strategy`."""
    if dev is None or strategy.num_replicas_in_sync != 1 or worker_count(strategy) != 1:
        return dev
    options = tf.distribute.InputOptions(experimental_fetch_to_device=False,
                                         experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA)
    return strategy.distribute_datasets_from_function(lambda context: dev, options=options)
