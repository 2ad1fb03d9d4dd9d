"""The argument table of the `t2t-keras` commands: one `add_argument` per flag, one name per setting.

A flag that sets a field of a generation request (`decoding.request.GenerationRequest`) has the field's name
(`--beam-size` is `beam_size`); `cli.py` hands the given ones to the opened artifact, which refuses those it does
not take.
"""

import argparse

from t2t_keras.config import (
    ALIGNMENT_ROWS,
    BLEU_PROTOCOLS,
    DECODING_PRECISIONS,
    LENGTH_PENALTIES,
    MODEL_SOURCES,
    STOPPING_RULES,
    check_shards,
)

STUDENT_PRESET = "student-mini"  # the student of `distill` into a new run without --config


def _add_config_args(parser, default="base", help="preset name (configs/NAME.yaml) or a YAML file"):
    parser.add_argument("--config", default=default, help=help)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config value, e.g. --set model.hidden_dim=256 (repeatable)")


def _shards(text):
    """`--shards`: "auto" or a positive integer (`config.check_shards`)."""
    try:
        return check_shards(int(text) if text.lstrip("-").isdigit() else text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _heads(text):
    """`--alignment-heads`: comma-separated head indices, e.g. 0,3."""
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected head indices like 0,3. Received: {text!r}") from None


def _truth(text):
    """`--end-at-limit`: true or false."""
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false. Received: {text!r}")
    return text.lower() == "true"


def _add_decoding_args(parser):
    _add_search_args(parser, "")
    _add_language_args(parser, "a multilingual run's (NLLB, M2M-100) ")
    parser.add_argument("--precision", choices=DECODING_PRECISIONS,
                        help="weights of a run's model while decoding (default: decoding.precision); bfloat16 is "
                             "faster for large models and batches on CPUs with bfloat16 units")
    parser.add_argument("--shards", type=_shards,
                        help="a run's batch decoded as this many concurrent searches, or auto: one per CPU core, one "
                             "on a GPU or TPU (default: decoding.shards); the tokens do not depend on it")
    parser.add_argument("--shortlist", action="store_true", default=None,
                        help="a run's search covers, per batch, only the target pieces of its vocabulary shortlist "
                             "(RUN/shortlist.npz, made by t2t-keras shortlist); off by default")
    _add_model_arg(parser)


def _add_model_arg(parser, extra=""):
    parser.add_argument("--model", choices=MODEL_SOURCES,
                        help="which weights of the run: the averaged checkpoints (auto, the default: when they "
                             "include the newest one), the newest checkpoint, or the best one (RUN/best/, kept when "
                             f"training.eval_every_steps is set){extra}")


def _add_search_args(parser, what):
    """--beam-size, --alpha, --length-penalty, --stopping, --max-extra-length, --max-output-length, --end-at-limit:
    `GenerationRequest` fields by their names (default: the run's decoding.*)."""
    parser.add_argument("--beam-size", type=int, help=f"{what}beam size, 1 for greedy search (decoding.beam_size)")
    parser.add_argument("--alpha", type=float, help=f"{what}the length penalty's exponent (decoding.alpha)")
    parser.add_argument("--length-penalty", choices=LENGTH_PENALTIES,
                        help=f"{what}beam search's length normalisation: gnmt ((5+|Y|)/6)^alpha, power |Y|^alpha "
                             "(Hugging Face's and fairseq's), average |Y|, none (decoding.length_penalty)")
    parser.add_argument("--stopping", choices=STOPPING_RULES,
                        help=f"{what}when a beam search is done with a sentence; transformers* as Hugging Face's "
                             "generate with early_stopping false, true, never (decoding.stopping)")
    parser.add_argument("--max-extra-length", "--extra-length", type=int, dest="max_extra_length",
                        help=f"{what}output limit: input length + this; an lm's new pieces (decoding.max_extra_length)")
    parser.add_argument("--max-output-length", type=int,
                        help=f"{what}output limit whatever the input's length, in tokens, the end included "
                             "(decoding.max_output_length)")
    parser.add_argument("--end-at-limit", type=_truth, metavar="{true,false}",
                        help=f"{what}a translation cut at its limit ends with the end token (decoding.end_at_limit)")


def _add_language_args(parser, what):
    """--source-lang, --target-lang: a multilingual model's `src_lang` and `tgt_lang` (import's flag names)."""
    parser.add_argument("--source-lang", dest="src_lang",
                        help=f"{what}source language code, e.g. fra_Latn (default: the one chosen at import)")
    parser.add_argument("--target-lang", dest="tgt_lang",
                        help=f"{what}target language code, forced as the first output token (default: the one "
                             "chosen at import)")


def _add_sampling_args(parser):
    """--temperature, --top-k, --top-p, --epsilon, --seed, --num-return: sampling (`decoding.sampling`)."""
    parser.add_argument("--temperature", type=float,
                        help="sample the translation (an lm: the continuation) at this temperature, with "
                             "--beam-size 1 (default 0: greedy argmax)")
    parser.add_argument("--top-k", type=int, help="sample among the k most likely pieces (default 0: all)")
    parser.add_argument("--top-p", type=float,
                        help="nucleus sampling: among the most likely pieces whose probabilities reach this sum, in "
                             "(0, 1] (default 1: all)")
    parser.add_argument("--epsilon", type=float,
                        help="epsilon sampling: among the pieces of probability at least this, in [0, 1), the most "
                             "likely always kept (default 0: all; 0.02 is common)")
    parser.add_argument("--seed", type=int, help="seed of the sampler, >= 0: the same samples every time")
    parser.add_argument("--num-return", type=int,
                        help="translations per line, tab-separated, best first: samples with --temperature, else "
                             "the beam's n-best list (at most --beam-size)")


def _add_mbr_args(parser):
    """--mbr, --candidates, --candidates-from, --mbr-aggregate: minimum Bayes risk decoding (`decoding.mbr`)."""
    parser.add_argument("--mbr", choices=("chrf", "bleu"),
                        help="minimum Bayes risk decoding: of --candidates translations per line, output the one with "
                             "the highest mean chrF (or sentence BLEU) against the others")
    parser.add_argument("--candidates", type=int, metavar="N", help="--mbr: candidates per line (default 8)")
    parser.add_argument("--candidates-from", choices=("sample", "beam"),
                        help="--mbr: epsilon samples (temperature 1, epsilon 0.02 unless given; the default) or a "
                             "beam search of N returning N")
    parser.add_argument("--mbr-aggregate", action="store_true", default=None,
                        help="--mbr: score each candidate against the candidates' aggregate (reference aggregation: "
                             "N utilities per line instead of N^2)")


def _add_quality_args(parser):
    """--with-quality, --min-quality, --low-quality-file: the quality estimate (t2t-keras qe-train)."""
    parser.add_argument("--with-quality", dest="quality", action="store_true", default=None,
                        help="print TRANSLATION<TAB>QUALITY: each translation's quality estimate in [0, 1] (a run "
                             "or export with one: t2t-keras qe-train)")
    parser.add_argument("--min-quality", type=float, metavar="Q",
                        help="a translation estimated below Q is withheld: an empty line in its place (the line "
                             "count and order are kept), and the line listed in --low-quality-file")
    parser.add_argument("--low-quality-file", metavar="FILE",
                        help="--min-quality: where the withheld lines go, one JSON object each (line, source, "
                             "translation, quality); default INPUT.low-quality.jsonl beside --input")


def _add_model_choice(parser, saved_model, ctranslate2, ensembles=False, litert=None):
    """Exactly one of --run-dir, --saved-model DIR, --ctranslate2 DIR (and, given its help, --litert FILE); with
    `ensembles`, --run-dir repeated."""
    where = parser.add_mutually_exclusive_group(required=True)
    if ensembles:
        _add_run_dirs(where)
    else:
        where.add_argument("--run-dir", dest="path", help="a run directory")
    where.add_argument("--saved-model", dest="path", metavar="DIR", help=saved_model)
    where.add_argument("--ctranslate2", dest="path", metavar="DIR", help=ctranslate2)
    if litert:
        where.add_argument("--litert", dest="path", metavar="FILE", help=litert)
    parser.set_defaults(path=None, run_dirs=None)  # the artifact is whichever is given (`cli._open`)


def _add_run_dirs(parser, required=False):
    """--run-dir, repeatable: one run, or several translation runs of one vocabulary decoding as an ensemble."""
    parser.add_argument("--run-dir", dest="run_dirs", action="append", required=required, metavar="RUN_DIR",
                        help="the run; given several times, the runs' models decode together, their "
                             "log-probabilities averaged at each step (translation runs of one vocabulary; the "
                             "decoding settings are the first run's)")


def _add_runner_args(parser, lines=True):
    """--runner (the corpus as an Apache Beam pipeline) and its flags; `lines`: --output, --max-errors,
    --overwrite of a line-by-line command."""
    parser.add_argument("--runner", choices=("direct", "dataflow", "flink", "spark"),
                        help="run as an Apache Beam pipeline (pip install 't2t_keras[beam]') on this runner; "
                             "flags this command does not know go to Beam as pipeline options (docs/scale.md)")
    parser.add_argument("--workers", type=int, help="with --runner: worker processes of the direct runner "
                                                    "(dataflow: --num_workers; flink, spark: --parallelism)")
    if lines:
        parser.add_argument("--output", help="with --runner: the output file of one input; for a glob of several, "
                                             "a directory of one file per input (bad lines: OUTPUT.errors.jsonl)")
        parser.add_argument("--max-errors", type=int, metavar="N",
                            help="with --runner: fail when more than N lines are bad (default: no limit)")
        parser.add_argument("--overwrite", action="store_true", help="with --runner: replace an existing --output")


def build_parser():
    parser = argparse.ArgumentParser(prog="t2t-keras", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("describe", help="print the architecture, parameter count and training FLOPs")
    _add_config_args(p)
    p.add_argument("--vocab-size", type=int, help="vocabulary size (default: the config's model.vocab_size)")
    p.add_argument("--sequence-length", type=int, default=32, help="sequence length for the FLOP count")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--run-dir", help="describe this run's saved config instead, and the run it started from "
                                     "(train --init-from)")

    p = commands.add_parser("prepare", help="tokenize the training corpus once into shards in RUN/prepared/ "
                                           "(translation; train then reads them)")
    _add_config_args(p)
    p.add_argument("--run-dir", required=True, help="the run directory to prepare (config.yaml is written there)")
    _add_runner_args(p, lines=False)
    p.add_argument("--max-length-ratio", type=float, metavar="R",
                   help="with --runner: also drop pairs whose longer side has more than R times the characters of "
                        "the shorter (default: no ratio filter, the pairs prepare keeps)")

    p = commands.add_parser("train", help="train a model, or continue the run in --run-dir")
    _add_config_args(p, default=None, help="preset name (configs/NAME.yaml) or a YAML file (default: the run's own "
                                           "config when --run-dir holds a run, else base)")
    p.add_argument("--run-dir", required=True, help="directory for config, vocabulary, checkpoints and logs")
    p.add_argument("--minutes", type=float, help="stop after this many minutes of training")
    p.add_argument("--init-from", metavar="RUN",
                   help="start a new run from this trained run's weights and tokenizer (its model and vocabulary "
                        "are kept, or fewer of its layers with --set model.num_layers / num_decoder_layers; the "
                        "optimizer and learning rate schedule start afresh); a run with checkpoints of its own "
                        "resumes from them")
    p.add_argument("--init-weights", choices=MODEL_SOURCES,
                   help="which weights of --init-from: those export takes (auto, the default), the averaged, the "
                        "latest or the best checkpoint")

    p = commands.add_parser("average", help="average the last checkpoints of a run (section 6.1)")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--last", type=int, help="how many checkpoints (default: training.average_last)")
    p.add_argument("--checkpoint", default="last", choices=("last", "best"),
                   help="average the checkpoints ending at the last one (default) or at the best one (RUN/best/)")

    p = commands.add_parser("evaluate", help="translate a split or files and report sacreBLEU, chrF; perplexity "
                                          "for lm and mlm runs")
    _add_run_dirs(p, required=True)
    p.add_argument("--split", default="test", choices=("dev", "test"))
    p.add_argument("--source", help="source file (with --reference, instead of --split)")
    p.add_argument("--reference", help="reference translations of --source")
    p.add_argument("--output", help="also write the translations to this file")
    p.add_argument("--text", help="lm / mlm runs: perplexity on this file (one sentence per line) instead of --split")
    p.add_argument("--bleu", choices=BLEU_PROTOCOLS,
                   help="translation runs: sacreBLEU (the default) with chrF and, for German, a tokenized BLEU; or "
                        "paper for the paper's BLEU in its place (Moses tokenization, compounds split at hyphens, "
                        "multi-bleu.perl, as tensor2tensor's get_ende_bleu.sh)")
    p.add_argument("--litert", metavar="FILE", help="translation runs: translate with this LiteRT file (export "
                                                   "--format litert) instead of the run's model")
    p.set_defaults(path=None)  # the artifact: the run (the first --run-dir), or --litert
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _add_decoding_args(p)

    p = commands.add_parser("translate", help="translate lines from --input or stdin, one per line")
    _add_model_choice(p, saved_model="an exported SavedModel directory",
                      ctranslate2="a CTranslate2 export (export --format ctranslate2)", ensembles=True,
                      litert="a LiteRT file (export --format litert), run by the LiteRT interpreter")
    p.add_argument("--input", help="file to translate (default: stdin); for an lm run, prompts to continue")
    p.add_argument("--alignments", action="store_true", default=None,
                   help="print TRANSLATION<TAB>ALIGNMENTS: Pharaoh i-j word links from the cross-attention")
    p.add_argument("--markup", action="store_true",
                   help="lines hold inline tags (<b>...</b>, <br/>): translate the text, place the tags by alignment")
    p.add_argument("--alignment-layer", type=int, help="decoder layer read (default decoding.alignment_layer)")
    p.add_argument("--alignment-heads", type=_heads, help="heads averaged, e.g. 0,3 (default decoding.alignment_heads)")
    p.add_argument("--alignment-rows", choices=ALIGNMENT_ROWS,
                   help="a target word's attention: of the steps that output it, or read it (decoding.alignment_rows)")
    _add_decoding_args(p)
    _add_sampling_args(p)
    _add_mbr_args(p)
    p.add_argument("--terminology", metavar="FILE",
                   help="a translation run's translations hold the target term of each source term found in their "
                        "sentence: a UTF-8 file of 'source term<TAB>target term' lines (constrained beam search)")
    _add_quality_args(p)
    _add_runner_args(p)

    p = commands.add_parser("qe-train", help="train the run's quality estimate on its dev set against sentence chrF "
                                             "(RUN/quality_estimate.json; carried into its exports)")
    p.add_argument("--run-dir", required=True, help="a translation run")
    p.add_argument("--split", default="dev", choices=("dev", "test"), help="the run's split translated (default dev)")
    p.add_argument("--source", help="source file (with --reference, instead of --split)")
    p.add_argument("--reference", help="reference translations of --source")
    p.add_argument("--limit", type=int, help="the first N sentence pairs only")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _add_mbr_args(p)  # translations chosen by MBR: their expected utility becomes a feature too

    p = commands.add_parser("score", help="forced decoding: negative log-likelihood of given translations")
    _add_model_choice(p, saved_model="an exported SavedModel directory (its 'score' signature)",
                      ctranslate2="a CTranslate2 export (its score_batch)")
    p.add_argument("--source", help="source sentences, one per line (with --target; without both, SOURCE<TAB>TARGET "
                                     "lines from --input or stdin)")
    p.add_argument("--target", help="their translations, line by line")
    p.add_argument("--input", help="a file of SOURCE<TAB>TARGET lines (default: stdin, when --source and --target "
                                   "are not given)")
    p.add_argument("--token-level", action="store_true", help="also print the negative log-likelihood of each token")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--batch-tokens", type=int, default=4096, help="padded tokens per batch")
    _add_model_arg(p)
    _add_runner_args(p)

    p = commands.add_parser("baseline", help="score the retrieval baseline on a split of the run's data")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--split", default="test", choices=("dev", "test"))
    p.add_argument("--json", action="store_true")

    p = commands.add_parser("export", help="write a SavedModel (strings in, translations out), a CTranslate2 model, "
                                           "a LiteRT file or a Hugging Face Marian checkpoint")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--out", required=True, help="export directory, or the .tflite file of --format litert (written "
                                                "atomically)")
    p.add_argument("--format", default="saved_model", choices=("saved_model", "ctranslate2", "litert", "marian"),
                   help="a TensorFlow SavedModel, a CTranslate2 model directory with the SentencePiece model, one "
                        "LiteRT .tflite file with the tokenizer and beam search inside, or a Hugging Face OPUS-MT "
                        "checkpoint directory (MarianMTModel and MarianTokenizer load it)")
    p.add_argument("--quantization", choices=("auto", "float32", "int8_float32", "int8"),
                   help="weight type: CTranslate2 float32 (default), int8_float32 or int8; SavedModel auto (the "
                        "default: int8 Dense weights where they measured faster, by model size and CPU), float32 "
                        "or int8; LiteRT float32 (default) or int8 (dynamic range)")
    p.add_argument("--precision", choices=DECODING_PRECISIONS,
                   help="SavedModel: bfloat16 weights and arithmetic (oneDNN's bfloat16 kernels where the CPU has "
                        "them; not with --quantization); default the run's weights (model.weights_dtype: float32, "
                        "or bfloat16 for a run imported with --precision bfloat16)")
    p.add_argument("--jit-compile", choices=("auto", "true", "false"),
                   help="SavedModel searches compiled with XLA: false (the default) none, every search in graph "
                        "mode; auto those of batches under 128 hypotheses (rows padded to a power of two x beam size), "
                        "greedy or at the default beam size, float32 weights: faster once each shape has compiled, "
                        "for long-running servers; true every search")
    p.add_argument("--ids-only", action="store_true", default=None,
                   help="SavedModel on token ids only (core TensorFlow ops; loads in stock TF Serving)")
    p.add_argument("--average-last", type=int, help="average the last N checkpoints first (with --model best: "
                   "the N ending at the best one)")
    _add_model_arg(p, "; with --average-last, the N checkpoints ending at the best one for best")
    _add_search_args(p, "the export's default ")
    p.add_argument("--max-beam-size", type=int, help="largest beam size callers may ask for "
                   "(default: decoding.max_beam_size)")
    p.add_argument("--temperature", type=float, help="lm: default sampling temperature (default 0: greedy)")
    p.add_argument("--top-k", type=int, help="lm: default top-k of the sampler (default 0: all pieces)")
    p.add_argument("--shortlist", action="store_true", default=None,
                   help="apply the run's vocabulary shortlist (RUN/shortlist.npz) in the export: in the SavedModel's "
                        "graph, or as CTranslate2's vmap.txt (translate with use_vmap=True)")
    p.add_argument("--constraints", action="store_true", default=None,
                   help="a SavedModel text export also gets the translate_constrained signature: translations that "
                        "hold given target terms (REST requests with \"constraints\")")
    p.add_argument("--overwrite", action="store_true", default=None, help="replace an existing export")

    p = commands.add_parser("shortlist", help="learn a run's vocabulary shortlist from its training corpus "
                                              "(RUN/shortlist.npz)")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--per-source", type=int, help="target pieces kept per source piece (default 50)")
    p.add_argument("--frequent", type=int, help="most frequent target pieces, always allowed (default 100)")

    p = commands.add_parser("serve", help="serve a SavedModel or CTranslate2 export over TensorFlow Serving's REST API")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--saved-model", dest="path", metavar="DIR", help="an exported SavedModel directory")
    where.add_argument("--ctranslate2", dest="path", metavar="DIR",
                       help="a CTranslate2 export (same API, batching and limits)")
    where.add_argument("--model-base-path", metavar="DIR",
                       help="TF Serving's layout: numbered version subdirectories (1, 2, ...), each a SavedModel or "
                            "CTranslate2 export; the newest is served, and a newer one is loaded, checked and "
                            "swapped in without dropping a request")
    p.add_argument("--file-system-poll-wait-seconds", type=float, default=1.0, metavar="S",
                   help="with --model-base-path: how often it is looked at for new versions (default 1, as TF "
                        "Serving's)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--model-name", default="default",
                   help="NAME in /v1/models/NAME:predict (TF Serving's default: default)")
    p.add_argument("--max-batch-size", type=int, default=32, help="sentences batched together at most")
    p.add_argument("--max-wait-ms", type=float, default=10, help="how long a request may wait for others")
    p.add_argument("--max-queue", type=int, help="sentences held, waiting or translated; past it 503 with Retry-After "
                                                 "at once (default: as many as --max-queue-seconds of work)")
    p.add_argument("--max-queue-seconds", type=float, metavar="S",
                   help="the queue holds as many sentences as the server translates in S seconds, at its measured "
                        "throughput (default 2; see docs/serving.md to size it for a latency target)")
    p.add_argument("--deadline-seconds", type=float, metavar="S",
                   help="a request still queued S seconds after its arrival gets 503 and is not translated; a "
                        "request's grpc-timeout or x-envoy-expected-rq-timeout-ms header may ask for less (default 30)")
    p.add_argument("--access-log", nargs="?", const="-", metavar="PATH",
                   help="one JSON line per request (time, status, sentences, latency, queued time), appended to PATH "
                        "(without PATH: standard error)")
    p.add_argument("--access-log-text", action="store_true",
                   help="with --access-log: also write each request's sentences (off by default: they are the users')")
    p.add_argument("--drain-seconds", type=float, help="after SIGTERM or SIGINT, how long accepted requests may "
                                                       "take while new ones get 503 (default 20)")

    p = commands.add_parser("inspect", help="attention heatmaps (PNG) and an interactive HTML page for a sentence")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--run-dir", dest="path", help="a translation run directory")
    where.add_argument("--saved-model", dest="path", metavar="DIR", help="a text SavedModel export")
    p.add_argument("--text", required=True, help="the source sentence")
    p.add_argument("--reference", help="a target sentence to inspect instead of the model's own translation")
    p.add_argument("--out", required=True, help="output directory")

    p = commands.add_parser("distill", help="sequence-level knowledge distillation: translate the teacher's training "
                                            "sources with the teacher, then train a student run on them")
    p.add_argument("--teacher", required=True, metavar="RUN", help="the trained translation run that translates")
    p.add_argument("--run-dir", required=True, help="the student run: its distilled corpus (RUN/distilled/), "
                                                    "config, vocabulary (the teacher's), checkpoints and logs")
    _add_config_args(p, default=None, help="the student's preset name (configs/NAME.yaml) or a YAML file (default: "
                                           f"the student run's own config when --run-dir holds one, else "
                                           f"{STUDENT_PRESET})")
    p.add_argument("--beam", "--beam-size", dest="beam_size", type=int, default=4,
                   help="the teacher's beam size (default 4; alpha and the output limit are the teacher's decoding.*)")
    p.add_argument("--minutes", type=float, help="stop the student's training after this many minutes")
    p.add_argument("--original-weight", type=float, metavar="W",
                   help="also train on the teacher's own corpus, drawn with weight W against the distilled corpus's "
                        "1 (data.sources); default: the distilled corpus alone")
    p.add_argument("--teacher-weights", choices=MODEL_SOURCES, default="auto",
                   help="which weights of the teacher translate: those export takes (auto), the averaged, the latest "
                        "or the best checkpoint")
    p.add_argument("--shard-sentences", type=int, default=2000,
                   help="sentences per shard of the distilled corpus: a resumed distillation skips the shards done")
    _add_runner_args(p, lines=False)

    p = commands.add_parser("import", help="make a run directory of a Hugging Face translation checkpoint "
                                           "(OPUS-MT / Marian, M2M-100, NLLB) that every command takes")
    p.add_argument("--from", dest="family", required=True, choices=("marian", "m2m100", "t5"),
                   help="marian: MarianMTModel (OPUS-MT); m2m100: M2M100ForConditionalGeneration (M2M-100, NLLB); "
                        "t5: T5ForConditionalGeneration / MT5ForConditionalGeneration (T5, Flan-T5, mT5, MADLAD-400)")
    p.add_argument("checkpoint", metavar="DIR", help="the checkpoint directory: config.json, weights, tokenizer files")
    p.add_argument("--run-dir", required=True, help="the new run directory (must not exist)")
    p.add_argument("--source-lang", help="m2m100: the source language code, e.g. eng_Latn (NLLB) or en (M2M-100)")
    p.add_argument("--target-lang", help="m2m100: the target language code, forced as the first output token; "
                                         "t5 (MADLAD-400): de writes the tag <2de> before every source")
    p.add_argument("--precision", choices=DECODING_PRECISIONS, default="float32",
                   help="the run's weights (model.weights_dtype) and decoding (decoding.precision): bfloat16 holds "
                        "and stores half the bytes of float32, a bfloat16 checkpoint's values as they are; such a "
                        "run decodes and exports but does not train (default float32)")

    p = commands.add_parser("main", help="the main job: train, average, evaluate, export, translate, report")
    _add_config_args(p)
    p.set_defaults(config="mini")
    p.add_argument("--run-dir", default="runs/main")
    p.add_argument("--minutes", type=float, default=30.0, help="training time budget of this invocation")
    for command in commands.choices.values():
        command.add_argument("--verbose", action="store_true",
                             help="also show TensorFlow's own start-up and C++ log lines (hidden by default, and "
                                  "shown when TF_CPP_MIN_LOG_LEVEL is set)")
    return parser
