"""Corpus-level scores of detokenized translations.

Two protocols are reported and labelled separately, because mixing them is the
usual reason a "27.3" cannot be reproduced:

* **sacreBLEU** (detokenized text, 13a tokenization inside sacreBLEU, with its
  signature) and chrF: comparable across papers that quote the signature.
* **tokenized BLEU**, the protocol of the paper's WMT'14 en-de numbers
  (tensor2tensor's get_ende_bleu.sh: tokenized text with hyphenated compounds
  split). Reproduced here with sacreBLEU's `intl` tokenizer, which splits
  hyphens into their own tokens. Only reported for German references.
"""

import sacrebleu

from t2t_keras.errors import DataError


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


def score(hypotheses, references, target_lang="de"):
    """sacreBLEU + chrF with signatures, and tokenized BLEU when the target is German.

    Returns a dict with `bleu`, `chrf`, `signature`, `chrf_signature`,
    `sentences`, `bleu_details` and, for German, `tokenized_bleu` and
    `tokenized_bleu_signature`.
    """
    hypotheses, references = list(hypotheses), list(references)
    _check(hypotheses, references)
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    result = {
        "bleu": round(bleu_score.score, 2),
        "chrf": round(chrf_score.score, 2),
        "signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "sentences": len(references),
        "bleu_details": str(bleu_score),
    }
    if target_lang == "de":
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
        lines.append(f"tokenized BLEU {result['tokenized_bleu']:.2f}  (paper protocol: intl tokenization, "
                     "compounds split at hyphens; not comparable with sacreBLEU)")
    lines.append(f"{result['sentences']} sentences")
    if "ensemble" in result:
        lines.append(f"ensemble of {len(result['ensemble'])} runs: {', '.join(result['ensemble'])}")
    return "\n".join(lines)
