"""Whole-daemon tests: the pool's guarantees under crashes, chaos, soaks, failovers and partitions,
and features end to end through several packages. One folder per concern."""
