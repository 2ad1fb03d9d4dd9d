"""Terminology: lexically constrained beam search (`decoding.constrained`), exact without constraints, every
constraint in every output, per-sentence errors for constraints that cannot fit, scores that forced decoding
repeats, and `translate --terminology FILE` on a run directory with its bad-file errors.

The models are tiny and untrained: their translations are garbage, which is the point, since the constraints must
appear whatever the model prefers.
"""

import pathlib
import tempfile

import httpx
import numpy as np
import tensorflow as tf

from t2t_keras.artifacts.saved_model import SavedModelArtifact
from t2t_keras.data.terminology import Terminology
from t2t_keras.data.tokenizer import train_sentencepiece
from t2t_keras.decoding.beams import beam_search
from t2t_keras.decoding.constrained import constrained_beam_search
from t2t_keras.decoding.constraint_rows import constraint_batch
from t2t_keras.decoding.forced import token_nll
from t2t_keras.decoding.generator import Generator
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.errors import DataError, T2TError
from t2t_keras.export.saved_model import export_translator
from t2t_keras.runs import load_run_model
from t2t_keras.serving.server import create_app
from t2t_keras.special_ids import BOS_ID, EOS_ID, PAD_ID
from tests.helpers import TestCase, cli_in_process, long_check, padded_ids, tiny_transformer, toy_pairs
from tests.test_ensemble import save_run
from tests.test_greedy import decoding_model
from tests.test_server import TIMEOUT, start_server

EXTRA = 6
# Eight sources of 2 to 7 ids (EOS included), and 0 to 3 constraints each, some of several tokens.
SOURCE = padded_ids([[11, 32, 45, 19, 27, 8, 3], [23, 9, 31, 3], [17, 3], [5, 44, 12, 38, 30, 21, 3],
                     [7, 7, 3], [40, 41, 42, 43, 3], [6, 13, 3], [29, 28, 27, 26, 25, 3]], 7)
CONSTRAINTS = [[], [[12]], [[30, 31], [9]], [[4, 5, 6]], [[45], [46, 47], [48]], [[33, 33]], [], [[20, 21, 22, 23]]]


def holds(tokens, ids):
    """Whether the output `tokens` (cut at EOS) hold `ids` as a contiguous run."""
    tokens = list(tokens)
    tokens = tokens[:tokens.index(EOS_ID)] if EOS_ID in tokens else tokens
    return any(tokens[i:i + len(ids)] == list(ids) for i in range(len(tokens) - len(ids) + 1))


class ConstrainedSearchTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = decoding_model()

    def test_without_constraints_the_tokens_are_beam_search_s(self):
        empty = constraint_batch([[]] * len(SOURCE), len(SOURCE))
        for beam_size in (1, 4):
            options = dict(beam_size=beam_size, max_extra_length=EXTRA, num_return=beam_size)
            plain = beam_search(self.model, SOURCE, **options)
            constrained = constrained_beam_search(self.model, SOURCE, empty, **options)
            self.assertAllEqual(constrained["tokens"], plain["tokens"], msg=beam_size)
            self.assertAllClose(constrained["scores"], plain["scores"], atol=1e-5)
            self.assertAllClose(constrained["log_probs"], plain["log_probs"], atol=1e-5)
            self.assertAllEqual(constrained["satisfied"], [True] * len(SOURCE))

    def test_every_constraint_appears_and_unconstrained_sentences_keep_their_tokens(self):
        batch = constraint_batch(CONSTRAINTS, len(SOURCE))
        for beam_size in (1, 4):
            out = constrained_beam_search(self.model, SOURCE, batch, beam_size=beam_size, max_extra_length=EXTRA)
            tokens = out["tokens"][:, 0].numpy()
            self.assertAllEqual(out["satisfied"], [True] * len(SOURCE))
            for row, constraints in enumerate(CONSTRAINTS):
                for ids in constraints:
                    self.assertTrue(holds(tokens[row], ids), msg=f"beam {beam_size}, row {row}: {tokens[row]}")
            plain = beam_search(self.model, SOURCE, beam_size=beam_size, max_extra_length=EXTRA)["tokens"][:, 0]
            for row in (0, 6):  # no constraints: beam_search's tokens, whatever the other rows need
                self.assertAllEqual(tokens[row], plain[row])

    @long_check
    def test_the_compiled_search_gives_the_same_tokens(self):
        batch = constraint_batch(CONSTRAINTS, len(SOURCE))
        search = tf.function(lambda source, constraints: constrained_beam_search(
            self.model, source, constraints, beam_size=4, max_extra_length=EXTRA)["tokens"], jit_compile=True)
        eager = constrained_beam_search(self.model, SOURCE, batch, beam_size=4, max_extra_length=EXTRA)["tokens"]
        self.assertAllEqual(search(SOURCE, batch), eager)

    @long_check
    def test_one_graph_serves_every_beam_size(self):
        # beam_size as a tensor (graph mode, as an export holds it): one trace, the tokens of each Python-int search
        batch = constraint_batch(CONSTRAINTS, len(SOURCE))
        graph = tf.function(lambda source, constraints, beam: constrained_beam_search(
            self.model, source, constraints, beam_size=beam, max_extra_length=EXTRA, growing_cache=True))
        for beam_size in (2, 4):
            fixed = constrained_beam_search(self.model, SOURCE, batch, beam_size=beam_size, max_extra_length=EXTRA)
            out = graph(tf.constant(SOURCE), batch, tf.constant(beam_size))
            self.assertAllEqual(out["tokens"], fixed["tokens"], msg=beam_size)
            self.assertAllClose(out["scores"], fixed["scores"], atol=1e-5, msg=beam_size)
            self.assertAllEqual(out["satisfied"], fixed["satisfied"])
        self.assertEqual(graph.experimental_get_tracing_count(), 1)

    def test_constraints_longer_than_the_limit_fail_for_their_sentence_only(self):
        rows = [list(c) for c in CONSTRAINTS]
        rows[2] = [[30, 31, 32, 33], [9, 10, 11, 12]]  # 8 tokens; sentence 2 may have 2 + 3
        rows[1] = [[12, 13, 14], [15, 16, 17, 18]]  # 7 tokens: exactly sentence 1's limit, 4 + 3
        out = constrained_beam_search(self.model, SOURCE, constraint_batch(rows, len(SOURCE)), beam_size=4,
                                      max_extra_length=3)
        self.assertAllEqual(out["satisfied"], [row != 2 for row in range(len(SOURCE))])
        self.assertEqual(out["scores"][2, 0], float("-inf"))
        for row in (1, 3, 5):
            self.assertTrue(all(holds(out["tokens"][row, 0].numpy(), ids) for ids in rows[row]))

    def test_forced_decoding_of_a_constrained_output_gives_its_log_probability(self):
        out = constrained_beam_search(self.model, SOURCE, constraint_batch(CONSTRAINTS, len(SOURCE)), beam_size=4,
                                      max_extra_length=EXTRA)
        tokens = out["tokens"][:, 0].numpy()
        target_in = np.concatenate([np.full((len(tokens), 1), BOS_ID), tokens[:, :-1]], axis=1)
        target_in[target_in == EOS_ID] = PAD_ID
        nll = token_nll(self.model, SOURCE, target_in, tokens).numpy().sum(axis=1)
        self.assertTrue(np.all(np.isfinite(nll)))
        self.assertAllClose(-nll, out["log_probs"][:, 0], atol=1e-4)


class TerminologyFileTest(TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, content):
        path = self.root / "terms.tsv"
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        return path

    def test_terms_apply_to_sentences_holding_them_as_whole_words(self):
        terms = Terminology.load(self.write("cat\tKatze\nNew York\tNeu York\n\nYork\tYork\ncat\tKatze\n"))
        self.assertEqual(terms.targets("the cat sees New York"), ["Katze", "Neu York", "York"])
        self.assertEqual(terms.targets("the cats see Cat and York"), ["York"])
        self.assertEqual(terms.targets("nothing here"), [])

    def test_bad_files_are_errors_naming_the_line_and_the_fix(self):
        cases = [
            (None, r"does not exist: fix the path"),
            (b"cat\tKatze\nhouse Haus\n", r"terms\.tsv:2 has 0 tab characters.*Fix or remove that line"),
            (b"cat\tKatze\tdie\n", r"terms\.tsv:1 has 2 tab characters"),
            (b"cat\t \n", r"terms\.tsv:1: the target term is empty.*remove the line"),
            (b"\tKatze\n", r"terms\.tsv:1: the source term is empty"),
            (b"cat\tKatze\ndog\tHund\ncat\tKater\n", r"terms\.tsv:3: the source term 'cat' has the target 'Kater' "
                                                      r"here but 'Katze' on line 1: keep one"),
            (b"cat\tK\xe4tze\n", r"terms\.tsv:1 is not valid UTF-8.*re-encode"),
            (b"\n\n", r"holds no terms"),
        ]
        for content, message in cases:
            path = self.root / "missing.tsv" if content is None else self.write(content)
            with self.assertRaisesRegex(DataError, message, msg=content):
                Terminology.load(path)
        with self.assertRaisesRegex(DataError, r"cannot be read.*give a readable file"):
            Terminology.load(self.root)


@long_check
class TerminologyRunTest(TestCase):
    """An untrained tiny run directory with a SentencePiece vocabulary, translated through the command line."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = cls.root = pathlib.Path(cls.tmp.name)
        train_sentencepiece([s for pair in toy_pairs(200) for s in pair], root / "vocab.model", 100)
        cls.run_dir = save_run(root / "run", root / "vocab.model", seed=1)
        cls.terms = root / "terms.tsv"
        cls.terms.write_text("cat\tKatze\nred house\trotes Haus\ndog\tHund\nwater\tWasser\n", encoding="utf-8")
        cls.lines = ["the cat sees a dog", "a big red house near the tree", "the man eats bread", "the cat",
                     "a red house and a cat drinks water"]
        cls.expected = [["Katze", "Hund"], ["rotes Haus"], [], ["Katze"], ["Katze", "rotes Haus", "Wasser"]]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def translate(self, *flags, lines=None, terms=None):
        source = self.root / "input.txt"
        source.write_text("\n".join(lines or self.lines) + "\n", encoding="utf-8")
        return cli_in_process("translate", "--run-dir", self.run_dir.path, "--terminology", terms or self.terms,
                              "--input", source, *flags)

    def test_translate_terminology_puts_every_target_term_in_its_sentence(self):
        for beam_size in ("1", "4"):
            result = self.translate("--beam-size", beam_size)
            self.assertEqual(result.returncode, 0, result.stderr.decode())
            outputs = result.stdout.decode("utf-8").splitlines()
            self.assertLen(outputs, len(self.lines))
            for output, targets in zip(outputs, self.expected):
                for target in targets:
                    self.assertIn(target, output, msg=f"beam {beam_size}")
        plain = cli_in_process("translate", "--run-dir", self.run_dir.path, "--beam-size", "4",
                               stdin=("\n".join(self.lines) + "\n").encode())
        self.assertEqual(plain.stdout.splitlines()[2], result.stdout.splitlines()[2])  # no term: today's tokens

    def test_terms_that_cannot_fit_are_an_error_for_their_line_only(self):
        long_term = self.root / "long.tsv"
        long_term.write_text("water\tWasser Brot Kind Mann Frau Katze Hund Baum\ncat\tKatze\n", encoding="utf-8")
        result = self.translate("--max-extra-length", "1", lines=["water", "the cat"], terms=long_term)
        self.assertEqual(result.returncode, 2)
        first, second = result.stdout.decode().split("\n")[:2]
        self.assertEqual(first, "")
        self.assertIn("Katze", second)
        self.assertRegex(result.stderr.decode(), r"line 1: its terms need \d+ target pieces but its translation may "
                                                 r"hold at most \d+ .*raise --max-extra-length")
        self.assertNotIn("line 2", result.stderr.decode())

    def test_bad_terminology_files_and_flags_are_clear_errors(self):
        bad = self.root / "bad.tsv"
        unknown = r"bad\.tsv:1: the target term '猫' holds characters the run's tokenizer does not know"
        for content, message in ((b"cat Katze\n", r"bad\.tsv:1 has 0 tab characters"),
                                 ("cat\t猫\n".encode(), unknown)):
            bad.write_bytes(content)
            result = self.translate(terms=bad)
            self.assertEqual(result.returncode, 2)
            self.assertRegex(result.stderr.decode(), message)
        result = self.translate(terms=self.root / "nowhere.tsv")
        self.assertRegex(result.stderr.decode(), r"terminology file .*nowhere\.tsv does not exist")
        result = self.translate("--shortlist")
        self.assertRegex(result.stderr.decode(), r"shortlist does not apply to a search with terms")

    def test_the_generator_refuses_malformed_constraints(self):
        generator = Generator(load_run_model(self.run_dir), self.run_dir.load_tokenizer(), jit_compile=False)
        request = GenerationRequest(beam_size=2, max_extra_length=EXTRA)
        for constraints, message in (([[" "]], "non-blank text"), ([["a\tb"]], "without tabs"),
                                     ([["Katze"], []], "1 lines but 2 lists")):
            with self.assertRaisesRegex(T2TError, message):
                generator.generate(["the cat"], request.updated(constraints=constraints))
        result = generator.generate(["the cat", "", "the dog"], request.updated(constraints=[[], ["Katze"], ["猫"]]))
        self.assertEqual(result.errors[0], None)
        self.assertRegex(result.errors[1], "empty")
        self.assertRegex(result.errors[2], "characters the vocabulary does not know")
        self.assertEqual(result.best[1:], ["", ""])


@long_check
class ExportedTerminologyTest(TestCase):
    """A text export's `translate_constrained` signature (`export --constraints`), from Python and through the
    REST API."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = cls.root = pathlib.Path(cls.tmp.name)
        cls.tokenizer = train_sentencepiece([s for pair in toy_pairs(200) for s in pair], root / "vocab.model", 100)
        cls.model = tiny_transformer(vocab_size=100, max_length=32)
        cls.translator = SavedModelArtifact(export_translator(
            cls.model, cls.tokenizer, root / "export", max_beam_size=2,
            request=GenerationRequest(beam_size=2, max_extra_length=6), constraints=True))
        cls.lines = ["the cat sees a dog", "a big red house", "the man eats bread", "water"]
        cls.terms = [["Katze", "Hund"], ["rotes Haus"], [], ["Wasser Brot Kind Mann Frau Katze Hund Baum"]]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_signature_puts_every_term_in_and_fails_only_what_cannot_fit(self):
        for beam_size in (1, 2):
            request = self.translator.request(beam_size=beam_size, max_extra_length=2)
            result = self.translator.generate(self.lines, request.updated(constraints=self.terms))
            self.assertEqual([error is None for error in result.errors], [True, True, True, False])
            for translation, terms in zip(result.best[:2], self.terms):
                for term in terms:
                    self.assertIn(term, translation, msg=beam_size)
            self.assertEqual(result.best[3], "")
            plain = self.translator.generate([self.lines[2]], request)
            self.assertEqual(result.best[2], plain.best[0])
            self.assertAllClose(result.scores[2], plain.scores[0], atol=1e-4)
        with self.assertRaisesRegex(T2TError, r"constraints\[0\] holds 'a\\tb'"):
            self.translator.request(constraints=[["a\tb"]])

    def test_exports_without_the_signature_say_how_to_get_it(self):
        with self.assertRaisesRegex(T2TError, "needs a text export.*leave out --ids-only"):
            export_translator(self.model, self.tokenizer, self.root / "ids", text_signatures=False, constraints=True)
        self.assertFalse((self.root / "ids").exists())
        # An export made without --constraints says so: test_export's ExportTest, on the export it already has.

    def test_rest_requests_take_constraints_per_sentence(self):
        server, thread, base_url = start_server(create_app(self.translator, model_name="toy", warm_up=False))
        try:
            url = base_url + "/v1/models/toy:predict"
            body = {"instances": self.lines, "constraints": self.terms, "params": {"max_extra_length": 2}}
            answer = httpx.post(url, json=body, timeout=TIMEOUT)
            self.assertEqual(answer.status_code, 200, answer.text)
            rows = answer.json()["predictions"]
            self.assertIn("rotes Haus", rows[1]["translations"])
            self.assertEqual([row["error"] is None for row in rows], [True, True, True, False])
            self.assertRegex(rows[3]["error"], "raise max_extra_length or give fewer terms")
            bad = httpx.post(url, json={"instances": ["a", "b"], "constraints": [["x"]]}, timeout=TIMEOUT)
            self.assertEqual(bad.status_code, 400)
            self.assertRegex(bad.json()["error"], "one list of target terms per sentence")
        finally:
            server.should_exit = True
            thread.join(TIMEOUT)
