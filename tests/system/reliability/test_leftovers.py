"""Processes a job left behind (setsid, double fork) outlive a SIGKILLed
supervisor and its slots; the next start of a daemon with the same host_id sweeps every process
still carrying that host's ``TENDER_POOL_OWNER`` marker, and requeues the job. (Under systemd,
``KillMode=mixed`` kills the unit's whole cgroup as well; a descendant that also cleared its
environment is only reachable that way.)"""

import os
import signal

import psutil
import pytest

from conftest import wait_until


@pytest.mark.timeout(90)
def test_the_next_start_sweeps_what_a_killed_daemon_left_running(h):
    d = h.daemon(workers=1)
    d.wait_slots(1)
    jid = h.submit(kind="long", payload={"record": str(h.records), "escape": True, "sleep": 60})
    wait_until(lambda: (h.records / f"{jid}.escaped").exists(), 20, what="escaped descendants")
    escaped = int((h.records / f"{jid}.escaped").read_text())
    # Given the supervisor and its slots SIGKILLed at once (the job's own session survives them)
    for pid in [d.pid, *d.slot_pids()]:
        os.kill(pid, signal.SIGKILL)
    d.proc.wait(10)
    assert psutil.pid_exists(escaped), "the escaped process outlived the daemon"
    # When the daemon starts again with the same host_id
    again = h.daemon()
    again.wait_slots(1)

    def gone() -> bool:
        try:
            return psutil.Process(escaped).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    # Then it killed the leftovers first, and the job runs again
    wait_until(gone, 15, what="the escaped process swept")
    assert "killed_leftovers_of_previous_incarnation" in again.logs()
    job = wait_until(lambda: (j := h.job(jid)) and j.attempts >= 2 and j, 30, what="the job re-run")
    assert job.interruptions >= 1
