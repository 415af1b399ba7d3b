"""A slot and Redis failures, through a real daemon: a partition during settle, a
settle whose reply was lost (item 22), and an entry left in the slot's list after a Redis error
that was not the claim's (item 6). The partition is a TCP proxy that drops traffic (``blackhole``)."""

import os
import signal
import time

import pytest

from support.blackhole import Blackhole
from conftest import wait_until


@pytest.fixture
def hole(h):
    bh = Blackhole(h.redis.sock)
    yield bh
    bh.close()


def _through(h, hole, **kw):
    """A daemon whose Redis is reached through the proxy (heartbeat 2: silence is judged at 6 s, so
    a slot blocked 3 s in one timed-out call is not taken for dead)."""
    cfg = h.config(heartbeat=2, **kw)
    cfg.write_text(cfg.read_text().replace(f'url = "{h.redis.url}"', f'url = "{hole.url}"'))
    armed = h.faults / "before_ack"
    armed.write_text("")  # disarmed for a first job, which loads settle.lua into the slot's connection
    d = h.daemon(faults="before_ack")
    h.wait_state(h.submit(kind="noop"), timeout=20)
    armed.unlink()
    return d


def _settled(d, jid):
    return d.log_events("settled", job_id=jid)


@pytest.mark.timeout(90)
def test_a_partition_during_settle_is_retried_and_the_job_runs_once(h, hole):
    d = _through(h, hole, workers=1)
    jid = h.submit(payload={"record": str(h.records)})
    pid = h.fault_pid("before_ack")  # the handler finished; settle comes next
    # When the network drops everything while the slot settles (a timeout, not a refused connection)
    hole.drop("both")
    os.kill(pid, signal.SIGCONT)
    time.sleep(5)
    hole.heal()
    # Then the settle is retried until it lands: the finished job is kept, not run again
    job = h.wait_state(jid, timeout=30)
    assert job.attempts == 1 and job.interruptions == 0, job
    assert not (h.records / f"{jid}.2.start").exists()
    assert "settle_retry" in d.logs()


@pytest.mark.timeout(90)
def test_a_settle_whose_reply_was_lost_counts_as_what_it_was(h, hole):
    d = _through(h, hole, workers=1)
    jid = h.submit(payload={"record": str(h.records)})
    pid = h.fault_pid("before_ack")
    # When settle runs on Redis but its reply is lost, so the retry finds the job already settled
    hole.drop("replies")
    os.kill(pid, signal.SIGCONT)
    time.sleep(4.5)
    hole.heal()
    job = h.wait_state(jid, timeout=30)
    assert job.attempts == 1
    # Then it is logged and counted as completed, not as fenced
    wait_until(lambda: _settled(d, jid), 15, what="the settled line")
    assert _settled(d, jid)[-1]["verdict"] == "completed", _settled(d, jid)
    assert "settle_reply_lost" in d.logs()


@pytest.mark.timeout(90)
def test_after_any_redis_error_the_slot_puts_back_what_it_does_not_run(h):
    # Given a slot running a job, and an entry in its list it does not run (a settle a failover undid)
    d = h.daemon(workers=1, faults="")
    running = h.submit(user="a", payload={"record": str(h.records), "sleep": 3})
    wait_until(lambda: (h.records / f"{running}.1.start").exists(), 15, what="start")
    (proc,) = [p.decode() for p in h.r.scan_iter(match=h.k.proc_pattern) if running.encode() in h.r.lrange(p, 0, -1)]
    left = h.submit(user="b", payload={"record": str(h.records)})
    assert h.r.lmove(h.k.ready_lo, proc, "RIGHT", "LEFT") == left.encode()
    h.r.hset(h.k.job(left), mapping={"state": "running", "token": "1.lost", "attempts": 1,
                                         "timeout_ms": 600_000, "worker": "elsewhere"})
    # When Redis restarts under the running job (its cancel/fence poll fails; nothing else does)
    h.redis.restart()
    # Then once the running job has settled, the slot reconciles its list: the leftover runs at once
    h.wait_state(running, timeout=20)
    job = h.wait_state(left, timeout=15)
    assert job.attempts == 2 and job.interruptions == 1, job
    assert "reconciled_entry" in d.logs()
