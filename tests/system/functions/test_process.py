"""Function handlers' attempts are process groups like any other: the timeout kills the group (and a
grandchild), escaped descendants are swept, cancel kills it, a SIGKILLed slot's job runs again
once elsewhere, SIGTERM blocked costs only the grace, and owns() turns False once the job is
someone else's."""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from conftest import wait_until
from tender_pool.slots import groups

from .fnhelp import client_of, fn_handlers, record


def server_slot(server: int) -> int:
    """The slot whose fork server ``server`` is (a function attempt's parent)."""
    assert "forkserver" in " ".join(psutil.Process(server).cmdline())
    return psutil.Process(server).ppid()


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.timeout(120)
def test_timeout_cancel_escape_and_blocked_term(h):
    h.daemon(workers=2, handlers=fn_handlers("hang", "escape", timeout=1.5))
    # Given a function that never returns and spawned a grandchild in its group
    j = h.submit(kind="hang", user="t", payload={"record": str(h.records)})
    wait_until(lambda: (h.records / f"{j}.1.start").exists(), 15, what="hang started")
    st = record(h, f"{j}.1.start")
    # it runs in a child forked by its slot's fork server, in its own session and process group
    assert st["pgid"] == st["pid"] == st["sid"] and server_slot(st["ppid"]) in h.daemons[0].slot_pids()
    # When its timeout passes, Then the group is killed, grandchild included: timeout, not retried
    job = h.wait_state(j, states=("failed",), timeout=15)
    assert job.error.kind == "timeout" and job.attempts == 1
    wait_until(lambda: gone(st["pid"]) and gone(st["grandchild"]), 5, what="function and grandchild dead")

    # A function that blocks SIGTERM: killed after kill_grace all the same
    b = h.submit(kind="hang", user="b", payload={"record": str(h.records), "ignore_term": True})
    job = h.wait_state(b, states=("failed",), timeout=15)
    bst = record(h, f"{b}.1.start")
    assert job.error.kind == "timeout"
    wait_until(lambda: gone(bst["pid"]) and gone(bst["grandchild"]), 5, what="TERM-blocking function dead")
    ran = h.daemons[0].log_events("job_ran", job_id=b)[0]
    assert ran["signals"] == ["SIGTERM", "SIGKILL"]

    # Escaping with setsid and a double fork: swept (the attempt's marker) when the timeout kills it
    e = h.submit(kind="escape", user="e", payload={"record": str(h.records), "hang": True})
    wait_until(lambda: (h.records / f"{e}.1.start").exists(), 15, what="escape started")
    est = record(h, f"{e}.1.start")
    # the exec'd escapee carries the attempt's marker
    assert est["escaped"] in groups.find_marked("TENDER_POOL_ATTEMPT", est["attempt"])
    # its orphan is the slot's (the subreaper), not the fork server's, which is no subreaper
    assert not gone(est["forked"]) and psutil.Process(est["forked"]).ppid() == server_slot(est["ppid"])
    assert h.wait_state(e, states=("failed",), timeout=15).error.kind == "timeout"
    wait_until(lambda: all(gone(p) for p in (est["pid"], est["escaped"], est["forked"])), 5, what="escapees dead")
    assert not groups.find_marked("TENDER_POOL_ATTEMPT", est["attempt"])
    # ... and when it returns cleanly, its leftovers are killed too
    e2 = h.submit(kind="escape", user="e2", payload={"record": str(h.records)})
    v = h.wait_state(e2).result["value"]
    wait_until(lambda: gone(v["escaped"]) and gone(v["forked"]), 5, what="clean function's escapees dead")

    # Cancel while running: the group is killed at once, the job is cancelled
    c = h.submit(kind="hang", user="c", payload={"record": str(h.records)})
    wait_until(lambda: (h.records / f"{c}.1.start").exists(), 15, what="cancel target started")
    cst = record(h, f"{c}.1.start")
    assert str(client_of(h).cancel(c)) == "signalled"
    job = h.wait_state(c, states=("cancelled",), timeout=10)
    assert job.attempts == 1
    wait_until(lambda: gone(cst["pid"]) and gone(cst["grandchild"]), 5, what="cancelled function dead")


@pytest.mark.timeout(90)
def test_sigkilled_slot_mid_function_runs_once_more_elsewhere(h):
    h.daemon(workers=2, handlers=fn_handlers("crash_slot"))
    h.daemons[0].wait_slots(2)
    j = h.submit(kind="crash_slot", payload={"record": str(h.records)})
    job = h.wait_state(j, timeout=30)
    first, second = record(h, f"{j}.1.start"), record(h, f"{j}.2.start")
    assert not (h.records / f"{j}.3.start").exists()
    assert job.attempts == 2 and job.result["value"]["slot"] == second["ppid"] != first["ppid"]
    assert gone(first["ppid"]) and gone(first["pid"])


@pytest.mark.timeout(90)
def test_owns_turns_false_once_the_job_is_someone_elses(h):
    h.daemon(workers=1, handlers=fn_handlers("owns_watch"))
    j = h.submit(kind="owns_watch", payload={"record": str(h.records)})
    wait_until(lambda: (h.records / f"{j}.1.start").exists(), 15, what="started")
    assert record(h, f"{j}.1.start")["owns"] is True
    # a re-run elsewhere took the job over: its token is no longer this attempt's
    h.r.hset(h.k.job(j), "token", "2.elsewhere")
    wait_until(lambda: (h.records / f"{j}.lost").exists(), 10, what="owns() false")
    assert record(h, f"{j}.lost")["owns"] is False


@pytest.mark.timeout(90)
def test_drain_timeout_stops_a_running_function_and_puts_its_job_back(h):
    d = h.daemon(workers=1, handlers=fn_handlers("hang", timeout=60))
    j = h.submit(kind="hang", payload={"record": str(h.records)})
    wait_until(lambda: (h.records / f"{j}.1.start").exists(), 15, what="started")
    st = record(h, f"{j}.1.start")
    # When the daemon is stopped and the function outlives drain_timeout (5 s in tests)
    assert d.stop(timeout=30) == 0
    # Then its group was killed, grandchild included, and the job is queued again: an interruption
    wait_until(lambda: gone(st["pid"]) and gone(st["grandchild"]), 5, what="the function's group dead")
    job = h.job(j)
    assert job.state.value == "queued" and job.interruptions == 1 and job.tries == 0
