"""The training data of any `training.task`: translation pairs, or one side of the text for lm / mlm."""

from t2t_keras.data import monolingual
from t2t_keras.data.batching import make_eval_dataset, make_training_dataset
from t2t_keras.training.data_setup import RunData, prepare_data, prepare_tokenizer


def prepare_task_data(run, config, num_replicas=1):
    """`RunData` for the run's task; translation is `data_setup.prepare_data` itself."""
    if config.task == "translation":
        return prepare_data(run, config, num_replicas)
    data, seed = config.data, config.training.seed
    train_text, train_origin = monolingual.load_sentences(data, "train", seed=seed)
    dev_text, dev_origin = None, None
    if monolingual.has_split(data, "dev"):
        dev_text, dev_origin = monolingual.load_sentences(data, "dev")
    tokenizer = prepare_tokenizer(run, config, monolingual.as_pairs(train_text))
    batching = dict(max_length=data.max_length, batch_tokens=data.batch_tokens, num_replicas=num_replicas)
    train = make_training_dataset(monolingual.as_pairs(train_text), tokenizer, shuffle_buffer=data.shuffle_buffer,
                                  seed=seed, **batching).repeat()
    train = monolingual.task_batches(config.task, train, config.model.vocab_size, seed)
    dev, dev_steps = None, 0
    if dev_text is not None:
        dev = make_eval_dataset(monolingual.as_pairs(dev_text), tokenizer, **batching)
        dev = monolingual.task_batches(config.task, dev, config.model.vocab_size, seed + 1).cache()
        dev_steps = sum(1 for _ in dev)  # one full pass; also fills the cache
        dev = dev.repeat()
    return RunData(tokenizer, train, dev, dev_steps, {"train": train_origin, "dev": dev_origin, "task": config.task})
