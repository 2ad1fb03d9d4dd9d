"""A run of each `data.tokenizer` (bpe, unigram, wordpiece): trained a few steps, its kind kept with the run,
exported as a SavedModel and reloaded (strings in, translations out), and the CTranslate2 export's choice."""

import json
import pathlib
import shutil
import sys
import tempfile

import tensorflow as tf
import yaml

from t2t_keras.artifacts.saved_model import SavedModelArtifact
from t2t_keras.config import replace
from t2t_keras.data.tokenizers import tokenizer_filename
from t2t_keras.decoding.generator import Generator
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.errors import T2TError
from t2t_keras.export.ctranslate2_export import export_ctranslate2_run
from t2t_keras.export.saved_model import export_run
from t2t_keras.resolved_run import resolve_run
from t2t_keras.runs import RunDirectory, load_export, load_run
from t2t_keras.training.trainer import train
from tests.helpers import best_texts, long_check, toy_config, toy_pairs, write_toy_corpus
from tests.test_export import Background

VOCAB_SIZE = 80  # the toy corpus supports it for every scheme (unigram: at most 83, WordPiece: at least 69)
SENTENCES = [pair[0] for pair in toy_pairs(4, seed=7)] + ["", "The dog (small) sees a cat."]

# A fresh interpreter that never imports t2t_keras: only TF-Text's ops are needed to run a text export.
FRESH_PROCESS = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

request = json.loads(sys.stdin.read())
out = tf.saved_model.load(request["export"]).signatures["serving_default"](inputs=tf.constant(request["sentences"]))
print(json.dumps({"translations": [t.decode("utf-8") for t in out["translations"].numpy()],
                  "imported_t2t_keras": any(name.startswith("t2t_keras") for name in sys.modules)}))
"""


class _TokenizerRun:
    """Trains and exports one toy run with `data.tokenizer = KIND` (mixed into a TestCase per scheme)."""

    KIND = None
    FRESH_PROCESS = False

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.TemporaryDirectory()
        root = pathlib.Path(cls.tmp.name)
        # Three steps (one checkpoint) at a learning rate too small to move the weights: the model stays as
        # initialised, so it writes long, varied translations (trained, even a few steps can teach it to stop at
        # once, and empty strings would compare equal trivially). No dev split: nothing here reads a validation.
        config = toy_config(write_toy_corpus(root / "data"), train_steps=3)
        cls.config = replace(config, data={"tokenizer": cls.KIND, "vocab_size": VOCAB_SIZE, "dev_files": None},
                             model={"vocab_size": VOCAB_SIZE, "max_length": 32}, training={"learning_rate": 1e-9})
        cls.run_dir = root / "run"
        train(resolve_run(cls.run_dir, cls.config), verbose=0)
        cls.model, cls.tokenizer = load_run(cls.run_dir)
        cls.export_dir = export_run(cls.run_dir, root / "export", max_beam_size=1,
                                    request=GenerationRequest(beam_size=1, max_extra_length=8))
        cls.fresh, cls._translations = None, None
        if cls.FRESH_PROCESS:
            request = {"export": str(cls.export_dir), "sentences": SENTENCES}
            cls.fresh = Background([sys.executable, "-c", FRESH_PROCESS], json.dumps(request))

    @classmethod
    def tearDownClass(cls):
        if cls.fresh is not None:
            cls.fresh.stop()
        cls.tmp.cleanup()
        super().tearDownClass()

    def translations(self):
        """The in-process translator's greedy translations of SENTENCES, computed once for the class."""
        cls = type(self)
        if cls._translations is None:
            generator = Generator(cls.model, cls.tokenizer, jit_compile=False)
            cls._translations = best_texts(generator, SENTENCES, GenerationRequest(max_extra_length=8, beam_size=1))
        return cls._translations

    def test_the_run_keeps_its_tokenizer_kind_and_every_loader_picks_it(self):
        run = RunDirectory(self.run_dir)
        self.assertEqual(run.load_config().data.tokenizer, self.KIND)
        self.assertTrue(run.tokenizer_file(self.KIND).exists())
        self.assertEqual((self.tokenizer.kind, self.tokenizer.vocab_size), (self.KIND, VOCAB_SIZE))
        model, exported = load_export(self.export_dir)
        self.assertEqual(exported.kind, self.KIND)
        self.assertTrue((self.export_dir / "assets.extra" / tokenizer_filename(self.KIND)).exists())
        self.assertAllEqual(exported.tokenize(SENTENCES), self.tokenizer.tokenize(SENTENCES))

    def test_reloaded_export_translates_strings_like_the_in_process_translator(self):
        reloaded = SavedModelArtifact(self.export_dir)
        expected = self.translations()
        self.assertEqual(best_texts(reloaded, SENTENCES), expected)
        self.assertEqual(expected[SENTENCES.index("")], "")
        self.assertGreater(len({text for text in expected if text}), 1)  # not trivially equal empty strings
        lengths = self.tokenizer.tokenize(tf.constant(SENTENCES)).row_lengths().numpy().tolist()
        self.assertEqual(reloaded.piece_lengths(SENTENCES), lengths)


@long_check
class BpeRunTest(_TokenizerRun, tf.test.TestCase):
    KIND = "bpe"
    test_session = None

    def test_a_run_saved_without_the_tokenizer_key_is_bpe(self):
        old = pathlib.Path(self.tmp.name) / "old-run"
        old.mkdir()
        shutil.copy(self.run_dir / "tokenizer.model", old)
        saved = yaml.safe_load((self.run_dir / "config.yaml").read_text(encoding="utf-8"))
        del saved["data"]["tokenizer"]
        (old / "config.yaml").write_text(yaml.safe_dump(saved), encoding="utf-8")
        run = RunDirectory(old)
        self.assertEqual(run.load_config().data.tokenizer, "bpe")
        self.assertEqual(run.load_tokenizer().kind, "bpe")


@long_check
class UnigramRunTest(_TokenizerRun, tf.test.TestCase):
    KIND = "unigram"
    test_session = None

    def test_ctranslate2_export_ships_the_unigram_model(self):
        out = export_ctranslate2_run(self.run_dir, pathlib.Path(self.tmp.name) / "ct2")
        self.assertEqual((out / "tokenizer.model").read_bytes(), (self.run_dir / "tokenizer.model").read_bytes())


@long_check
class WordpieceRunTest(_TokenizerRun, tf.test.TestCase):
    KIND = "wordpiece"
    FRESH_PROCESS = True
    test_session = None

    def test_fresh_process_without_t2t_keras_translates_the_same(self):
        got = json.loads(self.fresh.output().strip().splitlines()[-1])
        self.assertFalse(got["imported_t2t_keras"])
        self.assertEqual(got["translations"], self.translations())

    def test_ctranslate2_export_is_refused_before_anything_is_written(self):
        parent = pathlib.Path(self.tmp.name) / "ct2"
        with self.assertRaisesRegex(T2TError, "ships a SentencePiece model .* tokenizer is 'wordpiece': export it as "
                                              "a SavedModel"):
            export_ctranslate2_run(self.run_dir, parent / "model")
        self.assertFalse(parent.exists())


if __name__ == "__main__":
    tf.test.main()
