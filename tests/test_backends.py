"""The model on JAX and PyTorch: the same `.keras` file, the same logits, tokens and training as on TensorFlow.

Keras picks its backend once per process, so each backend runs in a child (`python -m tests.backend_child`), both
at once, on the files this TensorFlow process writes: a tiny Transformer and language models as `.keras` files,
initial weights, sources and training batches. The same functions of `tests.backend_child` run here on TensorFlow
for the reference numbers; the TensorFlow searches (`greedy_decode`, `beam_search`) give the reference tokens.
"""

import configparser
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.backends import BACKEND_PACKAGES, check_backend_installed
from t2t_keras.decoding import beam_search, greedy_decode
from t2t_keras.errors import BackendError
from t2t_keras.language_models import CausalLanguageModel, MaskedLanguageModel
from t2t_keras.model import Transformer
from t2t_keras.special_ids import EOS_ID
from tests import backend_child
from tests.helpers import TINY, TestCase, long_check

REPO = pathlib.Path(__file__).resolve().parents[1]
CHILD_BACKENDS = ("jax", "torch")
SPEC = {
    "transformer": TINY,
    "max_extra_length": 5,
    "warmup_steps": 10,
    "train_batch_size": 4,
    "schedule": {"hidden_dim": 16, "warmup_steps": 10, "scale": 2.0},
    "schedule_steps": [0, 4, 9, 99],
}
TRAIN_STEPS = 4
# float32 on three backends whose kernels add in different orders (about 1e-7 relative per op), with Adam, which
# divides each gradient by its own root mean square and so turns the rounding of small components into weight
# changes that later steps compound. Measured over these 4 steps: at most 4e-7 relative (torch), 1.2e-7 (JAX). The
# losses move by 0.1 to 0.4 between steps, so a wrong gradient, loss or schedule shows far above 1e-5.
LOSS_RTOL = 1e-5


def sources():
    """4 sentences of different lengths, padded, each ending with EOS."""
    source = np.random.default_rng(1).integers(4, TINY["vocab_size"], size=(4, 7)).astype("int32")
    source[:, -1] = EOS_ID
    source[1, 3:] = [EOS_ID, 0, 0, 0]
    source[2, 1:] = [EOS_ID, 0, 0, 0, 0, 0]
    return source


def decoding_model():
    """A tiny untied model whose EOS is likelier (its output column moved towards the decoder's mean output), so
    that hypotheses end at different lengths, by EOS and by the length limit."""
    keras.utils.set_random_seed(0)
    model = Transformer(**TINY, dropout=0.0, tie_embeddings="none")
    model.build()
    source = sources()
    embedded = model.target_position(model.target_embedding(source))  # a target as long as the source will do
    hidden = model.decoder(embedded, model.encode(source), model.source_mask(source)).output.numpy()
    direction = hidden.reshape(-1, TINY["hidden_dim"]).mean(axis=0)
    kernel = model.output_projection.kernel.numpy()
    kernel[:, EOS_ID] += 0.45 * direction / np.linalg.norm(direction)
    model.output_projection.kernel.assign(kernel)
    return model


def training_arrays(rng):
    """`TRAIN_STEPS` batches of 4 sentence pairs with padding, as three arrays."""
    rows = TRAIN_STEPS * SPEC["train_batch_size"]
    source = rng.integers(4, TINY["vocab_size"], size=(rows, 7)).astype("int32")
    target = rng.integers(4, TINY["vocab_size"], size=(rows, 7)).astype("int32")
    source[::3, 4:], target[::2, 5:] = 0, 0
    return {"train_source": source, "train_target_in": target[:, :-1], "train_target_out": target[:, 1:]}


def write_inputs(work):
    """The files the children read: models, initial weights, inputs and the spec."""
    decoding_model().save(work / "transformer.keras")
    keras.utils.set_random_seed(2)
    lm_arguments = dict(TINY, dropout=0.0)
    for name, cls in (("causal_lm", CausalLanguageModel), ("masked_lm", MaskedLanguageModel)):
        lm = cls(**lm_arguments)
        lm.build()
        lm.save(work / f"{name}.keras")
    initial = Transformer(**TINY, dropout=0.0)
    initial.build()
    initial.save_weights(work / "initial.weights.h5")
    rng = np.random.default_rng(3)
    lm_tokens = rng.integers(4, TINY["vocab_size"], size=(2, 6)).astype("int32")
    lm_tokens[1, 4:] = 0
    labels = rng.integers(4, TINY["vocab_size"], size=(3, 5)).astype("int32")
    labels[0, 3:] = 0
    np.savez(work / "arrays.npz", source=sources(), target_in=np.array([[2, 8, 9, 4]] * 4, "int32"),
             lm_tokens=lm_tokens, loss_labels=labels,
             loss_logits=rng.normal(size=(3, 5, TINY["vocab_size"])).astype("float32"),
             **training_arrays(rng))
    (work / "spec.json").write_text(json.dumps(SPEC))


def start_child(backend, work):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("KERAS_BACKEND", None)
    return subprocess.Popen([sys.executable, "-m", "tests.backend_child", "--backend", backend, str(work)], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_child(process, backend, work):
    _, stderr = process.communicate(timeout=300)
    if process.returncode != 0:
        raise AssertionError(f"the {backend} child failed:\n{stderr[-4000:]}")
    return json.loads((work / f"{backend}.json").read_text())


@long_check
class BackendsTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.work = pathlib.Path(cls.tmp.name)
        write_inputs(cls.work)
        children = {backend: start_child(backend, cls.work) for backend in CHILD_BACKENDS}
        arrays = dict(np.load(cls.work / "arrays.npz"))
        cls.model = keras.saving.load_model(cls.work / "transformer.keras")
        cls.reference = backend_child.model_outputs(cls.model, cls.work, arrays, SPEC)  # the children's code on TF
        cls.reference["training_losses"] = backend_child.training_losses(cls.work, arrays, SPEC)
        extra = SPEC["max_extra_length"]
        cls.tf_greedy = greedy_decode(cls.model, arrays["source"], max_extra_length=extra)
        cls.tf_beam = beam_search(cls.model, arrays["source"], beam_size=4, alpha=0.6, max_extra_length=extra,
                                  num_return=2)
        cls.results = {backend: finish_child(process, backend, cls.work) for backend, process in children.items()}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_children_ran_on_their_backends_without_tensorflow(self):
        for backend, results in self.results.items():
            self.assertEqual(results["backend"], backend)
            self.assertEqual(results["tensorflow_imported"],
                             {"after_import": False, "after_model_and_searches": False, "after_fit": False}, backend)

    def test_same_logits_from_the_same_keras_file(self):
        for backend, results in self.results.items():
            for name in ("logits", "causal_lm_logits", "masked_lm_logits"):
                self.assertAllClose(results[name], self.reference[name], atol=1e-5, rtol=0, msg=f"{backend} {name}")

    def test_keras_files_saved_on_jax_and_torch_load_on_tensorflow(self):
        arrays = np.load(self.work / "arrays.npz")
        inputs = (arrays["source"], arrays["target_in"])
        for backend in CHILD_BACKENDS:
            loaded = keras.saving.load_model(self.work / f"{backend}.keras")
            self.assertAllClose(loaded(inputs), self.reference["logits"], atol=1e-5, rtol=0, msg=backend)

    def test_tensorflow_searches_end_by_eos_and_by_the_length_limit(self):
        """A precondition of the token comparisons: they cover both ways a hypothesis ends."""
        limits = np.count_nonzero(sources(), axis=1) + SPEC["max_extra_length"]
        for tokens in (self.tf_greedy["tokens"].numpy(), self.tf_beam["tokens"].numpy()[:, 0]):
            lengths = np.count_nonzero(tokens, axis=-1)
            self.assertTrue(np.any(lengths < limits) and np.any(lengths == limits), lengths)

    def test_the_children_searches_on_tensorflow_equal_the_eager_searches(self):
        self.assertAllEqual(self.reference["greedy_tokens"], self.tf_greedy["tokens"])
        self.assertAllClose(self.reference["greedy_scores"], self.tf_greedy["scores"], atol=1e-5)
        self.assertAllEqual(self.reference["beam_tokens"], self.tf_beam["tokens"])
        self.assertAllClose(self.reference["beam_scores"], self.tf_beam["scores"], atol=1e-5)

    def test_one_search_in_its_three_loops_for_every_length_penalty(self):
        """The fixed-shape loop (eager here), the same compiled with XLA, and graph mode's growing cache that
        drops done sentences give the same tokens."""
        for kind, alpha, num_return in (("gnmt", 1.0, 4), ("average", 0.6, 3), ("none", 0.6, 1)):
            options = dict(beam_size=4, alpha=alpha, length_penalty=kind, max_extra_length=3, num_return=num_return)
            fixed = beam_search(self.model, sources(), **options)
            compiled = tf.function(lambda s: beam_search(self.model, s, **options), jit_compile=True)(sources())
            growing = tf.function(lambda s: beam_search(self.model, s, growing_cache=True, **options))(sources())
            for other in (compiled, growing):
                self.assertAllEqual(other["tokens"], fixed["tokens"], msg=kind)
                self.assertAllClose(other["log_probs"], fixed["log_probs"], atol=1e-5, msg=kind)
        options = dict(max_length=6, min_length=3)
        fixed = greedy_decode(self.model, sources(), **options)["tokens"]
        growing = tf.function(lambda s: greedy_decode(self.model, s, growing_cache=True, **options))(sources())
        self.assertAllEqual(growing["tokens"], fixed)

    def test_same_greedy_and_beam_tokens_on_every_backend(self):
        for backend, results in self.results.items():
            self.assertAllEqual(results["greedy_tokens"], self.tf_greedy["tokens"], msg=backend)
            self.assertAllEqual(results["beam_tokens"], self.tf_beam["tokens"], msg=backend)
            self.assertAllClose(results["beam_scores"], self.tf_beam["scores"], atol=1e-5, msg=backend)

    def test_same_loss_and_schedule_on_every_backend(self):
        arrays = np.load(self.work / "arrays.npz")
        labels, logits = arrays["loss_labels"], arrays["loss_logits"].astype(np.float64)
        # numpy: -(1-ε-ε/(V-1))·log p(gold) - ε/(V-1)·Σ_k log p(k), averaged over the non-padding tokens
        log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        off = 0.1 / (TINY["vocab_size"] - 1)
        gold = np.take_along_axis(log_p, labels[..., None], axis=-1)[..., 0]
        per_token = -(1 - 0.1 - off) * gold - off * log_p.sum(-1)
        expected = (per_token * (labels != 0)).sum() / (labels != 0).sum()
        step_num = np.array(SPEC["schedule_steps"]) + 1.0
        schedule = 2.0 * 16**-0.5 * np.minimum(step_num**-0.5, step_num * 10**-1.5)  # eq. (3), scale 2
        for backend, results in {"tensorflow": self.reference, **self.results}.items():
            self.assertAllClose(results["loss"], expected, rtol=1e-6, msg=backend)
            self.assertAllClose(results["schedule"], schedule, rtol=1e-6, msg=backend)

    def test_fit_gives_the_same_losses_on_every_backend(self):
        reference = self.reference["training_losses"]
        self.assertLen(reference, TRAIN_STEPS)
        self.assertLess(reference[-1], reference[0] - 0.05)  # the steps train: the comparison is not of constants
        for backend, results in self.results.items():
            self.assertAllClose(results["training_losses"], reference, rtol=LOSS_RTOL, atol=0, msg=backend)

    def test_the_tensorflow_only_translator_is_refused_with_the_alternative_on_other_backends(self):
        for backend, results in self.results.items():
            self.assertIn("BackendError", results["refusal"])
            self.assertIn("TensorFlow backend", results["refusal"])
            self.assertIn("greedy_decode / beam_search", results["refusal"])


class MissingBackendTest(TestCase):
    def test_a_missing_backend_is_named_with_its_install_command(self):
        with self.assertRaises(BackendError) as caught:
            check_backend_installed("jax", installed=lambda module: module != "jaxlib")
        self.assertIn("KERAS_BACKEND=jax needs jaxlib, which is not installed", str(caught.exception))
        self.assertIn("pip install jax==", str(caught.exception))
        check_backend_installed("torch", installed=lambda module: True)
        check_backend_installed("numpy", installed=lambda module: False)  # left to Keras

    def test_importing_the_package_with_a_missing_backend_says_what_to_install(self):
        env = dict(os.environ, KERAS_BACKEND="torch")
        code = "import sys; sys.modules['torch'] = None; import t2t_keras"  # as if torch were not installed
        completed = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                                   timeout=60)
        self.assertNotEqual(completed.returncode, 0)
        self.assertIn("BackendError: KERAS_BACKEND=torch needs torch, which is not installed", completed.stderr)
        self.assertIn("pip install torch==", completed.stderr)

    def test_the_commands_refuse_another_backend_with_the_alternative(self):
        import contextlib
        import io
        from unittest import mock

        from t2t_keras import cli

        stderr = io.StringIO()
        with mock.patch.dict(os.environ, {"KERAS_BACKEND": "jax"}), contextlib.redirect_stderr(stderr):
            self.assertEqual(cli.main(["describe", "--config", "tiny"]), 2)
        self.assertIn("t2t-keras describe runs on the TensorFlow backend only", stderr.getvalue())
        self.assertIn("KERAS_BACKEND=tensorflow", stderr.getvalue())

    def test_the_backends_extra_pins_the_packages_named_in_the_errors(self):
        config = configparser.ConfigParser()
        config.read(REPO / "setup.cfg")
        extra = config["options.extras_require"]["backends"].split()
        self.assertEqual(sorted(extra), sorted(BACKEND_PACKAGES["jax"] + BACKEND_PACKAGES["torch"]))
        self.assertIn("tensorflow==2.21.0", config["options"]["install_requires"].split())
        self.assertLessEqual(set(extra), set(config["options.extras_require"]["test"].split()))  # tests/run has them


if __name__ == "__main__":
    import unittest

    unittest.main()
