"""The quality estimate a translation can carry: its features worked out by hand, its regressor on a known
relation, and on the suite's tiny run (`tests.roads`, copied: qe-train writes into the run) `qe-train`,
`translate --with-quality` / `--min-quality`, `evaluate`, the SavedModel and CTranslate2 exports that carry it, and
the refusals without one."""

import json
import math
import pathlib
import shutil
import tempfile
import unittest

import numpy as np
import tensorflow as tf

from t2t_keras.decoding.quality_features import (
    FEATURES,
    WITHOUT_DISTRIBUTIONS,
    features_from_log_probs,
    features_from_token_log_probs,
)
from t2t_keras.decoding.quality_model import (
    QualityModel,
    choose_model,
    read_quality_models,
    write_quality_models,
)
from t2t_keras.decoding.request import Generation, GenerationRequest
from t2t_keras.errors import DataError, T2TError
from t2t_keras.evaluation.quality_estimate import ranking
from t2t_keras.evaluation.quality_lines import quality_outputs
from t2t_keras.serving import rest_api
from t2t_keras.special_ids import SpecialIds
from tests.helpers import cli_in_process, long_check
from tests.roads import roads

IDS = SpecialIds()  # pad 0, unk 1, bos 2, eos 3
SENTENCES = 6  # lines translated on the tiny run


class FeaturesTest(unittest.TestCase):
    def test_features_of_known_distributions(self):
        # Two output positions over a vocabulary of 4 (pad, unk, bos, eos); a third is padding.
        uniform = np.full(4, 0.25)
        halves = np.array([0.0, 0.5, 0.0, 0.5])  # a zero probability adds nothing to the entropy
        padded = np.array([0.1, 0.2, 0.3, 0.4])
        with np.errstate(divide="ignore"):  # log 0 = -inf, as a softmax's underflow gives
            log_probs = tf.constant(np.log(np.stack([uniform, halves, padded]))[None], tf.float32)
        target_out = tf.constant([[1, 3, 0]])  # an unknown piece, EOS, padding
        source = tf.constant([[5, 1, 1, 6, 3, 0]])  # 4 pieces (two unknown) + EOS, padding
        values = dict(zip(FEATURES, features_from_log_probs(log_probs, source, target_out, IDS).numpy()[0]))
        self.assertAlmostEqual(values["mean_log_prob"], (math.log(0.25) + math.log(0.5)) / 2, places=5)
        self.assertAlmostEqual(values["min_log_prob"], math.log(0.25), places=5)
        self.assertAlmostEqual(values["mean_entropy"], (math.log(4) + math.log(2)) / 2, places=5)
        self.assertAlmostEqual(values["length_ratio"], 1 / 4, places=6)  # one piece out (EOS not counted), 4 in
        self.assertEqual((values["source_unknown"], values["target_unknown"]), (2.0, 1.0))

    def test_features_from_token_log_probs(self):
        values = features_from_token_log_probs([-1.0, -3.0, -0.5], 2, 2, 0, 1)
        self.assertEqual(set(values), set(WITHOUT_DISTRIBUTIONS))
        self.assertAlmostEqual(values["mean_log_prob"], -1.5)
        self.assertAlmostEqual(values["min_log_prob"], -3.0)
        self.assertEqual((values["length_ratio"], values["target_unknown"]), (1.0, 1.0))


class RegressorTest(unittest.TestCase):
    def rows(self, count, seed=0):
        rng = np.random.default_rng(seed)
        return [{"a": a, "b": b, "c": 5.0} for a, b in rng.normal(size=(count, 2)) * [2.0, 0.5] + [1.0, -3.0]]

    def test_it_recovers_a_logistic_relation(self):
        rows = self.rows(300)
        truth = np.array([1 / (1 + math.exp(-(0.8 * r["a"] - 2.0 * r["b"] - 5.0))) for r in rows])
        model = QualityModel.fit(rows, truth, ("a", "b", "c"), l2=0.0)  # without the penalty: the relation itself
        np.testing.assert_allclose(model.predict(rows), truth, atol=1e-4)
        penalised = QualityModel.fit(rows, truth, ("a", "b", "c"))
        np.testing.assert_allclose(penalised.predict(rows), truth, atol=0.02)
        self.assertEqual(model.weights[2], 0.0)  # the constant feature says nothing
        fresh = self.rows(50, seed=1)
        expected = [1 / (1 + math.exp(-(0.8 * r["a"] - 2.0 * r["b"] - 5.0))) for r in fresh]
        np.testing.assert_allclose(model.predict(fresh), expected, atol=1e-4)

    def test_noisy_targets_rank_as_the_relation(self):
        rows = self.rows(400)
        rng = np.random.default_rng(2)
        targets = np.clip(0.5 + 0.1 * np.array([r["a"] for r in rows]) + rng.normal(0, 0.05, 400), 0, 1)
        predicted = QualityModel.fit(rows, targets, ("a", "b")).predict(rows)
        self.assertTrue(((predicted >= 0) & (predicted <= 1)).all())
        self.assertGreater(ranking(predicted, targets)["pearson"], 0.9)

    def test_too_few_sentences_are_refused(self):
        with self.assertRaisesRegex(DataError, "at least"):
            QualityModel.fit(self.rows(3), [0.5] * 3, ("a",))

    def test_the_file_round_trip_and_the_graph_agree(self):
        rows = self.rows(40)
        models = [QualityModel.fit(rows, [0.1 + 0.02 * i for i in range(40)], names) for names in (("a", "b"), ("a",))]
        with tempfile.TemporaryDirectory() as directory:
            path = pathlib.Path(directory) / "quality_estimate.json"
            write_quality_models(path, models, {"sentences": 40})
            read, record = read_quality_models(path)
        self.assertEqual(read, models)
        self.assertEqual(record["sentences"], 40)
        self.assertEqual(choose_model(read, ("a", "b", "x"), "here").features, ("a", "b"))
        self.assertEqual(choose_model(read, ("a",), "here").features, ("a",))
        with self.assertRaisesRegex(T2TError, "qe-train"):
            choose_model(read, ("b",), "here")
        columns = {name: tf.constant([row[name] for row in rows], tf.float32) for name in ("a", "b")}
        np.testing.assert_allclose(models[0].in_graph(columns).numpy(), models[0].predict(rows), atol=1e-5)

    def test_ranking_against_a_monotone_relation(self):
        scores = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
        result = ranking(scores ** 3, scores)
        self.assertAlmostEqual(result["spearman"], 1.0)
        self.assertAlmostEqual(result["pearson"], float(np.corrcoef(scores ** 3, scores)[0, 1]))
        self.assertIsNone(ranking([1.0, 1.0], [1.0, 2.0])["pearson"])


class RequestAndAnswerTest(unittest.TestCase):
    def generation(self):
        return Generation([["gut"], ["schlecht"], [""]], [[-0.1], [-2.0], [0.0]], [False] * 3, None, [None] * 3,
                          [0.9, 0.2, 0.5])

    def test_request_fields_are_checked(self):
        self.assertIsNone(GenerationRequest().min_quality)
        with self.assertRaisesRegex(T2TError, "min_quality"):
            GenerationRequest(min_quality=1.5)
        with self.assertRaisesRegex(T2TError, "quality must be true or false"):
            GenerationRequest(quality="yes")

    def test_translate_output_keeps_the_line_count(self):
        outputs, withheld = quality_outputs(["good", "bad", ""], self.generation(), True, 0.3)
        self.assertEqual(outputs, ["gut\t0.9000", "\t0.2000", "\t0.5000"])
        self.assertEqual(withheld, [{"line": 2, "source": "bad", "translation": "schlecht", "quality": 0.2}])

    def test_rest_answer_holds_quality_and_withholds_below_min_quality(self):
        request = GenerationRequest(min_quality=0.3)
        outputs = rest_api.predict_outputs(self.generation(), request, "translation")
        self.assertEqual(outputs["translations"], ["gut", "", ""])
        self.assertEqual(outputs["quality"], [0.9, 0.2, 0.5])
        self.assertNotIn("quality", rest_api.predict_outputs(self.generation()._replace(quality=None),
                                                             GenerationRequest(), "translation"))

    def test_rest_refuses_quality_without_an_estimate_naming_qe_train(self):
        body = json.dumps({"instances": ["a"], "params": {"quality": True}}).encode()
        with self.assertRaisesRegex(rest_api.BadRequest, "qe-train"):
            rest_api.parse_predict_request(body, parameter_names=rest_api.PARAMETER_NAMES)


class OnTheTinyRunTest(unittest.TestCase):
    """qe-train on a copy of the suite's tiny run, then every road that carries the estimate."""

    @classmethod
    def setUpClass(cls):
        cls.roads = roads()
        cls.directory = pathlib.Path(tempfile.mkdtemp(prefix="t2t-quality-"))
        cls.run_dir = cls.directory / "run"
        shutil.copytree(cls.roads.run_dir, cls.run_dir)
        corpus = cls.roads.root / "corpus"
        cls.trained = cli_in_process("qe-train", "--run-dir", cls.run_dir, "--source", corpus / "dev.en", "--reference",
                                     corpus / "dev.de", "--json")
        cls.input = cls.directory / "input.txt"
        lines = cls.roads.sentences.read_text(encoding="utf-8").splitlines()[:SENTENCES]
        cls.input.write_text("\n".join(lines) + "\n", encoding="utf-8")
        cls.with_quality = cli_in_process("translate", "--run-dir", cls.run_dir, "--input", cls.input, "--with-quality")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.directory, ignore_errors=True)

    def translate(self, flag, path, *args):
        done = cli_in_process("translate", flag, path, "--input", self.input, *args)
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        lines = done.stdout.decode("utf-8").splitlines()
        self.assertEqual(len(lines), SENTENCES, lines)
        return lines

    def estimates(self, flag, path, *args):
        lines = self.translate(flag, path, "--with-quality", *args)
        return self.read_estimates(lines)

    def read_estimates(self, lines):
        values = [float(line.rsplit("\t", 1)[1]) for line in lines]
        self.assertTrue(all(0.0 <= value <= 1.0 for value in values), values)
        return [line.rsplit("\t", 1)[0] for line in lines], values

    def test_qe_train_writes_the_models(self):
        self.assertEqual(self.trained.returncode, 0, self.trained.stderr.decode())
        result = json.loads(self.trained.stdout)
        models, record = read_quality_models(self.run_dir / "quality_estimate.json")
        self.assertEqual([model.features for model in models], [FEATURES, WITHOUT_DISTRIBUTIONS])
        self.assertEqual(record["sentences"], 40)
        self.assertEqual(result["features"], list(FEATURES))

    def of_run(self):
        """The run's `(texts, estimates)` of the input lines (`translate --with-quality`)."""
        self.assertEqual(self.with_quality.returncode, 0, self.with_quality.stderr.decode())
        lines = self.with_quality.stdout.decode("utf-8").splitlines()
        self.assertEqual(len(lines), SENTENCES, lines)
        return self.read_estimates(lines)

    def test_with_quality_prints_the_translation_and_its_estimate(self):
        texts, values = self.of_run()
        self.assertGreater(len({text for text in texts if text.strip()}), SENTENCES // 2, texts)
        self.assertGreater(len(set(values)), 1)

    def test_min_quality_withholds_lines_and_lists_them(self):
        _, values = self.of_run()
        ordered = sorted(values)
        gap, low = max((high - low, low) for low, high in zip(ordered, ordered[1:]))  # far from any printed value
        cut = low + gap / 2
        lines = self.translate("--run-dir", self.run_dir, "--min-quality", cut)
        side_file = pathlib.Path(f"{self.input}.low-quality.jsonl")
        listed = [json.loads(line) for line in side_file.read_text(encoding="utf-8").splitlines()]
        below = [i + 1 for i, value in enumerate(values) if value < cut]
        self.assertEqual([record["line"] for record in listed], below)
        self.assertEqual([i + 1 for i, line in enumerate(lines) if not line], below)
        sources = self.input.read_text(encoding="utf-8").splitlines()
        self.assertEqual([record["source"] for record in listed], [sources[i - 1] for i in below])

    def test_exports_carry_the_estimate(self):
        saved_model, ctranslate2 = self.directory / "saved_model", self.directory / "ctranslate2"
        for args in (("--out", saved_model, "--max-beam-size", 2), ("--out", ctranslate2, "--format", "ctranslate2")):
            done = cli_in_process("export", "--run-dir", self.run_dir, *args)
            self.assertEqual(done.returncode, 0, done.stderr.decode())
        texts, of_run = self.of_run()
        exported_texts, of_export = self.estimates("--saved-model", saved_model)
        self.assertEqual(exported_texts, texts)
        np.testing.assert_allclose(of_export, of_run, atol=2e-3)
        self.assertTrue((ctranslate2 / "quality_estimate.json").exists())
        self.estimates("--ctranslate2", ctranslate2, "--beam-size", 1)
        # A sampled translation is estimated too, from the score signature's features.
        self.estimates("--saved-model", saved_model, "--beam-size", 1, "--temperature", 1, "--seed", 3)
        # Where its translate signature does not estimate (MBR's chosen candidates), the export's score signature
        # gives the features without output distributions, as the run computes them.
        from t2t_keras.artifacts import open_artifact

        sources = self.input.read_text(encoding="utf-8").splitlines()
        of_export = open_artifact(saved_model).quality_rows(sources, texts)
        of_run = open_artifact(self.run_dir).quality_rows(sources, texts)
        for exported, own in zip(of_export, of_run):
            for name in WITHOUT_DISTRIBUTIONS:
                self.assertAlmostEqual(exported[name], own[name], places=4, msg=name)

    def test_evaluate_reports_how_well_it_ranks(self):
        reference = self.directory / "reference.txt"
        lines = (self.roads.root / "corpus" / "test.de").read_text(encoding="utf-8").splitlines()[:SENTENCES]
        reference.write_text("\n".join(lines) + "\n", encoding="utf-8")
        done = cli_in_process("evaluate", "--run-dir", self.run_dir, "--source", self.input, "--reference", reference,
                              "--json")
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        ranks = json.loads(done.stdout)["quality_estimate"]
        self.assertEqual(ranks["sentences"], SENTENCES)
        self.assertTrue(-1.0 <= ranks["pearson"] <= 1.0 and -1.0 <= ranks["spearman"] <= 1.0, ranks)

    def test_without_an_estimate_the_flags_are_refused_naming_qe_train(self):
        for flags in (("--with-quality",), ("--min-quality", "0.5")):
            for flag, path in (("--run-dir", self.roads.run_dir), ("--ctranslate2", self.roads.ctranslate2)):
                done = cli_in_process("translate", flag, path, "--input", self.input, *flags)
                self.assertEqual(done.returncode, 2, done.stdout)
                error = done.stderr.decode()
                self.assertIn("qe-train", error)
                self.assertEqual(len(error.strip().splitlines()), 1, error)

    def test_qe_train_without_a_dev_set_names_the_files_to_give(self):
        done = cli_in_process("qe-train", "--run-dir", self.roads.run_dir)  # the tiny run has no dev files
        self.assertEqual(done.returncode, 2, done.stdout)
        self.assertIn("--source and --reference", done.stderr.decode())
        self.assertFalse((self.roads.run_dir / "quality_estimate.json").exists())


@long_check
class WithMbrTest(unittest.TestCase):
    """qe-train on MBR translations: the chosen candidate's expected utility becomes a feature."""

    def test_with_mbr_the_expected_utility_is_a_feature(self):
        found = roads()
        with tempfile.TemporaryDirectory() as directory:
            run_dir, lines = pathlib.Path(directory) / "run", pathlib.Path(directory) / "input.txt"
            shutil.copytree(found.run_dir, run_dir)
            lines.write_text("\n".join(found.sentences.read_text(encoding="utf-8").splitlines()[:SENTENCES]) + "\n",
                             encoding="utf-8")
            mbr = ("--mbr", "chrf", "--candidates", 2, "--candidates-from", "beam")
            corpus = found.root / "corpus"
            done = cli_in_process("qe-train", "--run-dir", run_dir, "--source", corpus / "dev.en", "--reference",
                                  corpus / "dev.de", "--limit", 12, *mbr)
            self.assertEqual(done.returncode, 0, done.stderr.decode())
            models, record = read_quality_models(run_dir / "quality_estimate.json")
            self.assertEqual((record["mbr"], record["sentences"]), ("chrf", 12))
            self.assertEqual([model.features[-1] for model in models[:2]], ["expected_utility"] * 2)
            done = cli_in_process("translate", "--run-dir", run_dir, "--input", lines, "--with-quality", *mbr)
            self.assertEqual(done.returncode, 0, done.stderr.decode())
            values = [float(line.rsplit("\t", 1)[1]) for line in done.stdout.decode("utf-8").splitlines()]
            self.assertEqual(len(values), SENTENCES)
            self.assertTrue(all(0.0 <= value <= 1.0 for value in values), values)


if __name__ == "__main__":
    unittest.main()
