"""Every choice made from the hardware, evaluated for hardware that is not here: CPUs with AVX2, AVX-512 BF16 and
AMX, one GPU of compute capability 8.0 or 7.0, eight GPUs, a TPU. On a GPU or TPU no CPU-only setting is taken
(oneDNN, thread pinning, auto-clustering flags, int8), the precision follows the compute capability, and a search
runs as one shard; a `train` or `translate` set-up with the hardware stubbed at the one place it is read
(`Hardware.detect`) sets none of TensorFlow's CPU variables."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from t2t_keras import fast_path, switches
from t2t_keras.hardware import UNKNOWN_CAPABILITY, Hardware, listed_accelerators, usable_cpu_flags
from t2t_keras.switches.decisions import GRAPH_SEARCH_HYPOTHESES, Decisions
from t2t_keras.switches.threads import search_record
from tests.test_kernel_choice import export_with, run_with

AMX = frozenset({"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"})
DEVICES = {  # the declared devices of docs/performance.md's table, with the CPUs that host the accelerators
    "AVX2 CPU, 2 cores": Hardware(cpu_flags=frozenset({"sse4_2", "avx", "avx2", "fma"}), cores=2),
    "AVX-512 BF16 CPU, 16 cores": Hardware(cpu_flags=frozenset({"avx2", "avx512f", "avx512_vnni", "avx512_bf16"}),
                                           cores=16),
    "AMX CPU, 2 cores": Hardware(cpu_flags=AMX, cores=2),
    "1 GPU, compute capability 8.0": Hardware(gpu_capabilities=((8, 0),), cpu_flags=AMX, cores=16),
    "1 GPU, compute capability 7.0": Hardware(gpu_capabilities=((7, 0),), cpu_flags=AMX, cores=16),
    "8 GPUs, compute capability 8.0": Hardware(gpu_capabilities=((8, 0),) * 8, cpu_flags=AMX, cores=96),
    "TPU (8 cores)": Hardware(tpus=8, cpu_flags=AMX, cores=96),
}
# What each choice must be: (precision, training step XLA, fused elementwise ops, float32 search of 128 hypotheses
# with XLA, TF_XLA_FLAGS set, TF_ENABLE_ONEDNN_OPTS, TF_ONEDNN_USE_SYSTEM_ALLOCATOR for a server of versions,
# TF_NUM_INTRAOP_THREADS for a 2-shard narrow export,
# int8 for 10M parameters, search shards, CTranslate2's (inter, intra) threads (it runs on the host CPU), threads of
# each of 2 local pipeline workers)
EXPECTED = {
    "AVX2 CPU, 2 cores": ("float32", True, False, False, True, "0", "1", 1, None, 2, (2, 1), 1),
    "AVX-512 BF16 CPU, 16 cores": ("mixed_bfloat16", False, True, False, True, "0", "1", 8, None, 16, (16, 1), 8),
    "AMX CPU, 2 cores": ("mixed_bfloat16", False, True, False, True, "0", "1", 1, "int8", 2, (2, 1), 1),
    "1 GPU, compute capability 8.0": ("mixed_bfloat16", True, False, True, False, None, None, None, None, 1, (16, 1),
                                      None),
    "1 GPU, compute capability 7.0": ("mixed_float16", True, False, True, False, None, None, None, None, 1, (16, 1),
                                      None),
    "8 GPUs, compute capability 8.0": ("mixed_bfloat16", True, False, True, False, None, None, None, None, 1, (96, 1),
                                       None),
    "TPU (8 cores)": ("mixed_bfloat16", True, False, True, False, None, None, None, None, 1, (96, 1), None),
}
ACCELERATORS = [name for name, hardware in DEVICES.items() if hardware.tpus or hardware.gpu_capabilities]
NARROW = search_record(2, True, 128)
CPU_VARIABLES = ("TF_XLA_FLAGS", "TF_ENABLE_ONEDNN_OPTS", "TF_ONEDNN_USE_SYSTEM_ALLOCATOR", "TF_NUM_INTRAOP_THREADS")


def choices(decisions):
    jit = decisions.jit(decisions.precision)
    return (decisions.precision, jit, decisions.fuse_elementwise(decisions.precision, jit),
            decisions.decoding_jit("float32", GRAPH_SEARCH_HYPOTHESES), decisions.xla_flags is not None,
            decisions.onednn("float32"), decisions.onednn_allocator(True), decisions.intra_op_threads(NARROW),
            decisions.quantization(10_000_000)[0],
            decisions.shards, decisions.ctranslate2_threads(), decisions.worker_threads(2))


class DeclaredDevicesTest(unittest.TestCase):
    def test_each_declared_device_gets_the_choices_it_must(self):
        for name, hardware in DEVICES.items():
            with self.subTest(name):
                self.assertEqual(choices(Decisions.of(hardware)), EXPECTED[name])

    def test_no_accelerator_takes_a_cpu_only_setting_whatever_it_runs(self):
        for name in ACCELERATORS:
            decisions = Decisions.of(DEVICES[name])
            with self.subTest(name):
                self.assertIsNone(decisions.xla_flags)
                for arithmetic in ("float32", "bfloat16", "int8", None):
                    self.assertIsNone(decisions.onednn(arithmetic))
                for shards, width in ((2, 64), (4, 128), (96, 256)):
                    self.assertIsNone(decisions.intra_op_threads(search_record(shards, True, width)))
                for params in (1_000, 5_000_000, 10 ** 9):
                    chosen, reason = decisions.quantization(params)
                    self.assertIsNone(chosen)
                    self.assertIn("--quantization int8 forces", reason)
                for precision in ("float32", "mixed_float16", "mixed_bfloat16"):
                    self.assertTrue(decisions.jit(precision))
                    self.assertFalse(decisions.fuse_elementwise(precision, False))
                    self.assertTrue(decisions.decoding_jit("float32", 100 * GRAPH_SEARCH_HYPOTHESES))

    def test_mixed_precision_follows_the_compute_capability_of_the_oldest_gpu(self):
        cases = {((9, 0),): "mixed_bfloat16", ((8, 6),): "mixed_bfloat16", ((8, 0),) * 8: "mixed_bfloat16",
                 ((7, 5),): "mixed_float16", ((7, 0),): "mixed_float16", ((8, 0), (7, 0)): "mixed_float16",
                 ((6, 1),): "float32", (UNKNOWN_CAPABILITY,): "float32"}
        for capabilities, precision in cases.items():
            self.assertEqual(Decisions.of(Hardware(gpu_capabilities=capabilities)).precision, precision,
                             msg=capabilities)

    def test_search_shards_follow_the_cores_on_a_cpu_and_stay_one_on_accelerators(self):
        for cores in (1, 2, 16, 96):
            self.assertEqual(Decisions.of(Hardware(cores=cores)).shards, cores)
            for accelerator in (Hardware(gpu_capabilities=((8, 0),) * 8, cores=cores), Hardware(tpus=8, cores=cores)):
                self.assertEqual(Decisions.of(accelerator).shards, 1)

    def test_docs_show_the_table_of_every_declared_device(self):
        text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "performance.md").read_text(encoding="utf-8")
        columns = list(Decisions.of(Hardware()).summary())
        for name, hardware in [("device", None), *DEVICES.items()]:
            cells = columns if hardware is None else Decisions.of(hardware).summary().values()
            row = "| " + " | ".join([name, *cells]) + " |"
            self.assertTrue(row in text, msg=f"docs/performance.md lacks, or differs from, the row: {row}")


class StubbedGpuRunTest(unittest.TestCase):
    """`train` and `translate` set up with `Hardware.detect` answering for a GPU (or a TPU)."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        root = pathlib.Path(tmp.name)
        self.run_dir = run_with(root / "run")  # a float32 translation run
        self.export = str(export_with(root / "export", {"precision": "float32", "quantization": "float32",
                                                        "search": NARROW}))
        self.base = root / "models"  # a model base path whose newest version is that export
        shutil.copytree(self.export, self.base / "1")
        fast_path._detected.cache_clear()
        self.addCleanup(fast_path._detected.cache_clear)

    def switches_on(self, hardware, command, options):
        environ = {}
        with mock.patch.object(Hardware, "detect", return_value=hardware):
            chosen = switches.choose(command, options, environ, modules={})
        self.assertEqual(chosen, environ)
        return chosen

    def test_the_switches_set_nothing_on_an_accelerator_and_their_cpu_values_on_a_cpu(self):
        runs = {"path": None, "run_dirs": [self.run_dir], "precision": None, "litert": False}
        commands = [("train", {}), ("main", {}), ("distill", {}), ("translate", runs), ("evaluate", runs),
                    ("translate", {"path": self.export}), ("serve", {"model_base_path": str(self.base)})]
        for name in ACCELERATORS:
            for command, options in commands:
                self.assertEqual(self.switches_on(DEVICES[name], command, options), {}, msg=(name, command))
        cpu = DEVICES["AMX CPU, 2 cores"]
        self.assertEqual(list(self.switches_on(cpu, "train", {})), ["TF_XLA_FLAGS"])
        self.assertEqual(self.switches_on(cpu, "translate", runs), {"TF_ENABLE_ONEDNN_OPTS": "0"})
        self.assertEqual(self.switches_on(cpu, "translate", {"path": self.export}),
                         {"TF_ENABLE_ONEDNN_OPTS": "0", "TF_NUM_INTRAOP_THREADS": "1"})
        self.assertEqual(self.switches_on(cpu, "serve", {"model_base_path": str(self.base)}),
                         {"TF_ENABLE_ONEDNN_OPTS": "0", "TF_ONEDNN_USE_SYSTEM_ALLOCATOR": "1",
                          "TF_NUM_INTRAOP_THREADS": "1"})

    def test_training_decoding_and_export_take_the_gpus_choices(self):
        from t2t_keras.decoding.sharding import choose_shards
        from t2t_keras.export.saved_model import _auto_quantization
        from t2t_keras.training.precision import choose_fusion, choose_jit, choose_precision

        model = mock.Mock(count_params=mock.Mock(return_value=10_000_000))
        for name, expected in (("1 GPU, compute capability 7.0", ("mixed_float16", 1, None)),
                               ("8 GPUs, compute capability 8.0", ("mixed_bfloat16", 1, None)),
                               ("AMX CPU, 2 cores", ("mixed_bfloat16", 2, "int8"))):
            fast_path._detected.cache_clear()
            with self.subTest(name), mock.patch.object(Hardware, "detect", return_value=DEVICES[name]):
                precision = choose_precision("auto")
                jit = choose_jit("auto", precision)
                self.assertEqual(choose_fusion("auto", precision, jit), not jit)  # fused: a CPU's graph-mode step
                quantization = _auto_quantization(model, {"weights": {}})
                self.assertEqual((precision, choose_shards("auto"), quantization), expected)

    def test_the_cli_of_a_gpu_sets_no_cpu_variable_before_tensorflow_loads(self):
        # a fresh interpreter: the real `t2t-keras` entry point, its command replaced by a report of the variables
        # it runs with and of whether TensorFlow had loaded when the switches were chosen
        code = ("import json, os, sys\nfrom unittest import mock\nfrom t2t_keras import cli, switches\n"
                "from t2t_keras.hardware import Hardware\n"
                "spec = json.loads(sys.argv[1])\n"
                "hardware = Hardware(gpu_capabilities=tuple(map(tuple, spec['gpus'])), cores=spec['cores'])\n"
                "loaded = []\n"
                "def choose(*args, **kwargs):\n"
                "    loaded.append('tensorflow' in sys.modules)\n"
                "    return real(*args, **kwargs)\n"
                "def report(args):\n"
                f"    variables = {{k: os.environ.get(k) for k in {CPU_VARIABLES!r}}}\n"
                "    print(json.dumps([variables, loaded]))\n"
                "    return 0\n"
                "real = switches.choose\n"
                "with mock.patch.object(Hardware, 'detect', return_value=hardware), "
                "mock.patch.object(switches, 'choose', choose), mock.patch.dict(cli.COMMANDS, {sys.argv[2]: report}):\n"
                "    sys.exit(cli.main(sys.argv[2:]))")
        env = {k: v for k, v in os.environ.items() if k not in CPU_VARIABLES}
        gpu = json.dumps({"gpus": [[8, 0]], "cores": 16})
        # unstubbed, this CPU would set TF_XLA_FLAGS for train and TF_ENABLE_ONEDNN_OPTS for both translations
        for argv in (["train", "--run-dir", self.run_dir], ["translate", "--run-dir", self.run_dir],
                     ["translate", "--saved-model", self.export], ["serve", "--model-base-path", str(self.base)]):
            out = subprocess.run([sys.executable, "-c", code, gpu, *argv], capture_output=True, text=True, env=env,
                                 check=True).stdout
            self.assertEqual(json.loads(out.splitlines()[-1]), [dict.fromkeys(CPU_VARIABLES), [False]], msg=argv)


class BeforeTensorflowTest(unittest.TestCase):
    def test_the_accelerators_the_system_lists(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            self.assertEqual(listed_accelerators(root, {}), (0, ()))
            for bus in ("0000:00:04.0", "0000:00:05.0"):
                (root / "proc/driver/nvidia/gpus" / bus).mkdir(parents=True)
            for chip in ("accel0", "accel1", "accel2", "accel3"):
                (root / "dev").mkdir(exist_ok=True)
                (root / "dev" / chip).touch()
            cases = {None: 2, "1": 1, "0,1,2": 2, "": 0, "-1": 0, "1,-1,0": 1}
            for visible, gpus in cases.items():
                environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
                self.assertEqual(listed_accelerators(root, environ), (4, (UNKNOWN_CAPABILITY,) * gpus), msg=visible)


class OneDnnCapTest(unittest.TestCase):
    """oneDNN capped below AVX-512 (`ONEDNN_MAX_CPU_ISA=AVX2`) has no bfloat16 kernel, and TensorFlow would still
    send it bfloat16 on an AVX-512 CPU: under such a cap the table chooses as for a CPU without those units."""

    def test_a_cap_below_avx512_makes_an_amx_cpu_choose_as_an_avx2_one(self):
        avx2 = choices(Decisions.of(DEVICES["AVX2 CPU, 2 cores"]))
        for cap in ("AVX2", "avx2_vnni", "SSE41"):
            capped = Hardware(cpu_flags=usable_cpu_flags(AMX, cap), cores=2)
            self.assertEqual(choices(Decisions.of(capped))[:3], avx2[:3], msg=cap)
            self.assertIsNone(Decisions.of(capped).quantization(10_000_000)[0], msg=cap)

    def test_a_cap_at_avx512_keeps_bfloat16_and_drops_only_amx(self):
        capped = usable_cpu_flags(AMX, "AVX512_CORE_BF16")
        self.assertEqual(capped, AMX - {"amx_tile", "amx_bf16", "amx_int8"})
        self.assertEqual(Decisions.of(Hardware(cpu_flags=capped, cores=2)).precision, "mixed_bfloat16")

    def test_no_cap_or_one_at_amx_changes_nothing(self):
        for cap in (None, "", "ALL", "DEFAULT", "AVX512_CORE_AMX"):
            self.assertEqual(usable_cpu_flags(AMX, cap), AMX, msg=cap)

    def test_detect_reads_the_cap(self):
        with mock.patch.dict(os.environ, {"ONEDNN_MAX_CPU_ISA": "AVX2"}):
            flags = Hardware.detect(before_tensorflow=True).cpu_flags
        self.assertFalse({flag for flag in flags if flag.startswith(("avx512", "amx"))})


if __name__ == "__main__":
    unittest.main()
