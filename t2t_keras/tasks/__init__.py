"""What differs between the jobs a run can train, one file a task; everything else runs one road.

    base            `Task`: the shared data setup (`load_data`) and the questions the pipeline asks a task
    translation     `task: translation`: parallel pairs, the encoder-decoder, translations
    language_model  `task: lm` (next piece, continuations) and `task: mlm` (masked pieces, BERT's corruption)
    data_route      `data.pipeline`: training batches from memory or from shards prepared in RUN/prepared/

    task = task_of(config)          # the task `config.task` names
    data = task.load_data(run, config)
"""

from t2t_keras.tasks.base import RunData, Task
from t2t_keras.tasks.language_model import CausalLanguageModelTask, MaskedLanguageModelTask
from t2t_keras.tasks.translation import TranslationTask

TASKS = {task.name: task for task in (TranslationTask(), CausalLanguageModelTask(), MaskedLanguageModelTask())}


def task_of(config):
    """The `Task` a `config.Config` trains (`config.task`)."""
    return TASKS[config.task]


__all__ = ["TASKS", "RunData", "Task", "task_of"]
