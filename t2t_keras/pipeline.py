"""The commands' one road for every task: each step asks the run's `Task` what applies to it.

    train_run(resolve_run("runs/lm", "lm-mini"))      # trains any task, with the callbacks that task can use
"""

from t2t_keras.inspect.summary import RunAttentionSummary
from t2t_keras.tasks import task_of
from t2t_keras.training.trainer import train


def training_callbacks(task, run):
    """The callbacks beyond the trainer's own that `task` can use: attention summaries for translation only."""
    return [RunAttentionSummary(run)] if task.attention_summary else []


def train_run(resolved, minutes=None, **options):
    """`trainer.train` of a `resolved_run.ResolvedRun` with `training_callbacks`; `options` go to `train` (e.g.
    `verbose`)."""
    callbacks = training_callbacks(task_of(resolved.config), resolved.run)
    return train(resolved, minutes=minutes, callbacks=callbacks, **options)
