"""Unit tests of tender_pool.slots: the slot process, its scripts and its hot path."""
