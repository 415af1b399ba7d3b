"""A host that fences itself: a host cut off from Redis stops its running jobs before any
other host may reclaim them, so no tick of its attempt comes after the re-run elsewhere starts; a
stall of the supervisor shorter than the fence kills nothing.

Host A reaches Redis through a TCP proxy the test can pause (black-hole, connections kept open);
host B reaches it directly. Heartbeat 1 s, kill_grace 0.5 s: the fence is 3 − 0.5 − 1/3 ≈ 2.17 s
after A's last heartbeat write was sent, the reclaim no sooner than 3 s after it.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest
from conftest import JOBS, PYTHON, wait_until

TICKER = f'["{PYTHON}", "{JOBS / "ticker.py"}"]'
HANDLERS = f"""
[handlers.tick]
command = {TICKER}
timeout = 60
"""


def ticks(record, jid, attempt):
    f = record / f"{jid}.{attempt}.ticks"
    return [float(x) for x in f.read_text().split()] if f.exists() else []


@pytest.mark.timeout(90)
def test_a_partitioned_host_stops_its_job_before_the_rerun_elsewhere_starts(h, make_proxy, tmp_path):
    proxy = make_proxy(h.redis.sock)
    record = tmp_path / "rec"
    record.mkdir()
    h.config("a", workers=1, heartbeat=1.0, handlers=HANDLERS)
    a_cfg = h.tmp / "a.toml"
    a_cfg.write_text(a_cfg.read_text().replace(f'url = "{h.redis.url}"', f'url = "redis://127.0.0.1:{proxy.port}/0"'))
    a = h.daemon("a", start=False)
    a.start()
    a.wait_slots(1)
    jid = h.submit(kind="tick", user="u1", payload={"record": str(record), "sleep": 15})
    wait_until(lambda: ticks(record, jid, 1), 15, what="attempt 1 ticking on host A")
    h.daemon("b", workers=1, heartbeat=1.0, handlers=HANDLERS).wait_slots(1)
    # Given A's job is running; when A is cut off from Redis
    cut = time.time()
    proxy.pause()
    # then B reclaims the job after A's key expires and runs attempt 2
    wait_until(lambda: ticks(record, jid, 2), 20, what="attempt 2 ticking on host B")
    rerun_start = ticks(record, jid, 2)[0]
    last_a = ticks(record, jid, 1)[-1]
    print(f"A cut at 0; A's last tick {last_a - cut:.2f} s; B's first tick {rerun_start - cut:.2f} s")
    assert last_a < rerun_start, f"A's attempt ticked {last_a - rerun_start:.2f} s after the re-run started"
    time.sleep(1.0)
    assert ticks(record, jid, 1)[-1] == last_a, "A's attempt is still running"
    assert "fenced" in a.logs()
    proxy.resume()
    job = h.wait_state(jid, timeout=30)
    assert job.attempts == 2 and job.interruptions >= 1 and job.tries == 0


@pytest.mark.timeout(60)
def test_a_supervisor_stall_shorter_than_the_fence_kills_nothing(h, tmp_path):
    record = tmp_path / "rec"
    record.mkdir()
    d = h.daemon(workers=1, heartbeat=1.0, handlers=HANDLERS)
    d.wait_slots(1)
    jid = h.submit(kind="tick", user="u1", payload={"record": str(record), "sleep": 4})
    wait_until(lambda: ticks(record, jid, 1), 15, what="attempt 1 ticking")
    os.kill(d.pid, signal.SIGSTOP)
    time.sleep(1.2)  # < fence (2.17 s) and < the reclaim threshold
    os.kill(d.pid, signal.SIGCONT)
    job = h.wait_state(jid, timeout=30)
    assert job.attempts == 1 and job.interruptions == 0
    assert "fenced" not in d.logs()
