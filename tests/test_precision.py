"""`training.mixed_precision: auto` and `training.jit_compile: auto`: the hardware's fast path and the fallback.

A worker running this module once died with SIGSEGV, in a whole-suite run on a 2-core AMD EPYC, after other
modules had run in the same worker; the module passed alone and in a fresh worker. It has not happened again: 10
runs of the module alone and 3 in one worker after `tests.test_model` passed on an Intel Xeon with AVX-512 BF16 and
AMX. A segmentation fault comes from native code (TensorFlow's oneDNN or XLA kernels here: the bfloat16 training
steps of `TrainedRunFusionTest`, auto-clustered); one of that kind is TensorFlow's bfloat16 `MatMul` when oneDNN is
held below AVX-512 (`ONEDNN_MAX_CPU_ISA=AVX2`) on a CPU that has it: TensorFlow still hands bfloat16 to oneDNN,
which has no kernel for it, and the process dies at the first product. So that the next crash says where it
happened, the suite's set-up (`tests/setup.sh`) turns on Python's faulthandler: the stack of every thread of the
process that died (which test, which op) comes before the runner's line naming the module, and the runner runs the
module once more in a fresh worker. Alone: `python -X faulthandler -m unittest tests.test_precision`.
"""

import pathlib
import tempfile
from unittest import mock

import numpy as np
import tensorflow as tf

from t2t_keras.config import load_config
from t2t_keras.errors import ConfigError
from t2t_keras.fast_path import (
    FastPath,
    Hardware,
    cpu_flags,
    native_precision,
)
from t2t_keras.switches.clustering import set_auto_clustering, xla_auto_clustering
from t2t_keras.switches.xla import XLA_CPU_FLAGS, prepare_xla_flags
from t2t_keras.training import precision
from t2t_keras.training.precision import choose_fusion, choose_jit, choose_precision
from tests.helpers import TestCase

AVX2_CPU = Hardware(cpu_flags=frozenset({"sse4_2", "avx", "avx2", "fma"}))
AVX512_BF16_CPU = Hardware(cpu_flags=frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}))
ARM_BF16_CPU = Hardware(cpu_flags=frozenset({"fp", "asimd", "sve", "bf16"}))


def on(hardware):
    return FastPath.of(hardware)


class NativePrecisionTest(TestCase):
    def test_bfloat16_where_the_cpu_has_it(self):
        self.assertEqual(native_precision(AVX512_BF16_CPU)[0], "mixed_bfloat16")
        self.assertEqual(native_precision(ARM_BF16_CPU)[0], "mixed_bfloat16")
        self.assertEqual(native_precision(Hardware(cpu_flags=frozenset({"amx_bf16"})))[0], "mixed_bfloat16")

    def test_float32_on_a_cpu_without_bfloat16(self):
        policy, reason = native_precision(AVX2_CPU)
        self.assertEqual(policy, "float32")
        self.assertIn("without bfloat16", reason)
        self.assertEqual(native_precision(Hardware())[0], "float32")

    def test_accelerators(self):
        self.assertEqual(native_precision(Hardware(tpus=8, cpu_flags=AVX2_CPU.cpu_flags))[0], "mixed_bfloat16")
        self.assertEqual(native_precision(Hardware(gpu_capabilities=((8, 0),)))[0], "mixed_bfloat16")
        self.assertEqual(native_precision(Hardware(gpu_capabilities=((7, 0),)))[0], "mixed_float16")
        self.assertEqual(native_precision(Hardware(gpu_capabilities=((6, 1),)))[0], "float32")
        # A GPU's precision wins over the host CPU's; the oldest GPU decides for all replicas.
        mixed = Hardware(gpu_capabilities=((8, 6), (7, 5)), cpu_flags=AVX512_BF16_CPU.cpu_flags)
        self.assertEqual(native_precision(mixed)[0], "mixed_float16")

    def test_explicit_settings_are_kept(self):
        for setting in precision.PRECISIONS:
            self.assertEqual(choose_precision(setting, on(AVX2_CPU)), setting)
            self.assertEqual(choose_precision(setting, on(AVX512_BF16_CPU)), setting)
        self.assertEqual(choose_precision("auto", on(AVX2_CPU)), "float32")
        self.assertEqual(choose_precision("auto", on(AVX512_BF16_CPU)), "mixed_bfloat16")


class JitChoiceTest(TestCase):
    def test_auto_is_xla_except_bfloat16_on_a_cpu(self):
        self.assertTrue(choose_jit("auto", "float32", on(AVX512_BF16_CPU)))
        self.assertFalse(choose_jit("auto", "mixed_bfloat16", on(AVX512_BF16_CPU)))
        self.assertTrue(choose_jit("auto", "mixed_bfloat16", on(Hardware(gpu_capabilities=((9, 0),)))))
        self.assertTrue(choose_jit("auto", "mixed_bfloat16", on(Hardware(tpus=4))))

    def test_explicit_settings_are_kept(self):
        self.assertTrue(choose_jit(True, "mixed_bfloat16", on(AVX512_BF16_CPU)))
        self.assertFalse(choose_jit(False, "float32", on(AVX2_CPU)))


class FusionChoiceTest(TestCase):
    """`training.fuse_elementwise: auto`: XLA-fused elementwise ops around oneDNN matmuls in a bf16 CPU graph step."""

    def test_auto_fuses_only_a_graph_mode_bfloat16_step_on_a_cpu(self):
        self.assertTrue(choose_fusion("auto", "mixed_bfloat16", False, on(AVX512_BF16_CPU)))
        self.assertFalse(choose_fusion("auto", "mixed_bfloat16", True, on(AVX512_BF16_CPU)))  # all XLA already
        self.assertFalse(choose_fusion("auto", "float32", True, on(AVX2_CPU)))  # the fallback: float32 with XLA
        self.assertFalse(choose_fusion("auto", "float32", False, on(AVX2_CPU)))
        self.assertFalse(choose_fusion("auto", "mixed_bfloat16", False, on(Hardware(gpu_capabilities=((9, 0),)))))
        self.assertFalse(choose_fusion("auto", "mixed_bfloat16", False, on(Hardware(tpus=4))))

    def test_explicit_settings_are_kept(self):
        self.assertTrue(choose_fusion(True, "float32", True, on(AVX2_CPU)))
        self.assertFalse(choose_fusion(False, "mixed_bfloat16", False, on(AVX512_BF16_CPU)))

    def test_the_xla_flags_are_added_once_and_the_users_own_values_win(self):
        environ = {}
        prepare_xla_flags(environ)
        self.assertEqual(environ["TF_XLA_FLAGS"].split(), list(XLA_CPU_FLAGS))
        prepare_xla_flags(environ)
        self.assertEqual(environ["TF_XLA_FLAGS"].split(), list(XLA_CPU_FLAGS))
        environ = {"TF_XLA_FLAGS": "--tf_xla_ops_to_cluster=MISC --xla_dump_to=/tmp/x"}
        prepare_xla_flags(environ)
        self.assertEqual(environ["TF_XLA_FLAGS"].split(), ["--tf_xla_ops_to_cluster=MISC", "--xla_dump_to=/tmp/x",
                                                           "--tf_xla_cpu_global_jit",
                                                           "--tf_xla_async_compilation=true"])

    def test_importing_the_package_changes_no_variable_and_a_training_command_restores_what_it_set(self):
        import os
        import subprocess
        import sys

        from t2t_keras.switches import command_switches

        env = {k: v for k, v in os.environ.items() if k not in ("TF_XLA_FLAGS", "TF_ENABLE_ONEDNN_OPTS")}
        code = "import os, t2t_keras.cli; print(sorted(k for k in os.environ if k.startswith('TF_XLA')))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        self.assertEqual(out.stdout.split(), ["[]"])
        environ = {"KEPT": "1"}
        with mock.patch.object(Hardware, "detect", return_value=AVX2_CPU), \
                command_switches("train", {}, environ, modules={}) as chosen:
            self.assertEqual(environ["TF_XLA_FLAGS"].split(), list(XLA_CPU_FLAGS))
            self.assertEqual(list(chosen), ["TF_XLA_FLAGS"])
        self.assertEqual(environ, {"KEPT": "1"})
        with self.assertRaises(KeyError), mock.patch.object(Hardware, "detect", return_value=AVX2_CPU), \
                command_switches("main", {}, environ, modules={}):
            raise KeyError("a command that fails")
        self.assertEqual(environ, {"KEPT": "1"})  # restored on an error too


class FastPathTest(TestCase):
    """The hardware's fast path: one object, detected once per process, used by training and decoding."""

    def test_device_and_bfloat16_from_the_hardware(self):
        self.assertEqual((on(AVX2_CPU).device, on(AVX2_CPU).bfloat16), ("cpu", False))
        self.assertEqual((on(AVX512_BF16_CPU).device, on(AVX512_BF16_CPU).bfloat16), ("cpu", True))
        self.assertEqual(on(Hardware(gpu_capabilities=((7, 5),))).device, "gpu")
        self.assertEqual(on(Hardware(tpus=4, gpu_capabilities=((9, 0),))).device, "tpu")
        self.assertTrue(on(AVX2_CPU).cpu_only)
        self.assertFalse(on(Hardware(tpus=4)).cpu_only)

    def test_detected_once_and_logged_once(self):
        from t2t_keras import fast_path

        fast_path._detected.cache_clear()
        self.addCleanup(fast_path._detected.cache_clear)
        with mock.patch.object(Hardware, "detect", return_value=AVX512_BF16_CPU) as detect, \
                self.assertLogs("t2t_keras.fast_path", "INFO") as logs:
            self.assertIs(FastPath.detect(), FastPath.detect())
        self.assertEqual(detect.call_count, 1)
        self.assertEqual(len(logs.output), 1)
        self.assertIn("mixed_bfloat16 (CPU with amx_bf16, avx512_bf16)", logs.output[0])
        self.assertIn("graph mode with XLA-fused elementwise ops", logs.output[0])

    def test_decoding_compiles_float32_weights_only(self):
        for hardware in (AVX2_CPU, AVX512_BF16_CPU, Hardware(gpu_capabilities=((8, 0),))):
            self.assertTrue(on(hardware).decoding_jit("float32"))
            self.assertFalse(on(hardware).decoding_jit("bfloat16"))

    def test_a_cpu_searches_large_float32_batches_in_graph_mode(self):
        """On a CPU from GRAPH_SEARCH_HYPOTHESES hypotheses (rows x beam) a batch drops its done sentences in graph
        mode; an accelerator keeps XLA's fixed shapes at every size."""
        from t2t_keras.fast_path import GRAPH_SEARCH_HYPOTHESES

        self.assertTrue(on(AVX2_CPU).decoding_jit("float32", GRAPH_SEARCH_HYPOTHESES - 1))
        self.assertFalse(on(AVX2_CPU).decoding_jit("float32", GRAPH_SEARCH_HYPOTHESES))
        self.assertTrue(on(Hardware(gpu_capabilities=((8, 0),))).decoding_jit("float32", 10 * GRAPH_SEARCH_HYPOTHESES))
        self.assertTrue(on(Hardware(tpus=4)).decoding_jit("float32", 10 * GRAPH_SEARCH_HYPOTHESES))


class AutoClusteringSwitchTest(TestCase):
    """`xla_auto_clustering`: process-wide inside the block, the process's setting back after it, also on error."""

    def test_restores_on_exit_and_on_error(self):
        self.assertFalse(tf.config.optimizer.get_jit())
        with xla_auto_clustering(True):
            self.assertEqual(tf.config.optimizer.get_jit(), "autoclustering")
        self.assertFalse(tf.config.optimizer.get_jit())
        with self.assertRaisesRegex(RuntimeError, "inside"):
            with xla_auto_clustering(True):
                raise RuntimeError("inside")
        self.assertFalse(tf.config.optimizer.get_jit())

    def test_as_a_decorator_it_undoes_what_the_function_set(self):
        @xla_auto_clustering()
        def fails_after_setting():
            set_auto_clustering(True)
            raise ValueError("after setting")

        with self.assertRaises(ValueError):
            fails_after_setting()
        self.assertFalse(tf.config.optimizer.get_jit())
        self.addCleanup(set_auto_clustering, False)
        set_auto_clustering(True)
        with xla_auto_clustering(False):
            self.assertFalse(tf.config.optimizer.get_jit())
        self.assertEqual(tf.config.optimizer.get_jit(), "autoclustering")  # an enabled process stays enabled


class CpuFlagsTest(TestCase):
    def test_reads_x86_and_arm_cpuinfo(self):
        with tempfile.TemporaryDirectory() as tmp:
            x86 = pathlib.Path(tmp) / "x86"
            x86.write_text("processor\t: 0\nmodel name\t: Some Xeon\nflags\t\t: fpu avx2 avx512_bf16\n\n"
                           "processor\t: 1\nflags\t\t: fpu avx2 avx512_bf16\n")
            arm = pathlib.Path(tmp) / "arm"
            arm.write_text("processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd bf16 i8mm\n")
            self.assertEqual(cpu_flags(x86), {"fpu", "avx2", "avx512_bf16"})
            self.assertIn("bf16", cpu_flags(arm))
            self.assertEqual(cpu_flags(pathlib.Path(tmp) / "missing"), frozenset())


class ConfigTest(TestCase):
    def test_auto_is_accepted_and_other_words_are_not(self):
        config = load_config("tiny", ["training.mixed_precision=auto", "training.jit_compile=auto"])
        self.assertEqual((config.training.mixed_precision, config.training.jit_compile), ("auto", "auto"))
        with self.assertRaisesRegex(ConfigError, "jit_compile must be true, false or auto"):
            load_config("tiny", ["training.jit_compile=fast"])
        with self.assertRaisesRegex(ConfigError, "mixed_precision"):
            load_config("tiny", ["training.mixed_precision=bfloat16"])


class TrainerChoiceTest(TestCase):
    """The trainer builds and compiles the model with what `auto` chose for the (here simulated) hardware."""

    def compiled(self, hardware):
        from t2t_keras.training.trainer import compile_model

        config = load_config("tiny", ["data.vocab_size=50", "training.mixed_precision=auto",
                                      "training.jit_compile=auto", "training.fuse_elementwise=auto"])
        with mock.patch.object(FastPath, "detect", return_value=on(hardware)):
            model = compile_model(config, tf.distribute.get_strategy())
        self.assertFalse(tf.config.optimizer.get_jit())  # recorded on the model; the process is left as it was
        return model

    def test_bfloat16_cpu_trains_in_bfloat16_graph_mode(self):
        model = self.compiled(AVX512_BF16_CPU)
        self.assertEqual(model.dtype_policy.name, "mixed_bfloat16")
        self.assertFalse(model.jit_compile)
        self.assertTrue(model.fuse_elementwise)  # fused elementwise ops, once `train` turns auto-clustering on
        self.assertEqual(model.trainable_variables[0].dtype, "float32")  # float32 master weights

    def test_fallback_cpu_trains_in_float32_with_xla(self):
        model = self.compiled(AVX2_CPU)
        self.assertEqual(model.dtype_policy.name, "float32")
        self.assertTrue(model.jit_compile)
        self.assertFalse(model.fuse_elementwise)


class TrainedRunFusionTest(TestCase):
    def test_a_fused_run_trains_and_leaves_the_process_setting_as_it_was(self):
        from t2t_keras.resolved_run import resolve_run
        from t2t_keras.runs import RunDirectory
        from t2t_keras.training.trainer import train
        from tests.helpers import toy_config, write_toy_corpus

        with tempfile.TemporaryDirectory() as tmp:
            config = toy_config(write_toy_corpus(f"{tmp}/data", train=120, dev=12, test=12), train_steps=3,
                                mixed_precision="auto", jit_compile="auto", fuse_elementwise="auto")
            with mock.patch.object(FastPath, "detect", return_value=on(AVX512_BF16_CPU)):
                result = train(resolve_run(f"{tmp}/run", config))
            self.assertEqual(result.final_step, 3)
            self.assertEqual(RunDirectory(f"{tmp}/run").read_json(RunDirectory(f"{tmp}/run").precision_path),
                             {"mixed_precision": "mixed_bfloat16", "jit_compile": False, "fuse_elementwise": True})
            self.assertTrue(all(np.isfinite(result.history["loss"])))
        self.assertFalse(tf.config.optimizer.get_jit())  # evaluation and export after training are not clustered


class ResumedRunPrecisionTest(TestCase):
    """`auto` is resolved when a run starts; a resume on other hardware keeps that choice (RUN/precision.json)."""

    def settle(self, run, hardware, **settings):
        from t2t_keras.training.resume import record_precision, settle_precision

        training = load_config("tiny", [f"training.{key}={value}" for key, value in settings.items()]).training
        with mock.patch.object(FastPath, "detect", return_value=on(hardware)):
            chosen = settle_precision(run, training)
        record_precision(run, *chosen)
        return chosen

    def test_a_resume_on_other_hardware_keeps_the_first_choice(self):
        from t2t_keras.runs import RunDirectory

        with tempfile.TemporaryDirectory() as tmp:
            run = RunDirectory(tmp)
            auto = dict(mixed_precision="auto", jit_compile="auto", fuse_elementwise="auto")
            self.assertEqual(self.settle(run, AVX512_BF16_CPU, **auto), ("mixed_bfloat16", False, True))
            self.assertEqual(run.read_json(run.precision_path), {"mixed_precision": "mixed_bfloat16",
                                                                "jit_compile": False, "fuse_elementwise": True})
            self.assertEqual(self.settle(run, AVX2_CPU, **auto), ("mixed_bfloat16", False, True))
            with self.assertLogs("t2t_keras.training.resume", "WARNING") as logs:
                self.assertEqual(self.settle(run, AVX2_CPU, mixed_precision="float32", jit_compile="true"),
                                 ("float32", True, False))
            self.assertIn("not an exact continuation", "\n".join(logs.output))
            self.assertEqual(self.settle(run, AVX512_BF16_CPU, **auto), ("float32", True, False))  # as last used
        with tempfile.TemporaryDirectory() as tmp:  # a new run on the older CPU
            self.assertEqual(self.settle(RunDirectory(tmp), AVX2_CPU, **auto), ("float32", True, False))
