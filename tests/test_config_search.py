"""The main job's configuration search (bench/config_search.py): every candidate is a valid `mini` that differs
where it says, records are kept per machine class, and a candidate recorded there is not trained again."""

import importlib.util
import json
import pathlib
import shutil
import tempfile
from unittest import mock

from t2t_keras.config import load_config, parse_override
from tests.helpers import TestCase

HERE = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("config_search", HERE / "bench" / "config_search.py")
config_search = importlib.util.module_from_spec(spec)
spec.loader.exec_module(config_search)

AVX2 = "flags\t\t: fpu sse avx avx2 fma\nmodel name\t: AMD EPYC\ncpu family\t: 25\nmodel\t\t: 1\n"
BF16 = "flags\t\t: fpu avx2 avx512f avx512_bf16\nmodel name\t: AMD EPYC\ncpu family\t: 25\nmodel\t\t: 17\n"


def machine_of(cpuinfo):
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "cpuinfo"
        path.write_text(cpuinfo)
        return config_search.machine(path)


class CandidatesTest(TestCase):
    def test_every_candidate_is_a_valid_mini_that_changes_what_it_names(self):
        mini = load_config("mini").to_dict()
        for name, (_, overrides) in config_search.CANDIDATES.items():
            config = load_config("mini", overrides).to_dict()
            for text in overrides:
                ((section, values),) = parse_override(text).items()
                ((key, value),) = values.items()
                self.assertEqual(config[section][key], value, f"{name}: {text}")
                self.assertNotEqual(mini[section][key], value, f"{name}: {text} is mini's own value")
        self.assertEqual(config_search.CANDIDATES["mini"][1], [])


class MachineTest(TestCase):
    def test_the_class_tells_avx2_from_bfloat16(self):
        avx2, bf16 = machine_of(AVX2), machine_of(BF16)
        self.assertEqual(avx2["class"], "AMD EPYC, avx2")
        self.assertEqual(bf16["class"], "AMD EPYC, avx512+bf16")
        self.assertEqual(bf16["bfloat16"], ["avx512_bf16"])
        self.assertEqual(avx2["cpu_family_model"], "25/1")


class TrainTest(TestCase):
    def run_train(self, record, names, cpuinfo=AVX2, again=False, extra=()):
        calls = []
        self.commands = []

        def t2t(*args, capture=False):
            calls.append(args[0])
            self.commands.append([str(arg) for arg in args])
            run_dir = pathlib.Path(args[args.index("--run-dir") + 1])
            if args[0] == "train":
                run_dir.mkdir(parents=True)
                (run_dir / "timing.json").write_text(json.dumps([{"final_step": 2750, "seconds": 1800.0,
                                                                  "parts": {"training steps": 1500.0}}]))
                (run_dir / "quality.json").write_text(json.dumps({"points": [{"loss": 3.1}]}))
            return json.dumps({"bleu": 17.25, "chrf": 44.5}) + "\n"

        root, here = pathlib.Path(record).parent / "runs", machine_of(cpuinfo)
        with mock.patch.object(config_search, "t2t", t2t), mock.patch.object(config_search, "commit", lambda: "abc"), \
                mock.patch.object(config_search, "machine", lambda: here):
            config_search.main(["--record", str(record), "train", *names, "--minutes", "30", "--root", str(root)]
                               + (["--again"] if again else []) + list(extra))
        return calls

    def test_keep_checkpoints_keeps_more_on_disk_and_trains_the_same(self):
        with tempfile.TemporaryDirectory() as tmp:
            self.run_train(pathlib.Path(tmp) / "search.json", ["lr3"], extra=["--keep-checkpoints", "12"])
            train, average, _ = self.commands
            self.assertEqual(train[train.index("--set") + 1:], ["training.learning_rate_scale=3.0", "--set",
                                                                "training.keep_checkpoints=12"])
            self.assertEqual(average[-2:], ["--last", str(config_search.AVERAGE)])

    def test_a_recorded_candidate_is_skipped_on_its_class_only(self):
        with tempfile.TemporaryDirectory() as tmp:
            record = pathlib.Path(tmp) / "search.json"
            self.assertEqual(self.run_train(record, ["lr3"]), ["train", "average", "evaluate"])
            (row,) = json.loads(record.read_text())["runs"]
            self.assertEqual((row["candidate"], row["updates"], row["train_share"], row["dev_bleu"], row["dev_chrf"]),
                             ("lr3", 2750, 0.833, 17.25, 44.5))
            self.assertEqual(row["overrides"], ["training.learning_rate_scale=3.0"])
            self.assertEqual(self.run_train(record, ["lr3"]), [])  # recorded on this class
            self.assertEqual(self.run_train(record, ["lr3"], cpuinfo=BF16), ["train", "average", "evaluate"])
            self.assertEqual(len(json.loads(record.read_text())["runs"]), 2)

    def test_a_record_relative_to_another_mini_is_another_configuration(self):
        with tempfile.TemporaryDirectory() as tmp:
            record = pathlib.Path(tmp) / "search.json"
            self.assertEqual(self.run_train(record, ["mini"]), ["train", "average", "evaluate"])
            self.assertEqual(self.run_train(record, ["mini"]), [])  # recorded relative to today's mini
            data = json.loads(record.read_text())
            self.assertEqual(data["runs"][0]["preset"], config_search.preset_digest())
            data["runs"][0]["preset"] = "mini at N=3"  # as the records made before the preset took two layers
            record.write_text(json.dumps(data))
            shutil.rmtree(data["runs"][0]["run_dir"])
            self.assertEqual(self.run_train(record, ["mini"]), ["train", "average", "evaluate"])
            with mock.patch.object(config_search, "load_config",
                                   lambda name: load_config(name, ["model.num_layers=5"])):
                self.assertNotEqual(config_search.preset_digest(), json.loads(record.read_text())["runs"][1]["preset"])

    def test_again_refuses_to_train_over_an_earlier_run_directory(self):
        with tempfile.TemporaryDirectory() as tmp:
            record = pathlib.Path(tmp) / "search.json"
            self.run_train(record, ["drop0"])
            with self.assertRaisesRegex(SystemExit, "exists: a candidate trains from a fresh run directory"):
                self.run_train(record, ["drop0"], again=True)

    def test_score_records_a_trained_run_once(self):
        with tempfile.TemporaryDirectory() as tmp:
            record = pathlib.Path(tmp) / "search.json"
            root, here = pathlib.Path(tmp) / "runs", machine_of(AVX2)
            calls = []

            def t2t(*args, capture=False):
                calls.append(args[0])
                return json.dumps({"bleu": 21.5, "chrf": 49.0}) + "\n"

            def score():
                with mock.patch.object(config_search, "t2t", t2t), \
                        mock.patch.object(config_search, "commit", lambda: "abc"), \
                        mock.patch.object(config_search, "machine", lambda: here):
                    config_search.main(["--record", str(record), "score", "layers3", "--root", str(root),
                                        "--commit", "def"])

            with self.assertRaisesRegex(SystemExit, "no finished training"):
                score()
            run_dir = root / config_search.slug(here["class"]) / "layers3-30min"
            run_dir.mkdir(parents=True)
            (run_dir / "timing.json").write_text(json.dumps([{"final_step": 5027, "seconds": 1800.0,
                                                              "parts": {"training steps": 1620.0}}]))
            score()
            self.assertEqual(calls, ["average", "evaluate"])
            (row,) = json.loads(record.read_text())["runs"]
            self.assertEqual((row["candidate"], row["updates"], row["train_share"], row["dev_bleu"], row["commit"]),
                             ("layers3", 5027, 0.9, 21.5, "def"))  # the training's commit, not the scoring's
            with self.assertRaisesRegex(SystemExit, "already recorded"):
                score()

