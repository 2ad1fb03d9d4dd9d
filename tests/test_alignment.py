"""Word alignments from cross-attention: the word rule on hand-made attention, the aligner against the model's own
attention maps, the checks of the layer and heads, and `translate --alignments` / `--markup` on a tiny run."""

import pathlib
import tempfile
import unittest

import numpy as np
import tensorflow as tf

from t2t_keras.artifacts.saved_model import SavedModelArtifact
from t2t_keras.config import load_config, replace
from t2t_keras.data.tokenizer import train_sentencepiece
from t2t_keras.decoding.aligner import Aligner, aligned_pair, piece_rows
from t2t_keras.decoding.alignment import (
    WordPieces,
    covered_words,
    format_pharaoh,
    links_from_scores,
    parse_pharaoh,
    word_pieces,
    word_scores,
)
from t2t_keras.decoding.ensemble import Ensemble
from t2t_keras.decoding.markup import parse_markup, strip_markup
from t2t_keras.decoding.request import Generation, GenerationRequest
from t2t_keras.errors import ConfigError, T2TError
from t2t_keras.evaluation.aligned import aligned_translations
from t2t_keras.inspect.attention import extract_attention
from t2t_keras.runs import load_run, write_inspection_files
from tests.helpers import TestCase, cli_in_process, long_check, toy_pairs
from tests.test_ensemble import VOCAB, save_run

SENTENCES = ["the cat sees a dog", "a big red house near the tree", "water"]


class WordRuleTest(unittest.TestCase):
    def test_mass_summed_over_source_pieces_averaged_over_target_pieces(self):
        source = WordPieces([10, 11, 12, 13], [0, 1, 1, 2], 3)
        target = WordPieces([20, 21, 22], [0, 0, 1], 2)
        attention = [[0.1, 0.2, 0.3, 0.4], [0.5, 0.1, 0.1, 0.3], [0.0, 0.0, 0.0, 1.0]]
        np.testing.assert_allclose(word_scores(attention, source, target), [[0.3, 0.35, 0.35], [0.0, 0.0, 1.0]])

    def test_diagonal_attention_aligns_the_diagonal(self):
        pieces = WordPieces([5, 6, 7, 8], [0, 1, 2, 3], 4)
        scores = word_scores(np.eye(4) * 0.9 + 0.025, pieces, pieces)
        self.assertEqual(links_from_scores(scores), [(0, 0), (1, 1), (2, 2), (3, 3)])

    def test_each_target_word_to_its_best_source_word_then_unchosen_source_words(self):
        scores = [[0.9, 0.1, 0.0], [0.8, 0.1, 0.1]]
        self.assertEqual(links_from_scores(scores), [(0, 0), (0, 1), (1, 0), (2, 1)])
        self.assertEqual(links_from_scores(scores, source_covered=[True, True, False]), [(0, 0), (0, 1), (1, 0)])
        self.assertEqual(links_from_scores(scores, target_covered=[False, True]), [(0, 1), (1, 1), (2, 1)])
        self.assertEqual(links_from_scores(np.zeros((0, 3))), [])

    def test_cut_pieces_leave_their_words_uncovered(self):
        np.testing.assert_array_equal(covered_words(WordPieces([4, 5], [0, 0], 3)), [True, False, False])

    def test_pharaoh_round_trip_and_errors(self):
        self.assertEqual(format_pharaoh([(0, 0), (2, 1)]), "0-0 2-1")
        self.assertEqual(parse_pharaoh("2-1 0-0 0-0"), [(0, 0), (2, 1)])
        self.assertEqual(parse_pharaoh(""), [])
        for bad in ("0-", "a-1", "0:1", "1-2-3"):
            with self.assertRaisesRegex(T2TError, "Pharaoh"):
                parse_pharaoh(bad)

    def test_a_piece_takes_the_row_that_predicts_it_or_reads_it(self):
        attention = np.arange(12).reshape(4, 3)  # BOS + 3 pieces
        np.testing.assert_array_equal(piece_rows(attention, 2, "predicts"), attention[:2])
        np.testing.assert_array_equal(piece_rows(attention, 2, "reads"), attention[1:3])

    def test_config_checks_the_setting(self):
        config = load_config("tiny")
        self.assertEqual((config.decoding.alignment_layer, config.decoding.alignment_heads), (-1, None))
        self.assertEqual(replace(config, decoding={"alignment_heads": [0, 2]}).decoding.alignment_heads, [0, 2])
        for bad in ({"alignment_heads": []}, {"alignment_heads": [-1]}, {"alignment_layer": "last"},
                    {"alignment_layer": True}, {"alignment_rows": "shifted"}):
            with self.assertRaisesRegex(ConfigError, "decoding.alignment_"):
                replace(config, decoding=bad)


@long_check
class AlignerTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = pathlib.Path(cls.tmp.name)
        train_sentencepiece([s for pair in toy_pairs(200) for s in pair], root / "tok.model", VOCAB)
        cls.run_dir = save_run(root / "run", root / "tok.model", seed=1)
        cls.model, cls.tokenizer = load_run(cls.run_dir)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_word_pieces_are_the_sentence_pieces_with_their_words(self):
        for sentence, pieces in zip(SENTENCES, word_pieces(self.tokenizer, SENTENCES)):
            self.assertEqual(pieces.ids, self.tokenizer.tokenize(tf.constant(sentence)).numpy().tolist())
            self.assertEqual(pieces.num_words, len(sentence.split()))
            self.assertEqual(sorted(set(pieces.word_of_piece)), list(range(pieces.num_words)))
            self.assertEqual(pieces.word_of_piece, sorted(pieces.word_of_piece))
        cut = word_pieces(self.tokenizer, [SENTENCES[1]], max_pieces=3)[0]
        self.assertEqual((len(cut.ids), len(cut.word_of_piece), cut.num_words), (3, 3, 7))

    def test_attention_is_the_models_cross_attention(self):
        source, target = SENTENCES[1], "ein grosses rotes Haus"
        maps = extract_attention(self.model, self.tokenizer, source, target)
        aligner = Aligner(self.model, self.tokenizer, layer=-1, heads=[1, 2])
        src, tgt, attention = list(aligner.attention([SENTENCES[0], source], ["die Katze", target]))[1]
        rows, columns = len(tgt.ids), len(src.ids)
        self.assertEqual(maps.cross.shape[2:], (rows + 1, columns + 1))  # BOS + pieces, pieces + EOS
        np.testing.assert_allclose(attention, maps.cross[:, :, :rows, :columns], atol=1e-5)
        expected = aligned_pair(maps.cross[1, [1, 2], :rows, :columns].mean(axis=0), src, tgt)
        aligned = aligner.align([source], [target])[0]
        self.assertEqual(aligned.links, expected.links)
        np.testing.assert_allclose(aligned.scores, expected.scores, atol=1e-5)
        self.assertEqual({i for i, _ in aligned.links}, set(range(len(source.split()))))
        self.assertEqual({j for _, j in aligned.links}, set(range(len(target.split()))))

    def test_bad_layer_heads_and_models_are_refused(self):
        for layer, heads, message in ((2, None, r"\[-2, 1\]"), (-3, None, "alignment_layer"), (0, [4], r"\[0, 3\]"),
                                      (0, [], "alignment_heads"), (0, [True], "alignment_heads")):
            with self.assertRaisesRegex(T2TError, message):
                Aligner(self.model, self.tokenizer, layer=layer, heads=heads)
        with self.assertRaisesRegex(T2TError, "ensemble"):
            Aligner(Ensemble([self.model]), self.tokenizer)

    def translate(self, *flags, stdin):
        result = cli_in_process("translate", "--run-dir", self.run_dir.path, *flags, stdin=stdin.encode())
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        return result.stdout.decode().splitlines()

    def test_translate_alignments_prints_the_translation_a_tab_and_pharaoh_links(self):
        lines = SENTENCES[:2] + [""] + SENTENCES[2:]
        plain = self.translate(stdin="\n".join(lines) + "\n")
        aligned = self.translate("--alignments", stdin="\n".join(lines) + "\n")
        self.assertEqual(len(aligned), len(lines))
        for source, translation, line in zip(lines, plain, aligned):
            text, links = line.split("\t")
            self.assertEqual(text, translation)
            links = parse_pharaoh(links)
            if source and translation:
                self.assertEqual({i for i, _ in links}, set(range(len(source.split()))))
                self.assertEqual({j for _, j in links}, set(range(len(translation.split()))))
            else:
                self.assertEqual(links, [])
        other = self.translate("--alignments", "--alignment-layer", "0", "--alignment-heads", "3",
                               "--alignment-rows", "reads", stdin=lines[0])
        self.assertEqual(other[0].split("\t")[0], plain[0])
        expected = Aligner(self.model, self.tokenizer, 0, [3], "reads").align([lines[0]], [plain[0]])[0].links
        self.assertEqual(parse_pharaoh(other[0].split("\t")[1]), expected)

    def test_translate_markup_places_every_tag_once(self):
        lines = ['the <emph>cat</emph> sees <link href="x">a <b>dog</b></link><br/>', "<i>water</i> &amp; bread"]
        plain = self.translate(stdin="\n".join(strip_markup(line) for line in lines) + "\n")
        marked = self.translate("--markup", stdin="\n".join(lines) + "\n")
        both = self.translate("--markup", "--alignments", stdin="\n".join(lines) + "\n")
        for source, translation, line, line_with_links in zip(lines, plain, marked, both):
            self.assertEqual(strip_markup(line).split(), translation.split())
            self.assertEqual(sorted(t.open_text for t in parse_markup(line).tag_list()),
                             sorted(t.open_text for t in parse_markup(source).tag_list()))
            self.assertEqual(line_with_links.split("\t")[0], line)
            parse_pharaoh(line_with_links.split("\t")[1])

    def test_a_text_export_aligns_with_the_model_it_keeps(self):
        """A SavedModel translates with its graph and aligns with `assets.extra/`'s model (a stand-in export here:
        the Keras model and tokenizer written as `export` writes them, translations given)."""
        export_dir = pathlib.Path(self.tmp.name) / "export"
        write_inspection_files(export_dir, self.model, self.tokenizer)

        class Export(SavedModelArtifact):
            def __init__(self):  # what SavedModelArtifact holds, without a graph to load
                self.path, self._aligner_model = export_dir, None

            def check_request(self, request):
                return request

            def generate(self, lines, request):
                texts = [[f"{len(line.split())} w{request.beam_size}"] for line in lines]
                generation = Generation(texts, [[0.0]] * len(lines), [False] * len(lines), None, [None] * len(lines))
                return self._aligned(lines, generation, request)

        request = GenerationRequest(beam_size=2, alignment_heads=(0,))
        lines = aligned_translations(Export(), ["the <emph>cat</emph> sleeps"], request.updated(alignments=True),
                                     markup=True)
        text, links = lines[0].split("\t")
        self.assertEqual(strip_markup(text), "3 w2")
        self.assertEqual(parse_markup(text).tag_list()[0].open_text, "<emph>")
        expected = Aligner(self.model, self.tokenizer, heads=[0]).align(["the cat sleeps"], ["3 w2"])[0].links
        self.assertEqual(parse_pharaoh(links), expected)

    def test_bad_input_is_a_clear_error(self):
        cases = [(("--markup",), "the <emph>cat\n", ["<stdin>:1", "<emph>", "never closed"]),
                 (("--markup",), "ok\nthe cat</b>\n", ["<stdin>:2", "</b>", "closes no open tag"]),
                 (("--alignments", "--alignment-layer", "5"), "the cat\n", ["alignment_layer", "[-2, 1]"]),
                 (("--alignment-heads", "1"), "the cat\n", ["--alignment-heads", "--alignments or --markup"])]
        for flags, stdin, parts in cases:
            result = cli_in_process("translate", "--run-dir", self.run_dir.path, *flags, stdin=stdin.encode())
            self.assertEqual(result.returncode, 2, result.stderr[-2000:])
            self.assertEqual(result.stdout, b"")
            for part in parts:
                self.assertIn(part, result.stderr.decode())


if __name__ == "__main__":
    unittest.main()
