"""A training step's memory: the estimate's parts, the machine's memory, the batch split `train` chooses, refusal."""

import json
import pathlib
import tempfile

import numpy as np
import tensorflow as tf

from t2t_keras.config import load_config
from t2t_keras.memory import ACTIVATION_SCALE, ATTENTION_COPIES, GB, LOGIT_COPIES, RUNTIME_BYTES, estimate
from tests.helpers import TestCase, cli_in_process, one_bucket_config, write_toy_corpus

# tiny by hand: attention 4(64·64 + 64), feed-forward 2·64·256 + 256 + 64, LayerNorm 2·64; an encoder layer has
# attention, feed-forward and 2 LayerNorms, a decoder layer 2 attentions and 3; one shared 1000 x 64 embedding.
ATTENTION, FEED_FORWARD, NORM = 4 * (64 * 64 + 64), 2 * 64 * 256 + 256 + 64, 2 * 64
TINY_PARAMS = 2 * (ATTENTION + FEED_FORWARD + 2 * NORM) + 2 * (2 * ATTENTION + FEED_FORWARD + 3 * NORM) + 1000 * 64
# Values kept per token: (14·64 + 2·256) in each encoder layer, (24·64 + 2·256) in each decoder layer.
TINY_WIDTHS = 2 * (14 * 64 + 2 * 256) + 2 * (24 * 64 + 2 * 256)


class EstimateTest(TestCase):
    """The parts for the tiny preset (N=2, d_model=64, d_ff=256, h=4, 1000 pieces) on 4 rows of 16 tokens."""

    def setUp(self):
        self.model = load_config("tiny").model

    def test_float32_parts_by_hand(self):
        parts = estimate(self.model, "float32", rows=4, length=16).parts
        self.assertEqual(TINY_PARAMS, 297472)
        self.assertEqual(parts["weights"], 4 * TINY_PARAMS)
        self.assertEqual(parts["gradients"], 4 * TINY_PARAMS)
        self.assertEqual(parts["optimizer"], 8 * TINY_PARAMS)  # Adam: two moments
        self.assertEqual(parts["activations"], int(np.ceil(ACTIVATION_SCALE * 64 * TINY_WIDTHS * 4)))
        self.assertEqual(parts["logits"], LOGIT_COPIES["float32"] * 64 * 1000 * 4)  # tokens x vocabulary x 4 B
        self.assertEqual(parts["attention"], ATTENTION_COPIES * 4 * 4 * 16 ** 2 * 6 * 4)  # rows·h·len²·6 layers
        self.assertEqual(parts["runtime"], int(RUNTIME_BYTES))

    def test_mixed_bfloat16_accumulation_and_adapters(self):
        mixed = estimate(self.model, "mixed_bfloat16", rows=4, length=16, accumulating=True).parts
        self.assertEqual(mixed["weights"], (4 + 2) * TINY_PARAMS)  # float32 masters and their bfloat16 copies
        self.assertEqual(mixed["gradients"], 2 * 4 * TINY_PARAMS)  # the running sum
        # a CPU's memory: kept at float32's size (XLA's bfloat16 step measured so); a GPU's: at bfloat16's
        self.assertEqual(mixed["activations"], int(np.ceil(ACTIVATION_SCALE * 64 * TINY_WIDTHS * 4)))
        on_gpu = estimate(self.model, "mixed_bfloat16", rows=4, length=16, runtime=False).parts
        self.assertEqual(on_gpu["activations"], int(np.ceil(ACTIVATION_SCALE * 64 * TINY_WIDTHS * 2)))
        self.assertEqual(on_gpu["runtime"], 0)
        self.assertEqual(mixed["logits"], LOGIT_COPIES["mixed"] * 64 * 1000 * 4)
        adapters = estimate(self.model, "float32", rows=4, length=16, lora_rank=2).parts
        # rank 2: each projection (n_in, n_out) gets 2(n_in + n_out): Q, K, V, O 2(64 + 64), the FFN's 2(64 + 256)
        attention, feed_forward = 4 * 2 * (64 + 64), 2 * 2 * (64 + 256)
        rank_2 = 2 * (attention + feed_forward) + 2 * (2 * attention + feed_forward)
        self.assertEqual(adapters["optimizer"], 8 * rank_2)  # only the adapters train
        self.assertEqual(adapters["weights"], 4 * (TINY_PARAMS + rank_2))


class MachineMemoryTest(TestCase):
    def test_mem_available_or_the_cgroup_limit_when_lower(self):
        from t2t_keras.training.memory_fit import host_memory

        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            (root / "meminfo").write_text("MemTotal:  2000 kB\nMemAvailable:    1000 kB\n")
            (root / "cgroup").mkdir()
            self.assertEqual(host_memory(root / "meminfo", root / "cgroup"), (1024000, "MemAvailable"))
            (root / "cgroup" / "memory.max").write_text("max\n")  # no limit
            (root / "cgroup" / "memory.current").write_text("500\n")
            self.assertEqual(host_memory(root / "meminfo", root / "cgroup")[0], 1024000)
            (root / "cgroup" / "memory.max").write_text("600500\n")
            available, where = host_memory(root / "meminfo", root / "cgroup")
            self.assertEqual(available, 600000)
            self.assertIn("cgroup", where)


def first_update(files, run_dir, **training):
    """The checkpoint after one update of the toy run (no dropout; Adam with ε = 1, so that its first update is about
    lr·g, proportional to the gradient, where with ε = 1e-9 it would be lr·sign(g) and flip with rounding)."""
    from t2t_keras.config import replace
    from t2t_keras.resolved_run import resolve_run
    from t2t_keras.training.trainer import train

    config = one_bucket_config(files, train_steps=1, adam_epsilon=1.0, **training)
    train(resolve_run(run_dir, replace(config, model={"dropout": 0.0})), verbose=0)
    path = tf.train.latest_checkpoint(str(run_dir / "checkpoints"))
    return {name: tf.train.load_variable(path, name) for name, _ in tf.train.list_variables(path)
            if name.startswith(("model/", "input_position", "optimizer/iterations"))}


class BatchSplitTest(TestCase):
    """A step estimated above `training.memory_limit_gb` gets its batches split and accumulated; one that cannot fit
    even one sequence is refused."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)
        cls.files = write_toy_corpus(cls.root / "data", train=120, max_words=3)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_split_batches_make_the_update_of_the_whole_batch(self):
        from t2t_keras.runs import RunDirectory

        config = one_bucket_config(self.files)  # 384 tokens: a batch holds 48 pairs of 8 tokens
        whole = estimate(config.model, "float32", 48, 8)
        halves = estimate(config.model, "float32", 24, 8, accumulating=True)  # and the running sum of gradients
        limit = (whole.total + halves.total) / 2 / GB
        unsplit = first_update(self.files, self.root / "whole")
        split = first_update(self.files, self.root / "split", memory_limit_gb=limit)
        run = RunDirectory(self.root / "split")
        record = run.read_json(run.memory_path)
        self.assertEqual((record["batch_split"], record["micro_batch_rows"]), (2, 24))
        self.assertEqual(record["unsplit_estimate_bytes"], whole.total)
        self.assertEqual(int(split["input_position/.ATTRIBUTES/VARIABLE_VALUE"]), 1)  # batches read, not parts
        self.assertEqual(sorted(split), sorted(unsplit))
        for name, value in split.items():
            # Rounding moves a weight by a few units in its last place; an update normalised otherwise (each part
            # by its own tokens, say) by a tenth of lr·g, about 1e-6 here.
            self.assertAllClose(value, unsplit[name], atol=2e-7, rtol=0, msg=name)

    def test_a_step_that_cannot_fit_one_sequence_is_refused(self):
        import yaml

        config_path = self.root / "toy.yaml"
        config_path.write_text(yaml.safe_dump(one_bucket_config(self.files).to_dict()))
        refused = cli_in_process("train", "--config", config_path, "--run-dir", self.root / "refused", "--set",
                                 "training.memory_limit_gb=0.01")
        self.assertEqual(refused.returncode, 2, refused.stderr.decode()[-2000:])
        message = refused.stderr.decode()
        self.assertIn("does not fit in memory even with one sequence of data.max_length=8", message)
        self.assertIn("0.01 GB are available (training.memory_limit_gb)", message)
        self.assertIn("weights 0.", message)
        self.assertIn("smaller model", message)


class DescribeTest(TestCase):
    def test_describe_prints_the_step_memory(self):
        described = cli_in_process("describe", "--config", "base")
        self.assertEqual(described.returncode, 0, described.stderr.decode())
        self.assertIn("training step memory: about", described.stdout.decode())
        self.assertIn("data.batch_tokens=25000 (195 x 128 tokens, float32;", described.stdout.decode())
        info = json.loads(cli_in_process("describe", "--config", "base", "--json").stdout)["training_step_memory"]
        base = load_config("base").model
        self.assertEqual(info["total_bytes"], estimate(base, "float32", 195, 128).total)
        self.assertGreater(info["parts"]["logits"], info["parts"]["weights"])  # the largest single tensor
