"""Crash safety of settle_take.lua, the busy slot's one round trip per job (settle a job, start the
next queued one): SIGKILL at the new checkpoint ``after_settle_take`` (the reply is in, the next
attempt started in Redis, its child not yet spawned), and a reply lost on the way back."""

import os
import signal
import time

import pytest

from conftest import wait_until
from support.blackhole import Blackhole


def proc_entries(h):
    out = {}
    for k in h.r.scan_iter(match=h.k.proc_pattern):
        out[k.decode()] = [e.decode() for e in h.r.lrange(k, 0, -1)]
    return {k: v for k, v in out.items() if v}


def starts(h, jid):
    return sorted(p.name for p in h.records.glob(f"{jid}.*.start"))


@pytest.mark.timeout(60)
def test_killed_between_a_combined_settle_and_the_next_start(h):
    # Given one slot running A while B waits in ready
    h.daemon(workers=1, faults="after_settle_take")
    a = h.submit(user="a", payload={"record": str(h.records), "sleep": 0.5})
    wait_until(lambda: (h.records / f"{a}.1.start").exists(), 15, what="A started")
    b = h.submit(user="b", payload={"record": str(h.records)})
    # When A's settle has also started B, and the slot is SIGKILLed before B's child exists
    pid = h.fault_pid("after_settle_take")
    ja, jb = h.job(a), h.job(b)
    assert ja.state.value == "completed" and ja.attempts == 1
    assert jb.state.value == "running" and jb.attempts == 1 and starts(h, b) == []
    assert list(proc_entries(h).values()) == [[b]]
    assert h.r.get(h.k.lock("b")).decode() == jb.token
    assert h.r.get(h.k.lock("a")) is None
    os.kill(pid, signal.SIGKILL)
    # Then B is put back and runs once on the respawned slot; A is not run again; nothing is left
    jb = h.wait_state(b, timeout=15)
    assert jb.attempts == 2 and jb.interruptions == 1 and jb.tries == 0
    assert starts(h, b) == [f"{b}.2.start"]
    assert starts(h, a) == [f"{a}.1.start"] and h.job(a).attempts == 1
    wait_until(lambda: proc_entries(h) == {}, 5, what="empty processing lists")
    assert h.r.get(h.k.lock("b")) is None


@pytest.mark.timeout(90)
def test_a_combined_settle_whose_reply_was_lost_runs_the_started_job_once(h):
    hole = Blackhole(h.redis.sock)
    try:
        cfg = h.config(heartbeat=4, workers=1)  # the fence (~10 s) stays out of the outage
        cfg.write_text(cfg.read_text().replace(f'url = "{h.redis.url}"', f'url = "{hole.url}"'))
        armed = h.faults / "before_ack"
        armed.write_text("")  # disarmed for a first job, which loads the scripts into the slot's connection
        d = h.daemon(faults="before_ack")
        h.wait_state(h.submit(kind="noop"), timeout=20)
        h.wait_state(h.submit(kind="noop"), timeout=20)
        armed.unlink()
        # Given A finished (the slot stopped before settling it) and B queued behind it
        a = h.submit(user="a", payload={"record": str(h.records)})
        pid = h.fault_pid("before_ack")
        b = h.submit(user="b", payload={"record": str(h.records)})
        # When the combined settle runs on Redis (A settled, B started) but its reply is lost
        hole.drop("replies")
        os.kill(pid, signal.SIGCONT)
        time.sleep(4.5)
        hole.heal()
        # Then the retry adopts B, the attempt the first call started: B runs once, as attempt 1
        jb = h.wait_state(b, timeout=30)
        assert jb.attempts == 1 and jb.interruptions == 0, jb
        assert starts(h, b) == [f"{b}.1.start"]
        ja = h.job(a)
        assert ja.state.value == "completed" and ja.attempts == 1 and starts(h, a) == [f"{a}.1.start"]
        assert "settle_reply_lost" in d.logs()
    finally:
        hole.close()
