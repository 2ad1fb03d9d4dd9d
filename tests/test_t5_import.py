"""`t2t-keras import --from t5`: T5-family checkpoints made here with transformers (T5 v1.0, v1.1 / mT5, a
MADLAD-400 shape, umT5) become runs that give transformers' logits, token ids, and greedy and beam tokens and texts.

The checkpoints (`tests/t5_checkpoints.py`) are written as the released files are: config.json of transformers 4
(`tie_word_embeddings`, no `scale_decoder_outputs`), `lm_head.weight` apart when untied, MADLAD's stack
embeddings stored beside `shared.weight`, `spiece.model` beside the tokenizer.json transformers 5 writes; umT5
also as transformers 5 saves it (`shared.weight` alone, `tie_word_embeddings: true`).
"""

import json
import pathlib
import tempfile
from unittest import mock

import numpy as np

from t2t_keras.artifacts import open_artifact
from t2t_keras.errors import T2TError
from t2t_keras.export.ctranslate2_export import export_ctranslate2_run
from t2t_keras.export.litert_export import export_litert_run
from t2t_keras.export.saved_model import export_run
from t2t_keras.pretrained import checkpoint as checkpoint_lib
from t2t_keras.pretrained.importer import import_checkpoint
from t2t_keras.runs import load_run_model, open_run
from tests import hf_checkpoints, t5_checkpoints
from tests.helpers import TestCase, cli_in_process, long_check

TOLERANCE = 1e-4  # float32 logits, ours against transformers'
LINES = hf_checkpoints.sentences(12, seed=21) + ["the cat € sees ✓ the dog"]
_MADE = {}  # (kind, model_type) -> (checkpoint, run, transformers' model, transformers' tokenizer)
_ROOT = []


def tearDownModule():
    for tmp in _ROOT:
        tmp.cleanup()


def root_dir():
    """This module's temporary directory, made on first use and removed when the module's tests end."""
    if not _ROOT:
        _ROOT.append(tempfile.TemporaryDirectory())
    return pathlib.Path(_ROOT[0].name)


def made(kind, model_type="t5"):
    """The checkpoint of `kind` and its imported run (MADLAD's with --target-lang de), made once per process."""
    if (kind, model_type) not in _MADE:
        root = root_dir() / f"{kind}-{model_type}"
        checkpoint = t5_checkpoints.t5_checkpoint(root / "checkpoint", kind, model_type=model_type)
        run = import_checkpoint("t5", checkpoint, root / "run", target_lang="de" if kind == "madlad" else None)
        _MADE[kind, model_type] = (checkpoint, run, t5_checkpoints.reference_model(checkpoint),
                                   t5_checkpoints.reference_tokenizer(checkpoint))
    return _MADE[kind, model_type]


def tag(kind):
    return "<2de> " if kind == "madlad" else ""


class T5ImportTest(TestCase):
    def assert_same_logits(self, kind, model_type="t5"):
        import torch

        checkpoint, run, reference, _ = made(kind, model_type)
        config = open_run(run).load_config()
        source, target_in = t5_checkpoints.inputs(config)
        ours = np.asarray(load_run_model(run)((source, target_in)))
        with torch.no_grad():
            theirs = reference(input_ids=torch.tensor(source), attention_mask=torch.tensor(source != 0),
                               decoder_input_ids=torch.tensor(target_in)).logits.numpy()
        self.assertEqual(ours.shape, theirs.shape)
        self.assertLessEqual(float(np.max(np.abs(ours - theirs))), TOLERANCE)

    def test_tied_v1_0_logits_are_transformers(self):
        self.assert_same_logits("v1.0")
        config = open_run(made("v1.0")[1]).load_config()
        self.assertEqual((config.model.tie_embeddings, config.model.scale_decoder_output), ("all", True))

    def test_untied_v1_1_logits_are_transformers(self):
        self.assert_same_logits("v1.1")
        config = open_run(made("v1.1")[1]).load_config()
        self.assertEqual((config.model.tie_embeddings, config.model.scale_decoder_output), ("none", False))
        self.assertEqual((config.model.gated_feed_forward, config.model.activation), (True, "gelu_tanh"))

    def test_mt5_madlad_shape_logits_are_transformers(self):
        self.assert_same_logits("madlad", "mt5")

    def test_umt5_logits_are_transformers_with_a_table_in_every_layer(self):
        """As google/umt5-* hold it (untied, no scale) and as transformers 5 saves it (tied, the output scaled)."""
        for kind, tied in (("v1.1", ("none", False)), ("transformers5", ("all", True))):
            with self.subTest(kind=kind):
                self.assert_same_logits(kind, "umt5")
                run = made(kind, "umt5")[1]
                config = open_run(run).load_config().model
                self.assertTrue(config.relative_bias_per_layer)
                self.assertEqual((config.tie_embeddings, config.scale_decoder_output), tied)
                tables = [w.path for w in load_run_model(run).weights if "relative_bias" in w.path]
                self.assertEqual(len(tables), config.num_layers + config.decoder_layers)

    def test_token_ids_are_transformers_tokenizers(self):
        for kind, model_type in (("v1.1", "t5"), ("madlad", "mt5"), ("v1.1", "umt5")):
            _, run, _, theirs = made(kind, model_type)
            ours = open_run(run).load_tokenizer()
            self.assertEqual(ours.tokenize(LINES).to_list(), [theirs(tag(kind) + line)["input_ids"] for line in LINES])
            self.assertEqual(ours.tokenize_target(LINES).to_list(), [theirs(line)["input_ids"] for line in LINES])

    def test_madlad_decodes_from_id_0_and_refuses_an_unknown_tag(self):
        checkpoint, run, _, _ = made("madlad", "mt5")
        self.assertEqual(open_run(run).load_config().model.special_ids.decoder_start, 0)
        with self.assertRaisesRegex(T2TError, r"--target-lang 'xx'.*<2de>, <2en>, <2fr>"):
            import_checkpoint("t5", checkpoint, root_dir() / "refused", target_lang="xx")
        self.assertFalse((root_dir() / "refused").exists())

    def test_the_cli_imports_and_translates_and_refuses_an_unknown_tag_in_one_line(self):
        checkpoint = made("madlad", "mt5")[0]
        run = root_dir() / "cli-run"
        result = cli_in_process("import", "--from", "t5", checkpoint, "--run-dir", run, "--target-lang", "fr")
        self.assertEqual(result.returncode, 0, result.stderr)
        translated = cli_in_process("translate", "--run-dir", run, stdin="the cat sees the dog\n".encode())
        self.assertEqual(translated.returncode, 0, translated.stderr)
        refused = cli_in_process("import", "--from", "t5", checkpoint, "--run-dir", run.parent / "cli-refused",
                                 "--target-lang", "xx")
        self.assertNotEqual(refused.returncode, 0)
        self.assertRegex(refused.stderr.decode(), r"^[^\n]*--target-lang 'xx'.*<2de>, <2en>, <2fr>[^\n]*\n?$")

    def test_other_model_types_and_umt5s_tables_under_another_type_are_refused(self):
        for source, model_type, pattern in (
                ("t5", "bart", "only Marian .*T5 / mT5 / umT5 / MADLAD-400 are imported"),
                ("umt5", "mt5", r"no place for: \['decoder.block.1.layer.0.SelfAttention.relative_attention_bias")):
            checkpoint = made("v1.1", source)[0]
            copy = root_dir() / f"type-{model_type}"
            copy.mkdir()
            for path in checkpoint.iterdir():
                (copy / path.name).write_bytes(path.read_bytes())
            hf_checkpoints.edit_json(copy / "config.json", model_type=model_type)
            with self.subTest(model_type=model_type), self.assertRaisesRegex(T2TError, pattern):
                import_checkpoint("t5", copy, copy.parent / f"type-{model_type}-run")

    def test_a_stack_embedding_other_than_shared_is_refused(self):
        from safetensors.numpy import load_file, save_file

        checkpoint = made("madlad", "mt5")[0]
        copy = root_dir() / "changed"
        copy.mkdir()
        for path in checkpoint.iterdir():
            (copy / path.name).write_bytes(path.read_bytes())
        tensors = load_file(str(copy / "model.safetensors"))
        tensors["decoder.embed_tokens.weight"] = tensors["decoder.embed_tokens.weight"] + 1.0
        save_file(tensors, str(copy / "model.safetensors"))
        with self.assertRaisesRegex(T2TError, "decoder.embed_tokens.weight differs from shared.weight"):
            import_checkpoint("t5", copy, copy.parent / "changed-run", target_lang="de")

    def test_sharded_safetensors_give_the_same_model(self):
        from safetensors.numpy import load_file, save_file

        checkpoint, run = made("v1.1")[:2]
        copy = root_dir() / "sharded"
        copy.mkdir()
        for path in checkpoint.iterdir():
            if path.name != "model.safetensors":
                (copy / path.name).write_bytes(path.read_bytes())
        tensors = load_file(str(checkpoint / "model.safetensors"))
        names = sorted(tensors)
        shards = {f"model-0000{i + 1}-of-00003.safetensors": names[i::3] for i in range(3)}
        for shard, members in shards.items():
            save_file({name: tensors[name] for name in members}, str(copy / shard), metadata={"format": "pt"})
        index = {"metadata": {}, "weight_map": {name: shard for shard, members in shards.items() for name in members}}
        (copy / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
        # blocks of 64 bytes: every matrix is read and assigned a row (a column when transposed) at a time
        with mock.patch.object(checkpoint_lib, "BLOCK_BYTES", 64):
            sharded = load_run_model(import_checkpoint("t5", copy, copy.parent / "sharded-run"))
        for ours, theirs in zip(sharded.weights, load_run_model(run).weights):
            self.assertAllClose(ours.numpy(), theirs.numpy(), atol=0)

    def test_bfloat16_safetensors_are_read(self):
        import torch
        from safetensors.torch import load_file, save_file

        checkpoint = made("v1.1")[0]
        copy = root_dir() / "bfloat16"
        copy.mkdir()
        for path in checkpoint.iterdir():
            (copy / path.name).write_bytes(path.read_bytes())
        tensors = {name: value.to(torch.bfloat16) for name, value in load_file(str(copy / "model.safetensors")).items()}
        save_file(tensors, str(copy / "model.safetensors"))
        run = import_checkpoint("t5", copy, copy.parent / "bfloat16-run")
        model = load_run_model(run)
        expected = tensors["shared.weight"].float().numpy()
        self.assertAllClose(model.target_embedding.embeddings.numpy(), expected, atol=0)
        result = cli_in_process("import", "--from", "t5", copy, "--run-dir", copy.parent / "bfloat16-kept",
                                "--precision", "bfloat16")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(open_run(copy.parent / "bfloat16-kept").load_config().decoding.precision, "bfloat16")
        self.assertEqual(open_run(run).load_config().decoding.precision, "float32")


    def test_a_sharded_bfloat16_checkpoint_gives_transformers_logits_in_float32_and_in_bfloat16(self):
        """Five bfloat16 shards: float32 logits within TOLERANCE of transformers' float32 model (the weights are
        bfloat16 values, held exactly); with --precision bfloat16 the run's bfloat16 model is no further from
        those float32 logits than twice transformers' own model in bfloat16 is."""
        import torch

        from t2t_keras.decoding.weight_precision import bfloat16_copy, in_precision

        checkpoint = t5_checkpoints.t5_checkpoint(root_dir() / "bfloat16-shards", "v1.1", dtype=torch.bfloat16,
                                                  shard_bytes=8000)
        self.assertGreaterEqual(len(list(checkpoint.glob("model-*-of-*.safetensors"))), 3)
        run = import_checkpoint("t5", checkpoint, root_dir() / "bfloat16-shards-run", precision="bfloat16")
        config = open_run(run).load_config()
        self.assertEqual(config.decoding.precision, "bfloat16")
        source, target_in = t5_checkpoints.inputs(config)
        model = in_precision(load_run_model(run), "float32")  # its bfloat16 weights widened (test_bfloat16_import)
        ours = np.asarray(model((source, target_in)))
        ours_bfloat16 = np.asarray(bfloat16_copy(model)((source, target_in)), np.float32)
        theirs = {}
        for dtype in (torch.float32, torch.bfloat16):
            with torch.no_grad():
                theirs[dtype] = t5_checkpoints.reference_model(checkpoint, dtype)(
                    input_ids=torch.tensor(source), attention_mask=torch.tensor(source != 0),
                    decoder_input_ids=torch.tensor(target_in)).logits.float().numpy()
        exact = theirs[torch.float32]
        self.assertLessEqual(float(np.max(np.abs(ours - exact))), TOLERANCE)
        their_error = float(np.max(np.abs(theirs[torch.bfloat16] - exact)))
        self.assertGreater(float(np.max(np.abs(ours_bfloat16 - ours))), 0.0)  # computed in bfloat16 indeed
        self.assertLessEqual(float(np.max(np.abs(ours_bfloat16 - exact))), 2 * their_error)


class T5DecodingTest(TestCase):
    def assert_decodes_as_generate(self, kind, model_type, num_beams):
        import torch

        _, run, reference, tokenizer = made(kind, model_type)
        artifact = open_artifact(run)
        request = artifact.request(beam_size=num_beams)
        with torch.no_grad():
            inputs = tokenizer([tag(kind) + line for line in LINES], return_tensors="pt", padding=True)
            out = reference.generate(**inputs, num_beams=num_beams, do_sample=False).numpy()
        texts = [tokenizer.decode(row[1:], skip_special_tokens=True) for row in out]
        generated = artifact.generate(LINES, request).best
        # an empty line translates to "" without decoding (decoding.generator); generate() decodes its end id alone
        self.assertEqual([text for text, line in zip(generated, LINES) if line],
                         [text for text, line in zip(texts, LINES) if line])
        self.assertEqual({text for text, line in zip(generated, LINES) if not line}, {""})

    def test_madlad_greedy_and_beam_4_give_generates_texts(self):
        for beams in (1, 4):
            with self.subTest(beams=beams):
                self.assert_decodes_as_generate("madlad", "mt5", beams)

    def test_umt5_greedy_and_beam_4_give_generates_texts(self):
        for beams in (1, 4):
            with self.subTest(beams=beams):
                self.assert_decodes_as_generate("v1.1", "umt5", beams)

    @long_check
    def test_umt5_saved_by_transformers_5_greedy_and_beam_4_give_generates_texts(self):
        for beams in (1, 4):
            with self.subTest(beams=beams):
                self.assert_decodes_as_generate("transformers5", "umt5", beams)

    @long_check
    def test_tied_v1_0_greedy_and_beam_4_give_generates_texts(self):
        for beams in (1, 4):
            with self.subTest(beams=beams):
                self.assert_decodes_as_generate("v1.0", "t5", beams)


def run_texts(artifact, num_beams):
    return artifact.generate(LINES, artifact.request(beam_size=num_beams)).best


def ct2_ids(directory, hypotheses):
    """The ids of CTranslate2 `hypotheses` (token lists) in the model at `directory`: the converters name the ids
    past the tokenizer's apart (ours `madeupwordN`, its umT5 loader `<unused_N>`)."""
    directory = pathlib.Path(directory)
    path = next(path for path in (directory / "target_vocabulary.json", directory / "shared_vocabulary.json")
                if path.exists())
    index = {token: i for i, token in enumerate(json.loads(path.read_text(encoding="utf-8")))}
    return [[index[token] for token in tokens] for tokens in hypotheses]


@long_check
class T5ExportTest(TestCase):
    """The roads of an imported T5 run: each translates as the run (which translates as generate(), above)."""

    def test_the_saved_model_and_serve_translate_as_the_run(self):
        import httpx

        from t2t_keras.serving.server import create_app
        from tests.test_server import TIMEOUT, start_server

        _, run, _, _ = made("madlad", "mt5")
        saved = open_artifact(export_run(run, root_dir() / "madlad-saved", max_beam_size=4))
        for beams in (1, 4):
            self.assertEqual(run_texts(saved, beams), run_texts(open_artifact(run), beams))
        server, thread, base_url = start_server(create_app(saved, model_name="madlad", max_batch_size=64,
                                                           max_wait_ms=1))
        try:
            lines = [line for line in LINES if line]
            answer = httpx.post(f"{base_url}/v1/models/madlad:predict",
                                json={"instances": lines, "params": {"beam_size": 4}}, timeout=TIMEOUT)
            self.assertEqual(answer.status_code, 200, answer.text)
            self.assertEqual([row["translations"] for row in answer.json()["predictions"]],
                             [text for text, line in zip(run_texts(open_artifact(run), 4), LINES) if line])
        finally:
            server.should_exit = True
            thread.join(TIMEOUT)

    def test_the_litert_file_translates_as_the_run_and_madlads_tags_are_refused(self):
        root = root_dir()
        run = made("v1.1")[1]
        litert = open_artifact(export_litert_run(run, root / "v1.1.tflite", max_beam_size=4))
        for beams in (1, 4):
            self.assertEqual(run_texts(litert, beams), run_texts(open_artifact(run), beams))
        with self.assertRaisesRegex(T2TError, "user-defined symbols: export it as a SavedModel"):
            export_litert_run(made("madlad", "mt5")[1], root / "madlad.tflite")

    def test_the_umt5_saved_model_and_litert_file_translate_as_the_run(self):
        root = root_dir()
        run = made("v1.1", "umt5")[1]
        expected = {beams: run_texts(open_artifact(run), beams) for beams in (1, 4)}
        for artifact in (export_run(run, root / "umt5-saved", max_beam_size=4),
                         export_litert_run(run, root / "umt5.tflite", max_beam_size=4)):
            for beams in (1, 4):
                with self.subTest(artifact=pathlib.Path(artifact).name, beams=beams):
                    self.assertEqual(run_texts(open_artifact(artifact), beams), expected[beams])

    def test_ctranslate2_agrees_with_its_own_converter_where_that_reads_the_checkpoint_right(self):
        """Tied (v1.0, a umT5 saved by transformers 5): the same tokens as CTranslate2's TransformersConverter (for
        umT5 its UMT5Loader, a table per layer). Untied (MADLAD, umT5 as released): that converter reads
        transformers 5's `tie_word_embeddings` (always true there) and scales the decoder output, which transformers
        4 and the released config do not; our export translates as the run, whose tokens are generate()'s."""
        import ctranslate2

        root = root_dir()
        for kind, model_type in (("v1.0", "t5"), ("madlad", "mt5"), ("transformers5", "umt5"), ("v1.1", "umt5")):
            checkpoint, run, _, tokenizer = made(kind, model_type)
            ours = export_ctranslate2_run(run, root / f"{kind}-{model_type}-ct2")
            theirs = ctranslate2.converters.TransformersConverter(str(checkpoint)).convert(
                str(root / f"{kind}-{model_type}-ct2-theirs"))
            sources = [tokenizer.convert_ids_to_tokens(tokenizer(tag(kind) + line)["input_ids"])
                       for line in LINES if line]
            translators = [ctranslate2.Translator(str(path), intra_threads=1) for path in (ours, theirs)]
            for beams in (1, 4):
                with self.subTest(kind=kind, model_type=model_type, beams=beams):
                    found = [ct2_ids(path, [result.hypotheses[0] for result in translator.translate_batch(
                        sources, beam_size=beams, max_decoding_length=20)])
                        for path, translator in zip((ours, theirs), translators)]
                    if kind in ("v1.0", "transformers5"):
                        self.assertEqual(found[0], found[1])
                    if beams == 1:  # CTranslate2's beam search ranks by its own length penalty: greedy is the road's
                        self.assertEqual(run_texts(open_artifact(ours), beams), run_texts(open_artifact(run), beams))
