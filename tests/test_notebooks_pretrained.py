"""Notebook 04 (a pretrained model), executed end to end on its tiny stand-in checkpoint and four fine-tuning updates.

It runs in a kernel of its own as the other notebooks do (`tests.test_notebooks.execute_notebook`); the test checks
what each of its steps leaves behind: transformers' logits and ids from the imported run, the attention events for
TensorBoard, a lower loss after fine-tuning, the SavedModel, the same translations in process and over HTTP from a
server that is stopped again, and the Marian directory written back.
"""

import pathlib
import shutil
import tempfile
import unittest

from tests.test_notebooks import NOTEBOOKS, execute_notebook, outputs_of

PROBE = ('{"logits": logits_difference, "same_ids": same_ids, "events": attention_events, "losses": losses, '
         '"steps": [result.start_step, result.final_step], "status": status, "rest": rest, "in_process": in_process, '
         '"server_alive": server.poll() is None, "round_trip": round_trip_difference, '
         '"t5_logits": t5_logits_difference}')


class PretrainedNotebookTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = pathlib.Path(tempfile.mkdtemp(prefix="t2t-notebook-pretrained-"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def test_import_translate_inspect_fine_tune_export_serve(self):
        work_dir = self.work / "work"
        env = {"T2T_NOTEBOOK_WORK_DIR": str(work_dir), "T2T_NOTEBOOK_STEPS": "4", "TF_CPP_MIN_LOG_LEVEL": "2"}
        notebook, values = execute_notebook(NOTEBOOKS / "04_pretrained_model.py", self.work, env, PROBE)
        self.assertEqual(outputs_of(notebook, "error"), [])
        self.assertTrue(all(cell.execution_count for cell in notebook.cells if cell.cell_type == "code"))
        self.assertLessEqual(values["logits"], 1e-4)
        self.assertLessEqual(values["t5_logits"], 1e-4)
        self.assertTrue(values["same_ids"])
        self.assertEqual(len(values["events"]), 1)
        self.assertTrue(values["events"][0].startswith("events.out.tfevents."))
        self.assertEqual(values["steps"], [0, 4])
        self.assertLess(values["losses"]["fine-tuned"], values["losses"]["imported"])
        self.assertTrue((work_dir / "export" / "saved_model.pb").is_file())
        self.assertEqual(values["status"], 200)
        self.assertEqual(len(values["rest"]), 3)
        self.assertEqual(values["rest"], values["in_process"])
        self.assertFalse(values["server_alive"], "the notebook did not stop its server")
        self.assertTrue((work_dir / "marian" / "model.safetensors").is_file())
        self.assertLessEqual(values["round_trip"], 1e-4)


if __name__ == "__main__":
    unittest.main()
