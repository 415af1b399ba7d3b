"""Stalls longer than the lease: a supervisor stopped past its host key's life while another host
reclaims its jobs, and Redis frozen longer than the fence while a slot is inside a call to it.

CONTRACT: "With the fence no attempt runs after its job's re-run elsewhere has started"; "Jobs stopped
by the pool (drain, fence, reclaim, a Redis outage longer than the fence) count as interruptions:
neither a try nor a crash"."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from ..chaos.spans import by_job, overlaps, proven_ends, read_trails

from .trail import attempts, handlers, wait_ticking


def started_ms(h, jid: str) -> list[int]:
    """Redis time (ms) of each job_started event of ``jid``: when take.lua gave it to a slot."""
    k = h.k
    return [int(sid.split(b"-")[0]) for sid, f in h.r.xrange(k.events)
            if json.loads(f[b"e"]).get("job_id") == jid and json.loads(f[b"e"]).get("type") == "job_started"]


@pytest.mark.timeout(120)
def test_a_supervisor_stopped_past_its_key_runs_no_attempt_after_the_reruns_start(h):
    a = h.daemon("a", workers=3, heartbeat=1.0, handlers=handlers(timeout=30))
    a.wait_slots(3)
    jobs = [h.submit(kind="tick", user=f"u{i}", payload={"record": str(h.records), "sleep": 15}) for i in range(3)]
    for jid in jobs:
        wait_ticking(h.records, jid)
    h.daemon("b", workers=3, heartbeat=1.0, handlers=handlers(timeout=30)).wait_slots(3)
    # When A's supervisor is stopped (a VM pause, a swap storm) past its host key's life
    os.kill(a.pid, signal.SIGSTOP)
    try:
        for jid in jobs:
            wait_ticking(h.records, jid, n=2, timeout=20)  # B reclaimed it and runs attempt 2
        time.sleep(1.5)
    finally:
        os.kill(a.pid, signal.SIGCONT)
    for jid in jobs:
        h.wait_state(jid, timeout=40)
    # Then no tick of an attempt on A comes after take.lua gave its job to B (each slot polls at its
    # own phase: three jobs make a lucky pass of this check improbable)
    late = {}
    for jid in jobs:
        first = attempts(h.records, jid)[0]
        rerun = started_ms(h, jid)[1] / 1000
        late[jid] = round(first.end - 0.05 - rerun, 3)  # last tick − re-run's start
    assert all(v <= 0 for v in late.values()), f"ticks after the re-run started (s): {late}"
    # and no two attempts of a job overlapped, each stopped attempt's end bounded by when A's slot
    # reaped it (spans.proven_ends; without that bound a killed attempt may have lived one tick
    # interval past its last tick: 50 ms, more than the slot's settle → B's BLMOVE pick-up, ~3 ms)
    assert not overlaps(read_trails(h.records, killed=proven_ends([a.logs()], read_trails(h.records))), by_job)
    # and A's slots, their lease lapsing, started nothing new meanwhile (take.lua checks the lease):
    # one attempt on A, one on B, per job
    assert {jid: len(attempts(h.records, jid)) for jid in jobs} == {jid: 2 for jid in jobs}


@pytest.mark.timeout(90)
def test_redis_frozen_past_the_fence_interrupts_the_job_without_killing_its_slot(h):
    d = h.daemon(workers=1, heartbeat=1.0, handlers=handlers(timeout=30))
    d.wait_slots(1)
    jid = h.submit(kind="tick", user="u", payload={"record": str(h.records), "sleep": 6})
    wait_ticking(h.records, jid)
    # When Redis freezes for longer than the fence (2.17 s) and twice the socket timeout (3 s)
    h.redis.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(7)
    finally:
        h.redis.proc.send_signal(signal.SIGCONT)
    job = h.wait_state(jid, timeout=40)
    # Then the fence stopped the attempt: an interruption, neither a try nor a crash, and it ran again
    assert "fenced" in d.logs()
    assert job.interruptions >= 1 and job.crashes == 0 and job.tries == 0 and job.attempts == 2, job
    first, second = attempts(h.records, jid)
    assert not first.ended and first.end < second.start
