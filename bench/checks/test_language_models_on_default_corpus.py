"""A long check (`bash bench/checks/run`): a tiny causal LM and a tiny masked LM trained on the German side of
the default corpus (the LibreOffice help).

Real text, not a grammar: after a few hundred steps each model must be well below the perplexity of the
add-one-smoothed piece unigram of the training text, which the test computes with the run's own tokenizer. The
masked LM learns from the ~15% masked positions only, so it gets more steps and pre-LN: the post-LN encoder of
`tiny` was still near the unigram after 500 steps (444 against 467; 315 after 400 steps at half the rate), the
pre-LN one reaches 253 in 800.
The corpus is prepared as `t2t-keras main` prepares it (one `apt-get download` of the help packages, then a
cache); on a machine where apt cannot fetch them, the module is skipped with the reason. Both runs have the same
data settings, so they share one vocabulary: the first run trains it, the second starts with a copy.
"""

import json
import pathlib
import shutil
import tempfile
import unittest

from t2t_keras.data.libreoffice import prepare_libreoffice_corpus
from t2t_keras.errors import T2TError
from t2t_keras.runs import RunDirectory
from tests.helpers import TestCase, cli_in_process, long_check, unigram_perplexity

CORPUS = None
TOKENIZER = None  # the first run's tokenizer file, kept in VOCABULARY for the second run
VOCABULARY = None


def setUpModule():
    global CORPUS, VOCABULARY
    try:
        CORPUS = prepare_libreoffice_corpus("de", progress=False)
    except (T2TError, OSError) as error:
        raise unittest.SkipTest(f"the default corpus cannot be prepared here ({error}); it needs apt package lists "
                                "(`bash scripts/apt-lists.sh`) and access to a Debian mirror") from error
    VOCABULARY = tempfile.TemporaryDirectory()


def tearDownModule():
    VOCABULARY.cleanup()


def german(split):
    return CORPUS.files(split)[1].read_text("utf-8").splitlines()


@long_check
class _DefaultCorpusRun(TestCase):
    architecture = None
    steps = None
    extra_settings = ()

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.run_dir = pathlib.Path(cls.tmp.name) / "run"
        settings = [f"model.architecture={cls.architecture}", "data.lm_side=target", "data.max_length=48",
                    f"training.train_steps={cls.steps}", f"training.steps_per_epoch={cls.steps}",
                    f"training.checkpoint_every_steps={cls.steps}", "training.warmup_steps=100",
                    "training.jit_compile=False", "training.attention_every_steps=0", "model.dropout=0.0",
                    *cls.extra_settings]
        global TOKENIZER
        if TOKENIZER is not None:  # the vocabulary the first run trained on the same training split
            cls.run_dir.mkdir()
            shutil.copy(TOKENIZER, cls.run_dir)
        result = cli_in_process("train", "--config", "tiny", "--run-dir", cls.run_dir,
                                *[arg for setting in settings for arg in ("--set", setting)])
        assert result.returncode == 0, result.stderr.decode()[-3000:]
        run = RunDirectory(cls.run_dir)
        cls.tokenizer = run.load_tokenizer()
        if TOKENIZER is None:
            TOKENIZER = shutil.copy(run.tokenizer_file(run.load_config().data.tokenizer), VOCABULARY.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def dev_perplexity(self):
        result = cli_in_process("evaluate", "--run-dir", self.run_dir, "--split", "dev", "--json")
        self.assertEqual(result.returncode, 0, result.stderr.decode()[-3000:])
        return json.loads(result.stdout.decode().splitlines()[-1])


class CausalLanguageModelOnTheDefaultCorpusTest(_DefaultCorpusRun):
    architecture = "decoder_only"
    steps = 300

    def test_dev_perplexity_is_well_below_the_unigram(self):
        result = self.dev_perplexity()
        unigram = unigram_perplexity(self.tokenizer, german("train"), german("dev"), with_eos=True)
        self.assertEqual(result["task"], "lm")
        self.assertLess(result["perplexity"], 0.6 * unigram, f"unigram perplexity {unigram:.1f}")


class MaskedLanguageModelOnTheDefaultCorpusTest(_DefaultCorpusRun):
    architecture = "encoder_only"
    steps = 800
    extra_settings = ("model.normalize_first=true",)

    def test_dev_perplexity_is_well_below_the_unigram(self):
        result = self.dev_perplexity()
        unigram = unigram_perplexity(self.tokenizer, german("train"), german("dev"), with_eos=False)
        self.assertEqual(result["task"], "mlm")
        self.assertLess(result["perplexity"], 0.6 * unigram, f"unigram perplexity {unigram:.1f}")


if __name__ == "__main__":
    unittest.main()
