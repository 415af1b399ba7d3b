"""tender-pool's function handlers for bench/compare (system ``tender-pool-fn``): the same job bodies
as the peers' in-process functions (``jobs_dramatiq.py``), run as a fork of the slot's fork server
per job (CONTRACT "Benchmarks and guarantees": a forked child per job against a function in the
worker). The pool stamps started_at / finished_at itself: no marker write."""

import time


def noop(ctx):
    return {}


def sleep10(ctx):
    time.sleep(0.01)
    return {}


def long(ctx):
    time.sleep(3)
    return {}
