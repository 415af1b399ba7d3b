"""Recovery paths: each test drives one with real processes — a redis-server, a daemon, its slots,
tests/jobs/tickjob.py jobs whose trails show when each attempt ran."""
