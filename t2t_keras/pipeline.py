"""The commands' one road for every task: each step asks the run's `Task` what applies to it.

    train_run(config, "runs/lm")      # trains any task, with the callbacks that task can use
"""

from t2t_keras.inspect.summary import RunAttentionSummary
from t2t_keras.tasks import task_of
from t2t_keras.training.trainer import train


def training_callbacks(task, run_dir):
    """The callbacks beyond the trainer's own that `task` can use: attention summaries for translation only."""
    return [RunAttentionSummary(run_dir)] if task.attention_summary else []


def train_run(config, run_dir, minutes=None, **options):
    """`trainer.train` with `training_callbacks`; `options` go to `train` (e.g. `verbose`)."""
    return train(config, run_dir, minutes=minutes, callbacks=training_callbacks(task_of(config), run_dir), **options)
