"""A supervisor SIGKILLed mid-run and restarted at once used to run a job twice.

Found with ``bench/soak_supervisor_kill.py``: a slot whose handler had already exited when its
supervisor died (the PDEATHSIG arriving between the handler's exit and the settle) exited without
settling, so the next supervisor requeued the finished job and it ran again. Now the slot settles
such an attempt before it goes, and the next supervisor waits for its predecessor's slots before it
requeues their lists. The instants are pinned with the ``before_ack`` checkpoint (the handler has
exited, the settle has not run): no sleep-then-kill race. The last test runs a bounded sample of
the soak itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import wait_until  # tests/conftest.py

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[3]


def kill_supervisor(d) -> None:
    """SIGKILL the supervisor alone (its slots get their PDEATHSIG), as the issue did."""
    os.kill(d.pid, signal.SIGKILL)
    d.proc.wait(5)


def stopped_slot(h, request) -> int:
    """The slot stopped at ``before_ack``; SIGKILLed at the test's end whatever happened (once its
    supervisor is gone nobody else would)."""
    pid = h.fault_pid("before_ack")

    def gone() -> None:
        try:
            if b"tender-pool" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass
    request.addfinalizer(gone)
    return pid


def handler_runs(h, jid: str) -> list[str]:
    return sorted(p.name for p in h.records.iterdir() if p.name.startswith(f"{jid}.") and p.name.endswith(".start"))


def test_a_slot_whose_supervisor_died_settles_an_attempt_that_had_ended(h, request):
    # Given a slot stopped right after its handler exited, before the settle
    d = h.daemon(workers=1, faults="before_ack")
    jid = h.submit(payload={"record": str(h.records)})
    slot = stopped_slot(h, request)
    assert (h.records / f"{jid}.1.end").exists()
    # When its supervisor is SIGKILLed (the PDEATHSIG waits while the slot is stopped), the slot
    # goes on, and a new supervisor starts at once
    kill_supervisor(d)
    os.kill(slot, signal.SIGCONT)
    h.daemon()
    # Then the finished attempt is the job's result: it did not run again
    job = h.wait_state(jid, timeout=20)
    assert job.attempts == 1 and job.interruptions == 0, job
    assert handler_runs(h, jid) == [f"{jid}.1.start"]
    wait_until(lambda: not os.path.exists(f"/proc/{slot}") or _zombie(slot), 10, what="the old slot's exit")


def test_the_next_supervisor_waits_for_its_predecessors_slots_before_requeueing(h, request):
    # Given a slot stopped after its handler exited, and its supervisor SIGKILLed
    d = h.daemon(workers=1, faults="before_ack")
    jid = h.submit(payload={"record": str(h.records)})
    slot = stopped_slot(h, request)
    old_holder = h.r.get(h.k.host(_host_id(h)))
    kill_supervisor(d)
    # When a new supervisor has taken the host over while the old slot still cannot run, and only
    # then the old slot goes on (within the new supervisor's wait for it)
    h.daemon()
    wait_until(lambda: h.r.get(h.k.host(_host_id(h))) not in (None, old_holder), 15,
               what="the new supervisor's host key")
    import time
    time.sleep(0.8)  # without the wait, the new supervisor requeues the list in this time (the wait: 2 s)
    os.kill(slot, signal.SIGCONT)
    # Then the old slot's settle landed first: the job ran once
    job = h.wait_state(jid, timeout=20)
    assert job.attempts == 1 and job.interruptions == 0, job
    assert handler_runs(h, jid) == [f"{jid}.1.start"]
    # and the old list was not requeued under the settling slot (it was empty once the wait ended)
    assert not [e for e in h.daemons[-1].log_events("requeued") if e.get("job_id") == jid]
    waited = wait_until(lambda: h.daemons[-1].log_events("previous_slots_exited"), 10, what="the wait's log line")
    assert slot in waited[0]["pids"] and waited[0]["killed"] == [], waited


def test_a_slot_stuck_after_its_supervisor_died_is_killed_and_its_job_requeued(h, request):
    """The wait is bounded: a predecessor's slot that never goes on is SIGKILLed, then its list
    requeued (the job runs again: an interruption)."""
    d = h.daemon(workers=1, faults="before_ack")
    jid = h.submit(payload={"record": str(h.records)})
    slot = stopped_slot(h, request)
    kill_supervisor(d)
    h.daemon()
    job = h.wait_state(jid, timeout=20)
    assert job.attempts == 2, job
    assert not os.path.exists(f"/proc/{slot}") or _zombie(slot)  # killed before the list was requeued
    waited = wait_until(lambda: h.daemons[-1].log_events("previous_slots_exited"), 10, what="the wait's log line")
    assert waited[0]["killed"] == [slot], waited


def test_soak_sample_supervisor_killed_at_random_instants():
    """A bounded sample of bench/soak_supervisor_kill.py (the bench runs hundreds of rounds): no
    overlap of two attempts of a job, no job completed twice, every job completed."""
    res = subprocess.run([sys.executable, str(REPO / "bench" / "soak_supervisor_kill.py"), "--rounds", "3",
                          "--jobs", "40", "--done-timeout", "25"], capture_output=True, text=True, timeout=110)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]


def _host_id(h) -> str:
    import tomllib
    return tomllib.loads((h.tmp / "a.toml").read_text())["pool"]["host_id"]


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
