"""Corpora at scale: several weighted sources in one run, a uniform vocabulary sample, shuffled TFDS files."""

import collections
import pathlib
import tempfile
from unittest import mock

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from t2t_keras.config import load_config
from t2t_keras.data import sources
from t2t_keras.errors import ConfigError
from tests.helpers import TestCase


def write_corpus(directory, name, count):
    """`count` pairs whose every sentence names its corpus, e.g. ("a 17", "A 17")."""
    paths = [directory / f"{name}.en", directory / f"{name}.de"]
    paths[0].write_text("".join(f"{name} {i}\n" for i in range(count)), encoding="utf-8")
    paths[1].write_text("".join(f"{name.upper()} {i}\n" for i in range(count)), encoding="utf-8")
    return [str(p) for p in paths]


class MixedSourcesTest(TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.root = pathlib.Path(tmp.name)
        self.a = write_corpus(self.root, "a", 50)
        self.b = write_corpus(self.root, "b", 500)
        self.dev = write_corpus(self.root, "dev", 5)

    def config(self, weights=(0.7, 0.3)):
        entries = [{"source": "text", "train_files": self.a, "dev_files": self.dev, "weight": weights[0]},
                   {"source": "text", "train_files": self.b, "weight": weights[1]}]
        return load_config("tiny", [f"data.sources={entries!r}"])

    def shares(self, config, seed, count=4000):
        mixed, provenance = sources.training_pairs(config.data, seed=seed)
        names = [s.decode().split()[0] for s, _ in mixed.take(count).as_numpy_iterator()]
        counts = collections.Counter(names)
        return {name: counts[name] / count for name in ("a", "b")}, provenance, names

    def test_observed_shares_match_the_weights(self):
        shares, provenance, _ = self.shares(self.config(), seed=1)
        self.assertAllClose([shares["a"], shares["b"]], [0.7, 0.3], atol=0.03)  # a small corpus repeats
        self.assertEqual([s["share"] for s in provenance["sources"]], [0.7, 0.3])
        self.assertEqual([s["pairs"] for s in provenance["sources"]], [50, 500])
        other, _, _ = self.shares(self.config((1, 3)), seed=1)
        self.assertAllClose([other["a"], other["b"]], [0.25, 0.75], atol=0.03)

    def test_the_vocabulary_of_a_mixture_is_learned_on_one_pass_drawn_by_weight(self):
        mixed, provenance = sources.training_pairs(self.config().data, seed=1)
        self.assertEqual(sources.mixture_pairs(provenance), 550)
        sentences = list(sources.sentences_for_vocabulary(mixed, pairs_per_pass=550))
        self.assertEqual(len(sentences), 2 * 550)  # not the 2,000,000 of the limit from the endless stream
        shares = collections.Counter(sentence.split()[0] for sentence in sentences[::2])
        self.assertAllClose(shares["a"] / 550, 0.7, atol=0.06)
        self.assertIsNone(sources.mixture_pairs({"source": "text", "pairs": 50}))

    def test_deterministic_for_a_seed(self):
        _, _, first = self.shares(self.config(), seed=5, count=300)
        _, _, again = self.shares(self.config(), seed=5, count=300)
        _, _, other = self.shares(self.config(), seed=6, count=300)
        self.assertEqual(first, again)
        self.assertNotEqual(first, other)

    def test_dev_comes_from_the_first_source_and_train_concatenates_for_other_uses(self):
        config = self.config()
        dev, _ = sources.load_pairs(config.data, "dev")
        self.assertEqual(sources.as_string_pairs(dev)[0], ("dev 0", "DEV 0"))
        self.assertTrue(sources.has_split(config.data, "dev"))
        train = sources.as_string_pairs(sources.load_pairs(config.data, "train")[0])
        self.assertEqual(len(train), 550)

    def test_bad_entries_are_clear_errors(self):
        for entries, message in (([{"source": "text", "train_files": self.a, "weight": 0}], "weight must be"),
                                 ([{"source": "text", "train_file": self.a}], "unknown keys"),
                                 ([{"train_files": self.a}], "with a 'source'"),
                                 ([{"source": "web"}], r"data.sources\[0\]: data.source must be one of")):
            with self.subTest(entries=entries), self.assertRaisesRegex(ConfigError, message):
                load_config("tiny", [f"data.sources={entries!r}"])


class VocabularySampleTest(TestCase):
    def test_a_uniform_sample_of_the_whole_split(self):
        pairs = [(f"s{i}", f"t{i}") for i in range(1000)]
        for data in (pairs, tf.data.Dataset.from_tensor_slices(([s for s, _ in pairs], [t for _, t in pairs]))):
            chosen = [int(s[1:]) for s in list(sources.sentences_for_vocabulary(data, limit=400, seed=3))[::2]]
            self.assertAllClose(len(chosen), 200, atol=40)  # the dataset path keeps each pair with p = 0.2
            self.assertGreater(max(chosen), 900)  # not the first lines
            self.assertAllClose(np.mean(chosen), 500, atol=80)
            again = [int(s[1:]) for s in list(sources.sentences_for_vocabulary(data, limit=400, seed=3))[::2]]
            self.assertEqual(chosen, again)

    def test_everything_when_the_split_is_small(self):
        pairs = [("a", "b"), ("c", "d")]
        self.assertEqual(list(sources.sentences_for_vocabulary(pairs)), ["a", "b", "c", "d"])


class TfdsShuffledFilesTest(TestCase):
    def test_training_split_reads_shuffled_files_with_the_run_seed(self):
        config = load_config("tiny", ["data.source=tfds", "data.tfds_name=wmt14_translate/de-en"])
        with tfds.testing.mock_data(num_examples=4), \
                mock.patch("t2t_keras.data.tfds_source.load_tfds_pairs", wraps=None) as loader:
            loader.return_value = tf.data.Dataset.from_tensor_slices((["x"], ["y"]))
            sources.training_pairs(config.data, seed=11)
            sources.load_pairs(config.data, "dev")
        train_call, dev_call = loader.call_args_list
        self.assertEqual((train_call.kwargs["shuffle_files"], train_call.kwargs["seed"]), (True, 11))
        self.assertEqual((dev_call.kwargs["shuffle_files"], dev_call.kwargs["seed"]), (False, None))


if __name__ == "__main__":
    tf.test.main()
