"""`t2t-keras distill`: a student trained on its teacher's translations (sequence-level distillation).

The teacher is a tiny untrained model saved as a run (no training): its embeddings are scaled up so that each
step of its search has a clear favourite, which makes its translations deterministic whatever the batches. The
toy corpus has 40 training sentences, distilled in shards of 15 (15, 15 and 10 sentences).
"""

import json
import pathlib
import shutil
import tempfile

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.build import build_model
from t2t_keras.config import load_config
from t2t_keras.data.shortlist import learn_shortlist, save_shortlist
from t2t_keras.data.text_files import read_parallel_files
from t2t_keras.data.tokenizer import train_sentencepiece
from t2t_keras.decoding.generator import Generator
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.distillation.distill import distill, prepare_student
from t2t_keras.distillation.distilled import shard_files
from t2t_keras.distillation.student import student_config
from t2t_keras.distillation.teacher import open_teacher, teacher_settings, training_sources
from t2t_keras.errors import ConfigError, T2TError
from t2t_keras.params import count_parameters
from t2t_keras.runs import RunDirectory, checkpoint_step, load_run_model
from tests.helpers import TestCase, cli_in_process, long_check, toy_pairs, write_toy_corpus

VOCAB = 100
SHARD = 15
BEAM = 2
TEACHER = ["model.hidden_dim=16", "model.num_heads=4", "model.intermediate_dim=32", f"data.vocab_size={VOCAB}",
           "decoding.shards=1", "decoding.max_extra_length=6", "decoding.alpha=0.6"]
# The student: the teacher's width and vocabulary, a two-layer encoder and a one-layer decoder, two updates.
STUDENT = ["model.hidden_dim=16", "model.num_heads=4", "model.intermediate_dim=32", f"data.vocab_size={VOCAB}",
           "model.num_layers=2", "model.num_decoder_layers=1", "data.max_length=24", "data.batch_tokens=96",
           "training.train_steps=2", "training.steps_per_epoch=2", "training.checkpoint_every_steps=2",
           "training.warmup_steps=10", "training.jit_compile=False", "training.checkpoint_every_minutes=600",
           "decoding.beam_size=1", "decoding.max_extra_length=6", "decoding.shards=1"]
# The student presets: (encoder layers, decoder layers, parameters) as docs/commands/distill-and-import.md lists them.
PRESETS = {"student-mini": (6, 1, 1966720), "student-mini-6-2": (6, 2, 2231296), "student-small": (6, 2, 8894464),
           "student-base": (12, 1, 60976640)}


class Interrupted(Exception):
    """Stands for a distillation killed after its first shard."""


def save_teacher(path, files, tokenizer_file, weights=True, preset="tiny"):
    """A teacher run of `preset` on the toy corpus `files`: its config, the tokenizer (unless None) and, with
    `weights`, an untrained model's checkpoint whose embeddings are scaled (clear favourites at each step)."""
    corpus = [f"data.{split}_files={files[split]!r}" for split in ("train", "dev", "test")]
    config = load_config(preset, TEACHER + ["data.source=text"] + corpus)
    run = RunDirectory(path)
    run.save_config(config)
    if tokenizer_file is not None:
        shutil.copy(tokenizer_file, run.tokenizer_file(config.data.tokenizer))
    if weights:
        keras.utils.set_random_seed(7)
        model = build_model(config.model)
        model.target_embedding.embeddings.assign(model.target_embedding.embeddings * 20)
        tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(run.checkpoint_dir), 1).save(1)
    return run


def lines(path):
    return pathlib.Path(path).read_text(encoding="utf-8").splitlines()


def student_options(**more):
    return dict(dict(overrides=tuple(STUDENT), beam_size=BEAM, shard_sentences=SHARD, jit_compile=False), **more)


@long_check
class DistillationTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = cls.root = pathlib.Path(cls.tmp.name)
        cls.files = write_toy_corpus(root / "data", train=40, dev=5, test=5)
        train_sentencepiece([s for pair in toy_pairs(200) for s in pair], root / "shared.model", VOCAB)
        cls.teacher = save_teacher(root / "teacher", cls.files, root / "shared.model")
        cls.sources = lines(cls.files["train"][0])
        cls.student = RunDirectory(root / "student")
        cls.result = distill(cls.teacher, cls.student, load_config("tiny", STUDENT), **student_options())
        # What the student must have learned from: the teacher's translations with the same settings.
        decoding = cls.teacher.load_config().decoding
        generator = Generator(load_run_model(cls.teacher), cls.teacher.load_tokenizer(), jit_compile=False, shards=1)
        request = GenerationRequest(beam_size=BEAM, alpha=decoding.alpha, max_extra_length=decoding.max_extra_length)
        cls.expected = generator.generate(cls.sources, request).best

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def cli_refuses(self, student, *args, message):
        """`t2t-keras distill ... --run-dir student ARGS` exits with 2 and `message`, and writes nothing there."""
        result = cli_in_process("distill", "--run-dir", student, "--config", "tiny", "--shard-sentences", SHARD,
                                *[arg for setting in STUDENT for arg in ("--set", setting)], *args)
        self.assertEqual(result.returncode, 2, result.stderr.decode()[-2000:])
        self.assertRegex(result.stderr.decode(), message)
        return result

    def test_the_students_training_data_are_the_teachers_translations_line_by_line(self):
        config = self.student.load_config()
        self.assertEqual(config.data.source, "text")
        self.assertEqual(config.data.train_files, self.result.corpus.train_files)
        source_file, target_file = config.data.train_files
        self.assertEqual(lines(source_file), self.sources)
        self.assertEqual(lines(target_file), self.expected)
        self.assertGreater(len(set(self.expected)), 1)  # varied translations, not one string repeated
        self.assertEqual([len(lines(shard_files(self.student, i)[1])) for i in range(3)], [15, 15, 10])
        self.assertEqual((self.result.corpus.shards, self.result.corpus.translated, self.result.corpus.skipped),
                         (3, 40, 0))

    def test_the_teachers_exact_settings_are_recorded_in_the_student(self):
        record = json.loads(self.student.distillation_path.read_text())
        settings = record["settings"]
        self.assertEqual(settings["teacher"], str(self.teacher.path.resolve()))
        self.assertEqual((settings["beam_size"], settings["alpha"], settings["max_extra_length"]), (BEAM, 0.6, 6))
        self.assertEqual((settings["precision"], settings["jit_compile"], settings["length_penalty"]),
                         ("float32", False, "gnmt"))
        self.assertEqual(settings["weights"]["source"], "latest")
        self.assertEqual(settings["weights"]["steps"], [1])
        self.assertEqual(len(settings["weights"]["sha256"]), 64)
        self.assertEqual(settings["sources"]["sentences"], 40)
        self.assertTrue(record["complete"])
        self.assertEqual(sorted(record["shards"]), ["0", "1", "2"])

    def test_the_student_shares_the_teachers_vocabulary_and_splits(self):
        config = self.student.load_config()
        theirs = self.teacher.tokenizer_file("bpe").read_bytes()
        self.assertEqual(self.student.tokenizer_file("bpe").read_bytes(), theirs)
        for split in ("dev", "test"):
            files = getattr(config.data, f"{split}_files")
            self.assertEqual(read_parallel_files(*files), read_parallel_files(*self.files[split]))
        self.assertEqual((config.model.num_layers, config.model.num_decoder_layers), (2, 1))

    def test_the_student_is_an_ordinary_run_that_trains_and_translates(self):
        self.assertEqual((self.result.training.start_step, self.result.training.final_step), (0, 2))
        self.assertEqual(checkpoint_step(self.student.checkpoint_paths()[-1]), 2)
        translated = cli_in_process("translate", "--run-dir", self.student, "--input", self.files["dev"][0])
        self.assertEqual(translated.returncode, 0, translated.stderr.decode()[-2000:])
        self.assertEqual(len(translated.stdout.decode().splitlines()), 5)
        for command in (("average", "--run-dir", self.student, "--last", "1"),
                        ("evaluate", "--run-dir", self.student, "--split", "dev", "--json")):
            result = cli_in_process(*command)
            self.assertEqual(result.returncode, 0, result.stderr.decode()[-2000:])
        self.assertEqual(json.loads(result.stdout)["split"], "dev")
        described = cli_in_process("describe", "--run-dir", self.student)
        self.assertEqual(described.returncode, 0, described.stderr.decode()[-2000:])
        self.assertIn("N=2 encoder / 1 decoder layers", described.stdout.decode())

    def test_an_interrupted_distillation_resumes_and_skips_what_is_done(self):
        run, config = RunDirectory(self.root / "resumed"), load_config("tiny", STUDENT)

        def interrupt(index):
            raise Interrupted(index)

        with self.assertRaises(Interrupted):
            prepare_student(self.teacher, run, config, **student_options(on_shard=interrupt))
        self.assertEqual(sorted(json.loads(run.distillation_path.read_text())["shards"]), ["0"])
        self.assertFalse(run.exists())  # no student config before the corpus is complete
        first = shard_files(run, 0)
        written = [(path.stat().st_mtime_ns, path.read_bytes()) for path in first]
        done = []
        resumed = prepare_student(self.teacher, run, config, **student_options(on_shard=done.append)).corpus
        self.assertEqual((done, resumed.translated, resumed.skipped), ([1, 2], 25, 1))
        self.assertEqual([(path.stat().st_mtime_ns, path.read_bytes()) for path in first], written)
        for ours, theirs in zip(resumed.train_files, self.result.corpus.train_files):
            self.assertEqual(pathlib.Path(ours).read_bytes(), pathlib.Path(theirs).read_bytes())
        shard_files(run, 2)[1].unlink()  # a shard lost: translated again, alone
        again = prepare_student(self.teacher, run, config, **student_options(on_shard=done.append)).corpus
        self.assertEqual((done, again.translated, again.skipped), ([1, 2, 2], 10, 2))
        self.assertEqual(lines(again.train_files[1]), self.expected)

    def test_a_resume_with_other_settings_is_refused_naming_the_fix(self):
        record = self.student.distillation_path.read_bytes()
        with self.assertRaisesRegex(T2TError, r"beam_size: 2 recorded, 3 now.*--beam 2.*or distil into a new"):
            prepare_student(self.teacher, self.student, load_config("tiny", STUDENT),
                            **student_options(beam_size=3))
        with self.assertRaisesRegex(ConfigError, "holds a student of another model config: resume it with the same"):
            prepare_student(self.teacher, self.student, load_config("tiny", STUDENT + ["model.num_layers=3"]),
                            **student_options())
        self.assertEqual(self.student.distillation_path.read_bytes(), record)

    def test_bad_teachers_are_clear_errors_that_write_nothing(self):
        root = self.root / "bad-teachers"
        lm = RunDirectory(root / "lm")
        lm.path.mkdir(parents=True)
        lm.save_config(load_config("lm-mini", [f"data.vocab_size={VOCAB}"]))
        cases = {
            "missing": (root / "missing", r"--teacher .*missing is not a run directory \(no config.yaml\)"),
            "lm": (lm.path, r"t2t-keras distill does not apply to .*, a lm model: it takes translation models"),
            "no-tokenizer": (save_teacher(root / "no-tokenizer", self.files, None).path,
                             r"has no tokenizer file \(tokenizer.model\), which its student shares: train the teacher"),
            "no-weights": (save_teacher(root / "no-weights", self.files, self.root / "shared.model", weights=False)
                           .path, r"has no weights to translate with: .*holds no checkpoint: train the run first"),
        }
        for name, (teacher, message) in cases.items():
            with self.subTest(name):
                student = root / f"student-{name}"
                self.cli_refuses(student, "--teacher", teacher, message=message)
                self.assertFalse(student.exists())
        with self.assertRaisesRegex(T2TError, "t2t-keras distill does not apply to .*, a lm model: it takes "
                                              "translation models"):
            open_teacher(lm)

    def test_a_student_of_another_vocabulary_or_corpus_is_refused(self):
        student = self.root / "student-bad-config"
        self.cli_refuses(student, "--teacher", self.teacher, "--set", "data.vocab_size=90",
                         message=r"The student's vocabulary differs from its teacher's \(data.vocab_size=90 in "
                                 r"--config tiny, 100 in the teacher; model.vocab_size=90 .*--set data.vocab_size=100")
        self.cli_refuses(student, "--teacher", self.teacher, "--set", "data.train_files=[a, b]",
                         message="--set data.train_files: distill decides the student's corpus")
        self.cli_refuses(student, "--teacher", self.teacher, "--original-weight", "0",
                         message="--original-weight must be a positive number")
        self.assertFalse(student.exists())

    def test_a_student_directory_holding_another_run_is_refused(self):
        other = RunDirectory(self.root / "other-run")
        other.save_config(load_config("tiny", STUDENT))
        before = sorted(path.name for path in other.path.iterdir())
        self.cli_refuses(other.path, "--teacher", self.teacher,
                         message="already holds a run that is not a distillation: distil into a new --run-dir")
        self.assertEqual(sorted(path.name for path in other.path.iterdir()), before)

    def test_the_original_weight_mixes_in_the_teachers_corpus(self):
        teacher = open_teacher(self.teacher)
        config = student_config(load_config("tiny", STUDENT), teacher, RunDirectory(self.root / "mixed"), 0.5)
        distilled, original = config.data.sources
        self.assertEqual((distilled["source"], distilled["weight"]), ("text", 1.0))
        self.assertTrue(distilled["train_files"][1].endswith("mixed/distilled/train.tgt"))
        self.assertTrue(distilled["dev_files"][0].endswith("mixed/distilled/dev.src"))
        self.assertEqual(original, {"source": "text", "train_files": self.files["train"], "weight": 0.5})

    def test_distill_without_config_resumes_the_student_with_its_own_config_and_original_weight(self):
        from t2t_keras import cli

        run = RunDirectory(self.root / "mixed-resumed")
        first = prepare_student(self.teacher, run, load_config("tiny", STUDENT), **student_options(original_weight=0.5))
        run.save_config(first.config)  # as the student's training writes it
        args = cli.build_parser().parse_args(["distill", "--teacher", "t", "--run-dir", str(run.path)])
        args.run_dir = run  # as cli.main opens it
        config, where, weight = student_config_of(args)
        self.assertEqual((config, where, weight), (run.load_config(), f"the config of {run.path}", 0.5))
        resumed = prepare_student(self.teacher, run, config, beam_size=BEAM, shard_sentences=SHARD, jit_compile=False,
                                  original_weight=weight, where=where)
        self.assertEqual((resumed.config, resumed.corpus.translated, resumed.corpus.skipped), (first.config, 0, 3))
        args.original_weight = 0.25  # another mixture is another student
        config, _, weight = student_config_of(args)
        with self.assertRaisesRegex(ConfigError, "holds a student of another data config: resume it with the same"):
            prepare_student(self.teacher, run, config, beam_size=BEAM, shard_sentences=SHARD, jit_compile=False,
                            original_weight=weight)

    def test_a_resume_keeps_the_search_its_shards_were_translated_with(self):
        """Without a choice (jit_compile None) a new distillation records the fast path's per-batch choice, "auto",
        and a resumed one the search it recorded (here graph mode), so a resume never mixes two searches."""
        sentences = training_sources(open_teacher(self.teacher))
        self.assertEqual(teacher_settings(open_teacher(self.teacher), sentences, BEAM, SHARD)["jit_compile"], "auto")
        run = RunDirectory(self.root / "graph-mode-first")
        prepare_student(self.teacher, run, load_config("tiny", STUDENT), **student_options(jit_compile=False))
        resumed = prepare_student(self.teacher, run, load_config("tiny", STUDENT), **student_options(jit_compile=None))
        self.assertEqual((resumed.corpus.translated, resumed.corpus.skipped), (0, 3))
        self.assertFalse(json.loads(run.distillation_path.read_text())["settings"]["jit_compile"])

    def test_an_empty_or_truncated_shortlist_is_a_clear_error(self):
        pairs = [(np.array([5, 6]), np.array([7, 8]))] * 3
        save_shortlist(self.student.shortlist_path, learn_shortlist(pairs, VOCAB, per_source=2, frequent=2))
        whole = self.student.shortlist_path.read_bytes()
        try:
            for content in (b"", whole[:len(whole) // 2]):
                self.student.shortlist_path.write_bytes(content)
                result = cli_in_process("translate", "--run-dir", self.student, "--input", self.files["dev"][0],
                                        "--shortlist")
                self.assertEqual(result.returncode, 2, result.stderr.decode()[-2000:])
                self.assertRegex(result.stderr.decode(), r"shortlist.npz is not a shortlist file .*: learn it with "
                                                         r"t2t-keras shortlist --run-dir")
        finally:
            self.student.shortlist_path.unlink()


def student_config_of(args):
    """`(config, where, original_weight)` of the parsed `distill` arguments `args`, as `t2t-keras distill` chooses
    them."""
    from t2t_keras import cli
    from t2t_keras.distillation.student import chosen_student_config

    return chosen_student_config(args.run_dir, args.config, args.overrides, args.original_weight, cli.STUDENT_PRESET)


class StudentPresetTest(TestCase):
    def test_student_presets_have_a_deep_encoder_and_a_shallow_decoder(self):
        for preset, (encoder, decoder, params) in PRESETS.items():
            with self.subTest(preset):
                model = load_config(preset).model
                self.assertEqual((model.num_layers, model.decoder_layers), (encoder, decoder))
                self.assertEqual(count_parameters(model)["total"], params)

    def test_distill_trains_a_student_preset_by_default(self):
        from t2t_keras import cli

        args = cli.build_parser().parse_args(["distill", "--teacher", "t", "--run-dir", "s"])
        self.assertEqual((args.config, args.beam_size, args.original_weight), (None, 4, None))
        with tempfile.TemporaryDirectory() as root:
            args.run_dir = RunDirectory(pathlib.Path(root) / "new-student")
            config, where, weight = student_config_of(args)
        self.assertEqual((config, where, weight), (load_config("student-mini"), "--config student-mini", None))
        self.assertIn("student-mini", PRESETS)


if __name__ == "__main__":
    tf.test.main()
