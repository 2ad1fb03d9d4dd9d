"""Threads per op for an export's search, chosen from its record before TensorFlow is imported."""

import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

from t2t_keras.switches.threads import (
    NARROW_WIDTH,
    VARIABLE,
    choose_intra_op_threads,
    search_record,
    threads_per_shard,
)
from tests.test_kernel_choice import cpu_environment, export_with, on_a_cpu


def recorded(shards=2, graph_mode_only=True, hidden_dim=128):
    return {"precision": "float32", "quantization": "float32",
            "search": search_record(shards, graph_mode_only, hidden_dim)}


class ThreadChoiceTest(unittest.TestCase):
    def setUp(self):
        on_a_cpu(self)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def export(self, name, record):
        return export_with(pathlib.Path(self.tmp.name) / name, record)

    def test_a_narrow_sharded_graph_mode_search_gets_its_share_of_the_cores(self):
        narrow = self.export("narrow", recorded())
        self.assertEqual(threads_per_shard(narrow, cores=2), 1)
        self.assertEqual(threads_per_shard(narrow, cores=8), 4)
        self.assertEqual(threads_per_shard(narrow, cores=3), 1)
        self.assertEqual(threads_per_shard(narrow, cores=1), 1)  # never 0: 0 would mean TensorFlow's default
        self.assertEqual(threads_per_shard(self.export("four", recorded(shards=4)), cores=16), 4)
        self.assertEqual(threads_per_shard(self.export("edge", recorded(hidden_dim=NARROW_WIDTH)), cores=2), 1)

    def test_every_other_export_keeps_tensorflows_pool(self):
        cases = {"one shard": recorded(shards=1),
                 "wide": recorded(hidden_dim=NARROW_WIDTH * 2),  # its batch-1 products use both cores
                 "xla searches": recorded(graph_mode_only=False),  # XLA parallelises on the intra-op pool
                 "older": {"precision": "float32", "quantization": "float32"},  # recorded before `search` was
                 "bad search": {"search": {"shards": "2", "graph_mode_only": True, "hidden_dim": 128}},
                 "broken": "{not json",
                 "ids-only": None}
        for name, record in cases.items():
            self.assertIsNone(threads_per_shard(self.export(name, record), cores=2), msg=name)

    def test_the_choice_sets_the_variable_unless_the_user_or_tensorflow_was_first(self):
        narrow = self.export("narrow", recorded())
        environ = {}
        self.assertEqual(choose_intra_op_threads(narrow, environ, modules={}, cores=2), "1")
        self.assertEqual(environ, {VARIABLE: "1"})
        environ = {VARIABLE: "2"}
        self.assertIsNone(choose_intra_op_threads(narrow, environ, modules={}, cores=2))
        self.assertEqual(environ, {VARIABLE: "2"})
        environ = {}
        self.assertIsNone(choose_intra_op_threads(narrow, environ, modules={"tensorflow": object()}, cores=2))
        self.assertEqual(environ, {})
        environ = {}
        self.assertIsNone(choose_intra_op_threads(self.export("wide", recorded(hidden_dim=512)), environ,
                                                  modules={}, cores=2))
        self.assertEqual(environ, {})

    def test_the_cli_chooses_before_tensorflow_is_imported(self):
        narrow = self.export("narrow", recorded())
        code = ("import os, sys\nfrom t2t_keras import cli_arguments, switches\n"
                "args = cli_arguments.build_parser().parse_args(['translate', '--saved-model', sys.argv[1]])\n"
                "chosen = switches.choose(args.command, vars(args))\n"
                "print(chosen.get('TF_ENABLE_ONEDNN_OPTS'), chosen.get('TF_NUM_INTRAOP_THREADS'),\n"
                "      os.environ.get('TF_NUM_INTRAOP_THREADS'), 'tensorflow' in sys.modules)")
        env = cpu_environment(VARIABLE, "TF_ENABLE_ONEDNN_OPTS")
        out = subprocess.run([sys.executable, "-c", code, str(narrow)], capture_output=True, text=True, env=env,
                             check=True).stdout.split()
        threads = str(max(1, len(os.sched_getaffinity(0)) // 2))
        self.assertEqual(out, ["0", threads, threads, "False"])


if __name__ == "__main__":
    unittest.main()
