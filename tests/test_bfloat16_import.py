"""`t2t-keras import --precision bfloat16`: a run of bfloat16 weights, in memory and in its checkpoint.

A T5 v1.1 checkpoint stored in bfloat16 shards, as MADLAD-400's files are (`tests/t5_checkpoints.py`, made with
transformers), imported with `--precision bfloat16`: the run's variables are bfloat16 and hold the checkpoint's
values bit for bit, its checkpoint files are half those of the float32 import, its logits stay as close to
transformers' float32 logits as transformers' own bfloat16 model does (twice its distance at most), and it
decodes from the run and through each export; training it is refused in one line. The float32 import of the same
checkpoint is what it was.
"""

import json
import pathlib
import tempfile

import numpy as np
import tensorflow as tf

from t2t_keras.artifacts import open_artifact
from t2t_keras.config import replace
from t2t_keras.decoding.weight_precision import in_precision, weights_precision
from t2t_keras.errors import ConfigError, T2TError
from t2t_keras.export.saved_model import export_run
from t2t_keras.pretrained.checkpoint import SafetensorsTensors
from t2t_keras.pretrained.importer import import_checkpoint
from t2t_keras.pretrained.t5_weights import t5_assignments
from t2t_keras.resolved_run import resolve_run
from t2t_keras.runs import load_run_model, open_run
from t2t_keras.training.trainer import train
from tests import hf_checkpoints, t5_checkpoints
from tests.helpers import TestCase, cli_in_process, long_check

TOLERANCE = 1e-4  # float32 logits, ours against transformers' (tests/test_t5_import.py)
LINES = [line for line in hf_checkpoints.sentences(12, seed=21) if line] + ["the cat € sees ✓ the dog"]
BFLOAT16 = tf.bfloat16.as_numpy_dtype  # ml_dtypes' bfloat16, as TensorFlow gives it to numpy
_MADE = {}  # "checkpoint", "bfloat16" and "float32" (the runs) -> path
_ROOT = []


def tearDownModule():
    for tmp in _ROOT:
        tmp.cleanup()


def made(name):
    """The bfloat16 checkpoint in shards ("checkpoint") and its runs imported with --precision bfloat16 and
    float32 ("bfloat16", "float32"), made once per process."""
    if not _MADE:
        import torch

        _ROOT.append(tempfile.TemporaryDirectory())
        root = pathlib.Path(_ROOT[0].name)
        checkpoint = t5_checkpoints.t5_checkpoint(root / "checkpoint", "v1.1", dtype=torch.bfloat16, shard_bytes=8000)
        _MADE["checkpoint"] = checkpoint
        for precision in ("bfloat16", "float32"):
            _MADE[precision] = import_checkpoint("t5", checkpoint, root / precision, precision=precision).path
    return _MADE[name]


def checkpoint_bits(checkpoint):
    """`{name: uint16 array}`: the bits of every bfloat16 tensor of the sharded checkpoint, read by safetensors."""
    import torch
    from safetensors.torch import load_file

    shards = set(json.loads((checkpoint / "model.safetensors.index.json").read_text())["weight_map"].values())
    tensors = {}
    for shard in sorted(shards):
        tensors.update(load_file(str(checkpoint / shard)))
    return {name: value.view(torch.int16).numpy().view(np.uint16) for name, value in tensors.items()}


def transformers_logits(checkpoint, source, target_in, dtype):
    import torch

    with torch.no_grad():
        return t5_checkpoints.reference_model(checkpoint, dtype)(
            input_ids=torch.tensor(source), attention_mask=torch.tensor(source != 0),
            decoder_input_ids=torch.tensor(target_in)).logits.float().numpy()


def greedy_texts(artifact):
    return artifact.generate(LINES, artifact.request(beam_size=1)).best


def served_texts(artifact):
    """The greedy translations of `LINES` that `t2t-keras serve` of `artifact` answers."""
    import httpx

    from t2t_keras.serving.server import create_app
    from tests.test_server import TIMEOUT, start_server

    server, thread, base_url = start_server(create_app(artifact, model_name="t5", max_batch_size=64, max_wait_ms=1))
    try:
        answer = httpx.post(f"{base_url}/v1/models/t5:predict", json={"instances": LINES, "params": {"beam_size": 1}},
                            timeout=TIMEOUT)
        assert answer.status_code == 200, answer.text
        return [row["translations"] for row in answer.json()["predictions"]]
    finally:
        server.should_exit = True
        thread.join(TIMEOUT)


def checkpoint_bytes(run):
    """`(data files, weights)`: the bytes of the run's checkpoint files that hold the values, and of the weights
    among them (each floating-point tensor's values, by its shape and dtype)."""
    directory = pathlib.Path(run) / "checkpoints"
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(directory)))
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    weights = sum(int(np.prod(shapes[name])) * dtypes[name].size for name in shapes if dtypes[name].is_floating)
    return sum(path.stat().st_size for path in directory.glob("ckpt-0.data-*")), weights


class BFloat16ImportTest(TestCase):
    def test_the_runs_variables_are_the_checkpoints_bfloat16_values_bit_for_bit(self):
        run, bits = made("bfloat16"), checkpoint_bits(made("checkpoint"))
        config = open_run(run).load_config()
        self.assertEqual((config.model.weights_dtype, config.decoding.precision), ("bfloat16", "bfloat16"))
        stored = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(run / "checkpoints")))
        floating = {name: dtype for name, dtype in stored.get_variable_to_dtype_map().items() if dtype.is_floating}
        self.assertTrue(floating)
        self.assertEqual(set(floating.values()), {tf.bfloat16})
        model = load_run_model(run)
        self.assertEqual({variable.dtype for variable in model.weights}, {"bfloat16"})
        for entry in t5_assignments(model):
            ours = np.asarray(entry.variable.numpy()).view(np.uint16)
            with self.subTest(tensor=entry.name):
                np.testing.assert_array_equal(ours.T if entry.transposed else ours.reshape(bits[entry.name].shape),
                                              bits[entry.name])

    def test_its_checkpoint_is_half_the_float32_imports(self):
        """The weights take half the bytes, and the files as much less: the rest of them (the object graph, the
        save counter: 12 KB at this tiny size) is the same in both."""
        (files, weights), (float32_files, float32_weights) = map(checkpoint_bytes, (made("bfloat16"),
                                                                                    made("float32")))
        self.assertEqual(2 * weights, float32_weights)
        self.assertEqual(float32_files - files, weights)

    def test_its_logits_are_as_close_to_transformers_as_transformers_bfloat16_model(self):
        import torch

        checkpoint, run = made("checkpoint"), made("bfloat16")
        source, target_in = t5_checkpoints.inputs(open_run(run).load_config())
        model = load_run_model(run)
        ours = np.asarray(model((source, target_in)), np.float32)
        widened = np.asarray(in_precision(model, "float32")((source, target_in)))
        exact = transformers_logits(checkpoint, source, target_in, torch.float32)
        their_error = float(np.max(np.abs(transformers_logits(checkpoint, source, target_in, torch.bfloat16) - exact)))
        self.assertLessEqual(float(np.max(np.abs(widened - exact))), TOLERANCE)  # the values are the checkpoint's
        self.assertGreater(float(np.max(np.abs(ours - widened))), 0.0)  # computed in bfloat16 indeed
        self.assertLessEqual(float(np.max(np.abs(ours - exact))), 2 * their_error)

    def test_the_float32_import_is_unchanged(self):
        run, bits = made("float32"), checkpoint_bits(made("checkpoint"))
        config = open_run(run).load_config()
        self.assertEqual((config.model.weights_dtype, config.decoding.precision), ("float32", "float32"))
        model = load_run_model(run)
        self.assertEqual({variable.dtype for variable in model.weights}, {"float32"})
        widened = (bits["shared.weight"].astype(np.uint32) << 16).view(np.float32)
        np.testing.assert_array_equal(model.target_embedding.embeddings.numpy(), widened)

    def test_the_run_decodes_itself_in_bfloat16_and_a_widened_copy_as_generate_in_float32(self):
        import torch

        checkpoint, run = made("checkpoint"), made("bfloat16")
        artifact = open_artifact(run)
        self.assertEqual(weights_precision(artifact.generator.model), "bfloat16")
        self.assertEqual(len(greedy_texts(artifact)), len(LINES))
        tokenizer = t5_checkpoints.reference_tokenizer(checkpoint)
        with torch.no_grad():
            out = t5_checkpoints.reference_model(checkpoint).generate(
                **tokenizer(LINES, return_tensors="pt", padding=True), num_beams=1, do_sample=False).numpy()
        self.assertEqual(greedy_texts(open_artifact(run, precision="float32")),
                         [tokenizer.decode(row[1:], skip_special_tokens=True) for row in out])

    def test_the_cli_translates_and_scores_from_the_run(self):
        run, lines = made("bfloat16"), LINES[:4]
        artifact = open_artifact(run)
        translated = cli_in_process("translate", "--run-dir", run, "--beam-size", "1",
                                    stdin="".join(f"{line}\n" for line in lines).encode())
        self.assertEqual(translated.returncode, 0, translated.stderr)
        self.assertEqual(translated.stdout.decode().splitlines(),
                         artifact.generate(lines, artifact.request(beam_size=1)).best)
        pairs = "".join(f"{line}\t{line}\n" for line in lines).encode()
        scored = cli_in_process("score", "--run-dir", run, "--json", stdin=pairs)
        self.assertEqual(scored.returncode, 0, scored.stderr)
        self.assertEqual(len(scored.stdout.decode().splitlines()), len(lines))

    def test_a_model_in_its_own_precision_is_not_copied(self):
        model = load_run_model(made("bfloat16"))
        self.assertIs(in_precision(model, "bfloat16"), model)
        widened = in_precision(model, "float32")
        self.assertEqual(weights_precision(widened), "float32")
        for ours, theirs in zip(widened.weights, model.weights):
            np.testing.assert_array_equal(ours.numpy(), np.asarray(theirs.numpy(), np.float32))

    def test_safetensors_rows_are_read_as_bfloat16_as_stored_or_rounded_to_nearest_even(self):
        import torch
        from safetensors.torch import save_file

        values = torch.tensor([[1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8], [-2.5, 3.0 + 2**-7 + 2**-9, 1e-3]])
        with tempfile.TemporaryDirectory() as directory:
            path = pathlib.Path(directory) / "model.safetensors"
            save_file({"float32": values, "bfloat16": values.to(torch.bfloat16)}, str(path))
            tensors = SafetensorsTensors([path])
            expected = values.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
            for name in ("float32", "bfloat16"):
                rows = tensors.rows(name, 0, 2, BFLOAT16)
                self.assertEqual(rows.dtype, np.dtype(BFLOAT16))
                np.testing.assert_array_equal(rows.view(np.uint16), expected, err_msg=name)
            np.testing.assert_array_equal(tensors["bfloat16"], values.to(torch.bfloat16).float().numpy())


class BFloat16RefusalTest(TestCase):
    def test_training_it_is_refused_in_one_line_naming_the_fix(self):
        run = made("bfloat16")
        new = run.parent / "fine-tuned"
        refused = cli_in_process("train", "--init-from", run, "--run-dir", new, "--minutes", "0.1")
        self.assertNotEqual(refused.returncode, 0)
        self.assertRegex(refused.stderr.decode(), r"^[^\n]*--init-from [^\n]*bfloat16 weights[^\n]*import the "
                                                  r"checkpoint with --precision float32 to fine-tune\.\n?$")
        self.assertFalse((new / "checkpoints").exists())
        with self.assertRaisesRegex(ConfigError, "--precision float32 to fine-tune"):
            train(resolve_run(run), minutes=0.1)
        self.assertEqual(len(list((run / "checkpoints").glob("ckpt-*.index"))), 1)

    def test_a_bfloat16_saved_model_with_int8_weights_is_refused_naming_the_fix(self):
        out = made("bfloat16").parent / "int8-refused"
        with self.assertRaisesRegex(T2TError, r"exclude each other.*--precision float32"):
            export_run(made("bfloat16"), out, quantization="int8")
        self.assertFalse(out.exists())

    def test_model_weights_dtype_takes_float32_or_bfloat16(self):
        config = open_run(made("float32")).load_config()
        with self.assertRaisesRegex(ConfigError, "model.weights_dtype must be one of.*Received.*float16"):
            replace(config, model={"weights_dtype": "float16"})
        with self.assertRaisesRegex(T2TError, "--precision must be one of float32, bfloat16"):
            import_checkpoint("t5", made("checkpoint"), made("checkpoint").parent / "refused", precision="int8")


@long_check
class BFloat16ExportTest(TestCase):
    """The exports of a run of bfloat16 weights: a SavedModel holds them and translates as the run, and `serve`s
    it; CTranslate2 and LiteRT hold them widened to float32 and translate as the run widened to float32."""

    def test_the_saved_model_holds_bfloat16_weights_and_translates_as_the_run(self):
        from t2t_keras.runs import load_export

        run = made("bfloat16")
        widened = export_run(run, run.parent / "saved-float32", max_beam_size=1, precision="float32")
        self.assertEqual(greedy_texts(open_artifact(widened)), greedy_texts(open_artifact(run, precision="float32")))
        saved = export_run(run, run.parent / "saved", max_beam_size=1)
        record = json.loads((saved / "assets.extra" / "weights.json").read_text())
        self.assertEqual((record["precision"], record["quantization"]), ("bfloat16", "float32"))
        self.assertEqual(weights_precision(load_export(saved)[0]), "bfloat16")
        reader = tf.train.load_checkpoint(str(saved / "variables" / "variables"))
        shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
        matrices = {dtypes[name] for name, shape in shapes.items() if len(shape) == 2}  # kernels, embeddings
        self.assertEqual(matrices, {tf.bfloat16})
        got, want = greedy_texts(open_artifact(saved)), greedy_texts(open_artifact(run))
        # The same bfloat16 weights and search; a batch padded otherwise can flip one of random weights' many
        # near-ties in bfloat16 (tests/test_weight_precision.py): 11 of 13 lines agree here
        self.assertGreaterEqual(np.mean([a == b for a, b in zip(got, want)]), 0.75, list(zip(got, want)))
        self.assertEqual(served_texts(open_artifact(saved)), got)

    def test_ctranslate2_and_litert_translate_as_the_run_widened_to_float32(self):
        from t2t_keras.export.ctranslate2_export import export_ctranslate2_run
        from t2t_keras.export.litert_export import export_litert_run

        run = made("bfloat16")
        expected = greedy_texts(open_artifact(run, precision="float32"))
        for path in (export_ctranslate2_run(run, run.parent / "ct2"),
                     export_litert_run(run, run.parent / "model.tflite", max_beam_size=1)):
            with self.subTest(export=path.name):
                self.assertEqual(greedy_texts(open_artifact(path)), expected)
