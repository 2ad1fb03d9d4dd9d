"""The run-level commands on a trained toy run: evaluate, translate, export, score, baseline.

Most commands run in this process (`cli_in_process`); the test of undecodable standard input and its exit code
starts `python -m t2t_keras` as a user would."""

import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

import tensorflow as tf

from t2t_keras.data.tokenizer import train_sentencepiece
from t2t_keras.evaluation.paper_bleu import paper_bleu
from t2t_keras.resolved_run import resolve_run
from t2t_keras.runs import RunDirectory, open_run
from t2t_keras.training.trainer import train
from tests.helpers import TestCase, cli_in_process, long_check, toy_config, toy_pairs, write_toy_corpus

REPO = pathlib.Path(__file__).resolve().parents[1]
run_cli = cli_in_process


def run_process(*args, stdin=None):
    """`python -m t2t_keras ARGS` in a new process."""
    return subprocess.run([sys.executable, "-m", "t2t_keras", *args], input=stdin, capture_output=True,
                          timeout=300, cwd=REPO)


@long_check
class RunCommandsTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        files = write_toy_corpus(pathlib.Path(cls.tmp.name) / "data", train=1000)
        cls.run_dir = pathlib.Path(cls.tmp.name) / "run"
        config = toy_config(files, train_steps=200, steps_per_epoch=100, checkpoint_every_steps=100, warmup_steps=100)
        train(resolve_run(cls.run_dir, config), verbose=0)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def exported(self, *options):
        """The run exported by `t2t-keras export ... *options`, once per set of options: the tests that only use
        an export share it, whichever of them runs first exports."""
        out = pathlib.Path(self.tmp.name) / ("export" + "".join(o.replace("-", "") for o in options))
        if not out.exists():
            result = run_cli("export", "--run-dir", str(self.run_dir), "--out", str(out), *options)
            self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        return out

    def saved_model(self):
        return self.exported("--max-beam-size", "2", "--beam-size", "2")

    def ctranslate2_model(self, quantization):
        return self.exported("--format", "ctranslate2", "--quantization", quantization, "--beam-size", "1")

    def test_evaluate_json(self):
        result = run_cli("evaluate", "--run-dir", str(self.run_dir), "--json", "--beam-size", "2")
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        scores = json.loads(result.stdout.decode().strip().splitlines()[-1])
        for key in ("bleu", "chrf", "signature", "sentences", "tokenized_bleu"):
            self.assertIn(key, scores)
        self.assertEqual(scores["sentences"], 40)
        self.assertGreater(scores["chrf"], 20.0)  # learned something of the word mapping

    def test_evaluate_with_the_papers_bleu(self):
        output = pathlib.Path(self.tmp.name) / "paper-bleu.de"
        result = run_cli("evaluate", "--run-dir", str(self.run_dir), "--beam-size", "1", "--bleu", "paper",
                         "--output", str(output))
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        printed = result.stdout.decode()
        references = pathlib.Path(open_run(self.run_dir).load_config().data.test_files[1]).read_text().splitlines()
        expected, _ = paper_bleu(output.read_text().splitlines(), references)
        self.assertIn(f"paper BLEU {expected.score:.2f}", printed)
        self.assertIn(str(expected), printed)  # multi-bleu.perl's line
        self.assertIn("sacreBLEU", printed)
        self.assertNotIn("tokenized BLEU", printed)

    def test_translate_stdin_keeps_lines_and_empty_lines(self):
        result = run_cli("translate", "--run-dir", str(self.run_dir), "--beam-size", "1",
                         stdin="the cat sees a dog\n\nthe man eats bread\n".encode())
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        lines = result.stdout.decode().split("\n")
        self.assertEqual(len(lines), 4)  # three translations and the final newline
        self.assertEqual(lines[1], "")
        self.assertTrue(lines[0] and lines[2])

    def test_translate_rejects_non_utf8(self):
        result = run_process("translate", "--run-dir", str(self.run_dir), stdin=b"good line\nbad \xff line\n")
        self.assertEqual(result.returncode, 2)
        self.assertIn("<stdin>:2 is not valid UTF-8", result.stderr.decode())

    def test_export_then_translate_with_the_saved_model(self):
        export = self.saved_model()
        self.assertTrue((export / "saved_model.pb").exists())
        sentences = b"the cat sees a dog\nthe man eats bread\n"
        from_export = run_cli("translate", "--saved-model", str(export), stdin=sentences)
        from_run = run_cli("translate", "--run-dir", str(self.run_dir), "--beam-size", "2", stdin=sentences)
        self.assertEqual(from_export.returncode, 0, from_export.stderr[-2000:])
        self.assertEqual(from_export.stdout, from_run.stdout)
        inspected = run_cli("inspect", "--saved-model", str(export), "--text", "the cat sees a dog", "--out",
                            str(pathlib.Path(self.tmp.name) / "inspect"))
        self.assertEqual(inspected.returncode, 0, inspected.stderr[-2000:])
        pngs = list((pathlib.Path(self.tmp.name) / "inspect").glob("*_layer_*.png"))
        self.assertEqual(len(pngs), 6)  # 3 kinds x 2 layers
        again = run_cli("export", "--run-dir", str(self.run_dir), "--out", str(export))
        self.assertEqual(again.returncode, 2)  # no silent overwrite
        self.assertIn("exists", again.stderr.decode())

    def test_ctranslate2_export_then_translate(self):
        sentences = b"the cat sees a dog\nthe man eats bread\n\n"
        from_run = run_cli("translate", "--run-dir", str(self.run_dir), "--beam-size", "1", stdin=sentences)
        for quantization in ("float32", "int8"):
            out = self.ctranslate2_model(quantization)
            for name in ("model.bin", "config.json", "shared_vocabulary.json", "tokenizer.model", "t2t_keras.json"):
                self.assertTrue((out / name).exists(), name)
            from_ct2 = run_cli("translate", "--ctranslate2", str(out), stdin=sentences)
            self.assertEqual(from_ct2.returncode, 0, from_ct2.stderr[-2000:])
            if quantization == "float32":  # greedy search, as the run's own
                self.assertEqual(from_ct2.stdout, from_run.stdout)
            self.assertEqual(len(from_ct2.stdout.decode().split("\n")), 4)

    def test_precision_and_shards_set_how_a_run_decodes_and_are_refused_for_exports(self):
        sentences = b"the cat sees a dog\nthe man eats bread\nthe dog eats\nthe man sees a cat\n"
        one_search = run_cli("translate", "--run-dir", str(self.run_dir), "--beam-size", "2", "--shards", "1",
                             stdin=sentences)
        two_shards = run_cli("translate", "--run-dir", str(self.run_dir), "--beam-size", "2", "--shards", "2",
                             stdin=sentences)
        self.assertEqual(two_shards.returncode, 0, two_shards.stderr[-2000:])
        self.assertEqual(two_shards.stdout, one_search.stdout)  # shards change the speed, not the tokens
        self.assertEqual(len(two_shards.stdout.decode().splitlines()), 4)
        rounded = run_cli("translate", "--run-dir", str(self.run_dir), "--beam-size", "1", "--precision", "bfloat16",
                          stdin=sentences)
        self.assertEqual(rounded.returncode, 0, rounded.stderr[-2000:])
        self.assertEqual(len(rounded.stdout.decode().splitlines()), 4)
        for bad in ("0", "two", "-1"):
            refused = run_cli("translate", "--run-dir", str(self.run_dir), "--shards", bad, stdin=sentences)
            self.assertEqual(refused.returncode, 2, bad)
            self.assertIn("shards must be 'auto' or a positive integer", refused.stderr.decode())
        for export in (["--saved-model", str(self.saved_model())],
                       ["--ctranslate2", str(self.ctranslate2_model("float32"))]):
            for option in (["--precision", "bfloat16"], ["--shards", "2"]):
                refused = run_cli("translate", *export, *option, stdin=sentences)
                self.assertEqual(refused.returncode, 2, (export, option))
                self.assertIn(f"{option[0]} does not apply to ", refused.stderr.decode())
                self.assertIn("an export: its search and weights were chosen when it was written",
                              refused.stderr.decode())
                self.assertEqual(refused.stdout, b"")

    def test_quantization_auto_is_a_saved_model_choice(self):
        for export_format, takes in (("ctranslate2", "float32, int8_float32, int8"), ("litert", "float32, int8")):
            out = pathlib.Path(self.tmp.name) / f"auto-{export_format}"
            refused = run_cli("export", "--run-dir", str(self.run_dir), "--out", str(out), "--format", export_format,
                              "--quantization", "auto")
            self.assertEqual(refused.returncode, 2, export_format)
            self.assertIn(f"--quantization auto does not apply to --format {export_format}, which takes {takes}",
                          refused.stderr.decode())
            self.assertFalse(out.exists())

    def test_the_run_configuration_gives_the_default_shards(self):
        from t2t_keras.artifacts import open_artifact
        from t2t_keras.decoding.sharding import choose_shards

        self.assertEqual(open_artifact(self.run_dir).generator.shards, choose_shards("auto"))  # decoding.shards: auto
        self.assertEqual(open_artifact(self.run_dir, shards=3).generator.shards, 3)

    def test_ctranslate2_export_without_tokenizer_is_a_clear_error(self):
        broken = pathlib.Path(self.tmp.name) / "no-tokenizer"
        shutil.copytree(self.run_dir, broken)
        (broken / "tokenizer.model").unlink()
        exports = pathlib.Path(self.tmp.name) / "failed-exports"
        exports.mkdir()
        result = run_cli("export", "--run-dir", str(broken), "--out", str(exports / "ct2"), "--format", "ctranslate2")
        self.assertEqual(result.returncode, 2)
        self.assertIn("tokenizer.model is missing", result.stderr.decode())
        self.assertEqual(list(exports.iterdir()), [])

    def test_ids_only_export(self):
        out = pathlib.Path(self.tmp.name) / "ids-only"
        result = run_cli("export", "--run-dir", str(self.run_dir), "--out", str(out), "--ids-only",
                         "--max-beam-size", "1", "--beam-size", "1")
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        signatures = tf.saved_model.load(str(out)).signatures
        self.assertEqual(sorted(signatures), ["serving_default", "translate_ids"])

    def test_the_export_searches_in_graph_mode_unless_told_otherwise(self):
        """By default (--jit-compile false) every search runs in graph mode; auto runs batches under 128 hypotheses
        with XLA, true every search; a CTranslate2 export refuses the flag."""
        from t2t_keras.artifacts.saved_model import load_saved_model

        def compiled(path):  # and what the export records for `switches.threads`: every search in graph mode?
            loaded = load_saved_model(path)
            record = json.loads((pathlib.Path(path) / "assets.extra" / "weights.json").read_text("utf-8"))
            return (int(loaded.xla_below_hypotheses.numpy()), bool(loaded.jit_compiled.numpy()),
                    record["search"]["graph_mode_only"])

        self.assertEqual(compiled(self.saved_model()), (0, False, True))
        for flag, expected in (("auto", (128, False, False)), ("true", (0, True, False)), ("false", (0, False, True))):
            self.assertEqual(compiled(self.exported("--max-beam-size", "1", "--beam-size", "1", "--jit-compile", flag)),
                             expected, flag)
        out = pathlib.Path(self.tmp.name) / "ct2-jit"
        refused = run_cli("export", "--run-dir", str(self.run_dir), "--out", str(out), "--format", "ctranslate2",
                          "--jit-compile", "true")
        self.assertEqual(refused.returncode, 2)
        self.assertIn("--jit-compile does not apply to --format ctranslate2", refused.stderr.decode())
        self.assertFalse(out.exists())

    def test_score_with_the_run_and_the_saved_model(self):
        root = pathlib.Path(self.tmp.name)
        pairs = toy_pairs(30, seed=11)
        (root / "score.en").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
        (root / "score.de").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
        files = ["--source", str(root / "score.en"), "--target", str(root / "score.de")]
        from_run = run_cli("score", "--run-dir", str(self.run_dir), "--json", "--token-level", *files)
        self.assertEqual(from_run.returncode, 0, from_run.stderr[-2000:])
        records = [json.loads(line) for line in from_run.stdout.decode().splitlines()]
        self.assertEqual(len(records), 30)
        for record in records:
            self.assertAlmostEqual(record["nll"], sum(record["token_nll"]), places=3)
            self.assertEqual(record["tokens"], len(record["token_nll"]))
        from_export = run_cli("score", "--saved-model", str(self.saved_model()), *files)
        self.assertEqual(from_export.returncode, 0, from_export.stderr[-2000:])
        lines = [line.split("\t") for line in from_export.stdout.decode().splitlines()]
        self.assertAllClose([float(f[0]) for f in lines], [r["nll"] for r in records], atol=2e-3)
        from_ct2 = run_cli("score", "--ctranslate2", str(self.ctranslate2_model("float32")), "--json", *files)
        self.assertEqual(from_ct2.returncode, 0, from_ct2.stderr[-2000:])
        self.assertAllClose([json.loads(line)["nll"] for line in from_ct2.stdout.decode().splitlines()],
                            [r["nll"] for r in records], atol=2e-3)
        (root / "short.de").write_text("".join(t + "\n" for _, t in pairs[:-1]), encoding="utf-8")
        mismatched = run_cli("score", "--run-dir", str(self.run_dir), "--source", str(root / "score.en"),
                             "--target", str(root / "short.de"))
        self.assertEqual(mismatched.returncode, 2)
        self.assertIn("has 30 lines but", mismatched.stderr.decode())

    def test_baseline(self):
        result = run_cli("baseline", "--run-dir", str(self.run_dir), "--json")
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertIn("bleu", json.loads(result.stdout.decode().strip().splitlines()[-1]))

    def test_vocabulary_mismatch_is_a_clear_error(self):
        broken = pathlib.Path(self.tmp.name) / "broken"
        shutil.copytree(self.run_dir, broken)
        sentences = [s for pair in toy_pairs(300) for s in pair]
        train_sentencepiece(sentences, broken / "tokenizer.model", 80)
        RunDirectory(broken).checksums_path.unlink()  # a run written before its tokenizer's sha256 was recorded
        result = run_cli("translate", "--run-dir", str(broken), stdin=b"the cat\n")
        self.assertEqual(result.returncode, 2)
        self.assertIn("The tokenizer has 80 pieces but the model expects a vocabulary of 100", result.stderr.decode())


if __name__ == "__main__":
    tf.test.main()
