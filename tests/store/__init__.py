"""Unit tests of tender_pool.store: config loading, log lines."""
