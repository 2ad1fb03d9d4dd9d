"""`translate --terminology FILE`: a translation run's translations that hold the terms of a terminology file.

The file's format and how a term is matched: `data.terminology`; the search: `decoding.constrained`.
"""

import sys

from t2t_keras.data.terminology import Terminology
from t2t_keras.decoding.constrained_translator import ConstrainedTranslator
from t2t_keras.errors import T2TError, check_applicable
from t2t_keras.evaluation.evaluate_run import run_translator


def terminology_translations(artifact, lines, path, precision=None, shards=None, shortlist=None, **given):
    """`decoding.constrained_translator.ConstrainedTranslations` of `lines` (a list of str) by a translation run.

    Args:
        artifact: an opened run (`artifacts.RunArtifact`) of a translation model, or an ensemble of runs.
        path: the terminology file (`data.terminology`), read before the model loads.
        precision: the run's decoding precision (None: its config's).
        shards, shortlist: refused when given (the search with terms runs as one, over the whole vocabulary).
        given: `DecodingParams` fields (beam_size, alpha, max_extra_length) over the run's.
    """
    if artifact.kind != "run" or artifact.task != "translation":
        raise T2TError(f"--terminology applies to a translation run (--run-dir), not to {artifact.path}, a "
                       f"{artifact.task} {artifact.kind.replace('_', ' ')}: translate a run directory, or send a "
                       "SavedModel's server requests with \"constraints\".")
    check_applicable([f"--{name}" for name, value in (("shards", shards), ("shortlist", shortlist)) if value],
                     "a search with --terminology (one search over the whole vocabulary)")
    terminology = Terminology.load(path)
    terminology.target_ids(artifact.run.load_tokenizer())  # a term the tokenizer cannot write fails here
    translator = run_translator(artifact.run, artifact.model, artifact.decoding_params(**given), precision,
                                ensemble=artifact.ensemble, translator=ConstrainedTranslator)
    return translator.translate(lines, terminology.constraints(lines, translator.tokenizer))


def print_terminology_translations(artifact, lines, path, options):
    """Prints one translation per line of `lines` ("" for a sentence that failed) and, on stderr, an error naming
    each failed line; the exit status: 0, or 2 if a sentence failed. `options`: `terminology_translations`'s."""
    result = terminology_translations(artifact, lines, path, **options)
    for number, (text, error) in enumerate(zip(result.texts, result.errors), start=1):
        print(text)
        if error:
            print(f"t2t-keras translate: error: line {number}: {error}", file=sys.stderr)
    return 2 if any(result.errors) else 0
