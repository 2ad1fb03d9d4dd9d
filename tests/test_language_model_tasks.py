"""`training.task: lm | mlm`: training on one side of a corpus, perplexity, prompt continuation, task checks.

The corpus is one the tests write: German sentences from a small grammar in which articles, adjective endings and
verbs agree with their nouns (context a model can use, a unigram cannot), beside an English side the runs must
ignore. The default LibreOffice corpus needs a package download the tests cannot count on.
"""

import json
import pathlib
import tempfile

import numpy as np
import tensorflow as tf

from t2t_keras.config import load_config
from t2t_keras.data import monolingual
from t2t_keras.errors import ConfigError
from t2t_keras.runs import RunDirectory
from t2t_keras.special_ids import EOS_ID
from t2t_keras.tasks import task_of
from tests.helpers import TestCase, best_texts, cli_in_process, long_check, unigram_perplexity

# noun -> (nominative article, accusative article, adjective ending nominative, accusative)
NOUNS = {"Hund": ("der", "den", "e", "en"), "Katze": ("die", "die", "e", "e"), "Haus": ("das", "das", "e", "e"),
         "Mann": ("der", "den", "e", "en"), "Frau": ("die", "die", "e", "e"), "Kind": ("das", "das", "e", "e")}
ADJECTIVES = ["klein", "groß", "alt", "neu"]
VERBS = ["sieht", "findet", "sucht", "mag"]


def german_sentence(rng):
    subject, obj = rng.choice(list(NOUNS), size=2)
    nominative, _, ending, _ = NOUNS[subject]
    _, accusative, _, accusative_ending = NOUNS[obj]
    adjective, other = rng.choice(ADJECTIVES, size=2)
    return (f"{nominative.capitalize()} {adjective}{ending} {subject} {rng.choice(VERBS)} "
            f"{accusative} {other}{accusative_ending} {obj}.")


def write_corpus(directory, train=600, dev=40, test=40):
    """train/dev/test .en/.de files (the English side a marker only); returns {split: [en_path, de_path]}."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {}
    for seed, (split, count) in enumerate((("train", train), ("dev", dev), ("test", test))):
        rng = np.random.default_rng(seed)
        german = [german_sentence(rng) for _ in range(count)]
        paths = [directory / f"{split}.en", directory / f"{split}.de"]
        paths[0].write_text("".join(f"english {i}\n" for i in range(count)), "utf-8")
        paths[1].write_text("\n".join(german) + "\n", "utf-8")
        files[split] = [str(path) for path in paths]
    return files


def task_settings(files, architecture, steps):
    """The tiny preset as an lm or mlm on the German side of the toy corpus, as `--set` strings."""
    return [f"model.architecture={architecture}", "data.source=text", f"data.train_files={files['train']!r}",
            f"data.dev_files={files['dev']!r}", f"data.test_files={files['test']!r}", "data.lm_side=target",
            "data.vocab_size=100", "data.max_length=24", "data.batch_tokens=384", "data.shuffle_buffer=100",
            f"training.train_steps={steps}", f"training.steps_per_epoch={steps // 2}",
            f"training.checkpoint_every_steps={steps // 2}", "training.warmup_steps=50",
            "training.jit_compile=False", "model.dropout=0.0"]


def run_cli(*argv):
    """`t2t-keras ARGV` in this process: (exit code, stdout)."""
    result = cli_in_process(*argv)
    return result.returncode, result.stdout.decode("utf-8")


class _TaskRun(TestCase):
    architecture = None
    steps = 240
    extra_settings = ()

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = pathlib.Path(cls.tmp.name)
        cls.files = write_corpus(root / "data")
        cls.run_dir = root / "run"
        cls.settings = task_settings(cls.files, cls.architecture, cls.steps) + list(cls.extra_settings)
        code, _ = run_cli("train", "--config", "tiny", "--run-dir", cls.run_dir,
                          *[arg for setting in cls.settings for arg in ("--set", setting)])
        assert code == 0, code
        cls.tokenizer = RunDirectory(cls.run_dir).load_tokenizer()
        cls.german = {split: pathlib.Path(paths[1]).read_text("utf-8").splitlines()
                      for split, paths in cls.files.items()}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def evaluate(self, *extra):
        code, out = run_cli("evaluate", "--run-dir", self.run_dir, "--json", *extra)
        self.assertEqual(code, 0)
        return json.loads(out)


@long_check
class CausalLanguageModelTaskTest(_TaskRun):
    architecture = "decoder_only"

    def test_trains_to_well_below_the_unigram_perplexity(self):
        result = self.evaluate("--split", "dev")
        unigram = unigram_perplexity(self.tokenizer, self.german["train"], self.german["dev"], with_eos=True)
        self.assertEqual(result["task"], "lm")
        self.assertLess(result["perplexity"], 0.6 * unigram, f"unigram perplexity {unigram:.2f}")

    def test_counts_every_piece_and_eos_of_the_text(self):
        result = self.evaluate("--split", "test")
        pieces = self.tokenizer.tokenize(tf.constant(self.german["test"])).flat_values.shape[0]
        self.assertEqual(result["tokens"], pieces + len(self.german["test"]))

    def test_a_given_file_is_scored_like_the_same_split(self):
        by_split = self.evaluate("--split", "test")
        by_file = self.evaluate("--text", self.files["test"][1])
        self.assertAlmostEqual(by_file["perplexity"], by_split["perplexity"], places=4)
        self.assertEqual(by_file["tokens"], by_split["tokens"])

    def test_translate_continues_each_prompt(self):
        prompts = pathlib.Path(self.tmp.name) / "prompts.txt"
        prompts.write_text("\n".join(line.split()[0] for line in self.german["test"][:4]) + "\n", "utf-8")
        code, out = run_cli("translate", "--run-dir", self.run_dir, "--input", prompts)
        self.assertEqual(code, 0)
        greedy = out.splitlines()
        self.assertEqual(len(greedy), 4)
        self.assertTrue(all(line.strip() for line in greedy), greedy)
        code, again = run_cli("translate", "--run-dir", self.run_dir, "--input", prompts)
        self.assertEqual(again, out)  # greedy is deterministic
        code, sampled = run_cli("translate", "--run-dir", self.run_dir, "--input", prompts,
                                "--temperature", "1.5", "--top-k", "20", "--seed", "7")
        self.assertEqual(code, 0)
        self.assertEqual(len(sampled.splitlines()), 4)

    def test_export_reload_and_serve_continue_like_the_run(self):
        from starlette.testclient import TestClient

        from t2t_keras.artifacts import open_artifact
        from t2t_keras.serving.server import create_app

        prompts = [line.split()[0] for line in self.german["test"][:3]]
        prompt_file = pathlib.Path(self.tmp.name) / "export-prompts.txt"
        prompt_file.write_text("\n".join(prompts) + "\n", "utf-8")
        _, from_run = run_cli("translate", "--run-dir", self.run_dir, "--input", prompt_file, "--max-extra-length", 12)
        export_dir = pathlib.Path(self.tmp.name) / "export"
        code, _ = run_cli("export", "--run-dir", self.run_dir, "--out", export_dir, "--max-extra-length", 12)
        self.assertEqual(code, 0)
        code, from_export = run_cli("translate", "--saved-model", export_dir, "--input", prompt_file)
        self.assertEqual(code, 0)
        self.assertEqual(from_export, from_run)
        refused = cli_in_process("translate", "--saved-model", export_dir, "--input", prompt_file,
                                 "--precision", "bfloat16")
        self.assertEqual(refused.returncode, 2)
        self.assertIn("--precision does not apply to ", refused.stderr.decode())
        continuer = open_artifact(export_dir)
        self.assertEqual((continuer.kind, continuer.task), ("saved_model", "lm"))
        sampled = best_texts(continuer, prompts, temperature=1.0, top_k=5, seed=11)
        self.assertEqual(best_texts(continuer, prompts, temperature=1.0, top_k=5, seed=11), sampled)
        with TestClient(create_app(continuer, max_wait_ms=1)) as client:  # the translation server, unchanged
            self.check_served_continuations(client, prompts, from_run.splitlines(), sampled)

    def check_served_continuations(self, client, prompts, greedy, sampled):
        answer = client.post("/v1/models/default:predict", json={"instances": prompts})
        self.assertEqual(answer.status_code, 200, answer.text)
        self.assertEqual([p["continuations"] for p in answer.json()["predictions"]], greedy)
        answer = client.post("/v1/models/default:predict",
                             json={"inputs": prompts, "params": {"temperature": 1.0, "top_k": 5, "seed": 11}})
        self.assertEqual(answer.json()["outputs"]["continuations"], sampled)
        answer = client.post("/v1/models/default:predict", json={"inputs": prompts, "params": {"beam_size": 2}})
        self.assertEqual(answer.status_code, 400)
        answer = client.post("/v1/models/default:predict", json={"inputs": prompts, "params": {"temperature": -1}})
        self.assertEqual(answer.status_code, 400)
        metadata = client.get("/v1/models/default/metadata").json()["metadata"]
        self.assertEqual(set(metadata["signature_def"]["signature_def"]), {"serving_default", "continue"})
        self.assertEqual(metadata["decoding"]["defaults"]["max_extra_length"], 12)
        answer = client.post("/v1/models/default:attention", json={"instances": prompts[:1]})
        self.assertEqual(answer.status_code, 501, answer.text)  # no source, no cross attention

    def test_precision_and_shards_are_refused_for_an_lm_run(self):
        prompts = pathlib.Path(self.tmp.name) / "precision-prompts.txt"
        prompts.write_text("die\n", "utf-8")
        for command in (["translate", "--input", prompts], ["evaluate", "--split", "dev"]):
            refused = cli_in_process(*command, "--run-dir", self.run_dir, "--precision", "bfloat16", "--shards", "2")
            self.assertEqual(refused.returncode, 2, command)
            self.assertRegex(refused.stderr.decode(), "--precision, --shards do not apply to .*an lm run")
            self.assertEqual(refused.stdout, b"")

    def test_trains_on_the_configured_side_only(self):
        config = RunDirectory(self.run_dir).load_config()
        sentences, provenance = monolingual.load_sentences(config.data, "dev")
        self.assertEqual(sentences, self.german["dev"])
        self.assertEqual(provenance["side"], "target")


@long_check
class MaskedLanguageModelTaskTest(_TaskRun):
    architecture = "encoder_only"
    steps = 600  # it learns from the ~15% masked positions only
    # eq. (3) with d_model = 64 and 50 warmup steps peaks at 0.018: a post-LN encoder learning from so few positions
    # then stays at the unigram plateau for some seeds (4 of 5 tried); half that rate leaves it every time (ppl ~3).
    extra_settings = ("training.learning_rate_scale=0.5",)

    def test_trains_to_well_below_the_unigram_perplexity(self):
        result = self.evaluate("--split", "dev")
        unigram = unigram_perplexity(self.tokenizer, self.german["train"], self.german["dev"], with_eos=False)
        self.assertEqual(result["task"], "mlm")
        self.assertLess(result["perplexity"], 0.6 * unigram, f"unigram perplexity {unigram:.2f}")

    def test_loss_and_metrics_count_the_masked_positions_only(self):
        config = RunDirectory(self.run_dir).load_config()
        data = task_of(config).load_data(RunDirectory(self.run_dir), config)
        for inputs, labels, weights in data.dev.take(data.dev_steps):
            inputs, labels, weights = inputs.numpy(), labels.numpy(), weights.numpy()
            self.assertTrue(np.all(weights[labels == 0] == 0))  # no padding
            self.assertTrue(np.all(weights[labels == EOS_ID] == 0))
            self.assertTrue(np.all(weights[inputs != labels] == 1))  # every corrupted position is predicted
        result = self.evaluate("--split", "dev")
        pieces = self.tokenizer.tokenize(tf.constant(self.german["dev"])).flat_values.shape[0]
        self.assertLess(result["tokens"], 0.3 * pieces)
        self.assertGreater(result["tokens"], 0.05 * pieces)


class TaskConfigTest(TestCase):
    def test_the_task_follows_the_architecture(self):
        for architecture, task in (("encoder_decoder", "translation"), ("decoder_only", "lm"),
                                   ("encoder_only", "mlm")):
            self.assertEqual(load_config("tiny", [f"model.architecture={architecture}"]).task, task)

    def test_a_task_that_does_not_match_the_architecture_is_a_config_error(self):
        with self.assertRaisesRegex(ConfigError, "training.task='lm' does not match model.architecture="
                                                 "'encoder_only'.*decoder_only"):
            load_config("tiny", ["model.architecture=encoder_only", "training.task=lm"])
        with self.assertRaisesRegex(ConfigError, "training.task"):
            load_config("tiny", ["training.task=summarization"])

    def test_dev_bleu_evaluation_is_refused_for_language_models(self):
        with self.assertRaisesRegex(ConfigError, "eval_every_steps.*translation runs.*task 'lm'"):
            load_config("lm-mini", ["training.eval_every_steps=100"])

    def test_train_refuses_a_mismatch_before_writing_anything(self):
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = pathlib.Path(tmp) / "run"
            result = cli_in_process("train", "--config", "lm-mini", "--run-dir", run_dir, "--set", "training.task=mlm")
            self.assertEqual(result.returncode, 2)
            self.assertIn("does not match", result.stderr.decode("utf-8"))
            self.assertFalse(run_dir.exists())

    def test_a_single_text_file_is_a_corpus_for_lm(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "text.txt"
            path.write_text("Eins zwei.\n\nDrei vier.\n", "utf-8")
            config = load_config("lm-mini", ["data.source=text", f"data.train_files=[{str(path)!r}]"])
            self.assertEqual(monolingual.load_sentences(config.data, "train")[0], ["Eins zwei.", "Drei vier."])
            self.assertFalse(monolingual.has_split(config.data, "dev"))
