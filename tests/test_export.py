"""Translation SavedModel: fresh-process reload equals the in-process generator, signatures, parameters,
over-long and empty inputs, a TF-Text-free ids signature, atomic export."""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
from unittest import mock

import numpy as np
import tensorflow as tf

from t2t_keras.artifacts import open_artifact
from t2t_keras.artifacts.saved_model import SavedModelArtifact
from t2t_keras.config import replace
from t2t_keras.data.tokenizer import Tokenizer
from t2t_keras.decoding.generator import Generator
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.errors import DiskFullError
from t2t_keras.export.saved_model import export_run, export_translator
from t2t_keras.resolved_run import resolve_run
from t2t_keras.runs import load_run_model
from t2t_keras.switches.kernels import export_arithmetic
from t2t_keras.training.trainer import train
from tests.helpers import TestCase, best_texts, long_check, predicted, toy_config, toy_pairs, write_toy_corpus

REPO = pathlib.Path(__file__).resolve().parents[1]
MAX_BEAM_SIZE = 3  # the export's switch covers beam sizes 1..3 (8 by default; fewer traces keep the test fast)
BEAM_SIZE = 3  # the export's default
TRAIN_STEPS = 90  # enough for real, different translations of the toy sentences
MAX_LENGTH = 48  # the model's longest sequence: small, so that the over-long input decodes quickly
OVERLONG = " ".join(["the big red dog sees a small green tree"] * 8)  # more pieces than MAX_LENGTH
SENTENCES = [pair[0] for pair in toy_pairs(6, seed=7)] + ["", "   ", OVERLONG]
# The graph-mode export the XLA-compiled ones are compared with (`SmallExportTest.plain_export`).
PLAIN_OPTIONS = dict(max_beam_size=2, request=GenerationRequest(beam_size=2, max_extra_length=5))

# Runs in a fresh interpreter that never imports t2t_keras. First, before TF-Text is imported (as in a
# stock TF Serving): which op types core TensorFlow does not know, and the ids-only export. Then, after
# `import tensorflow_text`, the text export.
FRESH_PROCESS = """
import json, sys
import tensorflow as tf
from tensorflow.python.framework import op_def_registry

request = json.loads(sys.stdin.read())
unknown = [op for op in request["op_types"] if op_def_registry.get(op) is None]
ids_export = tf.saved_model.load(request["ids_export"])
ids_out = ids_export.signatures["serving_default"](source_ids=tf.constant(request["ids"], tf.int32))
result = {"unknown_op_types": unknown, "ids_signatures": sorted(ids_export.signatures),
          "ids_tokens": ids_out["tokens"].numpy().tolist(), "tf_text_was_loaded": "tensorflow_text" in sys.modules}

import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

loaded = tf.saved_model.load(request["export"])
sentences = tf.constant(request["sentences"])
default = loaded.signatures["serving_default"](inputs=sentences)
greedy = loaded.signatures["translate"](inputs=sentences, beam_size=tf.constant(1), alpha=tf.constant(0.6),
    max_extra_length=tf.constant(50), num_return=tf.constant(1))
single = loaded.signatures["serving_default"](inputs=sentences[:1])
texts = lambda t: [s.decode("utf-8") for s in t.numpy().reshape(-1)]
result.update(beam=texts(default["translations"]), truncated=default["truncated"].numpy().tolist(),
              greedy=texts(greedy["translations"]), single=texts(single["translations"]),
              imported_t2t_keras=any(name.startswith("t2t_keras") for name in sys.modules))
print(json.dumps(result))
"""


class Background:
    """A subprocess started now and checked later, so that it runs while other tests do."""

    def __init__(self, command, stdin=""):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=env,
                                        cwd=tempfile.gettempdir())  # not the repository: no t2t_keras
        self.process.stdin.write(stdin)
        self.process.stdin.close()
        self._output = None

    def output(self):
        """stdout after a successful exit."""
        if self._output is None:
            self.process.wait(timeout=300)
            out, err = self.process.stdout.read(), self.process.stderr.read()
            if self.process.returncode != 0:
                raise AssertionError(f"{self.process.args[:3]} failed:\n{err[-3000:]}")
            self._output = out
        return self._output

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process.stdout.close()
        self.process.stderr.close()


def graph_op_types(function):
    """Op types in a concrete function's graph and in every function it calls."""
    graph_def = function.graph.as_graph_def()
    types = {node.op for node in graph_def.node}
    for library_function in graph_def.library.function:
        types.update(node.op for node in library_function.node_def)
    return types


def call_translate(signature, inputs, beam_size=BEAM_SIZE, alpha=0.6, max_extra_length=50, num_return=1):
    return signature(**inputs, beam_size=tf.constant(beam_size), alpha=tf.constant(alpha),
                     max_extra_length=tf.constant(max_extra_length), num_return=tf.constant(num_return))


class ExportTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = pathlib.Path(cls.tmp.name)
        config = toy_config(write_toy_corpus(root / "data"), train_steps=TRAIN_STEPS, warmup_steps=40,
                            learning_rate_scale=0.3, steps_per_epoch=30, checkpoint_every_steps=TRAIN_STEPS)
        config = replace(config, model={"max_length": MAX_LENGTH}, data={"dev_files": None})  # no validations
        cls.run_dir = root / "run"
        train(resolve_run(cls.run_dir, config), verbose=0)
        cls.model = load_run_model(cls.run_dir)
        cls.tokenizer = Tokenizer.load(cls.run_dir / "tokenizer.model")
        cls.export_dir = export_run(cls.run_dir, root / "exports" / "toy", max_beam_size=MAX_BEAM_SIZE,
                                    request=GenerationRequest(beam_size=BEAM_SIZE), quantization="auto")
        cls.ids_export_dir = export_translator(cls.model, cls.tokenizer, root / "exports" / "ids", max_beam_size=1,
                                               text_signatures=False, request=GenerationRequest(beam_size=1))
        cls.cli = Background([str(pathlib.Path(sys.executable).with_name("saved_model_cli")), "show", "--all",
                              "--dir", str(cls.export_dir)])
        cls.translator = SavedModelArtifact(cls.export_dir)
        cls.signatures = cls.translator.saved_model.signatures
        cls.op_types = {name: graph_op_types(cls.signatures[name]) for name in ("translate", "translate_ids")}
        cls.source_ids = cls.tokenizer.tokenize(tf.constant(SENTENCES[:3])).to_tensor().numpy()
        request = {"op_types": sorted(set.union(*cls.op_types.values())), "ids_export": str(cls.ids_export_dir),
                   "ids": cls.source_ids.tolist(), "export": str(cls.export_dir), "sentences": SENTENCES}
        cls.fresh = Background([sys.executable, "-c", FRESH_PROCESS], json.dumps(request))
        cls.generator = Generator(cls.model, cls.tokenizer, jit_compile=False)  # the in-process reference

    @classmethod
    def tearDownClass(cls):
        cls.cli.stop()
        cls.fresh.stop()
        cls.tmp.cleanup()

    def fresh_process(self):
        return json.loads(self.fresh.output().strip().splitlines()[-1])

    def test_fresh_process_without_t2t_keras_translates_like_the_in_process_translator(self):
        got = self.fresh_process()
        self.assertFalse(got["imported_t2t_keras"])
        beam = best_texts(self.generator, SENTENCES, GenerationRequest(beam_size=BEAM_SIZE))
        greedy = best_texts(self.generator, SENTENCES, GenerationRequest(beam_size=1))
        self.assertEqual(got["beam"], beam)
        self.assertEqual(got["greedy"], greedy)
        self.assertEqual(got["single"], beam[:1])  # another batch size after reload
        self.assertEqual(got["beam"][6:8], ["", ""])  # empty and blank inputs
        self.assertGreater(len({t for t in beam if t}), 4)  # real, different translations
        self.assertEqual(got["truncated"], [False] * 8 + [True])  # only the over-long input is cut

    def test_ids_signature_uses_core_ops_only_and_an_ids_export_runs_without_tensorflow_text(self):
        got = self.fresh_process()
        self.assertFalse(got["tf_text_was_loaded"])
        self.assertIn("SentencepieceTokenizeOp", got["unknown_op_types"])  # the check sees TF-Text ops
        ids_types = self.op_types["translate_ids"]
        self.assertTrue(ids_types & {"While", "StatelessWhile"})  # the nested search functions were inspected
        self.assertEqual(ids_types & set(got["unknown_op_types"]), set())
        self.assertEqual(got["ids_signatures"], ["serving_default", "translate_ids"])
        expected = call_translate(self.signatures["translate_ids"], {"source_ids": self.source_ids}, beam_size=1)
        self.assertAllEqual(got["ids_tokens"], expected["tokens"][:, 0])

    def test_the_export_records_the_weights_it_holds(self):
        record = json.loads((self.export_dir / "assets.extra" / "weights.json").read_text("utf-8"))
        self.assertEqual(record["source"], "latest")  # the run was not averaged
        self.assertEqual(record["steps"], [TRAIN_STEPS])
        self.assertTrue(record["checkpoint"].endswith(f"ckpt-{TRAIN_STEPS}"), record)
        self.assertEqual(record["run"], str(self.run_dir))
        # quantization="auto", the command's default, keeps a model this small in float32 and says why
        self.assertEqual(record["quantization"], "float32")
        self.assertIn("under the 5,000,000", record["quantization_reason"])
        self.assertEqual(record["precision"], "float32")  # what `switches.kernels` reads before TensorFlow loads
        self.assertEqual(export_arithmetic(self.export_dir), "float32")
        # and how its searches run, which `switches.threads` reads before TensorFlow loads
        shards = int(self.translator.saved_model.decoding_shards.numpy())
        self.assertEqual(record["search"], {"shards": shards, "graph_mode_only": True,
                                            "hidden_dim": self.model.hidden_dim})
        reader = tf.train.load_checkpoint(str(self.export_dir / "variables" / "variables"))
        self.assertNotIn(tf.int8, set(reader.get_variable_to_dtype_map().values()))

    def test_an_export_without_constraints_refuses_them_naming_what_it_takes(self):
        from t2t_keras.errors import T2TError

        with self.assertRaisesRegex(T2TError, r"constraints \(--terminology\) does not apply to .*, a translation "
                                              r"SavedModel, which takes alignment_heads"):
            self.translator.request(constraints=[["Katze"]])

    def test_saved_model_cli_lists_the_signatures(self):
        shown = self.cli.output()
        for name in ("serving_default", "translate", "translate_ids"):
            self.assertIn(f"signature_def['{name}']", shown)
        for tensor in ("inputs", "source_ids", "beam_size", "alpha", "max_extra_length", "num_return",
                       "translations", "scores", "truncated", "tokens"):
            self.assertIn(f"['{tensor}'] tensor_info", shown)

    def test_nbest_lists_come_best_first_and_start_with_the_best_translation(self):
        inputs = {"inputs": tf.constant(SENTENCES[:4])}
        nbest = call_translate(self.signatures["translate"], inputs, num_return=3)
        best = self.signatures["serving_default"](**inputs)
        self.assertEqual(nbest["translations"].shape, (4, 3))
        self.assertAllEqual(nbest["translations"][:, 0], best["translations"])
        self.assertAllClose(nbest["scores"][:, 0], best["scores"])
        self.assertTrue(np.all(np.diff(nbest["scores"].numpy(), axis=1) <= 0))
        two = call_translate(self.signatures["translate"], inputs, beam_size=3, num_return=2)
        self.assertAllEqual(two["translations"], nbest["translations"][:, :2])

    def test_max_extra_length_is_an_input(self):
        source = self.tokenizer.tokenize(tf.constant(SENTENCES[:4])).to_tensor()
        lengths = np.count_nonzero(source.numpy(), axis=1) + 1  # EOS included
        for extra in (0, 2):
            tokens = call_translate(self.signatures["translate_ids"], {"source_ids": source},
                                    max_extra_length=extra)["tokens"].numpy()
            self.assertTrue(np.all(np.count_nonzero(tokens[:, 0], axis=1) <= lengths + extra))

    def test_parameters_out_of_range_fail_with_a_message_naming_them(self):
        inputs = {"inputs": tf.constant(["the cat"])}
        for params, message in ((dict(beam_size=0), "beam_size must be in \\[1, 3\\]"),
                                (dict(beam_size=4), "beam_size must be in \\[1, 3\\]"),
                                (dict(beam_size=2, num_return=3), "num_return must be in \\[1, beam_size\\]"),
                                (dict(alpha=-1.0), "alpha must be >= 0"),
                                (dict(max_extra_length=-1), "max_extra_length must be >= 0")):
            with self.assertRaisesRegex(tf.errors.InvalidArgumentError, message):
                call_translate(self.signatures["translate"], inputs, **params)

    def test_empty_batch_and_empty_strings(self):
        empty = self.signatures["serving_default"](inputs=tf.constant([], tf.string))
        self.assertEqual(empty["translations"].shape, (0,))
        out = self.signatures["serving_default"](inputs=tf.constant(["", " "]))
        self.assertAllEqual(out["translations"], [b"", b""])
        self.assertAllEqual(out["scores"], [0.0, 0.0])

    def test_client_wrapper_checks_parameters_and_matches_the_signature(self):
        got = predicted(self.translator, SENTENCES[:2], beam_size=2, num_return=2)
        expected = call_translate(self.signatures["translate"], {"inputs": tf.constant(SENTENCES[:2])},
                                  beam_size=2, num_return=2)
        self.assertEqual(got["translations"], expected["translations"].numpy().astype(str).tolist())
        self.assertEqual(best_texts(self.translator, []), [])
        with self.assertRaisesRegex(ValueError, "beam_size must be an integer in \\[1, 3\\]"):
            self.translator.request(beam_size=8)
        with self.assertRaisesRegex(ValueError, "lines\\[1\\] is a int"):
            best_texts(self.translator, ["a", 1])

    @long_check
    def test_the_stopping_rule_comes_from_the_run_and_is_fixed_in_the_export(self):
        self.assertEqual(self.translator.saved_model.stopping.numpy(), b"beam")  # the run's decoding.stopping
        self.assertEqual(open_artifact(self.run_dir).defaults.stopping, "beam")
        out = pathlib.Path(self.tmp.name) / "exact"
        exact = SavedModelArtifact(export_translator(self.model, self.tokenizer, out, max_beam_size=BEAM_SIZE,
                                                     request=GenerationRequest(beam_size=BEAM_SIZE, stopping="exact")))
        self.assertEqual(exact.saved_model.stopping.numpy(), b"exact")
        self.assertEqual(exact.defaults.stopping, "exact")
        for export, stopping in ((exact, "exact"), (self.translator, "beam")):
            request = GenerationRequest(beam_size=BEAM_SIZE, stopping=stopping)
            expected = best_texts(self.generator, SENTENCES[:6], request)
            self.assertEqual(best_texts(export, SENTENCES[:6]), expected, msg=stopping)


@long_check
class SmallExportTest(TestCase):
    """Exports of a random tiny model: atomic writes, and an XLA-compiled export."""

    @classmethod
    def setUpClass(cls):
        from t2t_keras.data.tokenizer import train_sentencepiece
        from tests.helpers import tiny_transformer

        cls.tmp = tempfile.TemporaryDirectory()
        root = pathlib.Path(cls.tmp.name)
        text = [s for pair in toy_pairs(200) for s in pair]
        cls.tokenizer = train_sentencepiece(text, root / "vocab.model", vocab_size=100)
        cls.model = tiny_transformer(vocab_size=100, max_length=32)
        cls._plain = None

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def plain_export(self):
        """A graph-mode text export (beam sizes 1 and 2, default 2, max_extra_length 5), made once for the class:
        what the XLA-compiled exports are compared with."""
        cls = type(self)
        if cls._plain is None:
            cls._plain = SavedModelArtifact(export_translator(cls.model, cls.tokenizer,
                                                              pathlib.Path(cls.tmp.name) / "plain", **PLAIN_OPTIONS))
        return cls._plain

    def export(self, out_dir, max_extra_length=50, **options):
        return export_translator(self.model, self.tokenizer, out_dir, max_beam_size=1, text_signatures=False,
                                 request=GenerationRequest(beam_size=1, max_extra_length=max_extra_length), **options)

    def failing_save(self):
        real_save = tf.saved_model.save

        def save(obj, directory, **kwargs):
            real_save(obj, directory, **kwargs)  # the files are written, then the export fails
            raise OSError("No space left on device")

        return mock.patch.object(tf.saved_model, "save", side_effect=save)

    def test_failure_mid_export_leaves_nothing(self):
        parent = pathlib.Path(self.tmp.name) / "failed"
        with self.failing_save(), self.assertRaisesRegex(DiskFullError, "No space left"):
            self.export(parent / "export")
        self.assertEqual(list(parent.iterdir()), [])

    def test_existing_export_is_kept_unless_replaced_completely(self):
        parent = pathlib.Path(self.tmp.name) / "replace"
        out_dir = self.export(parent / "export")
        before = (out_dir / "saved_model.pb").read_bytes()
        with self.assertRaisesRegex(FileExistsError, "pass overwrite=True"):
            self.export(out_dir)
        with self.failing_save(), self.assertRaises(DiskFullError):
            self.export(out_dir, overwrite=True, max_extra_length=7)
        self.assertEqual((out_dir / "saved_model.pb").read_bytes(), before)
        self.export(out_dir, overwrite=True, max_extra_length=7)
        self.assertEqual(sorted(p.name for p in parent.iterdir()), ["export"])
        saved = tf.train.load_variable(str(out_dir / "variables" / "variables"),
                                       "default_max_extra_length/.ATTRIBUTES/VARIABLE_VALUE")
        self.assertEqual(saved, 7)  # the new export

    def test_one_beam_search_serves_every_beam_size_unless_xla_needs_one_per_size(self):
        from t2t_keras.decoding import beam_search
        from t2t_keras.export.translator_module import TranslatorModule, prepare_source

        params = GenerationRequest(beam_size=2, max_extra_length=5)
        searches = {}
        for jit_compile in (True, False):
            module = TranslatorModule(self.model, None, max_beam_size=3, request=params, jit_compile=jit_compile)
            module.signatures()  # traces what the export saves
            searches[jit_compile] = module.traced_searches()
        self.assertEqual(searches[False], [(1, 1, False), (None, None, False)])  # greedy, beam search of any size
        self.assertEqual(searches[True], [(1, 1, True), (2, 1, True), (2, 2, True), (3, 1, True), (3, 3, True)])
        # `module`, the default (graph-mode) one, already traced: its calls below reuse the traced signatures
        ids = tf.constant([[5, 6, 7, 8, 0], [9, 10, 0, 0, 0]])
        source = prepare_source(ids, self.model.max_length, self.model.vocab_size)[0]
        for beam_size, num_return in ((2, 1), (3, 3), (3, 2)):
            got = module.functions.translate_ids(ids, beam_size, 0.6, 5, num_return)
            expected = beam_search(self.model, source, beam_size=beam_size, alpha=0.6, max_extra_length=5,
                                   num_return=num_return)
            self.assertAllEqual(got["tokens"], expected["tokens"], msg=(beam_size, num_return))
            self.assertAllClose(got["scores"], expected["scores"], atol=1e-5, msg=(beam_size, num_return))

    def test_auto_searches_small_batches_with_xla_and_the_rest_in_graph_mode(self):
        """`jit_compile="auto"`: below 128 hypotheses (rows padded to a power of two x beam size) greedy and the
        default beam size for the best translation run XLA searches; other sizes, n-best lists and larger batches
        the graph-mode ones. Both give the plain search's tokens."""
        from t2t_keras.decoding import beam_search
        from t2t_keras.decoding.greedy import greedy_decode
        from t2t_keras.export.translator_module import TranslatorModule, prepare_source

        module = TranslatorModule(self.model, None, max_beam_size=3, request=GenerationRequest(beam_size=2,
                                                                                           max_extra_length=5),
                                  jit_compile="auto")
        module.signatures()
        self.assertEqual(module.traced_searches(), [(1, 1, False), (1, 1, True), (2, 1, True), (None, None, False)])
        self.assertEqual(int(module.xla_below_hypotheses.numpy()), 128)
        chosen = {case: bool(module._small_batch(*case)) for case in
                  [(1, 2, 1), (32, 2, 1), (33, 2, 1), (3, 2, 2), (3, 3, 1), (64, 1, 1), (65, 1, 1), (0, 1, 1)]}
        self.assertEqual(chosen, {(1, 2, 1): True, (32, 2, 1): True, (33, 2, 1): False, (3, 2, 2): False,
                                  (3, 3, 1): False, (64, 1, 1): True, (65, 1, 1): False, (0, 1, 1): False})
        rows = [[5, 6, 7, 8, 0], [9, 10, 0, 0, 0], [11, 12, 13, 0, 0]]
        for ids in (tf.constant(rows), tf.constant(rows * 22)):  # 3 rows (padded to 4 for XLA), 66 (graph)
            source = prepare_source(ids, self.model.max_length, self.model.vocab_size)[0]
            for beam_size, num_return in ((1, 1), (2, 1), (2, 2), (3, 1)):
                got = module.functions.translate_ids(ids, beam_size, 0.6, 5, num_return)
                if beam_size == 1:
                    greedy = greedy_decode(self.model, source, max_extra_length=5)
                    expected = {"tokens": greedy["tokens"][:, None], "scores": greedy["scores"][:, None]}
                else:
                    expected = beam_search(self.model, source, beam_size=beam_size, alpha=0.6, max_extra_length=5,
                                           num_return=num_return)
                case = (int(ids.shape[0]), beam_size, num_return)
                self.assertAllEqual(got["tokens"], expected["tokens"], msg=case)
                self.assertAllClose(got["scores"], expected["scores"], atol=1e-4, msg=case)

    def test_auto_export_keeps_xla_for_float32_weights_and_translates_like_the_plain_one(self):
        root = pathlib.Path(self.tmp.name) / "auto-export"
        plain = self.plain_export()
        auto = SavedModelArtifact(export_translator(self.model, self.tokenizer, root / "auto", jit_compile="auto",
                                                      **PLAIN_OPTIONS))
        self.assertEqual(int(auto.saved_model.xla_below_hypotheses.numpy()), 128)
        self.assertFalse(auto.jit_compiled)  # not XLA everywhere: the client does not pad the rows
        for sentences in (SENTENCES[:1], SENTENCES[:3], SENTENCES):  # XLA at 1 and 3 rows; "" and blanks too
            expected, got = predicted(plain, sentences), predicted(auto, sentences)
            self.assertEqual(got["translations"], expected["translations"])
            self.assertAllClose(got["scores"], expected["scores"], atol=1e-3)
        # ids signatures only: the choice of XLA does not depend on the text signatures
        bfloat16 = export_translator(self.model, self.tokenizer, root / "bf16", jit_compile="auto",
                                     precision="bfloat16", text_signatures=False, **PLAIN_OPTIONS)
        self.assertEqual(int(tf.saved_model.load(str(bfloat16)).xla_below_hypotheses.numpy()), 0)  # graph mode

    def test_xla_compiled_export_translates_like_the_plain_one(self):
        root = pathlib.Path(self.tmp.name)
        options = dict(max_beam_size=1, request=GenerationRequest(beam_size=1, max_extra_length=5))
        compiled = SavedModelArtifact(export_translator(self.model, self.tokenizer, root / "xla", jit_compile=True,
                                                          **options))
        self.assertTrue(compiled.jit_compiled)
        sentences = SENTENCES[:3]  # padded to 4 rows for the compiled export
        expected, got = predicted(self.plain_export(), sentences, beam_size=1), predicted(compiled, sentences)
        self.assertEqual(got["translations"], expected["translations"])
        self.assertAllClose(got["scores"], expected["scores"], atol=1e-3)


if __name__ == "__main__":
    tf.test.main()
