"""The paper's BLEU: tokenized, compounds split, scored as Moses' multi-bleu.perl scores it.

The paper's English->German figures (Table 2) come from tensor2tensor's `get_ende_bleu.sh`:

    tokenizer.perl -l de < hypotheses > hypotheses.tok        # the references are tokenized the same way
    perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'            # both: "rich-text" -> "rich ##AT##-##AT## text"
    multi-bleu.perl references.tok.atat < hypotheses.tok.atat

Here the Moses tokenizer is sacremoses' port of tokenizer.perl (`MosesTokenizer(lang="de")`). It runs without
escaping (`escape=False`): tokenizer.perl's escaping (`&` -> `&amp;`, ...) replaces a token by another one on both
sides and changes no token boundary, so the score is the same. `multi_bleu` is multi-bleu.perl's corpus BLEU:
clipped n-gram precisions for n = 1..4 over whitespace tokens, the reference length of each sentence the closest
to the hypothesis's (the shorter on a tie), brevity penalty exp(1 - r/c) when c < r, and BLEU = BP *
exp(sum log p_n / 4) with no smoothing: a precision of 0 makes BLEU 0 (multi-bleu.perl takes log 0 as
-9999999999). Hypotheses with no token at all score 0 (multi-bleu.perl divides by zero there).

This score is not comparable with sacreBLEU's, which tokenizes differently and splits no compound.
"""

import collections
import functools
import math
import re
from typing import NamedTuple

from t2t_keras.errors import DataError

ORDER = 4
COMPOUND = re.compile(r"(\S)-(\S)")  # get_ende_bleu.sh's perl substitution, left to right, non-overlapping
COMPOUND_SPLIT = r"\1 ##AT##-##AT## \2"
PROTOCOL = "moses tokenizer.perl -l {lang}, compounds split at hyphens (##AT##-##AT##), multi-bleu.perl"


class MultiBleu(NamedTuple):
    """What multi-bleu.perl prints: BLEU, the n-gram precisions (in %), BP, length ratio and lengths."""

    score: float  # 100 * BLEU
    precisions: tuple  # 100 * p_n for n = 1..4
    brevity_penalty: float
    ratio: float  # hypothesis length / reference length
    hypothesis_length: int
    reference_length: int

    def __str__(self):
        """multi-bleu.perl's line, e.g. `BLEU = 27.30, 58.1/33.2/21.0/13.6 (BP=1.000, ratio=1.010, ...)`."""
        return (f"BLEU = {self.score:.2f}, {'/'.join(f'{p:.1f}' for p in self.precisions)} (BP="
                f"{self.brevity_penalty:.3f}, ratio={self.ratio:.3f}, hyp_len={self.hypothesis_length}, "
                f"ref_len={self.reference_length})")


def split_compounds(line):
    """get_ende_bleu.sh's compound splitting: `rich-text` -> `rich ##AT##-##AT## text`."""
    return COMPOUND.sub(COMPOUND_SPLIT, line)


@functools.cache
def _moses_tokenizer(lang):
    from sacremoses import MosesTokenizer

    return MosesTokenizer(lang=lang)


def paper_tokenize(line, lang="de"):
    """One line as the paper scored it: Moses-tokenized (tokenizer.perl -l `lang`), then compounds split."""
    return split_compounds(_moses_tokenizer(lang).tokenize(line, escape=False, return_str=True))


def _ngrams(tokens, n):
    return collections.Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def multi_bleu(hypotheses, references):
    """multi-bleu.perl's corpus BLEU of tokenized lines (strings of whitespace-separated tokens), one reference each.

    Returns a `MultiBleu`; see the module docstring for the formula.
    """
    correct, total = [0] * ORDER, [0] * ORDER
    hypothesis_length = reference_length = 0
    for hypothesis, reference in zip(hypotheses, references):
        words, reference_words = hypothesis.split(), reference.split()
        hypothesis_length += len(words)
        reference_length += len(reference_words)
        for n in range(1, ORDER + 1):
            counts, reference_counts = _ngrams(words, n), _ngrams(reference_words, n)
            total[n - 1] += sum(counts.values())
            correct[n - 1] += sum(min(count, reference_counts[gram]) for gram, count in counts.items())
    return _corpus_score(correct, total, hypothesis_length, reference_length)


def _corpus_score(correct, total, hypothesis_length, reference_length):
    """The `MultiBleu` of the clipped n-gram counts and the corpus lengths."""
    if reference_length == 0:
        raise DataError("The references hold no token: nothing to score. Give non-empty reference translations.")
    precisions = [c / t if t else 0.0 for c, t in zip(correct, total)]
    if hypothesis_length == 0:
        return MultiBleu(0.0, (0.0,) * ORDER, 0.0, 0.0, 0, reference_length)
    penalty = math.exp(1 - reference_length / hypothesis_length) if hypothesis_length < reference_length else 1.0
    bleu = penalty * math.exp(sum(math.log(p) for p in precisions) / ORDER) if all(precisions) else 0.0
    return MultiBleu(100 * bleu, tuple(100 * p for p in precisions), penalty, hypothesis_length / reference_length,
                     hypothesis_length, reference_length)


def paper_bleu(hypotheses, references, lang="de"):
    """`(MultiBleu, protocol)`: the paper's BLEU of detokenized translations against detokenized references."""
    score = multi_bleu([paper_tokenize(line, lang) for line in hypotheses],
                       [paper_tokenize(line, lang) for line in references])
    return score, PROTOCOL.format(lang=lang)
