"""The reaper across a Redis restart, and one host_id twice.

A restarted Redis (AOF, nothing lost) comes back with every ``host:`` key expired: nobody could
renew them while it was down. Death is judged by a host's failure to renew after Redis is back.
"""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest

from conftest import wait_until


def started(h, jid: str, attempt: int = 1) -> dict:
    rec = h.records / f"{jid}.{attempt}.start"
    wait_until(lambda: rec.exists() and rec.read_text().endswith("}"), 15, what=f"{jid} attempt {attempt} start")
    return json.loads(rec.read_text())


def lists_of(h, host: str) -> set[str]:
    return {p.decode() for p, v in h.r.hgetall(h.k.proclists).items() if v.decode().startswith(host + "\t")}


@pytest.mark.timeout(120)
def test_a_redis_restart_reclaims_nothing_from_live_hosts_and_drops_none_of_their_lists(h):
    # Given two hosts, each running a job (host keys live 3 heartbeats: 1.5 s and 3 s; the two
    # heartbeats make the hosts retry Redis on different schedules, so one is back before the other)
    # (no fence: an outage longer than the fence stops running jobs, by design; this test is about
    # what the reapers reclaim when Redis is back)
    a = h.daemon("a", workers=1, heartbeat=0.5, fence=0)
    b = h.daemon("b", workers=1, heartbeat=1.0, fence=0)
    a.wait_slots(1)
    b.wait_slots(1)
    ja = h.submit(kind="long", user="ua", payload={"sleep": 8, "record": str(h.records)})
    jb = h.submit(kind="long", user="ub", payload={"sleep": 8, "record": str(h.records)})
    started(h, ja)
    started(h, jb)
    assert {h.job(ja).worker.split("-")[0], h.job(jb).worker.split("-")[0]} == {"ha", "hb"}
    a_host, b_host = f"ha-{h.prefix}", f"hb-{h.prefix}"
    wait_until(lambda: lists_of(h, a_host) and lists_of(h, b_host), 10, what="both hosts' lists registered")
    before = lists_of(h, a_host) | lists_of(h, b_host)
    # When Redis restarts after 3.5 s down: every host key has expired when it loads its AOF
    h.redis.restart(down_for=3.5)
    time.sleep(4)
    # Then no live host's list was dropped (item 7) ...
    assert lists_of(h, a_host) | lists_of(h, b_host) == before
    # ... and no live host's job was reclaimed and run again (item 3)
    for jid in (ja, jb):
        job = h.wait_state(jid, timeout=30)
        assert job.attempts == 1 and job.interruptions == 0, job
    assert "reclaimed" not in a.logs() + b.logs()
    # And a host that really dies afterwards has its job back within about 3 heartbeats + 1 s
    jb2 = h.submit(kind="long", user="ub", payload={"sleep": 30, "sleep_once": True, "record": str(h.records)})
    started(h, jb2)
    victim = a if f"ha-{h.prefix}" in (h.job(jb2).worker or "") else b
    os.kill(victim.pid, signal.SIGKILL)
    victim.proc.wait(5)
    t0 = time.monotonic()
    wait_until(lambda: (h.records / f"{jb2}.2.start").exists(), 20, what="the dead host's job run again")
    assert time.monotonic() - t0 < 8


@pytest.mark.timeout(60)
def test_a_second_daemon_does_not_take_over_a_stalled_live_one_on_the_same_machine(h):
    # Given a daemon running a job, stopped (SIGSTOP) past its host key's lifetime
    a = h.daemon("a", workers=1, host_id="same", fence=0)  # a stall past the fence stops the job, by design
    a.wait_slots(1)
    jid = h.submit(kind="long", payload={"sleep": 6, "record": str(h.records)})
    job_pid = started(h, jid)["pid"]
    os.kill(a.pid, signal.SIGSTOP)
    try:
        time.sleep(2.0)  # the key (3 × 0.5 s) has expired
        # When a second daemon starts with the same host_id
        b = h.daemon("b", workers=1, host_id="same")
        # Then it refuses, and the first one's job is untouched
        assert b.proc.wait(15) == 2
        assert "already used by a live daemon" in b.logs()
        assert psutil.pid_exists(job_pid) and psutil.Process(job_pid).status() != psutil.STATUS_ZOMBIE
    finally:
        os.kill(a.pid, signal.SIGCONT)
    job = h.wait_state(jid, timeout=20)
    assert job.attempts == 1 and job.interruptions == 0
    assert a.proc.poll() is None


@pytest.mark.timeout(60)
def test_a_daemon_whose_host_id_was_taken_over_stops(h):
    # The other machine's case: a stalled daemon finds its host key held by another
    # incarnation (which has requeued its lists): it must stop, not run beside it
    a = h.daemon("a", workers=1)
    a.wait_slots(1)
    key = h.k.host(f"ha-{h.prefix}")
    os.kill(a.pid, signal.SIGSTOP)
    try:
        time.sleep(2.0)
        h.r.set(key, "feedbeef|another-machine|4242", px=60_000)
    finally:
        os.kill(a.pid, signal.SIGCONT)
    assert a.proc.wait(15) == 1
    assert "host_id_taken_over" in a.logs()
    assert h.r.get(key) == b"feedbeef|another-machine|4242"
