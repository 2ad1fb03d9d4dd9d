"""`task: lm` and `task: mlm`: one side of a corpus (`data.lm_side`), or a plain text file, into a single stack.

Sentences travel through the translation input pipeline as pairs `(sentence,
sentence)` (`monolingual.as_pairs`), so tokenization, length filtering and
bucketing are the same; `batches` then keeps what each task predicts.
"""

from t2t_keras.data import monolingual
from t2t_keras.decoding.generator import PROMPT, Generator
from t2t_keras.tasks.base import Task


class _OneSideTask(Task):
    def examples(self, data_config, split, seed=None):
        sentences, provenance = monolingual.load_sentences(data_config, split, seed=seed if split == "train" else None)
        return monolingual.as_pairs(sentences), provenance

    def has_split(self, data_config, split):
        return monolingual.has_split(data_config, split)

    def provenance(self, train, dev):
        return {"train": train, "dev": dev, "task": self.name}


class CausalLanguageModelTask(_OneSideTask):
    """A decoder-only model predicting each next piece and the closing EOS; it continues prompts."""

    name = "lm"
    output = "continuation"

    def batches(self, batches, vocab_size, seed):
        return monolingual.lm_batches(batches)

    def default_request(self, decoding):
        """The run's `decoding` section with a beam of one, greedy: a beam finds bland, repetitive continuations."""
        return super().default_request(decoding).updated(beam_size=1)

    def build_generator(self, model, tokenizer, **options):
        """A `Generator` of continuations of prompts; `options` are its own."""
        return Generator(model, tokenizer, inputs=PROMPT, **options)


class MaskedLanguageModelTask(_OneSideTask):
    """An encoder-only model predicting the masked pieces (BERT's 80/10/10); nothing to generate."""

    name = "mlm"
    weighted_metrics = True  # accuracy and perplexity over the masked positions: their sample weights

    def batches(self, batches, vocab_size, seed):
        return monolingual.mlm_batches(batches, vocab_size, seed)
