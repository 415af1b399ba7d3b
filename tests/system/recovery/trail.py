"""What the recovery tests share: the tick handler's config and reading its trails."""

from __future__ import annotations

from pathlib import Path

from ..chaos.spans import Attempt, read_trails
from conftest import JOBS, PYTHON, wait_until


def handlers(timeout: float = 10, extra: str = "") -> str:
    return f"""
[handlers.tick]
command = ["{PYTHON}", "{JOBS / "tickjob.py"}"]
timeout = {timeout}
{extra}
"""


def attempts(record: Path, job: str) -> list[Attempt]:
    return sorted((a for a in read_trails(record) if a.job == job), key=lambda a: a.start)


def wait_ticking(record: Path, job: str, n: int = 1, timeout: float = 20) -> Attempt:
    """Attempt ``n`` of ``job`` has ticked at least twice (it is running, not merely spawned)."""
    def found():
        return next((a for a in attempts(record, job) if a.n == n and a.ticks >= 2), None)
    return wait_until(found, timeout, interval=0.05, what=f"{job} attempt {n} ticking")
