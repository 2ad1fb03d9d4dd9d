"""`translate --terminology FILE`: translations that hold the terms of a terminology file.

The file's format and how a term is matched: `data.terminology`; each line's target terms become the request's
`constraints`, which a run and a SavedModel exported with `--constraints` honour (`decoding.constrained`).
"""

import sys

from t2t_keras.data.terminology import Terminology


def terminology_request(artifact, lines, path, request):
    """`request` with the constraints the terminology at `path` sets for each of `lines` (`data.terminology`),
    checked against what `artifact` accepts; a target term its tokenizer cannot write fails here, naming the line
    of the file."""
    terminology = Terminology.load(path)
    request = artifact.check_request(request.updated(constraints=[terminology.targets(line) for line in lines]))
    terminology.target_ids(artifact.tokenizer)
    return request


def print_terminology_translations(artifact, lines, path, request):
    """Prints one translation per line of `lines` ("" for a sentence that failed) and, on stderr, an error naming
    each failed line; the exit status: 0, or 2 if a sentence failed."""
    generation = artifact.generate(lines, terminology_request(artifact, lines, path, request))
    for number, (text, error) in enumerate(zip(generation.best, generation.errors), start=1):
        print(text)
        if error:
            print(f"t2t-keras translate: error: line {number}: {error}", file=sys.stderr)
    return 2 if any(generation.errors) else 0
