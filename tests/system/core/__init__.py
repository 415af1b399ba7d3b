"""The job path end to end: the whole flow, crashes at checkpoints, lifecycle, the per-user lock, a soak."""
