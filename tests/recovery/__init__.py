"""Recovery paths nothing else exercised (issue 11): each test drives one with real processes — a
redis-server, a daemon, its slots, tests/jobs/tickjob.py jobs whose trails show when each attempt ran."""
