"""Helpers for the runs tests (not a conftest: tests/conftest.py is the one): the tick handlers'
config, a recount of a run, the events of a stream."""

from __future__ import annotations

import json


BUCKET = {"dead": "failed"}


def recount(h, run_id: str) -> tuple[dict, dict]:
    """(the run hash's counts, a recount from its jobs' states)."""
    k = h.k
    ids = [x.decode() for x in h.r.lrange(k.runjobs(run_id), 0, -1)]
    p = h.r.pipeline(transaction=True)  # one atomic snapshot of the run and its jobs
    p.hgetall(k.run(run_id))
    for j in ids:
        p.hget(k.job(j), "state")
    raw, *states = p.execute()
    run = {a.decode(): b.decode() for a, b in raw.items()}
    counted = dict.fromkeys(("queued", "waiting", "running", "completed", "failed", "cancelled", "skipped"), 0)
    for st in states:
        st = st.decode()
        counted[BUCKET.get(st, st)] += 1
    counted["total"] = len(ids)
    stored = {c: int(run.get(c, 0)) for c in counted}
    return stored, counted


def run_state(h, run_id: str) -> str:
    return (h.r.hget(h.k.run(run_id), "state") or b"").decode()


def handlers(per_user_par: int = 0, extra: str = "") -> str:
    """The harness's behave handler twice: ``behave`` (per_user 1, the default) and ``par``
    (per_user as given), plus ``extra`` TOML."""
    from conftest import JOBS, PYTHON

    beh = f'["{PYTHON}", "{JOBS / "behave.py"}"]'
    return f"""
[handlers.behave]
command = {beh}
timeout = 10

[handlers.par]
command = {beh}
timeout = 10
per_user = {per_user_par}
{extra}
"""


def events(h, stream: str) -> list[dict]:
    return [dict(json.loads(f[b"e"]), id=i.decode()) for i, f in h.r.xrange(stream)]
