"""What `translate --with-quality` / `--min-quality` print: each translation with its quality estimate, or an
empty line below the threshold, the withheld lines listed in a side file (the estimate: `decoding.quality_model`;
training it: `evaluation.quality_estimate`)."""

import json

from t2t_keras.decoding.request import below_quality
from t2t_keras.errors import T2TError
from t2t_keras.files import write_text_atomic

LOW_QUALITY_SUFFIX = ".low-quality.jsonl"  # translate --min-quality: INPUT.low-quality.jsonl beside the input


def low_quality_path(input_path, given=None):
    """Where `translate --min-quality` lists the lines it withholds: `given` (--low-quality-file), else
    INPUT.low-quality.jsonl beside --input; stdin needs `given`."""
    if given:
        return given
    if not input_path:
        raise T2TError("--min-quality reading standard input needs --low-quality-file FILE: where the withheld "
                       "lines are listed (with --input they go to INPUT" + LOW_QUALITY_SUFFIX + ").")
    return str(input_path) + LOW_QUALITY_SUFFIX


def quality_outputs(lines, generation, with_quality=False, min_quality=None):
    """`(output lines, withheld)` of `translate` with a quality estimate: each best translation, with
    `with_quality` followed by a tab and its estimate; below `min_quality` an empty line instead, and the line
    listed in `withheld` as `{"line": number from 1, "source", "translation", "quality"}`."""
    low = set(below_quality(generation, min_quality))
    outputs, withheld = [], []
    for index, (source, text) in enumerate(zip(lines, generation.best)):
        quality = generation.quality[index]
        if index in low:
            withheld.append({"line": index + 1, "source": source, "translation": text, "quality": quality})
            text = ""
        outputs.append(f"{text}\t{quality:.4f}" if with_quality else text)
    return outputs, withheld


def write_withheld(path, withheld):
    """The lines `translate --min-quality` withheld, one JSON object a line, written atomically (empty: none)."""
    write_text_atomic(path, "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in withheld))
