"""One way to open what t2t-keras makes: a run directory, a SavedModel of any task, or a CTranslate2 model.

    artifact = open_artifact("runs/base")     # or "exports/base", "exports/base-ct2", "runs/lm"
    artifact.task, artifact.kind              # "translation" | "lm" | "mlm";  "run" | "saved_model" | "ctranslate2"
    artifact.translate(lines, beam_size=2)    # translations, or an lm's continuations
    artifact.scorer()                         # forced decoding of given translations (translation)
    artifact.limits()

Every kind has that interface; what a kind does not take (sampling for a
translation model, a run's precision for an export) is refused by name.
"""

from t2t_keras.decoding.parameters import DecodingParams
from t2t_keras.errors import T2TError, check_applicable
from t2t_keras.export.opening import open_export
from t2t_keras.runs import ensemble_runs, open_run

RUN_OPTIONS = ("precision", "shards", "shortlist")  # how a translation run's own model decodes


def open_artifact(path, model="auto", batch_size=32, ensemble=()):
    """A `RunArtifact` for a run directory (its weights by `model`: see `runs.run_weights`), else the export at
    `path` as `export.opening.open_export` opens it. `ensemble`: more run directories whose models translate
    with the run's (see `RunArtifact`)."""
    run = open_run(path)
    if run.exists():
        return RunArtifact(run, model, ensemble)
    check_applicable(["an ensemble"] if ensemble else [], f"{path}, an export: ensembles decode run directories")
    return open_export(path, batch_size=batch_size)


class RunArtifact:
    """A run directory, opened once: its task and config, and translation with its weights on demand.

    `ensemble`: more translation runs of the run's vocabulary (`runs.ensemble_runs` checks them when the artifact
    opens) whose models translate with its own, their log-probabilities averaged (`decoding.ensemble`); the
    decoding parameters are the run's.
    """

    kind = "run"

    def __init__(self, run, model="auto", ensemble=()):
        self.run = open_run(run)
        self.path = self.run.path
        self.model = model
        self.config = self.run.load_config()
        self.task = self.config.task
        self.ensemble = tuple(ensemble_runs(self.run, ensemble))

    def decoding_params(self, **given):
        """The run's `decoding` config with the given values; an lm searches greedily unless a beam is asked for."""
        params = DecodingParams.from_config(self.config.decoding)
        return (params.updated(beam_size=1) if self.task == "lm" else params).updated(**given)

    def translate(self, lines, precision=None, shards=None, temperature=None, top_k=None, seed=None, shortlist=None,
                  **given):
        """Translations (an lm: continuations) of `lines`; `given` are `DecodingParams` fields; `shortlist`:
        search over the run's vocabulary shortlist (translation runs)."""
        params = self.decoding_params(**given)
        if self.task == "lm":
            from t2t_keras.evaluation.continue_run import run_continuer

            _refuse(self, "an lm run", precision=precision, shards=shards, shortlist=shortlist)
            return run_continuer(self.run, self.model, params, temperature, top_k, seed).translate(lines)
        from t2t_keras.evaluation.evaluate_run import run_translator

        _refuse(self, "a translation run", temperature=temperature, top_k=top_k, seed=seed)
        return run_translator(self.run, self.model, params, precision, shards, ensemble=self.ensemble,
                              shortlist=shortlist).translate(lines)

    def scorer(self):
        """The run's model for forced decoding (`evaluation.scoring`)."""
        from t2t_keras.evaluation.scoring import RunScorer

        check_applicable(["an ensemble"] if self.ensemble else [], "scoring, which scores one run's model")

        return RunScorer(self.run, self.model)

    def limits(self):
        return {"max_length": self.config.model.max_length}


def _refuse(artifact, what, **options):
    if artifact.task == "mlm":
        raise T2TError(f"{artifact.path} is an mlm run: a masked language model generates nothing.")
    check_applicable([name for name, value in options.items() if value is not None], what)
