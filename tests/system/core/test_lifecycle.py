"""SIGTERM drain, second signal, Redis outages, duplicate host_id, slot respawn."""

import os
import signal
import time

import psutil
import pytest

from conftest import wait_until


def test_sigterm_lets_running_jobs_finish(h):
    d = h.daemon(workers=1)
    j = h.submit(payload={"sleep": 1, "record": str(h.records)})
    wait_until(lambda: (h.records / f"{j}.1.start").exists(), 15, what="start")
    queued = h.submit(user="other")
    assert d.stop() == 0
    assert h.job(j).state.value == "completed"
    assert h.job(queued).state.value == "queued"  # a draining pool claims nothing more


def test_drain_timeout_kills_and_requeues_without_counting_a_try(h):
    d = h.daemon(workers=1, extra="")
    cfg = h.tmp / "a.toml"
    cfg.write_text(cfg.read_text().replace("drain_timeout = 5", "drain_timeout = 1"))
    d.stop()
    d = h.daemon(workers=1, start=True) if False else h.daemons[-1].start()
    j = h.submit(kind="long", payload={"sleep": 30, "record": str(h.records), "sleep_once": True})
    wait_until(lambda: (h.records / f"{j}.1.start").exists(), 15, what="start")
    t0 = time.monotonic()
    assert d.stop() == 0
    assert time.monotonic() - t0 < 6
    job = h.job(j)
    assert job.state.value == "queued" and job.tries == 0 and job.interruptions == 1
    h.daemons[-1].start()
    assert h.wait_state(j, timeout=15).attempts == 2


def test_second_signal_kills_at_once_and_loses_nothing(h):
    d = h.daemon(workers=1)
    j = h.submit(kind="long", payload={"sleep": 30, "record": str(h.records), "sleep_once": True})
    wait_until(lambda: (h.records / f"{j}.1.start").exists(), 15, what="start")
    d.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(10) == 0
    assert h.job(j).state.value == "queued"
    d.start()
    h.wait_state(j, timeout=15)


def test_slot_killed_while_idle_is_respawned(h):
    d = h.daemon(workers=2)
    pids = d.wait_slots(2)
    os.kill(pids[0], signal.SIGKILL)
    wait_until(lambda: len(d.slot_pids()) == 2 and pids[0] not in d.slot_pids(), 10, what="respawn")
    h.wait_state(h.submit(), timeout=10)


def test_slot_killed_mid_job_reruns_within_two_seconds(h):
    d = h.daemon(workers=2)
    j = h.submit(kind="long", payload={"sleep": 30, "sleep_once": True, "record": str(h.records)})
    wait_until(lambda: (h.records / f"{j}.1.start").exists(), 15, what="start")
    slot = psutil.Process(psutil.Process(int(__import__("json").loads((h.records / f"{j}.1.start").read_text())["pid"])).ppid())
    t0 = time.monotonic()
    slot.kill()
    wait_until(lambda: (h.records / f"{j}.2.start").exists(), 5, what="second attempt")
    assert time.monotonic() - t0 < 2.0
    h.wait_state(j, timeout=10)


def test_duplicate_host_id_refuses_to_start(h):
    h.daemon("a", workers=1, host_id="same").wait_slots(1)
    b = h.daemon("b", workers=1, host_id="same")
    assert b.proc.wait(15) == 2
    assert "pool.host_id: same: already used by a live daemon" in b.logs()


@pytest.mark.timeout(90)
def test_redis_restart_loses_nothing(h):
    d = h.daemon(workers=2)
    d.wait_slots(2)
    running = h.submit(kind="long", user="r", payload={"sleep": 3, "record": str(h.records)})
    queued = [h.submit(user=f"q{i}") for i in range(5)]
    wait_until(lambda: (h.records / f"{running}.1.start").exists(), 15, what="start")
    h.redis.restart(down_for=2.0)
    for j in [running, *queued]:
        h.wait_state(j, timeout=30)
    assert d.proc.poll() is None
    h.wait_state(h.submit(user="after"), timeout=15)


@pytest.mark.timeout(90)
def test_redis_sigkilled_with_fsync_always_loses_nothing(h):
    d = h.daemon(workers=2)
    d.wait_slots(2)
    jobs = [h.submit(user=f"k{i}", payload={"sleep": 0.3}) for i in range(10)]
    time.sleep(0.5)
    h.redis.restart(down_for=1.0, sig=signal.SIGKILL)
    for j in jobs:
        h.wait_state(j, timeout=40)
    assert d.proc.poll() is None


def test_daemon_started_before_redis_waits_for_it(h):
    h.config()
    h.redis.stop()
    d = h.daemon(workers=1)
    time.sleep(1.5)
    assert d.proc.poll() is None  # still waiting, not crashed
    h.redis.start()
    h.wait_state(h.submit(), timeout=20)
