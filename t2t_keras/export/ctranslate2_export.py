"""Converting a trained Transformer to a CTranslate2 model directory, written atomically.

    export_ctranslate2_run("runs/base", "exports/base-ct2", quantization="int8")
    translator = ctranslate2.Translator("exports/base-ct2")

The directory holds what `ctranslate2.Translator` loads (`model.bin`,
`config.json`, `shared_vocabulary.json`), the run's SentencePiece model
(`tokenizer.model`) and `t2t_keras.json` (the model's length limit and the
run's decoding defaults), which `CTranslate2Translator` reads.

Runs with `data.tokenizer: bpe` or `unigram` export (both are SentencePiece
models, which `CTranslate2Translator` applies with the `sentencepiece`
package). A `wordpiece` run is refused before anything is written: CTranslate2
takes pieces, not text, and its translator would need TF-Text's WordPiece
tokenizer and our detokenizer beside it, the dependency this export exists to
avoid; export it as a SavedModel instead.

The weights are converted by `ctranslate2_converter.TransformerConverter`.
"""

import json
import logging
import pathlib

from t2t_keras.data.tokenizer import check_vocab_size
from t2t_keras.errors import T2TError
from t2t_keras.export.ctranslate2_converter import TransformerConverter
from t2t_keras.files import check_can_write, staged_directory
from t2t_keras.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID

logger = logging.getLogger(__name__)

QUANTIZATIONS = ("float32", "int8_float32", "int8")
METADATA_FILE = "t2t_keras.json"
TOKENIZER_FILE = "tokenizer.model"
SPECIAL_PIECES = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}


def export_ctranslate2_run(run_dir, out_dir, quantization="float32", average_last=None, source="auto",
                           overwrite=False, **defaults):
    """Converts the trained model of a run, with its tokenizer, to a CTranslate2 directory.

    Args:
        run_dir: a training run directory.
        out_dir: the directory to create.
        quantization: "float32", "int8_float32" or "int8" (weights in int8,
            the rest in float32 or, for "int8", chosen by CTranslate2).
        average_last: average the run's last N checkpoints first (§6.1) and
            export the average.
        source: which weights of the run, see `runs.load_run_model`.
        overwrite: replace an existing directory at `out_dir`.
        **defaults: decoding defaults `beam_size`, `alpha`, `max_extra_length`
            of `CTranslate2Translator`; those left out or None take the run
            config's `decoding` section.

    Returns:
        the output directory, a `pathlib.Path`.
    """
    from t2t_keras.data.tokenizers import load_tokenizer
    from t2t_keras.runs import RunDirectory, average_run, load_run_model

    run = RunDirectory(run_dir)
    config = run.load_config()
    check_sentencepiece(config.data.tokenizer)
    _check_tokenizer_file(run.tokenizer_path)
    _check_quantization(quantization)
    check_can_write(pathlib.Path(out_dir), overwrite)
    if average_last is not None:
        average_run(run_dir, average_last, checkpoint="best" if source == "best" else "last")
        source = "averaged"
    model = load_run_model(run_dir, source)
    return export_ctranslate2(model, load_tokenizer(run.tokenizer_path, config.data.tokenizer), out_dir,
                              quantization, _run_defaults(config.decoding, defaults), overwrite)


def _check_tokenizer_file(tokenizer_path):
    """Raises T2TError when the run's SentencePiece model file is missing."""
    if not tokenizer_path.exists():
        raise T2TError(f"{tokenizer_path} is missing: a CTranslate2 export needs the run's SentencePiece "
                       "model; train the run (which writes it) or copy it there.")


def _run_defaults(decoding, defaults):
    """`beam_size`, `alpha`, `max_extra_length` from `defaults`, or from the run's `decoding` where left out or None."""
    configured = {"beam_size": decoding.beam_size, "alpha": decoding.alpha,
                  "max_extra_length": decoding.extra_length}
    return {name: configured[name] if defaults.get(name) is None else defaults[name] for name in configured}


def export_ctranslate2(model, tokenizer, out_dir, quantization="float32", defaults=None, overwrite=False):
    """Writes `model` and `tokenizer` as a CTranslate2 model directory at `out_dir`, atomically.

    Args:
        model: a built `Transformer`.
        tokenizer: its `Tokenizer`, or None, which is an error: the directory
            must hold the SentencePiece model that maps text to its pieces.
        out_dir: the directory to create.
        quantization: see `export_ctranslate2_run`.
        defaults: decoding defaults stored for `CTranslate2Translator`
            (`beam_size`, `alpha`, `max_extra_length`).
        overwrite: replace an existing directory.

    Raises:
        UnsupportedModelError: naming what CTranslate2 cannot express.
        T2TError: no tokenizer, a WordPiece tokenizer, or an unknown quantization.
        FileExistsError: `out_dir` exists and `overwrite` is False.
    """
    if tokenizer is None:
        raise T2TError("A CTranslate2 export needs the model's tokenizer (its SentencePiece model): "
                       "pass the run's Tokenizer, e.g. Tokenizer.load('RUN/tokenizer.model').")
    check_sentencepiece(tokenizer.kind)
    _check_quantization(quantization)
    out_dir = pathlib.Path(out_dir)
    check_can_write(out_dir, overwrite)
    check_vocab_size(tokenizer.vocab_size, model.vocab_size)
    spec = TransformerConverter(model, vocabulary(tokenizer.model_bytes)).spec()
    metadata = {"max_length": int(model.max_length), "quantization": quantization,
                "defaults": dict(defaults or {"beam_size": 4, "alpha": 0.6, "max_extra_length": 50})}

    with staged_directory(out_dir, overwrite) as staging:
        spec.validate()
        spec.optimize(quantization=quantization)
        spec.save(str(staging))
        (staging / TOKENIZER_FILE).write_bytes(tokenizer.model_bytes)
        (staging / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    logger.info("Exported a CTranslate2 model (%s) to %s", quantization, out_dir)
    return out_dir


def vocabulary(model_bytes):
    """The SentencePiece pieces in id order, checked to have our special pieces at ids 0-3."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=model_bytes)
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    for index, piece in SPECIAL_PIECES.items():
        if pieces[index] != piece:
            raise T2TError(f"The tokenizer's piece {index} is {pieces[index]!r}, not {piece!r}: CTranslate2 finds "
                           "the special tokens by name; retrain the tokenizer with t2t_keras (pad=0, unk=1, "
                           "bos=2, eos=3).")
    return pieces


def check_sentencepiece(kind):
    """Raises T2TError unless the run's `data.tokenizer` is a SentencePiece one, which a CTranslate2 export ships."""
    if kind not in ("bpe", "unigram"):
        raise T2TError(f"A CTranslate2 export ships a SentencePiece model (data.tokenizer bpe or unigram), but this "
                       f"model's tokenizer is {kind!r}: export it as a SavedModel (t2t-keras export --format "
                       "saved_model), or train a bpe or unigram run for CTranslate2.")


def _check_quantization(quantization):
    if quantization not in QUANTIZATIONS:
        raise T2TError(f"quantization must be one of {QUANTIZATIONS}. Received: quantization={quantization!r}")
