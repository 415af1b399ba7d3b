"""The chaos soak: jobs keep their guarantees while everything around them is killed.

What runs: ``JOBS`` jobs over ``USERS`` users of one command kind (``tests/jobs/tickjob.py``, per_user 1):
about half no-ops (one tick), the rest ticking for 0.1–0.6 s, some submitted one by one (plain and
interactive) and some in runs (``Client.submit_run``). Host A runs 4 slots on Redis directly; host B
(2 slots) joins for the middle of the soak and reaches Redis through a TCP proxy the test can pause.

A driver thread, at seeded random moments (one action at a time):
  - SIGKILLs a slot (A's or B's), SIGKILLs a running job's process group (the kill time is recorded:
    it bounds that attempt's end),
  - SIGKILLs supervisor A and starts it again after a moment,
  - restarts Redis once (AOF, fsync always: nothing acknowledged is lost),
  - starts host B, later drains it (SIGTERM),
  - stalls supervisor A (SIGSTOP) past its fence but short of its host key's expiry, then SIGCONT,
  - black-holes B's Redis traffic for longer than B's host key lives (B must fence itself: A reclaims).

Timings: heartbeat 1 s, kill_grace 1.5 s, so the fence is 3 − 1.5 − 1/3 ≈ 1.17 s and a host key lives
3 s: the stall (1.9 s) lands in the middle of that window. max_tries and crash_cap are raised so that
the chaos cannot fail a job: every job must complete.

Checks, from the jobs' own side effects (every attempt's tick trail, ``tests/system/chaos/spans.py``, which
counts attempts killed before they could write an end line) and from Redis (the world the
driver acts on is storm.py):
  - 0 lost and 0 stuck: every submitted job is ``completed`` in the end, its result from its last attempt;
  - one terminal state each: exactly one terminal event per job in the ``events`` stream;
  - no two attempts of one job, and no two jobs of one (per_user 1) user, overlap in time;
  - nothing left in Redis (processing lists, locks, wait lists, ready, delayed);
  - 0 processes of ours once the daemons are stopped (everything they started carries a marker).

Sizes: 1,200 jobs over 120 users by default in a 60 s window (about 80 s on 2 cores: the window
bounds it; ~0.2 s of work a job on 4–6 slots fits inside it, so the chaos, ~1 action a second, lands
on a busy pool; 24 slot kills, 24 job-group kills, 2 supervisor kills, a Redis restart, a stall and a
black-hole); ``--long`` (with ``tests/system/chaos`` on
the command line) or TENDER_POOL_CHAOS_LONG=1: 20,000 over 2,000 (the bench run, ~20 minutes);
TENDER_POOL_CHAOS_JOBS=N: N jobs over N/10 users. The seed is printed;
TENDER_POOL_CHAOS_SEED=<seed> replays the same job mix and the same driver schedule (process timing
is the machine's, so a replay is the same storm, not the same interleaving).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time

import psutil
import pytest
import redis

from conftest import wait_until

from .spans import by_job, by_user, closest, describe, overlaps, proven_ends, read_trails
from .storm import EVERY, JOBS_N, SETTLE_S, TIMEOUT, USERS, WINDOW, Storm, marked


@pytest.mark.timeout(TIMEOUT)
def test_chaos_soak_loses_nothing_and_never_runs_anything_twice_at_once(h, capsys):
    seed = int(os.environ.get("TENDER_POOL_CHAOS_SEED") or random.SystemRandom().randrange(1 << 32))
    with capsys.disabled():
        print(f"\nchaos soak: seed {seed} (TENDER_POOL_CHAOS_SEED={seed} replays), {JOBS_N} jobs over {USERS} "
              f"users, window {WINDOW:.0f} s", flush=True)
    st = Storm(h, seed)
    try:
        _soak(h, st, seed, capsys)
    finally:
        st.stop.set()
        st.proxy.stop()


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _soak(h, st: Storm, seed: int, capsys) -> None:
    # Given host A with 4 slots, a job plan and a storm schedule drawn from the seed
    plan, acts = st.plan(), st.schedule()
    st.a.start()
    st.a.wait_slots(4, timeout=60)
    st.t0 = time.monotonic()
    # When jobs are submitted while the driver kills, stalls, partitions and restarts around them
    threads = [threading.Thread(target=st.submitter, args=(plan,), daemon=True, name="submitter"),
               threading.Thread(target=st.driver, args=(acts,), daemon=True, name="driver")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WINDOW + 180)
    assert not any(t.is_alive() for t in threads), "the submitter or the driver did not finish"
    st.stop_b()
    if not st.alive(st.a):
        st.a.start()
    chaos_s = time.monotonic() - st.t0
    assert not st.errors, f"seed {seed}: {st.errors}"
    assert len(st.jobs) == JOBS_N, f"seed {seed}: {len(st.jobs)} of {JOBS_N} submitted"

    # Then every job ends, completed (0 lost, 0 stuck)
    def open_jobs():
        try:
            states = st.states()
        except redis.RedisError as e:
            return [f"(Redis: {e})"]
        return [j for j, s in states.items() if s != "completed"]
    try:
        wait_until(lambda: not open_jobs(), SETTLE_S, interval=1.0, what="every job completed")
    except AssertionError:
        left = open_jobs()
        detail = {j: st.h.job(j) for j in left[:5]}
        raise AssertionError(f"seed {seed}: {len(left)} jobs not completed: {detail}\n--- A ---\n"
                             f"{st.a.logs()[-4000:]}") from None
    total_s = time.monotonic() - st.t0
    # and Redis holds nothing of theirs any more
    k = h.k
    wait_until(lambda: not any(h.r.llen(p) for p in h.r.scan_iter(match=k.proc_pattern)), 30,
               what="empty processing lists")
    patterns = {"lock": k.lock("*"), "wait": k.wait("*"), "backlog": k.backlog("*"), "hibacklog": k.hibacklog("*"),
                "sem": k.sem("*", "*"), "semwait": k.semwait("*", "*"), "runwait": k.runwait("*"), "deps": k.deps("*")}
    leftovers = {kind: [x.decode() for x in h.r.scan_iter(match=pattern)] for kind, pattern in patterns.items()}
    assert not any(leftovers.values()), f"seed {seed}: left in Redis: {leftovers}"
    ready = [x for key in (k.ready_hi, k.ready_lo) for x in h.r.lrange(key, 0, -1) if x != k.WAKE.encode()]
    assert not ready and h.r.zcard(k.delayed) == 0, f"seed {seed}: ready {ready[:5]}"

    # and once the daemon is stopped, no process of ours is left
    assert st.a.stop(timeout=60) == 0
    try:
        wait_until(lambda: not marked(st.marker), 15, what="no process of ours left")
    except AssertionError:
        left = [" ".join(psutil.Process(p).cmdline()) for p in marked(st.marker)]
        raise AssertionError(f"seed {seed}: processes left: {left}") from None

    # and each job has one terminal event, and its result comes from its last attempt
    ends, queued, trimmed = st.terminal_events()
    twice = {j: n for j, n in ends.items() if n != 1}
    missing = [j for j in st.jobs if j in queued and ends.get(j, 0) != 1]
    assert not twice and not missing, f"seed {seed}: terminal events ≠ 1: {dict(list(twice.items())[:5])} {missing[:5]}"
    records = {j: h.job(j) for j in st.jobs}
    wrong = [j for j, r in records.items() if (r.result or {}).get("value", {}).get("attempt") != r.attempts]
    assert not wrong, f"seed {seed}: results not from the last attempt: {[records[j] for j in wrong[:3]]}"

    # and, from the jobs' own trails (killed attempts included): no two attempts of one job, and no
    # two jobs of one user, ran at the same time
    logs = [d.logs() for d in (st.a, st.b) if d.log_path.exists()]
    attempts = read_trails(st.record, EVERY, proven_ends(logs, read_trails(st.record, EVERY), st.killed))
    unknown = {a.job for a in attempts} - set(st.jobs)
    assert not unknown, f"seed {seed}: attempts of jobs never submitted: {sorted(unknown)[:5]}"
    ran = {a.job for a in attempts if a.ended}
    assert set(st.jobs) <= ran, f"seed {seed}: completed without a finished attempt: {sorted(set(st.jobs) - ran)[:5]}"
    same_job, same_user = overlaps(attempts, by_job), overlaps(attempts, by_user)
    worst = max((o.seconds for o in same_job + same_user), default=0.0)

    interruptions = sum(r.interruptions for r in records.values())
    figures = {
        "seed": seed, "jobs": len(st.jobs), "users": USERS, "runs": len(st.runs),
        "attempts_ticked": len(attempts), "attempts_killed": sum(not a.ended for a in attempts),
        "handler_starts": sum(r.attempts for r in records.values()),
        "kills": dict(st.kills), "skipped_actions": dict(st.skipped),
        "reclaimed_remote": st.log_count("reclaimed"), "requeued_local": st.log_count("requeued"),
        "fenced": st.log_count("fenced"), "interruptions": interruptions,
        "tries": sum(r.tries for r in records.values()),
        "overlaps_same_job": len(same_job), "overlaps_same_user": len(same_user),
        "max_overlap_ms": round(worst * 1000, 1),
        "closest_rerun_ms": _ms(closest([a for a in attempts], by_job)),
        "closest_same_user_ms": _ms(closest(attempts, by_user)), "events_trimmed": trimmed,
        "chaos_s": round(chaos_s, 1), "all_done_s": round(total_s, 1),
    }
    with capsys.disabled():
        print("chaos soak figures: " + json.dumps(figures), flush=True)
    assert not same_job, f"seed {seed}: attempts of one job overlapped: " + "; ".join(map(describe, same_job[:5]))
    assert not same_user, f"seed {seed}: jobs of one user overlapped: " + "; ".join(map(describe, same_user[:5]))
