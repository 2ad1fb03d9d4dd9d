"""The notebooks, executed end to end on a small budget, and the helpers they import.

Each notebook in `notebooks/` is kept as a jupytext "percent" script; the test reads it with
jupytext, runs every cell with nbclient in an IPython kernel of the interpreter running the
tests (a kernel spec written to a temporary directory, so nothing needs installing), and fails
on the first cell that raises. Notebook 01 trains the `tiny` preset for a few steps into a run
directory that 02 and 03 then read, as a person would run them in order.
"""

import json
import os
import pathlib
import shutil
import tempfile
import time
import unittest

import numpy as np
from matplotlib.colors import to_rgba

from t2t_keras.inspect.heads import head_entropy
from t2t_keras.inspect.attention_lines import attention_lines_figure
from tests.helpers import write_toy_corpus

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
CELL_TIMEOUT = 600  # seconds for one cell; the three notebooks take about 1.5 minutes on 2 cores
STEPS = 30

# A last cell the test appends: prints the value of an expression, as JSON, for the assertions.
PROBE = "import json as _json; print(_json.dumps({expression}, default=str))"


def execute_notebook(path, cwd, env, probe=None):
    """Runs every cell of the jupytext notebook `path`; returns `(notebook, probe_value)`.

    The kernel runs this interpreter (through a kernel spec written to a temporary
    directory, found before any installed one), in `cwd`, with `env` added to the
    environment. `probe` is a Python expression evaluated after the last cell; its
    JSON value is returned. Raises nbclient's `CellExecutionError`, which carries the
    failing cell's traceback, when a cell raises.
    """
    import jupytext
    import nbformat
    from ipykernel.kernelspec import write_kernel_spec
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient

    notebook = jupytext.read(path)
    if probe:
        notebook.cells.append(nbformat.v4.new_code_cell(PROBE.format(expression=probe)))
    with tempfile.TemporaryDirectory() as kernels:
        write_kernel_spec(os.path.join(kernels, "python3"))
        specs = KernelSpecManager(kernel_dirs=[kernels])
        manager = AsyncKernelManager(kernel_name="python3", kernel_spec_manager=specs)
        client = NotebookClient(notebook, km=manager, timeout=CELL_TIMEOUT, allow_errors=False,
                                extra_arguments=["--colors=NoColor"],  # plain tracebacks in the test log
                                resources={"metadata": {"path": str(cwd)}})
        try:
            client.execute(env={**os.environ, **env})
        finally:  # nbclient leaves a kernel it was given running; killing its process group ends any children
            run_sync(manager.shutdown_kernel)(now=True)
    if not probe:
        return notebook, None
    printed = "".join(o.get("text", "") for o in notebook.cells.pop().outputs if o.output_type == "stream")
    return notebook, json.loads(printed.splitlines()[-1])


def outputs_of(notebook, output_type=None, mime=None):
    """All outputs of the notebook's code cells, optionally of one type or carrying one MIME type."""
    found = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output_type and output.output_type != output_type:
                continue
            if mime and mime not in output.get("data", {}):
                continue
            found.append(output)
    return found


def stdout_of(notebook):
    return "".join(o.text for o in outputs_of(notebook, "stream") if o.name == "stdout")


class NotebookTest(unittest.TestCase):
    """01 → 02 → 03 in one run directory, in one test: each notebook reads what the one before wrote. In the
    quick suite (about 70 CPU seconds on 2 cores), with notebook 04 beside it: the notebooks are the road a new
    user takes first."""

    @classmethod
    def setUpClass(cls):
        cls.work = pathlib.Path(tempfile.mkdtemp(prefix="t2t-notebooks-"))
        cls.run_dir = cls.work / "run"
        files = write_toy_corpus(cls.work / "corpus", train=400)
        settings = [
            # A small corpus made here, so the test needs no download.
            "data.source=text", f"data.train_files={files['train']!r}", f"data.dev_files={files['dev']!r}",
            f"data.test_files={files['test']!r}", "data.vocab_size=100", "data.max_length=24",
            # No XLA: compiling every length bucket would take longer than the training itself.
            "training.steps_per_epoch=10", "training.jit_compile=false", "training.attention_probes=1",
            f"training.attention_every_steps={STEPS}",
            "decoding.beam_size=2",  # the export traces one search per beam size up to the largest
        ]
        cls.env = {
            "T2T_NOTEBOOK_CONFIG": "tiny",
            "T2T_NOTEBOOK_STEPS": str(STEPS),
            "T2T_NOTEBOOK_RUN_DIR": str(cls.run_dir),
            "T2T_NOTEBOOK_SENTENCES": "3",
            "T2T_NOTEBOOK_SET": ";".join(settings),
            "T2T_NOTEBOOK_MAX_BEAM_SIZE": "2",
            "TF_CPP_MIN_LOG_LEVEL": "2",
        }
        cls.seconds = {}
        # Notebooks 02 and 03 read the run directory that 01 writes, as a person would run them.
        cls.trained, cls.trained_values = cls.execute("01_train_with_fit.py", probe='{"step": result.final_step}')

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)
        print(f"notebook seconds: {cls.seconds}")

    @classmethod
    def execute(cls, name, probe=None, **env):
        began = time.monotonic()
        notebook, values = execute_notebook(NOTEBOOKS / name, cls.work, {**cls.env, **env}, probe)
        cls.seconds[name] = round(time.monotonic() - began)
        return notebook, values

    def run_notebook(self, name, probe=None, **env):
        notebook, values = self.execute(name, probe, **env)
        self.check_ran(notebook)
        return notebook, values

    def check_ran(self, notebook):
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        self.assertTrue(code)
        self.assertTrue(all(cell.execution_count for cell in code), "a code cell did not run")
        self.assertEqual(outputs_of(notebook, "error"), [])

    def test_train_with_fit(self):
        import tensorflow as tf

        notebook, values = self.trained, self.trained_values
        self.check_ran(notebook)
        self.assertEqual(values["step"], STEPS)
        latest = tf.train.latest_checkpoint(str(self.run_dir / "checkpoints"))
        self.assertTrue(latest and latest.endswith(f"-{STEPS}"), latest)
        for name in ("config.yaml", "tokenizer.model", "averaged/ckpt.index"):
            self.assertTrue((self.run_dir / name).is_file(), name)
        events = {p.parent.name for p in (self.run_dir / "logs").rglob("events.out.tfevents.*")}
        self.assertLessEqual({"train", "validation", "attention"}, events)
        self.assertGreaterEqual(len(outputs_of(notebook, mime="image/png")), 2)  # schedule, learning curves
        self.assertEqual(stdout_of(notebook).count("model:     "), 3)

    def test_attention_inspection(self):
        notebook, values = self.run_notebook("02_attention_inspection.py", probe='{"heads": maps.num_heads}')
        self.assertEqual(values["heads"], 4)
        self.assertTrue((self.run_dir / "attention" / "attention.html").is_file())
        self.assertEqual(len(list((self.run_dir / "attention").glob("*_layer_*.png"))), 3 * 2)
        pages = [o for o in outputs_of(notebook, mime="text/html") if "attention-data" in o.data["text/html"]]
        self.assertEqual(len(pages), 1)
        self.assertGreaterEqual(len(outputs_of(notebook, mime="image/png")), 7)

    def test_export_and_serve(self):
        export_dir = self.work / "export"
        notebook, values = self.run_notebook(
            "03_export_and_serve.py", T2T_NOTEBOOK_EXPORT_DIR=str(export_dir),
            probe='{"status": status, "standalone": standalone, "in_process": in_process, "rest": rest, '
                  '"server_alive": server.poll() is None}')
        self.assertTrue((export_dir / "saved_model.pb").is_file())
        self.assertEqual(values["status"], 200)
        self.assertFalse(values["server_alive"], "the notebook did not stop its server")
        standalone, in_process = values["standalone"], values["in_process"]
        self.assertEqual(standalone["packages"], [])  # the script did not import t2t_keras
        # The same export gives the same translations and scores without the package, with it, and over HTTP.
        self.assertEqual(len(in_process["translations"]), 3)
        self.assertEqual(standalone["translations"], in_process["translations"])
        np.testing.assert_allclose(standalone["scores"], in_process["scores"], atol=1e-4)
        self.assertEqual(values["rest"]["translations"], in_process["translations"])
        np.testing.assert_allclose(values["rest"]["scores"], in_process["scores"], atol=1e-4)


class NotebookFormatTest(unittest.TestCase):
    def test_notebooks_are_stored_as_jupytext_writes_them(self):
        """Opening and saving a notebook in Jupyter (with jupytext) leaves its file unchanged."""
        import jupytext

        paths = sorted(NOTEBOOKS.glob("*.py"))
        self.assertEqual([p.name for p in paths],
                         ["01_train_with_fit.py", "02_attention_inspection.py", "03_export_and_serve.py",
                          "04_pretrained_model.py"])
        for path in paths:
            text = path.read_text(encoding="utf-8")
            notebook = jupytext.reads(text, fmt="py:percent")
            written = jupytext.writes(notebook, fmt="py:percent")
            without_version = [line for line in written.splitlines() if "jupytext_version:" not in line]
            self.assertEqual([line for line in text.splitlines() if "jupytext_version:" not in line],
                             without_version, path.name)


class NotebookSupportTest(unittest.TestCase):
    def test_head_entropy(self):
        keys = 5
        uniform = np.full((1, 1, 3, keys), 1.0 / keys)
        one_hot = np.zeros((1, 1, 3, keys))
        one_hot[..., 2] = 1.0
        values = head_entropy(np.concatenate([uniform, one_hot], axis=1))  # (1 layer, 2 heads)
        np.testing.assert_allclose(values, [[np.log(keys), 0.0]])

    def test_head_entropy_rejects_other_shapes(self):
        with self.assertRaisesRegex(ValueError, r"Received: shape=\(3, 5\)"):
            head_entropy(np.ones((3, 5)))

    def test_attention_lines_one_line_per_weight_above_threshold(self):
        weights = np.array([[[0.7, 0.3, 0.0], [0.01, 0.49, 0.5]],
                            [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]])  # (2 heads, 2 queries, 3 keys)
        figure = attention_lines_figure(weights, ["a", "b"], ["x", "y", "z"], title="t")
        lines = figure.axes[0].get_lines()
        self.assertEqual(len(lines), 6)  # 0.0 and 0.01 are below MIN_WEIGHT
        opacities = sorted(round(to_rgba(line.get_color())[3], 2) for line in lines)  # opacity = weight
        self.assertEqual(opacities, [0.3, 0.49, 0.5, 0.7, 1.0, 1.0])
        texts = [text.get_text() for text in figure.axes[0].texts]
        self.assertEqual(texts, ["a", "b", "x", "y", "z"])

    def test_attention_lines_one_query_and_chosen_heads(self):
        weights = np.full((3, 4, 4), 0.25)
        figure = attention_lines_figure(weights, list("abcd"), list("abcd"), heads=[1], query=2)
        lines = figure.axes[0].get_lines()
        self.assertEqual(len(lines), 4)
        self.assertEqual({line.get_label() for line in lines}, {"head 1"})
        # Every line starts at the query's row (rows are drawn top to bottom from 0).
        self.assertEqual({tuple(line.get_ydata())[0] for line in lines}, {2.0})

    def test_attention_lines_rejects_mismatched_labels(self):
        with self.assertRaisesRegex(ValueError, r"Received: shape=\(2, 3, 3\)"):
            attention_lines_figure(np.ones((2, 3, 3)), ["a", "b"], ["x", "y", "z"])


if __name__ == "__main__":
    unittest.main()
