"""`ArtifactHandler`: a RunInference model handler for any artifact `artifacts.open_artifact` opens."""

import threading

from apache_beam.ml.inference.base import ModelHandler

# The artifacts opened in this process, by (path, options): one per worker process, whatever the stages and
# threads that use it (Beam's own sharing is per RunInference stage; the retry stage reuses the first's model).
_OPENED = {}
_OPENING = threading.Lock()
# The lines of one inference call (BatchElements' batch): the artifact sorts them by length and decodes them
# `batch_size` at a time, so they pad about as little as one process's whole file (bench/results/pipeline.md)
LINES_PER_CALL = 512


class _LoadedArtifact:
    """An opened artifact, its resolved request, and the lock its calls take (one call at a time: the model
    uses every core of the process)."""

    def __init__(self, artifact, request):
        self.artifact, self.request, self.lock = artifact, request, threading.Lock()


class ArtifactHandler(ModelHandler):
    """Translates lines (`operation="generate"`) or scores SOURCE<TAB>TARGET pairs (`operation="score"`) with
    the artifact at `path`.

    Args:
      path: a run directory, SavedModel, CTranslate2 directory or LiteRT file; a path on a remote file system
        (gs://, s3://, hdfs://) is copied to the worker once (`pipeline_paths.local_copy`).
      open_options: `open_artifact`'s options (model, precision, ensemble, ...).
      request: the `GenerationRequest` fields given (`cli.REQUEST_FLAGS`), resolved by the artifact.
      operation: "generate" or "score".
      max_batch_size: the lines of one inference call: BatchElements' batch (all of that size but a bundle's
        last). The artifact decodes them `batch_size` at a time, sorted by length among themselves, so a call of
        many lines pads as little as the single-process command, which sorts a whole file.
      batch_size: the artifact's own batch (`open_artifact`'s `batch_size`).
      threads: the cores the artifact decodes on in a worker process (`open_artifact`'s `threads`; None: its
        default, every core), where several local workers share the machine (`Decisions.worker_threads`).
      score_format: `(token_level, as_json)` of `evaluation.scoring.format_score`.
      batch_tokens: padded tokens per scoring batch.
    """

    def __init__(self, path, open_options=None, request=None, operation="generate", max_batch_size=LINES_PER_CALL,
                 score_format=(False, False), batch_tokens=4096, batch_size=32, threads=None):
        super().__init__()
        self.path, self.open_options, self.request = str(path), dict(open_options or {}), dict(request or {})
        self.operation, self.max_batch_size = operation, max_batch_size
        self.batch_size, self.threads = batch_size, threads
        self.score_format, self.batch_tokens = tuple(score_format), batch_tokens

    def load_model(self):
        key = (self.path, repr(sorted(self.open_options.items())), repr(sorted(self.request.items())),
               self.operation, self.threads)
        with _OPENING:
            if key not in _OPENED:
                _OPENED[key] = self._open()
            return _OPENED[key]

    def _open(self):
        from t2t_keras.artifacts import open_artifact
        from t2t_keras.beam.pipeline_paths import local_copy

        artifact = open_artifact(local_copy(self.path), batch_size=self.batch_size, threads=self.threads,
                                 **self.open_options)
        if self.operation == "score":
            artifact.require("score")
            return _LoadedArtifact(artifact, None)
        return _LoadedArtifact(artifact, artifact.request(**self.request))

    def run_inference(self, batch, model, inference_args=None):
        """The output line of each element of `batch`, in its order."""
        batch = list(batch)
        with model.lock:
            if self.operation == "score":
                return self._scores(batch, model.artifact)
            return list(model.artifact.generate(batch, model.request).best)

    def _scores(self, pairs, artifact):
        from t2t_keras.evaluation.scoring import checked_pairs, format_score

        sources, targets = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
        checked = checked_pairs(sources, targets, ("source", "target"), artifact.max_length,
                                artifact.piece_lengths, "The pair goes to the dead-letter file.")
        scores = artifact.score(checked, batch_tokens=self.batch_tokens, progress=False)
        return [format_score(score, *self.score_format) for score in scores]

    def batch_elements_kwargs(self):
        return {"min_batch_size": self.max_batch_size, "max_batch_size": self.max_batch_size}

    def share_model_across_processes(self):
        return False  # one model per worker process (each process decodes on its own cores)

    def get_metrics_namespace(self):
        return "t2t_keras"
