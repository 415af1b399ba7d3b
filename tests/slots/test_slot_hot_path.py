"""A busy slot's cost per job, counted on a real Slot against a real Redis: round trips
from the slot (settle_take.lua settles a job and starts the next in one) and writes of reports to
the supervisor (a job's Finished goes out with the next job's Busy, in one write)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest


PROBE = Path(__file__).with_name("slot_probe.py")


@pytest.mark.timeout(120)
def test_a_busy_slot_makes_at_most_two_round_trips_and_one_report_write_per_job(h):
    # Given 20 queued no-op jobs of 20 users (no user waits for another's lock)
    n = 20
    cfg = h.config(heartbeat=30)  # no beats due during the run: only the jobs' reports are written
    for i in range(n):
        h.submit("noop", f"u{i}")
    # When one slot runs them all
    out = subprocess.run([sys.executable, str(PROBE), str(cfg), str(n)], capture_output=True, text=True,
                         timeout=100)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # Then every job finished, with ~1 round trip each (claim, take, two script loads, then one
    # settle_take per job; before: claim, read, start, settle = 5-6) and ~1 report write each
    # (before: Busy, Busy with the child's pid, Finished, Idle = 4)
    assert got["jobs"] == n
    assert got["round_trips"] <= 2 * n, got
    assert got["round_trips"] <= n + 6, got
    assert got["report_writes"] <= n + 3, got
    assert all(h.job(j.decode()).attempts == 1 for j in h.r.zrange(h.k.finished, 0, -1))
