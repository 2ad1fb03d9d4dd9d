"""Imported checkpoints decode as transformers' `generate()` decodes them, in every artifact.

Tiny OPUS-MT (classic, tc-big, separate vocabularies), NLLB and M2M-100 checkpoints made with transformers
(`tests/hf_checkpoints.py`) are imported once per class. Greedy search and beam 4, with the checkpoint's generation
defaults (Hugging Face's length normalisation and stopping, its length limit and forced end), give the tokens and
the text of `model.generate(num_beams=1 or 4, do_sample=False)` on every line: through the run, a SavedModel, a
LiteRT file, `serve`, and CTranslate2 (our export against CTranslate2's own converter of the same directory). An
empty line translates to "" without decoding, in every artifact (`decoding.generator`); transformers would decode
its end id alone. Language codes a model lacks are refused naming the code and where the model's list is.
"""

import collections
import contextlib
import pathlib
import tempfile

import httpx
import tensorflow as tf

from t2t_keras.artifacts import open_artifact
from t2t_keras.errors import T2TError
from t2t_keras.export.ctranslate2_export import export_ctranslate2_run
from t2t_keras.export.litert_export import export_litert_run
from t2t_keras.export.saved_model import export_run
from t2t_keras.pretrained.importer import import_checkpoint
from t2t_keras.serving.server import create_app
from tests import hf_checkpoints
from tests.helpers import TestCase, cli_in_process, long_check
from tests.test_server import TIMEOUT, start_server

LINES = hf_checkpoints.sentences(28, seed=11) + ["the cat € sees ✓ the dog", ""]
BEAMS = (1, 4)
MARIAN = {"ends": {}, "classic": {}, "tc-big": {"activation": "relu", "scale_embedding": False, "eos_first": False},
          "separate": {"separate": True, "eos_first": False}}
# The random models run every translation to the length limit, where the length penalty changes nothing; this
# raise of the end id's logits bias makes "ends" finish some hypotheses early, so beam 4's best hypothesis
# depends on the length normalisation (another normalisation, or another alpha, picks other hypotheses).
END_BIAS = 2.0


def marian_with_likelier_end(directory, seed, **options):
    """`hf_checkpoints.marian_checkpoint` (seed 0, the classic shape's weights) with its end id's logits bias
    raised by `END_BIAS`."""
    from safetensors.numpy import load_file, save_file

    directory = hf_checkpoints.marian_checkpoint(directory, seed=0, **options)
    tensors = load_file(directory / "model.safetensors")
    tensors["final_logits_bias"][..., 0] += END_BIAS  # </s> is id 0 in the classic vocabulary
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    return directory


@contextlib.contextmanager
def torch_threads(count):
    """torch with `count` intra-op threads, restored after: one thread is fastest for these tiny models."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield torch
    finally:
        torch.set_num_threads(saved)


class Reference:
    """transformers' model and tokenizer of a checkpoint directory, and what `generate()` makes of lines."""

    def __init__(self, directory, src_lang=None, tgt_lang=None):
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        languages = {} if src_lang is None else {"src_lang": src_lang, "tgt_lang": tgt_lang}
        self.tokenizer = AutoTokenizer.from_pretrained(directory, **languages)
        self.model = AutoModelForSeq2SeqLM.from_pretrained(directory).eval()
        self.config = self.model.generation_config
        self.forced = {} if tgt_lang is None else {"forced_bos_token_id": self.language_id(tgt_lang)}
        # M2M100Tokenizer keeps language codes in decoded text, NllbTokenizer and our tokenizers leave them out
        self.codes = set(getattr(self.tokenizer, "lang_token_to_id", {}).values())
        self._generated = {}  # (lines, num_beams, tgt_lang) -> what `generate` returned: it is deterministic

    def language_id(self, code):
        if hasattr(self.tokenizer, "get_lang_id"):
            return self.tokenizer.get_lang_id(code)
        return self.tokenizer.convert_tokens_to_ids(code)

    def generate(self, lines, num_beams, tgt_lang=None):
        """Per non-empty line, the generated ids (without the decoder start, up to the end id) and their text."""
        key = (tuple(lines), num_beams, tgt_lang)
        if key not in self._generated:
            self._generated[key] = self._generate(lines, num_beams, tgt_lang)
        return self._generated[key]

    def _generate(self, lines, num_beams, tgt_lang):
        forced = self.forced if tgt_lang is None else {"forced_bos_token_id": self.language_id(tgt_lang)}
        lines = [line for line in lines if line]
        with torch_threads(1) as torch, torch.no_grad():
            inputs = self.tokenizer(lines, return_tensors="pt", padding=True)
            out = self.model.generate(**inputs, num_beams=num_beams, do_sample=False, **forced).numpy()
        tokens = [until_end(row[1:], self.config.eos_token_id, self.config.pad_token_id) for row in out]
        texts = [self.tokenizer.decode([i for i in ids if i not in self.codes], skip_special_tokens=True)
                 for ids in tokens]
        return tokens, texts


def until_end(ids, eos, pad):
    """`ids` up to the first `eos` (included); without one, up to the padding."""
    ids = [int(i) for i in ids]
    if eos in ids:
        return ids[:ids.index(eos) + 1]
    return ids[:ids.index(pad)] if pad in ids else ids


def run_tokens(artifact, lines, request):
    """Per non-empty line, the best hypothesis' ids of a run artifact's search, as its `generate` searches them."""
    generator = artifact.generator
    layout = generator.layout(artifact.check_request(request))
    sources, _, empty = generator.source_rows(lines, layout)
    found = {}
    for batch, source in generator.batches(sources, empty):
        tokens = generator.search(source, request, target_prefix=layout.target_prefix).tokens.numpy()
        found.update((index, until_end(tokens[row, 0], generator.special_ids.eos, generator.special_ids.pad))
                     for row, index in enumerate(batch))
    return [found[i] for i in range(len(lines)) if lines[i]]


def non_empty(texts, lines):
    return [text for text, line in zip(texts, lines) if line]


_IMPORTED = {}  # (name, seed) -> Imported, shared by the classes
_ROOT = []  # the module's temporary directory


class Imported(collections.namedtuple("Imported", "checkpoint run reference artifact")):
    """A checkpoint directory made with transformers, its imported run, its `Reference` and the run's artifact."""


def tearDownModule():
    for tmp in _ROOT:
        tmp.cleanup()


def root():
    if not _ROOT:
        _ROOT.append(tempfile.TemporaryDirectory())
    return pathlib.Path(_ROOT[0].name)


def imported(name, build, options, family, languages, seed):
    """The checkpoint `name` built with `seed` and imported, made once per process: the classes that test it share
    it, and none changes it."""
    if (name, seed) not in _IMPORTED:
        checkpoint = build(root() / f"{name}-{seed}" / name, seed=seed, **options)
        run = import_checkpoint(family, checkpoint, root() / f"{name}-{seed}" / f"run-{name}", *languages)
        _IMPORTED[name, seed] = Imported(checkpoint, run, Reference(checkpoint, *languages), open_artifact(run))
    return _IMPORTED[name, seed]


class DecodingTestBase(TestCase):
    """`CHECKPOINTS`: name -> (build function, its options, import arguments, the languages, the seed), imported
    once per module (`imported`)."""

    CHECKPOINTS = {}

    @classmethod
    def setUpClass(cls):
        cls.root = pathlib.Path(tempfile.mkdtemp(dir=root()))
        cls.checkpoints, cls.runs, cls.references, cls.artifacts = {}, {}, {}, {}
        for name, arguments in cls.CHECKPOINTS.items():
            found = imported(name, *arguments)
            cls.checkpoints[name], cls.runs[name], cls.references[name], cls.artifacts[name] = found

    def assert_decodes_as_transformers(self, name, num_beams, **languages):
        """The run's tokens and texts equal `generate()`'s for every non-empty line, and an empty line is ""."""
        artifact, reference = self.artifacts[name], self.references[name]
        request = artifact.request(beam_size=num_beams, **languages)
        tokens, texts = reference.generate(LINES, num_beams, languages.get("tgt_lang"))
        self.assertEqual(run_tokens(artifact, LINES, request), tokens)
        generated = artifact.generate(LINES, request).best
        self.assertEqual(non_empty(generated, LINES), texts)
        self.assertEqual({text for text, line in zip(generated, LINES) if not line}, {""})

    def assert_refused(self, result, *patterns):
        """A CLI `result` failed with a message matching every pattern."""
        self.assertNotEqual(result.returncode, 0)
        for pattern in patterns:
            self.assertRegex(result.stderr.decode("utf-8"), pattern)


class MarianDecodingTest(DecodingTestBase):
    CHECKPOINTS = {name: (marian_with_likelier_end if name == "ends" else hf_checkpoints.marian_checkpoint, options,
                          "marian", (), seed) for seed, (name, options) in enumerate(MARIAN.items())}

    def test_the_run_decodes_with_the_generation_defaults(self):
        request = self.artifacts["classic"].defaults
        self.assertEqual((request.beam_size, request.length_penalty, request.alpha, request.max_output_length,
                          request.end_at_limit), (3, "power", 1.0, 63, True))

    @long_check
    def test_greedy_and_beam_4_give_the_tokens_of_generate(self):
        for name in MARIAN:
            for num_beams in BEAMS:
                with self.subTest(shape=name, num_beams=num_beams):
                    self.assert_decodes_as_transformers(name, num_beams)

    def test_a_model_without_language_codes_refuses_languages(self):
        artifact = self.artifacts["classic"]
        for field in ("src_lang", "tgt_lang"):
            with self.subTest(field=field):
                with self.assertRaisesRegex(T2TError, f"{field} .*does not apply to .*run-classic.*, which takes .*; "
                                                      "src_lang and tgt_lang choose among the language codes of a "
                                                      "multilingual checkpoint .*this model has none"):
                    artifact.request(**{field: "deu_Latn"})
        result = cli_in_process("translate", "--run-dir", self.runs["classic"], "--target-lang", "deu_Latn",
                                stdin=b"the cat\n")
        self.assert_refused(result, r"tgt_lang \(--target-lang\) does not apply", "this model has none")


class MultilingualDecodingTest(DecodingTestBase):
    CHECKPOINTS = {"nllb": (hf_checkpoints.nllb_checkpoint, {}, "m2m100", ("eng_Latn", "deu_Latn"), 0),
                   "m2m100": (hf_checkpoints.m2m100_checkpoint, {}, "m2m100", ("en", "de"), 1)}

    def test_greedy_and_beam_4_give_the_tokens_of_generate(self):
        for name in self.CHECKPOINTS:
            for num_beams in BEAMS:
                with self.subTest(shape=name, num_beams=num_beams):
                    self.assert_decodes_as_transformers(name, num_beams)

    def test_a_request_chooses_another_target_language(self):
        self.assert_decodes_as_transformers("nllb", 4, tgt_lang="fra_Latn")

    def test_an_unknown_language_code_is_refused_naming_it(self):
        where = r"its tokenizer \(.*tokenizer.zip, manifest.json \"languages\"\) lists its 3 codes"
        with self.assertRaisesRegex(T2TError, rf"tgt_lang \(--target-lang\) 'xyz_Latn' is not .*{where}"):
            self.artifacts["nllb"].generate(["the cat"], self.artifacts["nllb"].request(tgt_lang="xyz_Latn"))
        result = cli_in_process("translate", "--run-dir", self.runs["nllb"], "--source-lang", "qqq_Latn",
                                stdin=b"the cat\n")
        self.assert_refused(result, "src_lang \\(--source-lang\\) 'qqq_Latn' is not a language code", where,
                            "deu_Latn, eng_Latn, fra_Latn")


@long_check
class ExportDecodingTest(DecodingTestBase):
    """NLLB as a SavedModel and served; classic OPUS-MT as a LiteRT file and in CTranslate2."""

    CHECKPOINTS = {"classic": MarianDecodingTest.CHECKPOINTS["classic"],
                   "nllb": MultilingualDecodingTest.CHECKPOINTS["nllb"]}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.saved_model = open_artifact(export_run(cls.runs["nllb"], cls.root / "nllb-saved", max_beam_size=4))
        cls.app = create_app(cls.saved_model, model_name="nllb", max_batch_size=64, max_wait_ms=1)
        cls.server, cls.thread, cls.base_url = start_server(cls.app)

    @classmethod
    def tearDownClass(cls):
        cls.server.should_exit = True
        cls.thread.join(TIMEOUT)

    def assert_texts_of_generate(self, artifact, name, num_beams, **languages):
        texts = artifact.generate(LINES, artifact.request(beam_size=num_beams, **languages)).best
        self.assertEqual(non_empty(texts, LINES), self.references[name].generate(LINES, num_beams,
                                                                                languages.get("tgt_lang"))[1])
        self.assertEqual(texts[-1], "")

    def test_the_saved_model_translates_as_generate(self):
        for num_beams in BEAMS:
            with self.subTest(num_beams=num_beams):
                self.assert_texts_of_generate(self.saved_model, "nllb", num_beams)
        self.assert_texts_of_generate(self.saved_model, "nllb", 4, tgt_lang="fra_Latn")

    def test_the_saved_model_refuses_an_unknown_language_code(self):
        with self.assertRaisesRegex(T2TError, "tgt_lang .*'xyz_Latn' is not .*the export's variable language_codes"):
            self.saved_model.request(tgt_lang="xyz_Latn")
        translate = self.saved_model.saved_model.signatures["translate"]
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "src_lang.*qqq_Latn.*language_codes lists"):
            translate(inputs=tf.constant(["the cat"]), beam_size=tf.constant(1), alpha=tf.constant(1.0),
                      max_extra_length=tf.constant(5), num_return=tf.constant(1), src_lang=tf.constant("qqq_Latn"),
                      tgt_lang=tf.constant(""))

    def predict(self, body):
        return httpx.post(f"{self.base_url}/v1/models/nllb:predict", json=body, timeout=TIMEOUT)

    def test_serve_translates_as_generate_and_refuses_an_unknown_code(self):
        lines = [line for line in LINES if line]
        for num_beams in BEAMS:
            with self.subTest(num_beams=num_beams):
                answer = self.predict({"instances": lines, "params": {"beam_size": num_beams}})
                self.assertEqual(answer.status_code, 200, answer.text)
                self.assertEqual([row["translations"] for row in answer.json()["predictions"]],
                                 self.references["nllb"].generate(lines, num_beams)[1])
        refused = self.predict({"instances": lines[:1], "params": {"tgt_lang": "xyz_Latn"}})
        self.assertEqual(refused.status_code, 400)
        self.assertRegex(refused.json()["error"], "tgt_lang .*'xyz_Latn' is not a language code.*language_codes")

    def test_the_litert_file_translates_as_generate(self):
        artifact = open_artifact(export_litert_run(self.runs["classic"], self.root / "classic.tflite",
                                                   max_beam_size=4))
        for num_beams in BEAMS:
            with self.subTest(num_beams=num_beams):
                self.assert_texts_of_generate(artifact, "classic", num_beams)

    def test_ctranslate2_exports_agree_with_ctranslate2s_own_converter(self):
        import ctranslate2

        ours = export_ctranslate2_run(self.runs["classic"], self.root / "classic-ct2")
        theirs = ctranslate2.converters.TransformersConverter(str(self.checkpoints["classic"])).convert(
            str(self.root / "classic-ct2-theirs"))
        tokenizer = self.references["classic"].tokenizer
        sources = [tokenizer.convert_ids_to_tokens(tokenizer(line)["input_ids"]) for line in LINES if line]
        translators = [ctranslate2.Translator(str(path), intra_threads=1) for path in (ours, theirs)]
        for num_beams in BEAMS:
            with self.subTest(num_beams=num_beams):
                hypotheses = [[result.hypotheses[0] for result in translator.translate_batch(
                    sources, beam_size=num_beams, max_decoding_length=63)] for translator in translators]
                self.assertEqual(hypotheses[0], hypotheses[1])
                artifact = open_artifact(ours)
                texts = artifact.generate(LINES, artifact.request(beam_size=num_beams)).best
                self.assertEqual(non_empty(texts, LINES), [tokenizer.convert_tokens_to_string(tokens)
                                                           for tokens in hypotheses[1]])
