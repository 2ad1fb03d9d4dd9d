"""Converting a trained Transformer to a CTranslate2 model directory, written atomically.

    export_ctranslate2_run("runs/base", "exports/base-ct2", quantization="int8")
    translator = ctranslate2.Translator("exports/base-ct2")

The directory holds what `ctranslate2.Translator` loads (`model.bin`,
`config.json`, `shared_vocabulary.json`), the run's SentencePiece model
(`tokenizer.model`) and `t2t_keras.json` (the model's length limit and the
run's decoding defaults), which `artifacts.ctranslate2.CTranslate2Artifact` reads.

With a vocabulary shortlist (`export --shortlist`) the directory also holds
`vmap.txt`, CTranslate2's vocabulary map: one line per source piece with
entries, `piece<TAB>target target ...`, and a line with an empty key listing the
frequent target pieces, which CTranslate2 allows in every batch (as it always
allows UNK, BOS and EOS). `translate_batch(..., use_vmap=True)` then restricts
the output layer to the batch's candidates; `CTranslate2Artifact` passes it
when the metadata says `"shortlist": true`.

Runs with `data.tokenizer: bpe` or `unigram` export (both are SentencePiece
models, which `CTranslate2Artifact` applies with the `sentencepiece`
package). A `wordpiece` run is refused before anything is written: CTranslate2
takes pieces, not text, and its translator would need TF-Text's WordPiece
tokenizer and our detokenizer beside it, the dependency this export exists to
avoid; export it as a SavedModel instead.

An imported checkpoint's run (`data.tokenizer: pretrained`, `t2t-keras import`) exports with its own
vocabularies (the checkpoint's pieces in id order, a source vocabulary of its own where it has one) and special
tokens (Marian's decoder starts from its padding token, M2M-100's from its end token), its switches (unscaled
embeddings, Marian's and fairseq's sinusoids, the logits bias, pre-LN with final norms, ReLU, GELU or swish), and
its tokenizer archive (`tokenizer.zip`), with which `CTranslate2Artifact` makes the tokens: CTranslate2 then
translates it with the tokens CTranslate2's own `TransformersConverter` gives the same Hugging Face checkpoint
(`tests/test_pretrained_decoding.py`). Marian's decoder starts from the padding token's embedding, as
transformers' does (the converter's `start_from_zero_embedding` assumes that row is zero, as it is in OPUS-MT's
checkpoints).

The weights are converted by `ctranslate2_converter.TransformerConverter`, which gives CTranslate2 float32 arrays
(then `--quantization`): a model of bfloat16 weights (`import --precision bfloat16`) is widened, exactly.
"""

import json
import logging
import pathlib

from t2t_keras.data.tokenizer import check_vocab_size
from t2t_keras.decoding.quality_model import QUALITY_ESTIMATE_FILE
from t2t_keras.decoding.request import DEFAULTS, GenerationRequest
from t2t_keras.decoding.shortlist import PADDING
from t2t_keras.errors import T2TError
from t2t_keras.export.ctranslate2_converter import TransformerConverter
from t2t_keras.export.ctranslate2_files import (
    METADATA_FILE,
    PRETRAINED_TOKENIZER_FILE,
    TOKENIZER_FILE,
    VMAP_FILE,
)
from t2t_keras.files import check_can_write, staged_directory, write_text_atomic
from t2t_keras.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID

logger = logging.getLogger(__name__)

QUANTIZATIONS = ("float32", "int8_float32", "int8")
SPECIAL_PIECES = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
CTRANSLATE2_TOKENS = {"unk_token": "unk", "bos_token": "bos", "eos_token": "eos",
                      "decoder_start_token": "decoder_start"}


def export_ctranslate2_run(run_dir, out_dir, quantization="float32", average_last=None, source="auto",
                           overwrite=False, request=None, shortlist=None):
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
        request: the `GenerationRequest` a `CTranslate2Artifact` defaults to; None takes the run's (its
            `decoding` section).
        shortlist: true writes the run's vocabulary shortlist (RUN/shortlist.npz) as `vmap.txt`.

    Returns:
        the output directory, a `pathlib.Path`.
    """
    from t2t_keras.data.tokenizers import load_tokenizer
    from t2t_keras.runs import open_run, weights_to_export

    run = open_run(run_dir)
    config = run.load_config()
    check_sentencepiece(config.data.tokenizer)
    tokenizer_path = run.tokenizer_file(config.data.tokenizer)
    _check_tokenizer_file(tokenizer_path)
    _check_quantization(quantization)
    check_can_write(pathlib.Path(out_dir), overwrite)
    table = run.load_shortlist() if shortlist else None
    model, record = weights_to_export(run, source, average_last)
    out_dir = export_ctranslate2(model, load_tokenizer(tokenizer_path, config.data.tokenizer), out_dir, quantization,
                                 request or GenerationRequest.from_config(config.decoding), overwrite, record, table)
    _copy_quality_estimate(run, out_dir)
    return out_dir


def _copy_quality_estimate(run, out_dir):
    """The run's quality estimate (`t2t-keras qe-train`), if it has one, copied beside the model: the artifact
    applies it to its translations."""
    estimate = run.path / QUALITY_ESTIMATE_FILE
    if estimate.exists():
        write_text_atomic(out_dir / QUALITY_ESTIMATE_FILE, estimate.read_text(encoding="utf-8"))


def _check_tokenizer_file(tokenizer_path):
    """Raises T2TError when the run's SentencePiece model file is missing."""
    if not tokenizer_path.exists():
        raise T2TError(f"{tokenizer_path} is missing: a CTranslate2 export needs the run's SentencePiece "
                       "model; train the run (which writes it) or copy it there.")


def export_ctranslate2(model, tokenizer, out_dir, quantization="float32", request=DEFAULTS, overwrite=False,
                       weights=None, shortlist=None):
    """Writes `model` and `tokenizer` as a CTranslate2 model directory at `out_dir`, atomically.

    Args:
        model: a built `Transformer`.
        tokenizer: its tokenizer (a SentencePiece `Tokenizer` or an imported checkpoint's), or None, which is an
            error: the directory must hold what maps text to its pieces.
        out_dir: the directory to create.
        quantization: see `export_ctranslate2_run`.
        request: the `GenerationRequest` stored as a `CTranslate2Artifact`'s defaults (`beam_size`, `alpha`,
            `max_extra_length`, `max_output_length`).
        overwrite: replace an existing directory.
        weights: which weights of a run the model holds (`runs.export_record`), recorded in the metadata.
        shortlist: None, or a vocabulary shortlist (`data.shortlist.Shortlist`) written as `vmap.txt`.

    Raises:
        UnsupportedModelError: naming what CTranslate2 cannot express.
        T2TError: no tokenizer, a WordPiece tokenizer, or an unknown quantization.
        FileExistsError: `out_dir` exists and `overwrite` is False.
    """
    out_dir = pathlib.Path(out_dir)
    _check_export(model, tokenizer, quantization, out_dir, overwrite)
    converter = converter_of(model, tokenizer)
    vmap = None if shortlist is None else vmap_text(shortlist, converter.pieces)
    spec = converter.spec()
    metadata = _metadata(model, tokenizer, quantization, request, weights, shortlist is not None)

    with staged_directory(out_dir, overwrite, _model_bytes(model, quantization), " for the weights") as staging:
        _write_model_files(staging, spec, quantization, tokenizer, metadata, vmap)
    logger.info("Exported a CTranslate2 model (%s) to %s", quantization, out_dir)
    return out_dir


def _write_model_files(directory, spec, quantization, tokenizer, metadata, vmap):
    """What a CTranslate2 directory holds: the model (`spec`, quantized), the tokenizer, our metadata and, with
    a shortlist, the vocabulary map."""
    spec.validate()
    spec.optimize(quantization=quantization)
    spec.save(str(directory))
    _save_tokenizer(tokenizer, directory)
    (directory / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    if vmap is not None:
        (directory / VMAP_FILE).write_text(vmap, encoding="utf-8")


def _save_tokenizer(tokenizer, directory):
    """The tokenizer beside the model: a SentencePiece model of ours, or an imported checkpoint's archive."""
    if tokenizer.kind == "pretrained":
        tokenizer.save(directory / PRETRAINED_TOKENIZER_FILE)
    else:
        (directory / TOKENIZER_FILE).write_bytes(tokenizer.model_bytes)


def _metadata(model, tokenizer, quantization, request, weights, shortlist):
    """`t2t_keras.json`: the model's length limit, the export's defaults and how it was made."""
    return {"max_length": int(model.max_length), "quantization": quantization, "weights": weights,
            "defaults": {"beam_size": request.beam_size, "alpha": request.alpha,
                         "max_extra_length": request.max_extra_length, "max_output_length": request.max_output_length},
            "shortlist": shortlist, "tokenizer": tokenizer.kind}


def _model_bytes(model, quantization):
    """About the size of model.bin: the weights in float32 (the converter's, whatever the model's), a quarter of
    that in int8."""
    return 4 * model.count_params() // (4 if quantization.startswith("int8") else 1)


def _check_export(model, tokenizer, quantization, out_dir, overwrite):
    """Refuses, before anything is written, what a CTranslate2 export of `model` cannot hold."""
    if tokenizer is None:
        raise T2TError("A CTranslate2 export needs the model's tokenizer (its SentencePiece model): "
                       "pass the run's Tokenizer, e.g. Tokenizer.load('RUN/tokenizer.model').")
    check_sentencepiece(tokenizer.kind)
    _check_quantization(quantization)
    check_can_write(out_dir, overwrite)
    check_vocab_size(tokenizer.vocab_size, model.vocab_size)


def converter_of(model, tokenizer):
    """The `TransformerConverter` of `model` with `tokenizer`'s vocabularies: a SentencePiece model of ours, or an
    imported checkpoint's pieces and special tokens."""
    if tokenizer.kind != "pretrained":
        return TransformerConverter(model, vocabulary(tokenizer.model_bytes))
    pieces = tokenizer.pieces("target")
    source = tokenizer.pieces("source") if tokenizer.source_vocab_size != tokenizer.vocab_size else None
    ids = model.special_ids.to_dict()
    tokens = {name: pieces[ids[field]] for name, field in CTRANSLATE2_TOKENS.items()}
    return TransformerConverter(model, pieces, source, tokens)


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


def vmap_text(shortlist, pieces):
    """CTranslate2's vocabulary map of `shortlist`: `piece<TAB>targets` per source piece with entries, and the
    frequent pieces under the empty key (always candidates)."""
    if shortlist.vocab_size != len(pieces):
        raise T2TError(f"The shortlist covers {shortlist.vocab_size} pieces, the tokenizer {len(pieces)}: learn it "
                       "again with the run's tokenizer (t2t-keras shortlist).")
    spaced = [piece for piece in pieces if any(c in piece for c in " \t\n")]
    if spaced:
        raise T2TError(f"CTranslate2's vocabulary map separates pieces by spaces, and the pieces {spaced[:3]} hold "
                       "one: export without --shortlist.")
    lines = ["\t" + " ".join(pieces[i] for i in shortlist.frequent)]
    for source, targets in enumerate(shortlist.entries):
        targets = [pieces[i] for i in targets if i != PADDING]
        if targets:
            lines.append(pieces[source] + "\t" + " ".join(targets))
    return "\n".join(lines) + "\n"


def check_sentencepiece(kind):
    """Raises T2TError unless the run's `data.tokenizer` is one a CTranslate2 export ships: a SentencePiece model, or
    an imported checkpoint's tokenizer archive."""
    if kind not in ("bpe", "unigram", "pretrained"):
        raise T2TError(f"A CTranslate2 export ships a SentencePiece model (data.tokenizer bpe or unigram, or an "
                       f"imported checkpoint's), but this model's tokenizer is {kind!r}: export it as a SavedModel "
                       "(t2t-keras export --format saved_model), or train a bpe or unigram run for CTranslate2.")


def _check_quantization(quantization):
    if quantization not in QUANTIZATIONS:
        raise T2TError(f"quantization must be one of {QUANTIZATIONS}. Received: quantization={quantization!r}")
