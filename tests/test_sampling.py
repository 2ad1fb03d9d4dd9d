"""Sampling translations (`decoding.sampling`): the cuts on hand-made distributions, N samples per line, seeds, the
request's refusals, and the same samples through the run directory, its SavedModel, the CLI and the REST API."""

import asyncio
import unittest

import numpy as np
import tensorflow as tf

from t2t_keras.decoding import sampling
from t2t_keras.decoding.parameters import MAX_SAMPLES, DecodingParameterError
from t2t_keras.decoding.request import DEFAULTS
from t2t_keras.decoding.searches import search
from t2t_keras.errors import T2TError
from tests.helpers import TestCase, cli_in_process
from tests.test_greedy import EXTRA, SOURCE, decoding_model

DRAWS = 40  # decoding steps drawn per distribution, each for every row


def drawn(probs, rows=64, **cuts):
    """Counts `(vocab,)` of the pieces drawn from `probs` over `DRAWS` steps for `rows` rows, at temperature 1."""
    log_probs = tf.math.log(tf.constant([probs] * rows, tf.float32))
    keys = sampling.row_keys(tf.range(1, rows + 1)[:, None], 0)
    counts = np.zeros(len(probs))
    for step in range(DRAWS):
        np.add.at(counts, sampling.sample_tokens(log_probs, 7, step, keys, 1.0, **cuts).numpy(), 1)
    return counts


class CutsTest(TestCase):
    """Each cut on a distribution made by hand: what it drops is never drawn, what it keeps is, renormalised."""

    def test_epsilon_never_draws_a_piece_below_it(self):
        probs = [0.4, 0.3, 0.2, 0.06, 0.04]
        counts = drawn(probs, epsilon=0.1)
        self.assertEqual(counts[3:].tolist(), [0, 0])
        self.assertAllClose(counts[:3] / counts.sum(), np.array(probs[:3]) / 0.9, atol=0.04)

    def test_epsilon_keeps_the_most_likely_piece_when_every_piece_is_below_it(self):
        counts = drawn([0.3, 0.25, 0.25, 0.2], epsilon=0.5)
        self.assertEqual(counts[1:].tolist(), [0, 0, 0])

    def test_top_p_keeps_the_smallest_set_that_reaches_p(self):
        probs = [0.5, 0.3, 0.15, 0.05]
        counts = drawn(probs, top_p=0.7)
        self.assertEqual(counts[2:].tolist(), [0, 0])
        self.assertAllClose(counts[:2] / counts.sum(), [0.625, 0.375], atol=0.04)
        self.assertEqual(drawn(probs, top_p=0.5)[1:].tolist(), [0, 0, 0])
        self.assertTrue(np.all(drawn(probs, top_p=1.0) > 0))  # 1 is off: the least likely piece is drawn too

    def test_top_k_keeps_the_k_most_likely(self):
        counts = drawn([0.1, 0.4, 0.2, 0.3], top_k=2)
        self.assertEqual((counts[0], counts[2]), (0, 0))
        self.assertTrue(counts[1] > counts[3] > 0)

    def test_temperature_zero_is_argmax(self):
        log_probs = tf.nn.log_softmax(tf.random.stateless_normal([16, 50], [1, 2]) * 3)
        keys = sampling.row_keys(tf.range(16)[:, None] + 4, 0)
        argmax = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        for temperature in (0.0, tf.constant(0.0)):
            self.assertAllEqual(sampling.sample_tokens(log_probs, 3, 0, keys, temperature, top_p=0.5), argmax)

    def test_a_rows_key_ignores_padding_and_its_place_in_the_batch(self):
        keys = sampling.row_keys(tf.constant([[5, 6, 0, 0], [7, 8, 9, 0]]), 0, copies=3).numpy()
        again = sampling.row_keys(tf.constant([[7, 8, 9], [5, 6, 0]]), 0, copies=3).numpy()
        self.assertAllEqual(keys[:3], again[3:])
        self.assertEqual(len(set(keys.tolist())), 6)  # every sample of every row draws apart


class SamplesTest(TestCase):
    """N samples per line from greedy search on a tiny model."""

    @classmethod
    def setUpClass(cls):
        cls.model = decoding_model()

    def sample(self, source=SOURCE, **options):
        options = dict(dict(beam_size=1, num_return=3, temperature=1.5, seed=3, max_extra_length=EXTRA), **options)
        result = search(self.model, source, **options)
        return result.tokens.numpy(), result.scores.numpy()

    def test_n_samples_per_line_most_likely_first(self):
        tokens, scores = self.sample()
        self.assertEqual(tokens.shape[:2], (len(SOURCE), 3))
        self.assertEqual(scores.shape, (len(SOURCE), 3))
        self.assertTrue(np.all(np.diff(scores, axis=1) <= 0), scores)
        self.assertGreater(len({row.tobytes() for row in tokens.reshape(-1, tokens.shape[-1])}), len(SOURCE))

    def test_the_same_seed_gives_the_same_samples_and_another_seed_others(self):
        tokens, scores = self.sample()
        again, again_scores = self.sample()
        self.assertAllEqual(tokens, again)
        self.assertAllClose(scores, again_scores)
        self.assertNotAllEqual(tokens, self.sample(seed=4)[0])

    def test_a_lines_samples_do_not_depend_on_the_batch(self):
        tokens, _ = self.sample()
        reversed_tokens, _ = self.sample(SOURCE[::-1])
        self.assertAllEqual(tokens, reversed_tokens[::-1])
        padded, _ = self.sample(np.pad(SOURCE, [[0, 0], [0, 3]]))
        self.assertAllEqual(tokens, padded[..., :tokens.shape[-1]])

    def test_compiled_and_graph_searches_draw_alike(self):
        tokens, _ = self.sample()
        options = dict(beam_size=1, num_return=3, temperature=1.5, seed=3, max_extra_length=EXTRA, top_p=0.9)
        xla = tf.function(lambda s: search(self.model, s, **options).tokens, jit_compile=True)(SOURCE)
        graph = tf.function(lambda s: search(self.model, s, growing_cache=True, **options).tokens)(SOURCE)
        self.assertAllEqual(xla, graph[..., :xla.shape[-1]])


class RequestTest(unittest.TestCase):
    """The request's sampling fields, each checked once with a message naming the fix."""

    def test_refusals(self):
        for given, message in (
                ({"beam_size": 2, "temperature": 0.8}, "takes beam_size 1, not 2"),
                ({"beam_size": 1, "temperature": 1.0, "num_return": MAX_SAMPLES + 1},
                 rf"num_return must be an integer in \[1, {MAX_SAMPLES}\] when sampling"),
                ({"beam_size": 1, "num_return": 3}, "would repeat one argmax translation"),
                ({"beam_size": 1, "temperature": 1.0, "top_p": 0.0}, r"top_p must be a number in \(0, 1\]"),
                ({"beam_size": 1, "temperature": 1.0, "epsilon": 1.0}, r"epsilon must be a number in \[0, 1\)"),
                ({"beam_size": 1, "epsilon": 0.02}, "epsilon only apply when sampling"),
                ({"beam_size": 1, "temperature": 1.0, "seed": -1}, r"seed must be an integer in \[0, ")):
            with self.subTest(given=given), self.assertRaisesRegex(DecodingParameterError, message):
                DEFAULTS.updated(**given)

    def test_samples_per_line_go_past_the_beam(self):
        request = DEFAULTS.updated(beam_size=1, temperature=1.0, epsilon=0.02, num_return=64, seed=1)
        self.assertTrue(request.sampling)
        self.assertEqual((request.num_return, request.epsilon, request.top_p), (64, 0.02, 1.0))


class ArtifactsTest(TestCase):
    """The tiny run of `tests.roads` and its exports, sampled."""

    REQUEST = dict(beam_size=1, temperature=1.0, epsilon=0.02, num_return=4, seed=11)

    @classmethod
    def setUpClass(cls):
        from t2t_keras.artifacts import open_artifact
        from tests.roads import roads

        cls.roads = roads()
        cls.lines = cls.roads.sentences.read_text(encoding="utf-8").splitlines()[:6]
        cls.run_artifact = open_artifact(cls.roads.run_dir)
        cls.saved_model = open_artifact(cls.roads.saved_model)

    def generate(self, artifact, **given):
        return artifact.generate(self.lines, artifact.request(**dict(self.REQUEST, **given)))

    def test_the_run_directory_and_its_saved_model_draw_the_same_samples(self):
        of_run, of_export = self.generate(self.run_artifact), self.generate(self.saved_model)
        self.assertEqual([len(texts) for texts in of_run.texts], [4] * len(self.lines))
        self.assertEqual(of_export.texts, of_run.texts)
        self.assertAllClose(of_export.scores, of_run.scores, atol=1e-3)
        self.assertNotEqual(self.generate(self.run_artifact, seed=12).texts, of_run.texts)

    def test_an_export_without_the_sample_signature_opens_and_refuses_sampling(self):
        from t2t_keras.artifacts.saved_model import SavedModelArtifact

        class Older:  # the export as one written before sampling: no `sample` signature
            def __init__(self, loaded):
                self.loaded = loaded
                self.signatures = {k: v for k, v in loaded.signatures.items() if k != "sample"}

            def __getattr__(self, name):
                return getattr(self.loaded, name)

        older = SavedModelArtifact(self.roads.saved_model, loaded=Older(self.saved_model.saved_model))
        self.assertEqual(older.generate(self.lines[:2], older.request(beam_size=1)).best,
                         self.saved_model.generate(self.lines[:2], self.saved_model.request(beam_size=1)).best)
        with self.assertRaisesRegex(T2TError, "has no 'sample' signature .*export the run again"):
            older.request(**self.REQUEST)

    def test_ctranslate2_samples_with_a_seed_and_refuses_epsilon(self):
        from t2t_keras.artifacts import open_artifact

        artifact = open_artifact(self.roads.ctranslate2)
        first = self.generate(artifact, epsilon=None, top_p=0.95)
        self.assertEqual([len(texts) for texts in first.texts], [4] * len(self.lines))
        self.assertEqual(self.generate(artifact, epsilon=None, top_p=0.95).texts, first.texts)
        with self.assertRaisesRegex(T2TError, r"epsilon \(--epsilon\) does not apply to .*no epsilon sampling.*"
                                              r"logits processor"):
            artifact.request(**self.REQUEST)

    def test_the_litert_file_refuses_sampling_in_one_line(self):
        from t2t_keras.artifacts import open_artifact

        with self.assertRaisesRegex(T2TError, r"temperature \(--temperature\).* not apply to .*LiteRT"):
            open_artifact(self.roads.litert).request(**self.REQUEST)

    def test_translate_prints_the_samples_of_a_line_tab_separated(self):
        source = self.roads.root / "sampling-source.txt"
        source.write_text("\n".join(self.lines) + "\n", encoding="utf-8")
        flags = ["--beam-size", 1, "--temperature", 1, "--epsilon", 0.02, "--seed", 11, "--num-return", 4]
        outputs = {}
        for flag, path in (("--run-dir", self.roads.run_dir), ("--saved-model", self.roads.saved_model)):
            done = cli_in_process("translate", flag, path, "--input", source, *flags)
            self.assertEqual(done.returncode, 0, done.stderr.decode())
            outputs[flag] = done.stdout.decode("utf-8").splitlines()
        self.assertEqual(outputs["--run-dir"], outputs["--saved-model"])
        self.assertEqual([line.split("\t") for line in outputs["--run-dir"]], self.generate(self.run_artifact).texts)
        done = cli_in_process("translate", "--run-dir", self.roads.run_dir, "--input", source, "--temperature", 1)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("takes beam_size 1", done.stderr.decode())

    def test_rest_params_sample(self):
        from t2t_keras.serving.server import create_app
        from tests.test_server import post_all, start_server

        server, thread, base_url = start_server(create_app(self.saved_model, model_name="toy", warm_up=False))
        try:
            body = {"instances": self.lines[:3], "params": dict(self.REQUEST)}
            answers = asyncio.run(post_all(base_url, [body, body]))
        finally:
            server.should_exit = True
            thread.join(60)
        self.assertEqual([answer.status_code for answer in answers], [200, 200], answers[0].text)
        predictions = answers[0].json()["predictions"]
        self.assertEqual([p["translations"] for p in predictions], self.generate(self.saved_model).texts[:3])
        self.assertEqual(answers[1].json(), answers[0].json())


if __name__ == "__main__":
    unittest.main()
