"""The main job: default corpus -> train within a time budget -> average -> evaluate -> export -> translate.

Every step writes into one run directory, and running the job again resumes
training from the last checkpoint for another time budget before
re-averaging, re-evaluating and re-exporting.
"""

import json
import logging
import sys
from typing import NamedTuple

import tensorflow as tf

from t2t_keras import config as config_lib
from t2t_keras.artifacts import open_artifact
from t2t_keras.data import sources
from t2t_keras.errors import check_task
from t2t_keras.evaluation.evaluate_run import evaluate, evaluate_baseline
from t2t_keras.export.saved_model import export_run
from t2t_keras.inspect.quality_plot import write_quality_plot
from t2t_keras.pipeline import train_run
from t2t_keras.resolved_run import resolve_run
from t2t_keras.runs import average_run, checkpoint_step, open_run
from t2t_keras.training.wall_time import WallClock, append_record, folded, format_breakdown, session_record

logger = logging.getLogger(__name__)

EXAMPLES = [
    "Click the Print button.",
    "Choose Format - Cells and click the Font tab.",
    "This function returns the number of characters in a text string.",
    "You can insert pictures and tables into your document.",
    "Select the cells that you want to sort.",
]


def _train(config, run, minutes):
    if minutes <= 0:
        return None
    return train_run(resolve_run(run, config), minutes)


def _baseline(run, split="test"):
    """Retrieval-baseline scores, computed once per run directory."""
    cached = run.read_json(run.baseline_path)
    if cached is not None:
        return cached
    result = evaluate_baseline(run, split)
    run.write_json(run.baseline_path, result)
    return result


def _other_corpora_tests(run, artifact):
    """`{corpus: {bleu, chrf}}` on the test split of each corpus of `data.sources` after the first, translated by
    `artifact` (the run's, opened).

    The main test set is the first corpus's; a mixture's other domains are scored too, so the report shows
    what mixing them in bought. A corpus named twice (two text sources) is keyed by its test file.
    """
    scores = {}
    for part, _ in sources.components(run.load_config().data)[1:]:
        if not sources.has_split(part, "test") or part.source == "tfds":
            continue
        kind, files = sources.split_files(part, "test")
        if kind != "text":
            continue
        name = part.source if part.source in sources.PREPARED_SOURCES else files[0]
        result = evaluate(artifact, run, "test", source=files[0], reference=files[1])
        scores[name] = {"bleu": result["bleu"], "chrf": result["chrf"], "sentences": result["sentences"]}
    return scores


def _pairs(info):
    """Sentence pairs of one split in data.json: its own count, or the sum over a mixture's corpora."""
    info = info or {}
    if "sources" in info:
        return sum(part.get("pairs") or 0 for part in info["sources"])
    return info.get("pairs")


def _speed(run):
    """Mean target tokens/s over the last logged steps of the run (from TensorBoard scalars)."""
    values = []
    for path in sorted((run.log_dir / "train").glob("events.out.tfevents.*")):
        for record in tf.data.TFRecordDataset(str(path)):  # eager: no deprecated summary_iterator warning
            event = tf.compat.v1.Event.FromString(record.numpy())
            values += [tf.make_ndarray(v.tensor).item() for v in event.summary.value if v.tag == "tokens_per_second"]
    recent = values[-20:]
    return round(sum(recent) / len(recent)) if recent else None


def tensorboard_command(log_dir):
    """The command that shows `log_dir` in TensorBoard, with this Python (the venv's), so it works as printed."""
    return f"{sys.executable} -m tensorboard.main --logdir {log_dir}"


def _quality_plot(run):
    """Draws the run's quality points (RUN/quality.json) into RUN/quality.png; its path, or None without points."""
    curve = run.read_json(run.quality_path) or {}
    if not curve.get("points"):
        return None
    title = f"{run.path.name}: dev BLEU of {curve['sentences']} sentences against wall-clock minutes"
    return str(write_quality_plot(curve["points"], run.quality_plot_path, title))


class Done(NamedTuple):
    """What the main job's steps gave, for its report."""

    result: object  # the train session's TrainResult, or None without training
    averaged: object  # RUN/averaged/
    scores: dict  # the test split's
    other_tests: dict  # the other corpora's test splits'
    baseline: dict  # the retrieval baseline's
    export_dir: object
    translations: list  # of the examples, by the export
    plot: object  # RUN/quality.png, or None


def _steps(run, config, minutes, examples, clock):
    """Every step after the config, each timed as its part of `clock`: `Done`."""
    with clock.part("training"):
        result = _train(config, run, minutes)
    with clock.part("averaging"):
        averaged = average_run(run)
    with clock.part("evaluation"):  # the run's model is loaded and its search traced on the first batch
        artifact = open_artifact(run, "auto", progress=True)
        scores = evaluate(artifact, run, "test")
    with clock.part("other corpora"):
        other_tests = _other_corpora_tests(run, artifact)
    with clock.part("retrieval baseline"):
        baseline = _baseline(run)
    with clock.part("export"):
        export_dir = export_run(run, run.export_dir, overwrite=True)
    with clock.part("export start-up"):  # the SavedModel loaded
        exported = open_artifact(export_dir)
    with clock.part("examples"):
        translations = exported.generate(examples, exported.defaults).best
    with clock.part("quality plot"):
        plot = _quality_plot(run)
    return Done(result, averaged, scores, other_tests, baseline, export_dir, translations, plot)


def run_main_job(run_dir="runs/main", config="mini", minutes=30.0, overrides=(), examples=EXAMPLES):
    """Runs every step and returns the report dict (also written to RUN/report.json), the run locked throughout
    (its steps write it: `runs.RunDirectory.lock`)."""
    clock = WallClock("other")
    loaded = config_lib.load_config(config, overrides)
    check_task("main", loaded.task, f"--config {config}")
    run = open_run(run_dir)  # opened once; every step below takes it
    with run.lock("main"):
        return _report(run, _steps(run, loaded, minutes, examples, clock), examples, clock)


def _report(run, done, examples, clock):
    """The report of the steps `done`, with where the job's wall time went; written to RUN/report.json."""
    result, scores = done.result, done.scores
    data = run.read_json(run.data_path) or {}
    report = {
        "run_dir": str(run.path),
        "data": {split: _pairs(info) for split, info in data.items()} | {"test": scores["sentences"]},
        "steps": checkpoint_step(run.checkpoint_paths()[-1]),
        "steps_this_session": None if result is None else result.final_step - result.start_step,
        "train_minutes_this_session": None if result is None else round(result.seconds / 60, 1),
        "target_tokens_per_second": _speed(run),
        "test": {k: scores[k] for k in ("bleu", "chrf", "signature", "tokenized_bleu") if k in scores},
        "test_other_corpora": done.other_tests,
        "retrieval_baseline": {k: done.baseline[k] for k in ("bleu", "chrf")},
        "averaged_model": str(done.averaged),
        "export": str(done.export_dir),
        "examples": dict(zip(examples, done.translations)),
        "quality_plot": done.plot,
        "tensorboard": tensorboard_command(run.log_dir),
    }
    timing = folded(session_record("main", clock), "training", None if result is None else result.timing)
    append_record(run, timing)
    report.update(timing=timing, total_minutes=round(timing["seconds"] / 60, 1))
    run.write_json(run.report_path, report)
    return report


def format_report(report):
    lines = [
        "== t2t_keras main job ==",
        f"data (sentence pairs): {json.dumps(report['data'])}",
        f"training: {report['steps']} steps in total"
        + (f", {report['steps_this_session']} now in {report['train_minutes_this_session']} min"
           if report["steps_this_session"] is not None else ""),
        f"speed: {report['target_tokens_per_second']} target tokens/s",
        f"test: sacreBLEU {report['test']['bleu']}, chrF {report['test']['chrf']} ({report['test']['signature']})",
    ]
    lines += [f"test on {name}: sacreBLEU {scores['bleu']}, chrF {scores['chrf']}"
              for name, scores in (report.get("test_other_corpora") or {}).items()]
    lines += [
        f"retrieval baseline: sacreBLEU {report['retrieval_baseline']['bleu']}, "
        f"chrF {report['retrieval_baseline']['chrf']}",
        "examples (translated by the exported SavedModel):",
    ]
    lines += [f"  {source}\n    -> {target}" for source, target in report["examples"].items()]
    lines += [
        f"run directory: {report['run_dir']}",
        f"export: {report['export']}",
        f"quality curve: {report['quality_plot'] or 'none (no quality points: training.quality_every_minutes)'}",
        f"TensorBoard: {report['tensorboard']}",
    ]
    lines += format_breakdown(report["timing"])
    lines.append(f"total time: {report['total_minutes']} min")
    return "\n".join(lines)
