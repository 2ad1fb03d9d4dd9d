"""Vocabulary shortlist: learned from the corpus, exact with every id allowed, full-vocabulary ids out, and carried
by both exports; bad files are clear errors that leave nothing half-written."""

import pathlib
import tempfile

import numpy as np
import tensorflow as tf

from t2t_keras.artifacts import open_artifact
from t2t_keras.artifacts.ctranslate2 import CTranslate2Artifact
from t2t_keras.artifacts.saved_model import SavedModelArtifact
from t2t_keras.config import replace
from t2t_keras.data.shortlist import Shortlist, learn_shortlist, load_shortlist, save_shortlist
from t2t_keras.decoding import beam_search, greedy_decode
from t2t_keras.decoding.generator import Generator
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.decoding.shortlist import batch_vocabulary
from t2t_keras.errors import DataError, T2TError
from t2t_keras.export.ctranslate2_export import VMAP_FILE, export_ctranslate2_run
from t2t_keras.export.quantization import quantized_copy
from t2t_keras.export.saved_model import export_run
from t2t_keras.resolved_run import resolve_run
from t2t_keras.runs import RunDirectory, load_run
from t2t_keras.training.trainer import train
from tests.helpers import (
    TestCase,
    best_texts,
    cli_in_process,
    long_check,
    padded_ids,
    tiny_transformer,
    toy_config,
    toy_pairs,
    write_toy_corpus,
)

SENTENCES = [s for s, _ in toy_pairs(6, seed=5)]
EXTRA = 6


def all_ids(vocab_size):
    """A shortlist that allows every id."""
    return Shortlist(np.zeros((vocab_size, 1), np.int32), np.arange(vocab_size, dtype=np.int32), {})


class PiecesTest(TestCase):
    def test_each_source_word_lists_its_translation_first(self):
        """Source piece i always translated by target piece 40 + i: that piece is first in row i."""
        rng = np.random.default_rng(0)
        words = np.arange(4, 30)
        pairs = []
        for _ in range(300):
            source = rng.choice(words, size=rng.integers(2, 7), replace=False)
            pairs.append((source, rng.permutation(source + 40)))
        shortlist = learn_shortlist(pairs, 80, per_source=3, frequent=5)
        np.testing.assert_array_equal(shortlist.entries[words, 0], words + 40)
        self.assertEqual(shortlist.entries.shape, (80, 3))
        self.assertTrue(np.all(shortlist.entries[:4] == 0))  # special ids hold no entries
        self.assertEqual(len(shortlist.frequent), 5)
        counts = np.bincount(np.concatenate([t for _, t in pairs]), minlength=80)
        self.assertEqual(sorted(counts[shortlist.frequent]), sorted(np.sort(counts)[-5:]))

    def test_batch_vocabulary_is_the_sorted_union_padded_to_a_bucket(self):
        entries = np.zeros((20, 2), np.int32)
        entries[5] = [9, 11]
        entries[6] = [11, 0]
        ids = batch_vocabulary(entries, np.array([15]), np.array([[5, 6, 3, 0]]), 20, size_multiple=4).numpy()
        np.testing.assert_array_equal(ids, [0, 1, 2, 3, 9, 11, 15, 0])
        full = batch_vocabulary(entries, np.arange(20), np.array([[5]]), 20, size_multiple=16).numpy()
        np.testing.assert_array_equal(full, np.arange(20))  # capped at the vocabulary size

    def test_every_projection_gives_the_logits_of_the_listed_ids(self):
        """Tied embedding, untied Dense, adaptive softmax and the int8 export copy: logits of `ids` only."""
        ids, hidden = tf.constant([0, 3, 7, 21, 40, 49]), tf.random.stateless_normal((3, 1, 16), (1, 2))
        models = [tiny_transformer(vocab_size=50, tie_embeddings=tie, **options) for tie, options in
                  (("all", {}), ("none", {}), ("none", dict(softmax="adaptive", adaptive_cutoffs=[10, 25])))]
        models.append(quantized_copy(models[0]))
        for model in models:
            self.assertAllClose(model.project(hidden, ids), tf.gather(model.project(hidden), ids, axis=-1),
                                atol=1e-5)
            # A search takes the listed ids' weights once (`output_weights`) and every step multiplies by them:
            # the same numbers as gathering them in the step.
            weights = model.output_weights(ids)
            self.assertAllEqual(model.project(hidden, ids, weights), model.project(hidden, ids))
        self.assertEqual([model.output_weights(ids) is None for model in models], [False, False, True, True])
        self.assertEqual(models[0].output_weights(ids).shape, (6, 16))  # the embedding's rows of ids
        self.assertEqual(models[1].output_weights(ids).shape, (16, 6))  # the kernel's columns of ids


@long_check
class ShortlistRunTest(TestCase):
    """One tiny trained run, its shortlist learned by the command, and both exports of it."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = pathlib.Path(cls.tmp.name)
        config = toy_config(write_toy_corpus(root / "data", dev=8, test=8), train_steps=90, warmup_steps=30,
                            learning_rate_scale=0.3, steps_per_epoch=45, checkpoint_every_steps=90)
        config = replace(config, model={"max_length": 32},
                         decoding={"beam_size": 2, "max_beam_size": 2, "max_extra_length": EXTRA})
        cls.run_dir = RunDirectory(root / "run")
        train(resolve_run(cls.run_dir, config), verbose=0)
        result = cli_in_process("shortlist", "--run-dir", str(cls.run_dir.path), "--per-source", "3",
                                "--frequent", "4")
        assert result.returncode == 0, result.stderr
        cls.model, cls.tokenizer = load_run(cls.run_dir)
        cls.root = root

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def source_batch(self):
        rows = self.tokenizer.tokenize(tf.constant(SENTENCES))
        return padded_ids([list(r) + [3] for r in rows.numpy()], 24)

    def test_every_id_allowed_gives_exactly_the_full_vocabulary_tokens(self):
        for beam_size in (1, 2):
            request = GenerationRequest(beam_size=beam_size, max_extra_length=EXTRA)
            generators = [Generator(self.model, self.tokenizer, shards=1, jit_compile=False, shortlist=shortlist)
                          for shortlist in (None, all_ids(self.model.vocab_size))]
            self.assertEqual(*[best_texts(generator, SENTENCES, request) for generator in generators])

    def test_shortlisted_search_returns_full_vocabulary_ids_that_detokenize(self):
        shortlist = self.run_dir.load_shortlist()
        self.assertEqual(shortlist.settings["per_source"], 3)
        source = self.source_batch()
        ids = batch_vocabulary(shortlist.entries, shortlist.frequent, source, self.model.vocab_size, size_multiple=8)
        allowed = set(ids.numpy().tolist())
        self.assertLess(len(allowed), self.model.vocab_size // 2)
        for search in (greedy_decode, beam_search):
            tokens = search(self.model, source, max_extra_length=EXTRA, output_ids=ids)["tokens"].numpy()
            self.assertTrue(set(tokens.ravel().tolist()) <= allowed)
            self.assertGreater(tokens.max(), len(ids))  # ids of the whole vocabulary, not shortlist positions
            texts = self.tokenizer.detokenize(tokens.reshape(len(source), -1)).numpy()
            self.assertTrue(all(text for text in texts))

    def test_saved_model_holds_the_shortlist(self):
        request = GenerationRequest(beam_size=1, max_extra_length=EXTRA)  # one traced search keeps the export quick
        out = export_run(self.run_dir, self.root / "exports" / "saved", shortlist=True, request=request,
                         max_beam_size=1)
        exported = best_texts(SavedModelArtifact(out), SENTENCES)
        expected = best_texts(open_artifact(self.run_dir, shortlist=True, shards=1, jit_compile=False), SENTENCES,
                              request)
        self.assertEqual(exported, expected)

    def test_ctranslate2_export_writes_a_vmap_it_translates_with(self):
        out = export_ctranslate2_run(self.run_dir, self.root / "exports" / "ct2", shortlist=True,
                                     request=GenerationRequest(beam_size=2, max_extra_length=EXTRA))
        lines = (out / VMAP_FILE).read_text(encoding="utf-8").splitlines()
        self.assertTrue(lines[0].startswith("\t") and len(lines[0].split(" ")) == 4)  # the frequent pieces
        self.assertTrue(all(len(line.split("\t")) == 2 and line.split("\t")[0] for line in lines[1:]))
        translator = CTranslate2Artifact(out)
        self.assertTrue(translator.use_vmap)
        self.assertTrue(all(best_texts(translator, SENTENCES)))
        shortlist, pieces = self.run_dir.load_shortlist(), translator.pieces
        sources = pieces.encode(SENTENCES, out_type=str)
        allowed = {pieces.id_to_piece(int(i)) for i in range(4)} | {pieces.id_to_piece(int(i)) for i in np.concatenate(
            [shortlist.frequent] + [shortlist.entries[pieces.piece_to_id(p)] for row in sources for p in row])}
        results = translator.translator.translate_batch(sources, beam_size=2, max_decoding_length=20, use_vmap=True)
        self.assertTrue(all(set(r.hypotheses[0]) <= allowed for r in results))

    def test_bad_shortlist_files_are_clear_errors_and_exports_leave_nothing(self):
        broken = RunDirectory(self.root / "broken-run")
        broken.path.mkdir()
        for name in ("config.yaml", "tokenizer.model", "checkpoints"):
            (broken.path / name).symlink_to(self.run_dir.path / name)
        empty = Shortlist(np.zeros((self.model.vocab_size, 2), np.int32), np.zeros([0], np.int32), {})
        for content in (b"", b"not a zip file", None):
            if content is None:
                save_shortlist(broken.shortlist_path, empty)
            else:
                broken.shortlist_path.write_bytes(content)
            with self.assertRaisesRegex(DataError, r"shortlist\.npz.*t2t-keras shortlist --run-dir"):
                broken.load_shortlist()
            for export, name in ((export_run, "saved"), (export_ctranslate2_run, "ct2")):
                with self.assertRaises(DataError):
                    export(broken, self.root / "bad" / name, shortlist=True)
            self.assertFalse((self.root / "bad").exists() and any((self.root / "bad").iterdir()))
        broken.shortlist_path.unlink()
        with self.assertRaisesRegex(T2TError, "no vocabulary shortlist.*t2t-keras shortlist --run-dir"):
            open_artifact(broken, shortlist=True)
        with self.assertRaisesRegex(DataError, "was learned for a vocabulary of 7 pieces"):
            save_shortlist(broken.shortlist_path, all_ids(7))
            load_shortlist(broken.shortlist_path, self.model.vocab_size)
