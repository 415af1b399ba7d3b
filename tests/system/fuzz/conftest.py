"""Shared by the fuzz tests: Hypothesis settings with a printed seed, a module-wide Redis + harness
(one real daemon serves many generated examples: a daemon per example would not fit the budget),
and the checks every test repeats (one line, no traceback, nothing of ours left running).

The seed: ``TENDER_POOL_FUZZ_SEED`` if set, else 0 under CI (a run is reproducible), else a fresh
random one. Every test prints it; a failure's captured stdout shows it, and setting the variable to
it replays the same examples (Hypothesis's example database is off: nothing is written to the repo).
"""

from __future__ import annotations

import os
import random
import signal
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from conftest import SESSION, Harness, RedisServer  # tests/conftest.py
from hypothesis import HealthCheck, Phase, seed, settings

SEED = int(os.environ.get("TENDER_POOL_FUZZ_SEED") or (0 if os.environ.get("CI") else random.randrange(2**32)))


def fuzz(max_examples: int, deadline_s: float | None = 10.0, shrink: bool = True):
    """Hypothesis settings for one test, bounded, seeded with ``SEED``. ``deadline_s`` is per example.
    ``shrink=False`` for tests whose failing example waits out a timeout: shrinking would repeat
    that wait hundreds of times; the failing example is reported as generated."""
    s = settings(
        phases=[p for p in Phase if shrink or p not in (Phase.shrink, Phase.explain)],
        max_examples=max_examples,
        deadline=None if deadline_s is None else timedelta(seconds=deadline_s),
        database=None,
        derandomize=False,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                               HealthCheck.function_scoped_fixture, HealthCheck.large_base_example],
    )

    def wrap(f):
        return seed(SEED)(s(f))

    return wrap


@pytest.fixture(autouse=True)
def _print_seed():
    print(f"fuzz seed {SEED} (TENDER_POOL_FUZZ_SEED={SEED} replays it)")
    yield


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A Redis and a harness shared by one module's tests (``Harness`` of tests/conftest.py)."""
    tmp = tmp_path_factory.mktemp("fuzz")
    srv = RedisServer(tmp)
    h = Harness(tmp, srv)
    yield h
    h.close()
    srv.stop(signal.SIGKILL)


def one_line_error(stderr: str, prefix: str) -> str:
    """The contract's failure shape: exactly one non-empty line starting with ``prefix``."""
    assert "Traceback" not in stderr, stderr[-2000:]
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line, got {len(lines)}: {stderr[-2000:]!r}"
    # str.splitlines also splits at \x0b \x0c \x1c-\x1e \x85 \u2028 \u2029: a terminal or a log
    # shipper may too, so none of them may appear either.
    assert len(stderr.rstrip("\n").split("\n")) == 1, repr(stderr[-2000:])
    assert lines[0].startswith(prefix), lines[0][:300]
    return lines[0]


def marker_env(env: dict | None = None) -> tuple[dict, str]:
    """An environment carrying a fresh marker, to find every process a command left behind."""
    mark = uuid.uuid4().hex
    out = dict(os.environ if env is None else env)
    out["TENDER_POOL_FUZZ_MARKER"] = mark
    out["TENDER_POOL_TEST_SESSION"] = SESSION
    return out, mark


def processes_with(mark: str) -> list[int]:
    needle = f"TENDER_POOL_FUZZ_MARKER={mark}".encode()
    me = os.getpid()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0"):
                out.append(int(d.name))
        except OSError:
            pass
    return out


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
