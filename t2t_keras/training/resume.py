"""What an exact resume needs beyond model and optimizer: dropout random state and input position.

The input position is deterministic rather than stored: the training stream is a fixed
function of `training.seed` (seeded shuffle, deterministic batching), and every update
consumes `gradient_accumulation_steps` micro-batches, so a run resumed at update `s`
skips the first `s · N` micro-batches. Skipping re-reads them (it costs one pass over
them through the input pipeline, not through the model).
"""

import logging

logger = logging.getLogger(__name__)


def random_state(model):
    """The state variables of every Keras `SeedGenerator` in `model` (dropout), in a stable order.

    `tf.train.Checkpoint(model=model)` does not track them; a checkpoint that lists them
    makes the dropout masks after a resume those of an uninterrupted run.
    """
    return [v for v in model.variables if v.path.endswith("seed_generator_state")]


def skip_consumed(dataset, step, micro_batches_per_step=1):
    """`dataset` (micro-batches, from its beginning) without the ones that `step` updates consumed."""
    if step <= 0:
        return dataset
    return dataset.skip(step * micro_batches_per_step)


def check_replicas(run, replicas, step):
    """Logs when a run resumes on another replica count: batches then split differently (not exact)."""
    previous = run.read_json("replicas.json")
    if step > 0 and previous and previous.get("replicas") != replicas:
        logger.warning("Resuming at step %d on %d replica(s), trained on %d: the batches and random state are split "
                       "differently, so the rest of the run is not an exact continuation.",
                       step, replicas, previous.get("replicas"))
    run.write_json("replicas.json", {"replicas": replicas})
    return previous is None or previous.get("replicas") == replicas

