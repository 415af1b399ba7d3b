"""Tests of tender_pool.supervisor: the loop, the reaper, the status and control sockets, metrics, the CLI."""
