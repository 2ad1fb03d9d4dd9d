"""Fine-tuning an imported OPUS-MT checkpoint: `train --init-from IMPORTED_RUN`, whole or with LoRA adapters.

The checkpoint (tests/hf_checkpoints.py, made with transformers) ends sentences with id 0, pads with its last id and
starts decoding from that pad id: the batches our pipeline makes from a pair are those transformers trains with
(`input_ids = tokenizer(source)`, `labels = tokenizer(text_target=target)`, the decoder's input shifted right from
the pad id), and the first batch's loss is transformers' loss on it. A few updates lower the loss, a second `train`
continues the run, and its SavedModel translates. An imported run cannot teach a distillation (it has no corpus).
"""

import pathlib
import tempfile

import numpy as np

from t2t_keras.artifacts import open_artifact
from t2t_keras.config import replace
from t2t_keras.export.formats import export_format
from t2t_keras.pretrained.importer import import_checkpoint
from t2t_keras.resolved_run import InitSource, resolve_run
from t2t_keras.runs import load_run_model, open_run
from t2t_keras.tasks import task_of
from t2t_keras.training.loss import LabelSmoothedCrossEntropy
from t2t_keras.training.trainer import train
from tests import hf_checkpoints
from tests.helpers import TestCase, cli_in_process, long_check, toy_config, toy_pairs, write_toy_corpus

LINES = [source for source, _ in toy_pairs(3, seed=9)]


def fine_tuning_config(files, **training):
    """The toy corpus at a constant rate, no label smoothing, no validation; sentences up to 40 of the
    checkpoint's pieces."""
    config = toy_config(files, **{"learning_rate": 0.003, "label_smoothing": 0.0, "steps_per_epoch": 2, **training})
    return replace(config, data={"max_length": 40, "dev_files": None})


def unpadded(row, pad):
    return tuple(int(i) for i in row[row != pad])


@long_check
class FineTuningTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = cls.root = pathlib.Path(cls.tmp.name)
        cls.checkpoint = hf_checkpoints.marian_checkpoint(root / "opus-mt")
        cls.imported = import_checkpoint("marian", cls.checkpoint, root / "imported")
        cls.files = write_toy_corpus(root / "data", train=120, dev=8, test=8)
        cls.full = root / "full"  # two updates, then a second session to four
        source = InitSource(cls.imported)
        train(resolve_run(cls.full, fine_tuning_config(cls.files, train_steps=2, checkpoint_every_steps=2),
                          init_from=source), verbose=0)
        resumed = fine_tuning_config(cls.files, train_steps=4, checkpoint_every_steps=2)
        cls.resumed = train(resolve_run(cls.full, resumed, init_from=source), verbose=0)
        cls.lora = root / "lora"
        lora = fine_tuning_config(cls.files, train_steps=4, checkpoint_every_steps=4, steps_per_epoch=4, lora_rank=2)
        train(resolve_run(cls.lora, lora, init_from=source), verbose=0)
        config = replace(open_run(cls.full).load_config(), data={"dev_files": cls.files["dev"]})
        data = task_of(config).load_data(open_run(cls.full), config)
        cls.train_batch, cls.dev_batch = next(iter(data.train)), next(iter(data.dev))
        cls.ids = config.model.special_ids

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def loss(self, run, batch):
        """The training loss (no smoothing, the model's pad weighing 0) of the run's model on `batch`."""
        (source, target_in), target_out, weights = batch
        logits = load_run_model(run)((source, target_in))
        return float(LabelSmoothedCrossEntropy(epsilon=0.0, pad_id=self.ids.pad)(target_out, logits, weights))

    def test_the_ids_are_the_checkpoint_s(self):
        self.assertEqual((self.ids.pad, self.ids.eos, self.ids.decoder_start), (62, 0, 62))

    def test_the_batches_are_those_transformers_trains_with(self):
        import torch
        from transformers import MarianTokenizer
        from transformers.models.marian.modeling_marian import shift_tokens_right

        tokenizer = MarianTokenizer.from_pretrained(self.checkpoint)
        pairs = {(tuple(tokenizer(source)["input_ids"]), tuple(tokenizer(text_target=target)["input_ids"]))
                 for source, target in toy_pairs(120, seed=0) + toy_pairs(8, seed=1)}  # train and dev, as written
        for name, batch in (("planned training batch", self.train_batch), ("dev batch", self.dev_batch)):
            with self.subTest(batch=name):
                (source, target_in), target_out, weights = batch
                source, target_in, target_out, weights = map(np.asarray, (source, target_in, target_out, weights))
                self.assertAllEqual(weights, (target_out != self.ids.pad).astype(np.float32))
                real = weights.any(axis=1)  # not a dev batch's filler row (all padding)
                self.assertTrue(real.any())
                for row in np.flatnonzero(real):
                    self.assertIn((unpadded(source[row], self.ids.pad), unpadded(target_out[row], self.ids.pad)),
                                  pairs)
                labels = torch.tensor(np.where(target_out == self.ids.pad, -100, target_out), dtype=torch.long)
                shifted = shift_tokens_right(labels, self.ids.pad, self.ids.decoder_start).numpy()
                # Where a label counts; after the eos transformers' input holds the eos, ours the pad, whose
                # prediction (of padding) weighs 0 and, the decoder being causal, changes no earlier one.
                self.assertAllEqual(target_in[weights > 0], shifted[weights > 0])

    def test_the_first_batch_s_loss_is_transformers_s(self):
        import torch
        from transformers import MarianMTModel

        (source, _), target_out, _ = self.train_batch
        source, target_out = np.asarray(source), np.asarray(target_out)
        model = MarianMTModel.from_pretrained(self.checkpoint).eval()
        with torch.no_grad():
            theirs = model(input_ids=torch.tensor(source, dtype=torch.long),
                           attention_mask=torch.tensor(source != self.ids.pad),
                           labels=torch.tensor(np.where(target_out == self.ids.pad, -100, target_out),
                                               dtype=torch.long)).loss.item()
        ours = self.loss(self.imported, self.train_batch)
        self.assertAllClose(ours, theirs, rtol=1e-5, atol=0)

    def test_updates_lower_the_loss_whole_and_with_adapters(self):
        before = self.loss(self.imported, self.train_batch)
        for run in (self.full, self.lora):
            with self.subTest(run=run.name):
                self.assertLess(self.loss(run, self.train_batch), before)

    def test_a_second_train_continues_the_run(self):
        self.assertEqual((self.resumed.start_step, self.resumed.final_step), (2, 4))
        self.assertEqual([path.rsplit("-", 1)[1] for path in open_run(self.full).checkpoint_paths()], ["2", "4"])

    def test_adapters_leave_the_checkpoint_s_other_weights_as_they_were(self):
        imported, adapted = load_run_model(self.imported), load_run_model(self.lora)  # adapters merged
        unchanged = {variable.path: variable.numpy() for variable in imported.weights
                     if not variable.path.endswith("kernel")}  # adapters add to the projections' kernels only
        self.assertIn("transformer/logits_bias/bias", unchanged)
        for variable in adapted.weights:
            if variable.path in unchanged:
                self.assertAllEqual(variable.numpy(), unchanged[variable.path], variable.path)

    def test_the_fine_tuned_run_s_saved_model_translates_as_the_run_does(self):
        request = dict(beam_size=1, max_extra_length=6)
        out = export_format(self.full, self.root / "export", "saved_model", max_beam_size=1, **request)
        exported, run = open_artifact(out), open_artifact(self.full)
        texts = exported.generate(LINES, exported.request(**request)).best
        self.assertEqual(len(texts), len(LINES))
        self.assertEqual(texts, run.generate(LINES, run.request(**request)).best)

    def test_an_imported_run_teaches_no_distillation_and_its_student_needs_its_ids(self):
        result = cli_in_process("distill", "--teacher", self.imported, "--run-dir", self.root / "student")
        self.assertEqual(result.returncode, 2, result.stderr.decode()[-2000:])
        self.assertIn("is a checkpoint made a run by t2t-keras import, which has no training corpus of its own",
                      result.stderr.decode())
        result = cli_in_process("distill", "--teacher", self.full, "--run-dir", self.root / "student", "--config",
                                "tiny")
        self.assertEqual(result.returncode, 2, result.stderr.decode()[-2000:])
        self.assertRegex(result.stderr.decode(), r"model.special_ids=\{.*\} in --config tiny, \{\"pad\": 62, .*\} "
                                                 r"in the teacher.*--set 'model.special_ids=\{\"pad\": 62, \"unk\": 1")
        self.assertFalse((self.root / "student").exists())


if __name__ == "__main__":
    import unittest

    unittest.main()
