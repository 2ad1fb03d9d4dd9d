"""Training (§5): everything `model.fit` needs, and `train`, which puts it together.

    trainer       `train(resolved)` of a `resolved_run.ResolvedRun`: compile, restore, `model.fit` in a strategy
    fitting       one `model.fit`: its input from the run's position, its callbacks
    guard         a diverging loss caught inside the train step, its update not applied
    divergence    reading the guard's record once a batch; what is logged and written of an event
    recovery      what a diverging run does: stop, or roll back, skip the batch and recover
    memory_fit    a training step's memory estimate against the machine; batches split to fit
    schedule      the learning rate of eq. (3) and Adam(0.9, 0.98, 1e-9) (§5.3)
    loss          label-smoothed cross-entropy that ignores padding (§5.4)
    metrics       padding-aware accuracy, perplexity and token counts
    callbacks     stop at a step, time limit, training scalars for TensorBoard, skipped (overflow) updates
    keep_best     dev BLEU and loss during training, the best checkpoint (RUN/best/), early stopping
    checkpoints   periodic checkpoints of model and optimizer (never after a diverging update), resuming
    strategy      the distribution strategy from the config (one device, mirrored, multi-worker)
    multi_worker  what MultiWorkerMirroredStrategy needs on top of Keras
"""
