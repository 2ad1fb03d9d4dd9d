"""Terminology (lexically constrained decoding) on the Debian package-description test set.

    PYTHONPATH=$PWD nice -n 19 python bench/bench_terminology.py --run-dir /work/keep/main-job-run \\
        [--limit N] [--json bench/results/terminology.json] [--output bench/results/terminology.md]

The Debian package-description corpus, English to German (`data.debian_descriptions`, read from
`--corpus-dir`), is out of domain for a model trained on the LibreOffice help, which is what makes terms useful.

Terms. Words are `\\w+` runs, counted lowercased, written in their most frequent spelling in train. On the
**train** split, each English word of at least `--min-letters` letters (letters only) that is not among the
`--stopwords` most frequent English words of train gets its best German partner by Dice over sentence pairs,
2 c(e, g) / (c(e) + c(g)), c counting the pairs holding the word(s); the pair is kept when Dice >= `--min-dice`
and c(e, g) >= `--min-count`. Then only the pairs the human translators used in the test split are kept: some
test pair holds the source term in its English and the target term in its German, both as whole words,
case-sensitive (matched by `data.terminology.Terminology`, as `translate --terminology` matches). A term whose
target the run's tokenizer cannot write (`Terminology.target_ids` refuses it) is dropped and counted. The list
is written as a TSV (`--terms`) and loaded back with `Terminology.load`. An application is a (sentence, target
term) pair: a term that applies to the sentence (`Terminology.targets`).

Translation. The test sources (the first `--limit` of them, or all) are translated twice with the run, beam
`--beam-size`, the run's other decoding settings: plain, as `translate --run-dir` does (`RunArtifact.generate`),
and with the terms, as `translate --terminology` does (the request's `constraints` from
`evaluation.terminology.terminology_request`). Each is timed once, wall seconds of the whole call, on a freshly
opened run (`artifacts.open_artifact`): loading the run's model (both), and XLA compilation of the
search for each batch shape (the constrained search has more shapes: term count and length). One untimed
one-sentence plain translation runs first, so that TensorFlow's start-up is in neither.

Scores. Term hits: the fraction of applications whose target term is in the translation (as a substring, what
the constrained search guarantees, and as a whole word); the same for the references. sacreBLEU and chrF
(`evaluation.bleu.score`) of each against the references; a sentence whose terms did not fit has an empty
translation, scored as such, and is counted as failed. Speed cost: constrained seconds / plain seconds.

Machine: the CPU of `lscpu`, 2 cores (the container's), niced (`nice -n 19`), TF threads default; see the
report for the CPU model, TF version, date and commit.
"""

import argparse
import collections
import datetime
import os
import re
import subprocess
import sys
import time
from typing import NamedTuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from help_test_pairs import write_json  # noqa: E402

from t2t_keras.artifacts import open_artifact  # noqa: E402
from t2t_keras.data.corpus import corpora_dir  # noqa: E402
from t2t_keras.data.debian_descriptions import CORPUS_NAME  # noqa: E402
from t2t_keras.data.terminology import Term, Terminology  # noqa: E402
from t2t_keras.data.text_files import read_parallel_files  # noqa: E402
from t2t_keras.errors import DataError  # noqa: E402
from t2t_keras.evaluation.bleu import score  # noqa: E402
from t2t_keras.evaluation.terminology import terminology_request  # noqa: E402

WORD = re.compile(r"\w+")


class Vocabulary(NamedTuple):
    """One side of a corpus: each line's set of lowercased words, each word's token count and line count, and its
    most frequent spelling."""

    sets: list
    frequency: collections.Counter
    lines: collections.Counter
    spelling: dict


def vocabulary(texts):
    """The `Vocabulary` of `texts` (a list of str)."""
    sets, frequency, spellings = [], collections.Counter(), collections.defaultdict(collections.Counter)
    for text in texts:
        found = WORD.findall(text)
        for word in found:
            spellings[word.lower()][word] += 1
        lowered = [word.lower() for word in found]
        frequency.update(lowered)
        sets.append(set(lowered))
    lines = collections.Counter(word for words in sets for word in words)
    return Vocabulary(sets, frequency, lines, {w: c.most_common(1)[0][0] for w, c in spellings.items()})


def dice_terms(english, german, args):
    """`Term`s (line: rank) of each English candidate word with its best German partner by Dice (module doc)."""
    common = {word for word, _ in english.frequency.most_common(args.stopwords)}
    candidates = {w for w in english.lines if len(w) >= args.min_letters and w.isalpha() and w not in common}
    together = collections.defaultdict(collections.Counter)
    for en, de in zip(english.sets, german.sets):
        for word in en & candidates:
            together[word].update(de)
    terms = []
    for word in sorted(together):
        dice, count, partner = max((2 * c / (english.lines[word] + german.lines[g]), c, g)
                                   for g, c in together[word].items())
        if dice >= args.min_dice and count >= args.min_count:
            terms.append(Term(english.spelling[word], german.spelling[partner], len(terms) + 1))
    return terms


def used_in(terms, pairs):
    """The `terms` whose source term is in the English and target term in the German of one of `pairs`."""
    used = []
    for term in terms:
        source, target = Terminology([term]), Terminology([Term(term.target, term.target, term.line)])
        if any(term.source in en and term.target in de and source.targets(en) and target.targets(de)
               for en, de in pairs):
            used.append(term)
    return used


def writable(terms, tokenizer):
    """`(terms the tokenizer can write, how many it cannot)`."""
    kept = []
    for term in terms:
        try:
            Terminology([term]).target_ids(tokenizer)
            kept.append(term)
        except DataError:
            pass
    return kept, len(terms) - len(kept)


def extract_terms(train, test, tokenizer, args):
    """Writes the terminology (module doc) to `args.terms`; returns the counts of its steps."""
    english = vocabulary([en for en, _ in train])
    german = vocabulary([de for _, de in train])
    candidates = dice_terms(english, german, args)
    used = used_in(candidates, test)
    terms, unwritable = writable(used, tokenizer)
    with open(args.terms, "w", encoding="utf-8") as handle:
        handle.writelines(f"{term.source}\t{term.target}\n" for term in terms)
    return {"dice_pairs": len(candidates), "used_in_test": len(used), "unwritable": unwritable, "terms": len(terms),
            "identical": sum(term.source == term.target for term in terms)}


def hit_rates(texts, applications, terminology):
    """`{"substring", "whole_word"}`: the fractions of `applications` (per sentence, its target terms) whose target
    term is in the text of `texts`."""
    targets = list(dict.fromkeys(term.target for term in terminology.terms))
    as_words = Terminology([Term(target, target, 0) for target in targets])
    total = sum(len(wanted) for wanted in applications)
    substring = sum(target in text for text, wanted in zip(texts, applications) for target in wanted)
    whole = sum(len(set(wanted) & set(as_words.targets(text))) for text, wanted in zip(texts, applications))
    total = max(total, 1)
    return {"substring": round(substring / total, 4), "whole_word": round(whole / total, 4)}


def timed(call):
    """`(value of call(), wall seconds)`."""
    start = time.perf_counter()
    value = call()
    return value, time.perf_counter() - start


def translate_plain(args, lines):
    """The `Generation` of `lines` by a freshly opened run (its model loaded in the call), beam `--beam-size`."""
    artifact = open_artifact(args.run_dir, model=args.model)
    return artifact.generate(lines, artifact.request(beam_size=args.beam_size))


def translate_with_terms(args, lines):
    """`translate_plain` with the constraints the terminology `args.terms` sets for each line."""
    artifact = open_artifact(args.run_dir, model=args.model)
    request = terminology_request(artifact, lines, args.terms, artifact.request(beam_size=args.beam_size))
    return artifact.generate(lines, request)


def translate_both(sources, args):
    """`{"plain", "with_terms"}`: each `{"texts", "errors", "seconds"}` for `sources`."""
    translate_plain(args, ["Warm-up sentence."])  # TensorFlow start-up, untimed
    plain, plain_s = timed(lambda: translate_plain(args, sources))
    print(f"plain: {len(sources)} sentences in {plain_s:.1f} s", file=sys.stderr, flush=True)
    terms, terms_s = timed(lambda: translate_with_terms(args, sources))
    print(f"with terms: {len(sources)} sentences in {terms_s:.1f} s", file=sys.stderr, flush=True)
    return {"plain": {"texts": plain.best, "errors": plain.errors, "seconds": plain_s},
            "with_terms": {"texts": terms.best, "errors": terms.errors, "seconds": terms_s}}


def summary(output, references, applications, terminology):
    """The figures of one translation of the test sources (`translate_both`'s value)."""
    scores = score(output["texts"], references, "de")
    failed = [i + 1 for i, error in enumerate(output["errors"]) if error]
    return {"seconds": round(output["seconds"], 1), "sentences_per_s": round(len(references) / output["seconds"], 2),
            "term_hits": hit_rates(output["texts"], applications, terminology), "failed": len(failed),
            "failed_lines": failed, "bleu": scores["bleu"], "chrf": scores["chrf"],
            "bleu_signature": scores["signature"], "chrf_signature": scores["chrf_signature"]}


def machine():
    """CPU model, cores, TF version, date and commit."""
    cpu = [line.split(":", 1)[1].strip() for line in subprocess.run(["lscpu"], capture_output=True, text=True)
           .stdout.splitlines() if line.startswith("Model name")]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu[0] if cpu else "?", "cores": len(os.sched_getaffinity(0)), "tensorflow": tf.__version__,
            "date": datetime.date.today().isoformat(), "commit": commit, "nice": os.nice(0)}


def command_line():
    """This command, as run (`nice -n 19` when it was)."""
    return "PYTHONPATH=$PWD " + ("nice -n 19 " if os.nice(0) == 19 else "") + "python " + " ".join(sys.argv)


ROW = "| {name} | {seconds} | {speed} | {hits} | {words} | {failed} | {bleu} | {chrf} |"


def report(results):
    """The markdown report of `results` (the JSON's dict)."""
    terms, m, whole = results["terms"], results["machine"], results["whole_test_set"]
    lines = [f"# Terminology on the Debian package-description test set ({results['run_dir']})", "",
             f"`{results['command']}`", "",
             f"{terms['terms']} terms ({terms['identical']} with target = source; {terms['dice_pairs']} Dice pairs "
             f"on train, {terms['used_in_test']} used by the test references, {terms['unwritable']} not writable "
             f"by the tokenizer). Translated: the first {results['sentences']} of {results['test_pairs']} test "
             f"sentences, {results['sentences_with_terms']} with >= 1 term, {results['applications']} (sentence, term) "
             f"applications (whole test set: {whole['sentences_with_terms']} sentences, {whole['applications']} "
             f"applications). Beam {results['beam_size']}.", "",
             "| translation | seconds | sentences/s | term hits | whole-word hits | failed | BLEU | chrF |",
             "|---|---|---|---|---|---|---|---|"]
    for name, key in (("plain", "plain"), ("with terms", "with_terms")):
        r = results[key]
        lines.append(ROW.format(name=name, seconds=r["seconds"], speed=r["sentences_per_s"],
                                hits=r["term_hits"]["substring"], words=r["term_hits"]["whole_word"],
                                failed=r["failed"], bleu=r["bleu"], chrf=r["chrf"]))
    ref = results["reference_term_hits"]
    lines += [ROW.format(name="references", seconds="-", speed="-", hits=ref["substring"], words=ref["whole_word"],
                         failed="-", bleu="-", chrf="-"), "",
              f"Speed cost (with terms / plain seconds): {results['speed_cost']:.2f}. Seconds: the whole call, model "
              "loading and XLA compilation included. BLEU/chrF: " + results["plain"]["bleu_signature"] + " / "
              + results["plain"]["chrf_signature"] + ".", "",
              "| CPU (lscpu Model name) | cores | nice | TensorFlow | date | commit |", "|---|---|---|---|---|---|",
              f"| {m['cpu']} | {m['cores']} | {m['nice']} | {m['tensorflow']} | {m['date']} | {m['commit']} |", ""]
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, help="a trained English-to-German translation run (read only)")
    parser.add_argument("--model", default="auto", help="which weights of the run (as t2t-keras translate --model)")
    parser.add_argument("--corpus-dir", default=str(corpora_dir() / CORPUS_NAME),
                        help="the prepared Debian corpus ({train,test}.{en,de})")
    parser.add_argument("--limit", type=int, help="translate only the first N test sentences")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--min-letters", type=int, default=4)
    parser.add_argument("--stopwords", type=int, default=200, help="leave out the N most frequent English words")
    parser.add_argument("--min-dice", type=float, default=0.5)
    parser.add_argument("--min-count", type=int, default=3)
    parser.add_argument("--terms", default="bench/results/terminology_terms.tsv", help="where the TSV is written")
    parser.add_argument("--json", help="write the results to this JSON file")
    parser.add_argument("--output", help="write the markdown report here")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    split = {name: read_parallel_files(f"{args.corpus_dir}/{name}.en", f"{args.corpus_dir}/{name}.de")
             for name in ("train", "test")}
    artifact = open_artifact(args.run_dir, model=args.model)  # its tokenizer only: each translation opens the run
    counts = extract_terms(split["train"], split["test"], artifact.run.load_tokenizer(), args)
    terminology = Terminology.load(args.terms)
    pairs = split["test"][:args.limit]
    sources, references = [en for en, _ in pairs], [de for _, de in pairs]
    applications = [terminology.targets(source) for source in sources]
    outputs = translate_both(sources, args)
    results = {"run_dir": args.run_dir, "command": command_line(), "beam_size": args.beam_size,
               "terms_file": args.terms, "terms": counts, "test_pairs": len(split["test"]), "sentences": len(pairs),
               "sentences_with_terms": sum(bool(a) for a in applications),
               "applications": sum(len(a) for a in applications),
               "whole_test_set": {"sentences_with_terms": sum(bool(terminology.targets(en)) for en, _ in split["test"]),
                                  "applications": sum(len(terminology.targets(en)) for en, _ in split["test"])},
               "reference_term_hits": hit_rates(references, applications, terminology),
               **{key: summary(out, references, applications, terminology) for key, out in outputs.items()},
               "machine": machine()}
    results["speed_cost"] = round(results["with_terms"]["seconds"] / results["plain"]["seconds"], 2)
    text = report(results)
    print(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)
    return write_json(args.json, results)


if __name__ == "__main__":
    sys.exit(main())
