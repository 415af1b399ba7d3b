"""Invariant 1 (no job lost) and 2 (never twice at once): SIGKILL real processes at named checkpoints.

Each test stops a process at a checkpoint (it SIGSTOPs itself there), looks at Redis at exactly that
instant, SIGKILLs it, and checks that the job still runs to an outcome.
"""

import os
import signal
import time

import psutil

from conftest import wait_until
from tender_pool.slots import groups


def proc_entries(h):
    r = h.r
    out = {}
    for k in r.scan_iter(match=h.k.proc_pattern):
        out[k.decode()] = [e.decode() for e in r.lrange(k, 0, -1)]
    return {k: v for k, v in out.items() if v}


def started(h, jid):
    return h.r.hget(h.k.started, jid)


def test_killed_between_blmove_and_stamp(h):
    h.daemon(workers=1, faults="after_claim")
    jid = h.submit(payload={"record": str(h.records)})
    pid = h.fault_pid("after_claim")
    # Given: the entry sits in the slot's processing list, take.lua never ran
    assert list(proc_entries(h).values()) == [[jid]]
    assert h.job(jid).state.value == "queued" and h.job(jid).attempts == 0
    # the reaper stamps an untimed entry on first sight, so it can never be skipped forever
    wait_until(lambda: started(h, jid) is not None, 5, what="reaper stamp")
    # When: the slot dies in that gap
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    # Then: the supervisor saw it and the job runs at once on the respawned slot
    job = h.wait_state(jid, timeout=10)
    assert time.monotonic() - t0 < 5
    assert job.attempts == 1 and job.interruptions == 0
    assert proc_entries(h) == {}


def test_killed_after_stamp_releases_lock_and_reruns(h):
    h.daemon(workers=1, faults="after_stamp")
    jid = h.submit(user="alice", payload={"record": str(h.records)})
    pid = h.fault_pid("after_stamp")
    job = h.job(jid)
    assert job.state.value == "running" and started(h, jid) is not None
    assert h.r.get(h.k.lock("alice")).decode() == job.token
    os.kill(pid, signal.SIGKILL)
    job = h.wait_state(jid, timeout=10)
    assert job.attempts == 2 and job.interruptions == 1 and job.tries == 0
    assert h.r.get(h.k.lock("alice")) is None


def test_killed_before_ack_runs_again_and_old_attempt_is_fenced(h):
    h.daemon(workers=1, faults="before_ack")
    jid = h.submit(payload={"record": str(h.records)})
    pid = h.fault_pid("before_ack")
    assert (h.records / f"{jid}.1.end").exists()  # the handler did finish
    assert h.job(jid).state.value == "running"
    os.kill(pid, signal.SIGKILL)
    job = h.wait_state(jid, timeout=10)
    assert job.attempts == 2 and job.result["value"]["attempt"] == 2
    # a stale settle from attempt 1 is refused (fencing token)
    q = h.queue()
    from tender_pool.store.records import JobRecord
    stale = JobRecord(id=jid, kind="behave", user="u1", payload={})
    ok, _ = q.settle("x", stale, "1.deadbeef", "completed", result={"value": "stale"}, lock_ttl_ms=1000,
                     retention_s=60)
    assert not ok and h.job(jid).result["value"]["attempt"] == 2


def test_supervisor_killed_mid_requeue_then_restarted(h):
    d = h.daemon(workers=1, faults="after_stamp,mid_requeue")
    jid = h.submit(payload={"record": str(h.records)})
    slot = h.fault_pid("after_stamp")
    os.kill(slot, signal.SIGKILL)
    sup = h.fault_pid("mid_requeue")
    assert sup == d.pid
    assert list(proc_entries(h).values()) == [[jid]]  # not yet requeued
    os.kill(sup, signal.SIGKILL)
    d.proc.wait(5)
    # a new incarnation with the same host_id takes over its dead predecessor's lists
    h.daemon(workers=1)
    job = h.wait_state(jid, timeout=15)
    assert job.attempts == 2 and job.interruptions == 1


def test_supervisor_killed_mid_job_leaves_nothing_running(h):
    d = h.daemon(workers=1)
    jid = h.submit(payload={"record": str(h.records), "sleep": 30, "sleep_once": True})
    wait_until(lambda: (h.records / f"{jid}.1.start").exists(), 15, what="job start")
    slots = d.slot_pids()
    os.kill(d.pid, signal.SIGKILL)
    d.proc.wait(5)
    token = h.job(jid).token
    # slots die with their supervisor (PDEATHSIG), and so do their jobs
    wait_until(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in slots), 5,
               what="slots to die")
    wait_until(lambda: not groups.find_marked("TENDER_POOL_ATTEMPT", token), 5, what="job processes to die")
    h.daemon(name="a", workers=1)
    job = h.wait_state(jid, timeout=20)
    assert job.attempts == 2


def test_other_host_reclaims_a_dead_hosts_job(h):
    a = h.daemon("a", workers=1)
    h.daemon("b", workers=1, start=False)  # write b's config (same Redis and prefix, other host_id)
    jid = h.submit(payload={"record": str(h.records), "sleep": 30, "sleep_once": True})
    wait_until(lambda: (h.records / f"{jid}.1.start").exists(), 15, what="job start on a")
    os.kill(a.pid, signal.SIGKILL)
    a.proc.wait(5)
    b = h.daemons[-1].start()
    # b's reaper sees a's host heartbeat expire (3 x 0.5 s) and requeues; b runs it
    job = h.wait_state(jid, timeout=20)
    assert job.worker.startswith("hb-") and job.attempts == 2 and job.interruptions == 1
    assert b.proc.poll() is None


def test_crash_cap_stops_a_job_that_kills_its_slot(h):
    h.daemon(workers=1)
    jid = h.submit(payload={"crash_slot": True})
    job = h.wait_state(jid, states=("failed",), timeout=30)
    assert job.error.kind == "crash_cap" and job.attempts == 3


def test_an_attempt_whose_job_was_reclaimed_elsewhere_stops_within_seconds(h):
    # Given a running attempt
    h.daemon(workers=1)
    jid = h.submit(kind="long", payload={"record": str(h.records), "sleep": 30})
    wait_until(lambda: (h.records / f"{jid}.1.start").exists(), 15, what="start")
    marker = __import__("json").loads((h.records / f"{jid}.1.start").read_text())["attempt_env"]
    assert groups.find_marked("TENDER_POOL_ATTEMPT", marker)
    # When another host's reaper reclaims it (its token changes, as requeue.lua + a new start would do)
    h.r.hset(h.k.job(jid), "token", "9.elsewhere")
    t0 = time.monotonic()
    # Then this attempt's processes are gone within a few seconds, and its settle was fenced
    wait_until(lambda: not groups.find_marked("TENDER_POOL_ATTEMPT", marker), 5, what="the stale attempt stopped")
    assert time.monotonic() - t0 < 3
    wait_until(lambda: h.daemons[0].log_events("settled", verdict="fenced"), 5, what="fenced settle")
    assert h.job(jid).token == "9.elsewhere"  # the new owner's state untouched


def test_a_drain_signalled_to_a_slot_in_its_first_instant_is_not_lost(h):
    """The supervisor stops while a slot it just forked still runs the supervisor's signal handlers:
    the SIGTERM it sends that slot must not be swallowed by the inherited handler (the drain then
    waited its whole timeout, 5 s here, for a slot that never heard it)."""
    d = h.daemon(workers=1, faults="slot_forked")
    slot = h.fault_pid("slot_forked")  # stopped right after the fork
    t0 = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "draining" in d.logs(), 10, what="the drain")
    time.sleep(0.2)  # the supervisor has sent the slot its SIGTERM
    os.kill(slot, signal.SIGCONT)
    assert d.proc.wait(10) == 0
    assert time.monotonic() - t0 < 3.5, d.logs()[-2000:]
    assert "drain_timeout_aborting_jobs" not in d.logs()
