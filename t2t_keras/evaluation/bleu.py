"""Corpus-level scores of detokenized translations.

The protocols are reported and labelled separately, because mixing them is the
usual reason a "27.3" cannot be reproduced:

* **sacreBLEU** (detokenized text, 13a tokenization inside sacreBLEU, with its
  signature) and chrF: comparable across papers that quote the signature.
* **tokenized BLEU**, by default for German references: sacreBLEU's `intl`
  tokenizer, which splits hyphens into their own tokens, close to the paper's
  protocol but not the same.
* **paper BLEU** (`bleu="paper"`, `evaluate --bleu paper`), the protocol of the
  paper's WMT'14 en-de numbers exactly: tensor2tensor's get_ende_bleu.sh, Moses
  tokenization, compounds split at hyphens, multi-bleu.perl (paper_bleu.py). It
  replaces the tokenized BLEU line.
"""

import sacrebleu

from t2t_keras.config import BLEU_PROTOCOLS
from t2t_keras.errors import DataError
from t2t_keras.evaluation.paper_bleu import paper_bleu


def _check(hypotheses, references):
    if len(hypotheses) != len(references):
        raise DataError(
            f"{len(hypotheses)} translations but {len(references)} references: score files of equal length."
        )
    if not references:
        raise DataError("Nothing to score: the reference set is empty.")


def tokenized_bleu(hypotheses, references):
    """The paper's tokenized BLEU (see module docstring) as a sacrebleu BLEUScore."""
    metric = sacrebleu.metrics.BLEU(tokenize="intl")
    return metric.corpus_score(hypotheses, [references]), metric.get_signature()


def score(hypotheses, references, target_lang="de", bleu="sacrebleu"):
    """sacreBLEU + chrF with signatures, and tokenized BLEU when the target is German; with `bleu="paper"`, the
    paper's BLEU in its place (any target language: Moses tokenizes for it).

    Returns a dict with `bleu`, `chrf`, `signature`, `chrf_signature`,
    `sentences`, `bleu_details` and, for German, `tokenized_bleu` and
    `tokenized_bleu_signature`; with `bleu="paper"`, `paper_bleu`,
    `paper_bleu_details` (multi-bleu.perl's line) and `paper_bleu_protocol`
    instead of the tokenized BLEU.
    """
    if bleu not in BLEU_PROTOCOLS:
        raise DataError(f"bleu must be one of {BLEU_PROTOCOLS}. Received: bleu={bleu!r}")
    hypotheses, references = list(hypotheses), list(references)
    _check(hypotheses, references)
    bleu_metric, chrf_metric = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    bleu_score = bleu_metric.corpus_score(hypotheses, [references])
    chrf_score = chrf_metric.corpus_score(hypotheses, [references])
    result = {
        "bleu": round(bleu_score.score, 2),
        "chrf": round(chrf_score.score, 2),
        "signature": str(bleu_metric.get_signature()),
        "chrf_signature": str(chrf_metric.get_signature()),
        "sentences": len(references),
        "bleu_details": str(bleu_score),
    }
    if bleu == "paper":
        paper, protocol = paper_bleu(hypotheses, references, target_lang)
        result.update(paper_bleu=round(paper.score, 2), paper_bleu_details=str(paper), paper_bleu_protocol=protocol)
    elif target_lang == "de":
        tokenized, signature = tokenized_bleu(hypotheses, references)
        result.update(tokenized_bleu=round(tokenized.score, 2), tokenized_bleu_signature=str(signature))
    return result


def format_scores(result):
    """Human-readable lines, each protocol labelled."""
    lines = [
        f"sacreBLEU {result['bleu']:.2f}  ({result['signature']})",
        f"chrF      {result['chrf']:.2f}  ({result['chrf_signature']})",
    ]
    if "tokenized_bleu" in result:
        lines.append(f"tokenized BLEU {result['tokenized_bleu']:.2f}  (close to the paper's protocol: intl "
                     "tokenization, compounds split at hyphens; --bleu paper for the exact one; not comparable with "
                     "sacreBLEU)")
    if "paper_bleu" in result:
        lines.append(f"paper BLEU {result['paper_bleu']:.2f}  ({result['paper_bleu_protocol']}: "
                     f"{result['paper_bleu_details']}; not comparable with sacreBLEU)")
    lines.append(f"{result['sentences']} sentences")
    if "ensemble" in result:
        lines.append(f"ensemble of {len(result['ensemble'])} runs: {', '.join(result['ensemble'])}")
    return "\n".join(lines)
