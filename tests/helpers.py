"""Small models and inputs shared by the tests."""

import collections
import contextlib
import io
import math
import subprocess
import sys
import traceback

import numpy as np
import tensorflow as tf

from t2t_keras.model import Transformer
from t2t_keras.special_ids import EOS_ID

TINY = dict(vocab_size=50, hidden_dim=16, num_layers=2, num_heads=4, intermediate_dim=32)


def tiny_transformer(**overrides):
    """A 2-layer d_model=16 Transformer with dropout switched off, built."""
    kwargs = dict(TINY, dropout=0.0)
    kwargs.update(overrides)
    model = Transformer(**kwargs)
    model.build()
    return model


def random_ids(batch, length, vocab_size=50, seed=0, low=4):
    """Token ids in [low, vocab_size): no padding or special ids."""
    return np.random.default_rng(seed).integers(low, vocab_size, size=(batch, length)).astype("int32")


def long_check(target):
    """Marks a test class or one test as a long check: `bash bench/checks/run` runs it, `tests/run` leaves it out.

    For what trains, exports or serves for minutes on 2 cores: the suite stays under 15 minutes there."""
    target.long_check = True
    return target


class TestCase(tf.test.TestCase):
    """tf.test.TestCase without its inherited `test_session` helper, which unittest would report as skipped."""

    test_session = None


ENGLISH = ("the cat dog house tree sees big small red green runs sleeps under over near a man woman child "
           "eats drinks water bread old new").split()
GERMAN = ("die Katze Hund Haus Baum sieht gross klein rot gruen rennt schlaeft unter ueber nahe ein Mann Frau "
          "Kind isst trinkt Wasser Brot alt neu").split()


def toy_pairs(count, seed=0, min_words=3, max_words=8):
    """English-like sentences and their word-by-word 'German' translations: learnable in a few hundred steps."""
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(count):
        words = rng.integers(0, len(ENGLISH), size=rng.integers(min_words, max_words + 1))
        pairs.append((" ".join(ENGLISH[i] for i in words), " ".join(GERMAN[i] for i in words)))
    return pairs


def write_toy_corpus(directory, train=400, dev=40, test=40, max_words=8):
    """Writes train/dev/test .en/.de files; returns {split: [source_path, target_path]}."""
    import pathlib

    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = {}
    for offset, (split, count) in enumerate((("train", train), ("dev", dev), ("test", test))):
        pairs = toy_pairs(count, seed=offset, max_words=max_words)
        paths = [directory / f"{split}.en", directory / f"{split}.de"]
        for path, side in zip(paths, zip(*pairs)):
            path.write_text("\n".join(side) + "\n", encoding="utf-8")
        files[split] = [str(p) for p in paths]
    return files


def toy_config(files, **training):
    """The tiny preset on a toy corpus: 100-piece vocabulary, short sequences, no XLA (fast compiles)."""
    from t2t_keras.config import load_config

    overrides = {
        "data.source": "text", "data.train_files": files["train"], "data.dev_files": files["dev"],
        "data.test_files": files["test"], "data.vocab_size": 100, "data.max_length": 24,
        "data.batch_tokens": 384, "data.shuffle_buffer": 100,
        "training.train_steps": 6, "training.steps_per_epoch": 3, "training.checkpoint_every_steps": 3,
        "training.warmup_steps": 10, "training.jit_compile": False,
        "training.checkpoint_every_minutes": 600,  # checkpoints by steps only, however slow the machine
    }
    overrides.update({f"training.{k}": v for k, v in training.items()})
    return load_config("tiny", [f"{k}={v!r}" if isinstance(v, list) else f"{k}={v}" for k, v in overrides.items()])


def one_bucket_config(files, **training):
    """`toy_config` with one layer in each stack, pairs of at most 8 tokens and no dev split: on a corpus of
    `write_toy_corpus(..., max_words=3)` every batch has one shape, so each compiled model traces its train step
    once. For tests that train several short runs."""
    from t2t_keras.config import replace

    return replace(toy_config(files, **training), model={"num_layers": 1}, data={"max_length": 8, "dev_files": None})


def padded_ids(rows, width):
    """int32 `(len(rows), width)` array of id lists, right-padded with 0."""
    array = np.zeros((len(rows), width), np.int32)
    for i, row in enumerate(rows):
        array[i, :len(row)] = row
    return array


def train_toy_model(pieces, pairs, epochs=15, seed=1, **overrides):
    """A tiny model (d_model=32, max_length=64) fitted to toy `pairs` for `epochs` (about 200 steps).

    Brief training gives searches clear winners, so comparisons of two
    decoders need no near-ties. `pieces` is a `sentencepiece.SentencePieceProcessor`.
    """
    import keras

    from t2t_keras.training.optimizer import FusedAdam

    keras.utils.set_random_seed(seed)
    kwargs = dict(vocab_size=pieces.get_piece_size(), max_length=64, hidden_dim=32, intermediate_dim=64)
    kwargs.update(overrides)
    model = tiny_transformer(**kwargs)
    sources = [pieces.encode(s) + [3] for s, _ in pairs]
    targets = [pieces.encode(t) for _, t in pairs]
    width = max(len(r) for r in sources + targets) + 1
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)
    model.compile(FusedAdam(3e-3), loss, jit_compile=False)  # Keras' Adam's update, one op per weight to trace
    examples = ((padded_ids(sources, width), padded_ids([[2] + t for t in targets], width)),
                padded_ids([t + [3] for t in targets], width))
    # Whole batches only: a last, smaller batch would trace the training step a second time.
    batches = tf.data.Dataset.from_tensor_slices(examples).shuffle(len(sources), seed=seed)
    model.fit(batches.batch(32, drop_remainder=True), epochs=epochs, verbose=0)
    return model


class ToyTranslation(collections.namedtuple("ToyTranslation", "tokenizer pieces pairs model")):
    """A 100-piece vocabulary of `toy_pairs(400)` (`tokenizer`, and as `pieces` a SentencePieceProcessor), the
    pairs, and `train_toy_model` fitted to them."""


_TOY_TRANSLATION = []


def toy_translation():
    """The `ToyTranslation`, trained once per process: the test modules that use it and land in the same worker
    process of the runner train it once. Its users read it and never change its weights."""
    if not _TOY_TRANSLATION:
        import atexit
        import pathlib
        import shutil
        import tempfile

        import sentencepiece as spm

        from t2t_keras.data.tokenizer import train_sentencepiece

        directory = tempfile.mkdtemp(prefix="t2t-toy-translation-")
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        pairs = toy_pairs(400)
        tokenizer = train_sentencepiece([s for p in pairs for s in p], pathlib.Path(directory) / "tok.model", 100)
        pieces = spm.SentencePieceProcessor(model_proto=tokenizer.model_bytes)
        _TOY_TRANSLATION.append(ToyTranslation(tokenizer, pieces, pairs, train_toy_model(pieces, pairs)))
    return _TOY_TRANSLATION[0]


def cli_in_process(*args, stdin=b""):
    """`t2t-keras ARGS` run by `cli.main` in this process, with `stdin` as its standard input: a CompletedProcess
    whose stdout and stderr are bytes. It spares each call a Python and TensorFlow start-up; the tests of the
    entry point itself start a real process."""
    from t2t_keras import cli

    out, err = io.StringIO(), io.StringIO()
    saved_stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main([str(arg) for arg in args])
            except SystemExit as exit_:  # argparse's usage errors
                code = exit_.code if isinstance(exit_.code, int) else 1
            except Exception:  # noqa: BLE001 - what the process would print before exiting with 1
                traceback.print_exc()
                code = 1
    finally:
        sys.stdin = saved_stdin
    return subprocess.CompletedProcess(["t2t-keras", *map(str, args)], code, out.getvalue().encode("utf-8"),
                                       err.getvalue().encode("utf-8"))


def unigram_perplexity(tokenizer, train_lines, eval_lines, with_eos):
    """Perplexity of the add-one-smoothed piece unigram of `train_lines` on `eval_lines` (EOS too if `with_eos`)."""
    def piece_counts(lines):
        ragged = tokenizer.tokenize(tf.constant(lines, tf.string))
        counts = np.bincount(ragged.flat_values.numpy(), minlength=tokenizer.vocab_size).astype(np.float64)
        if with_eos:
            counts[EOS_ID] += len(lines)  # one EOS per line
        return counts

    counts = piece_counts(train_lines)
    log_probs = np.log((counts + 1) / (counts.sum() + tokenizer.vocab_size))
    held_out = piece_counts(eval_lines)
    nll = -np.dot(held_out, log_probs) / held_out.sum()
    return math.exp(nll)


class TokenizerHolder(tf.Module):
    """A module holding a tokenizer, as an exported translator does: tokenize and detokenize as tf.functions."""

    def __init__(self, tokenizer):
        super().__init__()
        self.tokenizer = tokenizer

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(self, strings):
        return self.tokenizer.tokenize(strings)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def detokenize(self, ids):
        return self.tokenizer.detokenize(ids)


def best_texts(generator, lines, request=None, **fields):
    """The best text of each line from an artifact (its request with `fields`) or a `Generator` (`request`)."""
    if request is None:
        request = generator.request(**fields)
    return generator.generate(list(lines), request).best


def predicted(artifact, lines, **fields):
    """`generate` of `lines` under the artifact's request with `fields`, as columns: translations (n-best lists),
    scores, truncation flags and errors."""
    generation = artifact.generate(list(lines), artifact.request(**fields))
    return {"translations": generation.texts, "scores": generation.scores, "truncated": generation.truncated,
            "errors": generation.errors}
