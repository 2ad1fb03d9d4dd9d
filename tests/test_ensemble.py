"""Ensembles: several translation models searched as one, their log-probabilities averaged at each step
(`decoding.ensemble.Ensemble`), and `translate` / `evaluate` with `--run-dir` repeated.

The runs are tiny untrained models saved as run directories (no training): their embeddings are scaled up so that
each step has a clear favourite, and comparisons of two searches meet no near-ties.
"""

import json
import pathlib
import re
import shutil
import tempfile

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.artifacts import open_artifact
from t2t_keras.build import build_model
from t2t_keras.config import load_config
from t2t_keras.data.tokenizer import train_sentencepiece
from t2t_keras.decoding.beams import beam_search
from t2t_keras.decoding.common import next_log_probs
from t2t_keras.decoding.ensemble import Ensemble
from t2t_keras.decoding.generator import Generator
from t2t_keras.decoding.greedy import greedy_decode
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.errors import ConfigError, T2TError
from t2t_keras.runs import RunDirectory, ensemble_runs, load_run_model
from t2t_keras.special_ids import BOS_ID, EOS_ID, PAD_ID
from tests.helpers import TestCase, cli_in_process, long_check, random_ids, toy_pairs

VOCAB = 100
GREEDY = GenerationRequest(beam_size=1, max_extra_length=6)
SENTENCES = ["the cat sees a dog", "a big red house near the tree", "water"]


def save_run(path, tokenizer_file, seed=None, vocab_size=VOCAB, preset="tiny"):
    """A run directory of `preset` (narrowed to d_model 16) with `tokenizer_file`; with a `seed`, also an untrained
    model's checkpoint, its embeddings scaled so that every step has a clear favourite. Returns the run."""
    config = load_config(preset, ["model.hidden_dim=16", "model.num_heads=4", "model.intermediate_dim=32",
                                  f"data.vocab_size={vocab_size}", "decoding.shards=1", "decoding.max_extra_length=6"])
    run = RunDirectory(path)
    run.save_config(config)
    if tokenizer_file is not None:
        shutil.copy(tokenizer_file, run.tokenizer_file(config.data.tokenizer))
    if seed is not None:
        keras.utils.set_random_seed(seed)
        model = build_model(config.model)
        model.target_embedding.embeddings.assign(model.target_embedding.embeddings * 20)
        tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(run.checkpoint_dir), 1).save(1)
    return run


def log_softmax(x):
    x = np.asarray(x, np.float64)
    return x - np.log(np.sum(np.exp(x - x.max(-1, keepdims=True)), -1, keepdims=True)) - x.max(-1, keepdims=True)


@long_check
class EnsembleTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = cls.root = pathlib.Path(cls.tmp.name)
        sentences = [s for pair in toy_pairs(200) for s in pair]
        train_sentencepiece(sentences, root / "shared.model", VOCAB)
        train_sentencepiece([s for pair in toy_pairs(200, seed=5) for s in pair][:300], root / "other.model", VOCAB)
        train_sentencepiece(sentences, root / "smaller.model", VOCAB - 10)
        cls.run_a = save_run(root / "a", root / "shared.model", seed=1)
        cls.run_b = save_run(root / "b", root / "shared.model", seed=2)  # same vocabulary, other weights
        cls.a, cls.b = load_run_model(cls.run_a), load_run_model(cls.run_b)
        cls.source = random_ids(3, 6, vocab_size=VOCAB)
        cls.source[:, -1] = EOS_ID
        cls.source[2, 4:] = [EOS_ID, PAD_ID]  # a shorter sentence
        # What the CLI's XLA-compiled searches must give: the ensemble's greedy translations, in graph mode.
        generator = Generator(Ensemble([cls.a, cls.b]), cls.run_a.load_tokenizer(), jit_compile=False, shards=1)
        cls.translations = generator.generate(SENTENCES, GREEDY).best

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_an_ensemble_of_a_model_with_itself_gives_the_model_s_tokens(self):
        searches = {"greedy": lambda model: greedy_decode(model, self.source, max_extra_length=6)["tokens"],
                    "beam": lambda model: beam_search(model, self.source, beam_size=3, max_extra_length=6)["tokens"]}
        alone = {name: search(self.a) for name, search in searches.items()}
        for name, search in searches.items():
            with self.subTest(search=name):
                self.assertAllEqual(search(Ensemble([self.a, self.a])), alone[name])
        self.assertNotAllEqual(searches["greedy"](Ensemble([self.a, self.b])), alone["greedy"])  # b counts

    def test_a_step_averages_the_members_log_probabilities(self):
        ensemble = Ensemble([self.a, self.b])
        bos = tf.fill((3, 1), BOS_ID)
        members = [model.decode_step(bos, model.init_cache(model.encode(self.source), 4), 0,
                                     model.source_mask(self.source)).logits[:, 0] for model in (self.a, self.b)]
        by_hand = (log_softmax(members[0]) + log_softmax(members[1])) / 2  # (batch, vocab)
        step = ensemble.decode_step(bos, ensemble.init_cache(ensemble.encode(self.source), 4), 0,
                                    ensemble.source_mask(self.source))
        self.assertAllClose(step.logits[:, 0], by_hand, atol=1e-5)
        self.assertEqual(len(step.cache), 4)  # both members' two decoder layers
        # What the searches take from a step: the mean normalised, the log of the normalised geometric mean.
        searched, _ = next_log_probs(ensemble, bos[:, 0], ensemble.source_mask(self.source),
                                     ensemble.init_cache(ensemble.encode(self.source), 4), 0)
        normalised = log_softmax(by_hand)
        self.assertAllClose(searched, normalised, atol=1e-5)
        self.assertNotAllClose(normalised, log_softmax(members[0]), atol=1e-2)
        normalised[:, [PAD_ID, BOS_ID]] = -np.inf  # never generated
        tokens = greedy_decode(ensemble, self.source, max_length=2)["tokens"]
        self.assertAllEqual(tokens[:, 0], np.argmax(normalised, -1))

    def test_members_of_different_depths_decode_as_their_teacher_forced_mean(self):
        keras.utils.set_random_seed(4)
        shallow = build_model(load_config("tiny", ["model.hidden_dim=16", "model.num_layers=1", "model.dropout=0",
                                                   f"model.vocab_size={VOCAB}"]).model)
        shallow.target_embedding.embeddings.assign(shallow.target_embedding.embeddings * 20)
        tokens = greedy_decode(Ensemble([self.a, shallow]), self.source, max_length=5)["tokens"].numpy()
        target_in = np.concatenate([np.full((3, 1), BOS_ID), tokens[:, :-1]], axis=1)
        mean = sum(log_softmax(model((self.source, target_in))) for model in (self.a, shallow)) / 2
        mean[:, :, [PAD_ID, BOS_ID]] = -np.inf
        expected = np.argmax(mean, -1)
        for row, ids in enumerate(tokens):
            length = list(ids).index(EOS_ID) + 1 if EOS_ID in ids else len(ids)
            self.assertAllEqual(ids[:length], expected[row, :length])

    def test_models_of_different_vocabulary_sizes_cannot_form_an_ensemble(self):
        keras.utils.set_random_seed(3)
        smaller = build_model(load_config("tiny", ["model.hidden_dim=16", "model.vocab_size=90"]).model)
        with self.assertRaisesRegex(ValueError, r"must share one vocabulary. Received: vocabulary sizes \[100, 90\]"):
            Ensemble([self.a, smaller])

    def test_runs_of_different_vocabularies_are_refused_naming_both_runs_and_the_fix(self):
        cases = {"other": ("tokenizer file (sha256) differs", "other.model", VOCAB),
                 "smaller": ("vocabulary size (model.vocab_size) differs (90 and 100)", "smaller.model", 90)}
        for name, (what, tokenizer, vocab_size) in cases.items():
            with self.subTest(name):
                other = save_run(self.root / name, self.root / tokenizer, vocab_size=vocab_size)
                message = (f"{other.path} and {self.run_a.path} do not share a vocabulary: their {what}",
                           f"copy {self.run_a.tokenizer_file('bpe')} into a new run directory")
                with self.assertRaisesRegex(ConfigError, ".*".join(map(re.escape, message))):
                    ensemble_runs(self.run_a, [self.run_b, other])
        result = cli_in_process("translate", "--run-dir", self.run_a, "--run-dir", self.root / "other", stdin=b"a\n")
        self.assertEqual(result.returncode, 2)
        self.assertIn("do not share a vocabulary", result.stderr.decode())

    def test_ensembles_of_lm_runs_and_of_exports_are_refused(self):
        lm = save_run(self.root / "lm", None, preset="lm-mini")
        for runs in ((lm, self.run_a), (self.run_a, lm)):
            with self.assertRaisesRegex(T2TError, re.escape(f"an ensemble does not apply to {lm.path}, an lm run")):
                ensemble_runs(runs[0], runs[1:])
        result = cli_in_process("evaluate", "--run-dir", lm, "--run-dir", self.run_a)
        self.assertEqual(result.returncode, 2)
        self.assertIn("an ensemble does not apply to", result.stderr.decode())
        result = cli_in_process("translate", "--run-dir", self.run_a, "--saved-model", self.root / "export")
        self.assertEqual(result.returncode, 2)
        self.assertIn("not allowed with argument", result.stderr.decode())

    def test_translate_with_two_run_dirs_decodes_their_ensemble(self):
        result = cli_in_process("translate", "--run-dir", self.run_a, "--run-dir", self.run_b, "--beam-size", "1",
                                stdin="\n".join(SENTENCES).encode())
        self.assertEqual(result.returncode, 0, result.stderr.decode()[-2000:])
        self.assertEqual(result.stdout.decode().splitlines(), self.translations)

    def test_evaluate_with_two_run_dirs_scores_their_ensemble(self):
        source, reference, output = (self.root / name for name in ("test.en", "test.de", "hypotheses.de"))
        source.write_text("\n".join(SENTENCES) + "\n")
        reference.write_text("die Katze\nein Haus\nWasser\n")
        result = cli_in_process("evaluate", "--run-dir", self.run_a, "--run-dir", self.run_b, "--source", source,
                                "--reference", reference, "--output", output, "--beam-size", "1", "--json")
        self.assertEqual(result.returncode, 0, result.stderr.decode()[-2000:])
        scores = json.loads(result.stdout.decode().splitlines()[-1])
        self.assertEqual((scores["ensemble"], scores["sentences"]), ([str(self.run_a), str(self.run_b)], 3))
        self.assertEqual(output.read_text().splitlines(), self.translations)

    def test_bfloat16_decoding_rounds_every_member(self):
        generator = open_artifact(self.run_a, precision="bfloat16", ensemble=[self.run_b]).generator
        members = generator.model.models
        self.assertEqual([member.dtype_policy.name for member in members], ["bfloat16", "bfloat16"])
        for member, model in zip(members, (self.a, self.b)):
            self.assertAllClose(member.target_embedding.embeddings, model.target_embedding.embeddings, rtol=1e-2)
