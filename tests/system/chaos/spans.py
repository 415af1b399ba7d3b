"""When each attempt ran, from the trails ``tests/jobs/tickjob.py`` leaves, and where two overlapped.

An attempt's span is its first tick .. its ``end`` line, or, for an attempt that was killed before it
could write one, its last tick + the tick interval (it may have lived that much longer, no more: it
would have ticked again). A kill time the test itself observed (it sent the SIGKILL) bounds that end
further. Killed attempts are exactly the ones a check over start/end records misses, and the ones
an overlap hides in (a reclaimed attempt that ran on while its re-run started elsewhere).

Pure functions over files: the chaos soak and ``tests/system/core/test_soak.py`` share them.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterable, NamedTuple


class Attempt(NamedTuple):
    job: str
    token: str  # TENDER_POOL_ATTEMPT, "<n>.<hex>"
    n: int  # the attempt number the handler got on stdin
    user: str
    start: float
    end: float  # the end line, else last tick + interval (bounded by a known kill time)
    ended: bool  # wrote its end line (ran to its exit)
    ticks: int


class Overlap(NamedTuple):
    first: Attempt
    second: Attempt
    seconds: float


def read_trail(path: Path, every: float = 0.05, killed_at: float | None = None) -> Attempt | None:
    """One ``<id>@<token>.ticks`` file; None when the attempt never ticked (killed at birth)."""
    job, _, token = path.name[: -len(".ticks")].partition("@")
    job = job.replace("+", "/")  # tickjob.py: a run job <run>/<n> is written <run>+<n>
    header: dict = {}
    ticks: list[float] = []
    end: float | None = None
    for line in path.read_text().splitlines():
        if line.startswith("# "):
            header = json.loads(line[2:])
        elif line.startswith("end "):
            end = float(line[4:])
        elif line.strip():
            try:
                ticks.append(float(line))
            except ValueError:  # a line cut short by the kill
                pass
    if not ticks:
        return None
    ended = end is not None
    if end is None:
        end = ticks[-1] + every
        if killed_at is not None:
            end = max(ticks[-1], min(end, killed_at))
    return Attempt(job, token, int(header.get("attempt", token.partition(".")[0] or 0)), header.get("user", ""),
                   ticks[0], end, ended, len(ticks))


def read_trails(record: Path, every: float = 0.05, killed: dict[tuple[str, str], float] | None = None) -> list[Attempt]:
    """Every attempt recorded in ``record``; ``killed``: (job, token) → when the test SIGKILLed it."""
    killed = killed or {}
    out = []
    for f in sorted(record.glob("*.ticks")):
        job, _, token = f.name[: -len(".ticks")].partition("@")
        job = job.replace("+", "/")
        a = read_trail(f, every, killed.get((job, token)))
        if a is not None:
            out.append(a)
    return out


def proven_ends(logs: Iterable[str], attempts: Iterable[Attempt],
                 killed: dict[tuple[str, str], float] | None = None) -> dict[tuple[str, str], float]:
    """(job, token) → the earliest proven end of each attempt, for ``read_trails``: a kill time the
    test observed (``killed``), the slot's ``job_ran`` line (logged once the runner's wait returned:
    the process had exited) or the supervisor's ``slot_exited`` line for a dead slot's attempt
    (logged after its group was SIGKILLed and before its list is requeued). A pool that stops an
    attempt settles or requeues it only after such a line, and a re-run may start within
    milliseconds: inside the one-tick estimate an attempt without its own end line otherwise gets.
    ``logs``: daemon log texts (JSON lines)."""
    seen: dict[tuple[str, int], float] = {}
    for text in logs:
        for line in text.splitlines():
            if '"job_ran"' not in line and '"slot_exited"' not in line:
                continue
            try:
                ev = json.loads(line)
                if ev.get("event") not in ("job_ran", "slot_exited") or ev.get("attempt") is None:
                    continue
                t = datetime.fromisoformat(ev["timestamp"].replace("Z", "+00:00")).timestamp()
                key = (ev["job_id"], int(ev["attempt"]))
            except (ValueError, KeyError, TypeError):
                continue
            seen[key] = min(t, seen.get(key, t))
    out = dict(killed or {})
    for a in attempts:
        t = seen.get((a.job, a.n))
        if t is not None:
            out[(a.job, a.token)] = min(t, out.get((a.job, a.token), t))
    return out


def overlaps(attempts: Iterable[Attempt], key: Callable[[Attempt], str]) -> list[Overlap]:
    """Pairs of attempts with the same ``key`` whose spans intersect (a sweep per key, by start: each
    attempt against the one that, of those started before it, ends last)."""
    groups: dict[str, list[Attempt]] = {}
    for a in attempts:
        groups.setdefault(key(a), []).append(a)
    found = []
    for group in groups.values():
        group.sort(key=lambda a: a.start)
        latest: Attempt | None = None
        for a in group:
            if latest is not None and a.start < latest.end:
                found.append(Overlap(latest, a, min(latest.end, a.end) - a.start))
            if latest is None or a.end > latest.end:
                latest = a
    return found


def closest(attempts: Iterable[Attempt], key: Callable[[Attempt], str]) -> float | None:
    """The smallest gap (seconds) between one attempt's end and the next start with the same key:
    how near the soak came to an overlap (negative: an overlap). None with fewer than two."""
    groups: dict[str, list[Attempt]] = {}
    for a in attempts:
        groups.setdefault(key(a), []).append(a)
    best = None
    for group in groups.values():
        group.sort(key=lambda a: a.start)
        end = None
        for a in group:
            if end is not None and (best is None or a.start - end < best):
                best = a.start - end
            end = a.end if end is None else max(end, a.end)
    return best


def by_job(a: Attempt) -> str:
    return a.job


def by_user(a: Attempt) -> str:
    return a.user


def describe(o: Overlap) -> str:
    f, s = o.first, o.second
    return (f"{f.job}#{f.n} ({f.user}, {f.start:.3f}..{f.end:.3f}{'' if f.ended else ' killed'}) and "
            f"{s.job}#{s.n} ({s.user}, {s.start:.3f}..{s.end:.3f}{'' if s.ended else ' killed'}): "
            f"{o.seconds * 1000:.0f} ms")
