"""Text for the language-model tasks (`training.task: lm | mlm`): one side of a corpus, or a plain text file.

Sentences travel through the translation input pipeline as pairs `(sentence,
sentence)`, so tokenization, length filtering and bucketing are the same;
`lm_batches` and `mlm_batches` then keep the one side each task needs (`tasks.language_model`).
"""

import tensorflow as tf

from t2t_keras.data import sources
from t2t_keras.data.masking import masked_lm_batches
from t2t_keras.data.text_files import _read_lines


def _single_text_file(data_config, split):
    """The one plain text file `data.{split}_files` names (source: text), or None."""
    files = getattr(data_config, f"{split}_files", None)
    if data_config.source == "text" and not data_config.sources and files and len(files) == 1:
        return files[0]
    return None


def has_split(data_config, split):
    return _single_text_file(data_config, split) is not None or sources.has_split(data_config, split)


def load_sentences(data_config, split, seed=None):
    """`(sentences, provenance)`: `data.lm_side` of the split's pairs, or the lines of its single text file.

    `sentences` is a list of strings, or a tf.data.Dataset of scalar strings (TFDS, mixtures).
    """
    path = _single_text_file(data_config, split)
    if path is not None:
        lines = read_sentences(path)
        return lines, {"source": "text", "files": [str(path)], "sentences": len(lines)}
    if split == "train":
        pairs, provenance = sources.training_pairs(data_config, seed)
    else:
        pairs, provenance = sources.load_pairs(data_config, split)
    side = 0 if data_config.lm_side == "source" else 1
    provenance = dict(provenance, side=data_config.lm_side)
    if isinstance(pairs, tf.data.Dataset):
        return pairs.map(lambda *pair: pair[side]), provenance
    return [pair[side] for pair in pairs], provenance


def read_sentences(path):
    """The non-blank lines of a text file (one sentence per line)."""
    return [line for line in _read_lines(path) if line.strip()]


def as_pairs(sentences):
    """A dataset of `(sentence, sentence)` string pairs for the translation input pipeline."""
    if not isinstance(sentences, tf.data.Dataset):
        sentences = tf.data.Dataset.from_tensor_slices(tf.constant(list(sentences), tf.string))
    return sentences.map(lambda sentence: (sentence, sentence))


def lm_batches(batches):
    """`(BOS x, x EOS, weights)` from pipeline batches: a causal LM predicts each next token and EOS."""
    return batches.map(lambda inputs, target_out, weights: (inputs[1], target_out, weights))


def mlm_batches(batches, vocab_size, seed):
    """`(corrupted x EOS, x EOS, weights at masked positions)` from pipeline batches (BERT's 80/10/10)."""
    return masked_lm_batches(batches.map(lambda inputs, target_out, weights: inputs[0]), vocab_size, seed)

