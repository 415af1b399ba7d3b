"""Tests of tender_pool.client: jobs, runs, events, history, the status probe."""
