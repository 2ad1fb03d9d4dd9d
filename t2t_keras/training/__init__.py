"""Training pieces: the learning-rate schedule and optimizer (§5.3), the label-smoothed loss (§5.4),
padding-aware metrics and the distribution strategy."""
