"""The slot → supervisor reports never block a slot, and a slot keeps reporting
while it waits out a job's kill_grace (item 12): real daemons, a really stopped supervisor."""

import json
import os
import signal

import pytest

from conftest import wait_until


def _done(h, jids):
    return sum(1 for j in jids if h.r.hget(h.k.job(j), "state") == b"completed")


@pytest.mark.timeout(120)
def test_a_stopped_supervisor_does_not_wedge_its_slot(h):
    # Given a slot whose supervisor stops reading its reports (SIGSTOP; silence judged at 3 x 20 s)
    d = h.daemon(workers=1, heartbeat=20)
    d.wait_slots(1)
    h.wait_state(h.submit(kind="noop"), timeout=15)
    os.kill(d.pid, signal.SIGSTOP)
    try:
        # When it runs more jobs than the report pipe holds (64 KiB: about 80 jobs' reports)
        jids = [h.submit(kind="noop", user=f"u{i % 50}") for i in range(300)]
        # Then it keeps running them: a report never blocks the slot
        wait_until(lambda: _done(h, jids) == len(jids), 40, interval=0.2,
                   what=f"300 jobs done with the supervisor stopped ({_done(h, jids)} done)")
    finally:
        os.kill(d.pid, signal.SIGCONT)
    # And no Finished report was dropped: the supervisor counts every job once it reads again
    def succeeded():
        out = h.cli("status", "--json")
        return out.returncode in (0, 1) and json.loads(out.stdout)["counters"]["succeeded"] == 301
    wait_until(succeeded, 20, interval=0.5, what="301 succeeded in status")


@pytest.mark.timeout(60)
def test_a_slot_keeps_reporting_through_a_long_kill_grace(h):
    # Given kill_grace just under the 3 heartbeats after which a silent slot is killed
    cfg = h.config(workers=1, heartbeat=1)
    cfg.write_text(cfg.read_text().replace("kill_grace = 0.5", "kill_grace = 2.9\nfence = 0"))
    d = h.daemon()
    slot = d.wait_slots(1)
    # When a job that ignores SIGTERM reaches its timeout
    jid = h.submit(kind="slow", payload={"ignore_term": True, "sleep": 60, "record": str(h.records)})
    job = h.wait_state(jid, states=("failed",), timeout=30)
    # Then it is a timeout (killed after the grace), not a slot killed as silent and a crash
    assert job.error.kind == "timeout" and job.attempts == 1 and job.interruptions == 0, job
    assert d.slot_pids() == slot and "slot_exited" not in d.logs()
