"""Live resize (scale, SIGHUP), drain for deploys, and reloads that keep the pool running."""

import json
import signal
import time

import pytest

from conftest import wait_until


def attempts_on_record(h):
    """Every attempt the jobs themselves recorded: (job id, attempt) → (start, end or None)."""
    out = {}
    for f in h.records.glob("*.start"):
        jid, attempt, _ = f.name.rsplit(".", 2)
        end = h.records / f"{jid}.{attempt}.end"
        out[(jid, int(attempt))] = (json.loads(f.read_text())["t"], json.loads(end.read_text())["t"] if end.exists() else None)
    return out


def assert_each_ran_once_to_the_end(h, jobs):
    rec = attempts_on_record(h)
    assert sorted(j for j, _ in rec) == sorted(jobs), "a job never started, or started twice"
    assert all(a == 1 for _, a in rec), [k for k in rec if k[1] != 1]
    assert all(end is not None for _, end in rec.values()), "an attempt was killed before its end"
    for j in jobs:
        job = h.job(j)
        assert job.state.value == "completed" and job.attempts == 1 and job.interruptions == 0, job


def set_workers(cfg, n):
    text = cfg.read_text()
    import re
    cfg.write_text(re.sub(r"worker_count = \d+", f"worker_count = {n}", text))


@pytest.mark.timeout(90)
def test_scale_up_and_down_under_load_loses_and_kills_nothing(h):
    d = h.daemon(workers=2)
    d.wait_slots(2)
    jobs = [h.submit(user=f"u{i}", payload={"sleep": 0.6, "record": str(h.records)}) for i in range(36)]
    wait_until(lambda: len(list(h.records.glob("*.start"))) >= 2, 15, what="first jobs running")
    # scale up live: two more slots join
    out = h.cli("scale", "4", "--wait", "--timeout", "20")
    assert out.returncode == 0, out.stderr
    assert "scaling from 2 to 4" in out.stdout
    assert len(d.slot_pids()) == 4
    wait_until(lambda: sum(1 for r in h.r.keys(h.k.busy("*"))) >= 3, 10, what="3 busy slots")
    # scale down while all four are busy: three finish their job, then exit
    busy_before = {p for p in d.slot_pids()}
    out = h.cli("scale", "1")
    assert out.returncode == 0, out.stderr
    wait_until(lambda: len(d.slot_pids()) == 1, 15, what="one slot left")
    assert set(d.slot_pids()) <= busy_before  # the survivor kept running: no respawn
    for j in jobs:
        h.wait_state(j, timeout=60)
    assert_each_ran_once_to_the_end(h, jobs)
    assert "slot_unresponsive" not in d.logs() and not d.log_events("slot_exited", how="signal*")
    assert d.stop() == 0


@pytest.mark.timeout(60)
def test_reload_resizes_when_the_file_changed_and_keeps_a_live_scale_otherwise(h):
    d = h.daemon(workers=2)
    d.wait_slots(2)
    cfg = h.tmp / "a.toml"
    # the file changed: it wins
    set_workers(cfg, 3)
    d.proc.send_signal(signal.SIGHUP)
    d.wait_slots(3)
    # a live scale, then a reload whose file did not change worker_count: the scale stays
    assert h.cli("scale", "1", "--wait", "--timeout", "15").returncode == 0
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: '"live_scale_kept"' in d.logs(), 10, what="live_scale_kept")
    time.sleep(1.0)
    assert len(d.slot_pids()) == 1
    h.wait_state(h.submit(), timeout=15)
    assert d.stop() == 0


@pytest.mark.timeout(60)
def test_invalid_reload_keeps_the_old_config_and_says_why(h):
    d = h.daemon(workers=2)
    pids = d.wait_slots(2)
    h.client()  # the harness's client, built from the file while it is still valid
    cfg = h.tmp / "a.toml"
    good = cfg.read_text()
    set_workers(cfg, 9)
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "reload_rejected" in d.logs(), 10, what="reload_rejected")
    line = next(l for l in d.logs().splitlines() if "reload_rejected" in l)
    assert "config: pool.worker_count: 9: an integer from 1 to 4" in line
    time.sleep(1.0)
    assert d.proc.poll() is None and sorted(d.slot_pids()) == sorted(pids)  # same slots, untouched
    from tender_pool.client.status_client import request
    st = request(str(h.tmp / "state-a" / "status.sock")).status  # (the CLI would refuse the bad file)
    assert st.configured == 2 and st.online == 2
    h.wait_state(h.submit(), timeout=15)
    # a valid reload: a restart-only key is kept (and named), a slot setting recycles the slots,
    # each after its running job, which is not killed
    cfg.write_text(good.replace(f'prefix = "{h.prefix}"', 'prefix = "elsewhere"').replace("timeout = 60", "timeout = 61"))
    j = h.submit(kind="long", payload={"sleep": 2, "record": str(h.records)})
    wait_until(lambda: (h.records / f"{j}.1.start").exists(), 15, what="start")
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: '"reloaded"' in d.logs(), 10, what="reloaded")
    line = next(l for l in d.logs().splitlines() if '"reloaded"' in l)
    assert json.loads(line)["restart_needed"] == ["redis.prefix"], line
    assert json.loads(line)["slots_recycled_for"] == ["handlers.long"], line
    wait_until(lambda: len(set(d.slot_pids()) - set(pids)) == 2, 15, what="both slots recycled")
    assert h.wait_state(j).attempts == 1 and (h.records / f"{j}.1.end").exists()
    h.wait_state(h.submit(), timeout=15)  # still on the old prefix: the harness queue sees it done
    assert d.stop() == 0


@pytest.mark.timeout(60)
def test_drain_waits_for_running_jobs_then_scale_resumes(h):
    d = h.daemon(workers=2)
    d.wait_slots(2)
    running = [h.submit(user=f"r{i}", payload={"sleep": 1.5, "record": str(h.records)}) for i in range(2)]
    wait_until(lambda: len(list(h.records.glob("*.start"))) == 2, 15, what="both running")
    queued = h.submit(user="later")
    t0 = time.monotonic()
    out = h.cli("drain", "--timeout", "20")
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - t0 > 0.8  # it waited for the jobs...
    assert all(h.job(j).state.value == "completed" for j in running)  # ...which finished, not killed
    assert_each_ran_once_to_the_end(h, running)
    assert d.slot_pids() == [] and d.proc.poll() is None
    time.sleep(1.0)
    assert h.job(queued).state.value == "queued"  # nothing claims while drained
    st = json.loads(h.cli("status", "--json").stdout)
    assert st["draining"] is True and st["busy"] == 0
    assert h.cli("scale", "2", "--wait", "--timeout", "15").returncode == 0
    h.wait_state(queued, timeout=15)
    assert d.stop() == 0
