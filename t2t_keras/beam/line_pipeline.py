"""The pipeline of translate and score `--runner`: numbered lines in, one output file per input file out.

    inputs -> read and check each line (bad ones: dead letters) -> Reshuffle (spread over workers)
      -> RunInference, batched by BatchElements; a batch that fails is tried again line by line, and a line that
         fails alone is a dead letter -> group by input file -> sort by line number -> the file, written whole

Exactly once, in order: every line is keyed by (file, line number); RunInference emits a batch's results only
when the batch succeeded, so a line's result comes from the first try or from the retry, never both; the writer
places each result at its line number, and a bad line's place is left empty, so output line N is input line N.
The dead-letter file is written before the outputs, which are refused (the pipeline fails) when the bad lines
outnumber --max-errors.
"""

import apache_beam as beam
from apache_beam.ml.inference.base import KeyedModelHandler, RunInference

from t2t_keras.beam import line_checks
from t2t_keras.beam.pipeline_paths import write_whole
from t2t_keras.errors import DataError

BAD = "bad"


def build_line_pipeline(pipeline, plan, handler, retry_handler, check="sentence", max_errors=None):
    """Adds to `pipeline` the transforms that read `plan.inputs`, run `handler` on each good line (item of
    `line_checks.CHECKS[check]`) and write `plan.outputs` and `plan.errors`."""
    read = (pipeline | "Inputs" >> beam.Create(list(enumerate(plan.inputs)))
            | "Read and check" >> beam.FlatMap(_checked_lines, line_checks.CHECKS[check]).with_outputs(
                BAD, main="good"))
    lines = read.good | "Spread" >> beam.Reshuffle()
    done, failed = inferred(lines, handler, retry_handler)
    bad = (read[BAD], failed) | "Bad lines" >> beam.Flatten()
    bad_count = (bad | "All bad lines" >> beam.combiners.ToList()
                 | "Write dead letters" >> beam.Map(_write_dead_letters, plan))
    seeds = pipeline | "Every input" >> beam.Create([(index, None) for index in range(len(plan.inputs))])
    placed = (done | "Place results" >> beam.Map(lambda item: (item[0][0], (item[0][1], item[1]))),
              bad | "Place bad lines" >> beam.Map(lambda item: (item[0][0], (item[0][1], ""))), seeds)
    return (placed | "Lines" >> beam.Flatten() | "By input" >> beam.GroupByKey()
            | "Write outputs" >> beam.Map(_write_output, plan, max_errors, beam.pvalue.AsSingleton(bad_count)))


def inferred(lines, handler, retry_handler):
    """`(results, failures)` of keyed `lines`: `((file, number), output line)` and `((file, number), reason)`."""
    first, first_failed = lines | "Infer" >> RunInference(KeyedModelHandler(handler)).with_exception_handling()
    again = first_failed.failed_inferences | "Failed batches" >> beam.FlatMap(lambda failure: list(failure[0]))
    second, second_failed = (again | "Infer line by line" >> RunInference(
        KeyedModelHandler(retry_handler)).with_exception_handling())
    failed = second_failed.failed_inferences | "Failed lines" >> beam.FlatMap(_failure_records)
    return (first, second) | "Results" >> beam.Flatten(), failed


def _failure_records(failure):
    batch, (_, message, _) = failure
    return [(key, f"the model failed on it: {message}") for key, _ in batch]


def _checked_lines(indexed_path, check):
    index, path = indexed_path
    for number, raw in line_checks.numbered_lines(path):
        item, reason = check(raw, number)
        if reason is None:
            yield (index, number), item
        else:
            yield beam.pvalue.TaggedOutput(BAD, ((index, number), reason))


def _write_dead_letters(bad, plan):
    """Writes the dead-letter file (empty when no line was bad); returns how many lines it holds."""
    records = [line_checks.dead_letter(plan.inputs[index], number, reason) for (index, number), reason in bad]
    write_whole(plan.errors, line_checks.dead_letter_text(records).encode("utf-8"))
    return len(records)


def _write_output(group, plan, max_errors, bad_count):
    """Writes one input's output file: its lines' results by line number, a bad line's place empty."""
    index, entries = group
    if max_errors is not None and bad_count > max_errors:
        raise DataError(too_many_bad_lines(bad_count, max_errors, plan.errors))
    by_number = dict(entry for entry in entries if entry is not None)
    text = "".join(by_number[number] + "\n" for number in sorted(by_number))
    if len(by_number) != (max(by_number) if by_number else 0):
        raise RuntimeError(f"lines of {plan.inputs[index]} are missing from the results")  # never: each is placed
    write_whole(plan.outputs[index], text.encode("utf-8"))
    return plan.outputs[index]


def too_many_bad_lines(count, max_errors, errors_path):
    return (f"{count} lines could not be used, more than --max-errors {max_errors}: no output was written. "
            f"They are listed in {errors_path} (file, line, reason): fix or remove them, or raise --max-errors.")
