"""A batch decoded as concurrent shards gives the rows of the unsharded search, in order."""

from unittest import mock

import numpy as np
import tensorflow as tf

from t2t_keras.decoding.generator import Generator
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.decoding.sharding import choose_shards, cpu_cores, sharded
from t2t_keras.fast_path import FastPath, Hardware
from tests.helpers import best_texts, long_check
from tests.test_generator import SENTENCES, CharTokenizer
from tests.test_greedy import DecodingTestCase, decoding_model


def shard_sizes(source):
    """A stand-in search: each row gets the row count of the shard it was decoded in, and its own first id."""
    rows = tf.shape(source)[0]
    return {"rows": tf.fill([rows], rows), "first": source[:, 0]}


class ShardedFunctionTest(DecodingTestCase):
    def run_sharded(self, rows, shards):
        """Outputs with the batch size known while tracing, and with it known only when run: they must agree."""
        source = tf.constant(np.arange(rows * 3, dtype=np.int32).reshape(rows, 3))
        static = tf.function(sharded(shard_sizes, shards))(source)
        dynamic = tf.function(sharded(shard_sizes, shards), input_signature=[tf.TensorSpec([None, 3], tf.int32)])
        tf.nest.map_structure(self.assertAllEqual, static, dynamic(source))
        return static

    def test_shards_are_balanced_and_rows_keep_their_order(self):
        out = self.run_sharded(rows=7, shards=3)
        self.assertEqual(out["rows"].numpy().tolist(), [3, 3, 3, 2, 2, 2, 2])  # 7 = 3 + 2 + 2
        self.assertEqual(out["first"].numpy().tolist(), [3 * i for i in range(7)])

    def test_a_batch_too_small_to_share_is_one_search(self):
        out = self.run_sharded(rows=3, shards=2)  # fewer than 2 rows per shard
        self.assertEqual(out["rows"].numpy().tolist(), [3, 3, 3])

    def test_one_shard_is_the_search_itself(self):
        self.assertIs(sharded(shard_sizes, 1), shard_sizes)


class ChooseShardsTest(DecodingTestCase):
    def test_auto_is_one_per_cpu_core(self):
        self.assertEqual(choose_shards("auto"), cpu_cores())

    def test_auto_is_one_with_a_gpu_or_tpu(self):
        for hardware in (Hardware(gpu_capabilities=((8, 0),)), Hardware(tpus=1)):
            with mock.patch.object(FastPath, "detect", return_value=FastPath.of(hardware)):
                self.assertEqual(choose_shards("auto"), 1, hardware)

    def test_the_inter_op_thread_setting_caps_the_cores(self):
        with mock.patch.object(tf.config.threading, "get_inter_op_parallelism_threads", return_value=1):
            self.assertEqual(cpu_cores(), 1)

    def test_explicit_counts_and_bad_settings(self):
        self.assertEqual(choose_shards(3), 3)
        for bad in (0, -1, 1.5, "two", True):
            with self.assertRaisesRegex(ValueError, "shards must be 'auto' or a positive integer"):
                choose_shards(bad)


@long_check
class ShardedTranslationTest(DecodingTestCase):
    def test_greedy_and_beam_translations_equal_the_unsharded_ones(self):
        model = decoding_model()
        sentences = SENTENCES * 3  # batches of 16 rows, split in 2 and 3 shards
        searches = {"greedy": GenerationRequest(beam_size=1, max_extra_length=5),
                    "beam": GenerationRequest(max_extra_length=5)}
        for method in ("greedy", "beam"):
            expected = Generator(model, CharTokenizer(), shards=1)
            self.assertEqual(expected.shards, 1)
            for shards in (2, 3):
                generator = Generator(model, CharTokenizer(), shards=shards)
                with self.subTest(method=method, shards=shards):
                    self.assertEqual(best_texts(generator, sentences, searches[method]),
                                     best_texts(expected, sentences, searches[method]))


@long_check
class ShardedExportSearchTest(DecodingTestCase):
    def test_the_export_module_with_shards_gives_the_unsharded_n_best(self):
        from t2t_keras.export.translator_module import TranslatorModule

        model = decoding_model()
        source = tf.constant(np.random.default_rng(0).integers(4, 20, size=(8, 6)).astype("int32"))
        results = []
        for shards in (1, 2):
            module = TranslatorModule(model, None, max_beam_size=2, shards=shards,
                                      request=GenerationRequest(beam_size=2, max_extra_length=5))
            self.assertEqual(int(module.decoding_shards.numpy()), shards)
            for beam_size in (1, 2):
                results.append(module.functions.translate_ids(source, beam_size, 0.6, 5, beam_size))
        for unsharded, with_shards in zip(results[:2], results[2:]):
            tf.nest.map_structure(self.assertAllClose, unsharded, with_shards)
