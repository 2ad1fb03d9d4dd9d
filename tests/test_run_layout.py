"""The run directory's layout is named in one place (`runs.RunDirectory`; the name of its config file in
`config_paths`, which the CLI reads before TensorFlow loads), and weights have one format.

Checkpoints, the best checkpoint and the average are all tf.train checkpoints of the model, read by one
`load_run_model`; `run_weights` says which one a command uses, and an export records it.
"""

import ast
import pathlib
import tempfile

import numpy as np
import tensorflow as tf

from t2t_keras.build import build_model
from t2t_keras.config import load_config
from t2t_keras.runs import RunDirectory, average_run, load_run_model, open_run, run_weights
from tests.helpers import TestCase

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "t2t_keras"


def run_file_names():
    """The names of the files `RunDirectory` gives a run (config.yaml, replicas.json, ...), and of its folders but
    those whose names are also words of the CLI or the config (export, best, averaged, prepared: a command,
    weight sources, a data.pipeline)."""
    run = RunDirectory("RUN")
    names = {value.name for value in vars(run).values() if isinstance(value, pathlib.Path) and value != run.path}
    return names - {"export", "best", "averaged", "prepared"}


class LayoutTest(TestCase):
    def test_only_runs_py_names_the_files_of_a_run(self):
        names, found = run_file_names(), []
        for path in sorted(PACKAGE.rglob("*.py")):
            if path.name == "runs.py" and path.parent == PACKAGE:
                continue
            named_here = {"config.yaml"} if path == PACKAGE / "config_paths.py" else set()
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names - named_here:
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.value!r}")
        self.assertIn("replicas.json", names)
        self.assertEqual(found, [], "use the RunDirectory attribute instead of the file name")

    def test_an_open_run_is_handed_down_not_reopened(self):
        run = RunDirectory("runs/x")
        self.assertIs(open_run(run), run)
        self.assertEqual(str(run), "runs/x")
        self.assertEqual(pathlib.Path(run) / "a", pathlib.Path("runs/x/a"))


class WeightsTest(TestCase):
    """A run of the tiny model with two checkpoints (steps 1 and 2), written by hand."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.run_dir = RunDirectory(pathlib.Path(cls.tmp.name) / "run")
        config = load_config("tiny", ["model.hidden_dim=16", "model.num_heads=2", "model.intermediate_dim=16",
                                      "model.num_layers=1", "model.vocab_size=40", "training.average_last=2"])
        cls.run_dir.save_config(config)
        model = build_model(config.model)
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(cls.run_dir.checkpoint_dir), 3)
        cls.saved = []
        for step in (1, 2):
            model.set_weights([np.full_like(w, step) for w in model.get_weights()])
            manager.save(step)
            cls.saved.append(model.get_weights())

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_every_source_is_a_model_checkpoint_read_the_same_way(self):
        latest = run_weights(self.run_dir, "latest")
        self.assertEqual((latest.source, latest.steps), ("latest", (2,)))
        self.assertEqual(latest.describe(), "the checkpoint at step 2")
        average_run(self.run_dir)
        self.assertTrue((self.run_dir.averaged_dir / "ckpt.index").exists())
        auto = run_weights(self.run_dir, "auto")  # the average includes the newest checkpoint
        self.assertEqual((auto.source, auto.steps), ("averaged", (1, 2)))
        for got, one, two in zip(load_run_model(self.run_dir, "auto").get_weights(), *self.saved):
            self.assertAllClose(got, (one + two) / 2)
        with self.assertRaisesRegex(Exception, "no best checkpoint"):
            run_weights(self.run_dir, "best")
