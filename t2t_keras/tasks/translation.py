"""`task: translation` (§3, §6.1): parallel sentence pairs into the encoder-decoder `Transformer`."""

from t2t_keras.data import sources
from t2t_keras.decoding.generator import SOURCE, Generator
from t2t_keras.tasks.base import Task


class TranslationTask(Task):
    """Source and target sentences; the model translates, and its three attention kinds can be drawn."""

    name = "translation"
    attention_summary = True
    output = "translation"

    def examples(self, data_config, split, seed=None):
        if split == "train":
            return sources.training_examples(data_config, seed=seed)  # a Mixture: planned in memory by weight
        return sources.load_pairs(data_config, split)

    def example_inputs(self, ids):
        return (ids, ids)  # (source, target_in)

    def dev_pairs(self, dev_examples):
        return sources.as_string_pairs(dev_examples)

    def build_generator(self, model, tokenizer, **options):
        """A `Generator` of translations (of a `Transformer`, or an `Ensemble`); `options` are its own."""
        return Generator(model, tokenizer, inputs=SOURCE, **options)
