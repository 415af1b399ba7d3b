"""The database consumer: Client.consume keeps a SQLite table in step with every job transition
(examples/db_sync.py, a real daemon, a real Redis), trimming respects consumer groups, a gap is
reported and answered with a resync, failing applies are retried and a poison entry is parked."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from conftest import wait_until
from tender_pool.client import Client
from tender_pool.supervisor import stream_trim
from support.keyspace import keys

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("db_sync", ROOT / "examples" / "db_sync.py")
db_sync = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(db_sync)


def free_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def scrape(port: int) -> str | None:
    import urllib.request

    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None


def client_of(h) -> Client:
    return Client(h.redis.url, prefix=h.prefix, socket_timeout=3)


def table_rows(path: Path) -> dict[str, dict]:
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    rows = {r["id"]: dict(r) for r in db.execute("SELECT * FROM tasks")}
    db.close()
    return rows


def assert_in_step(pool: Client, rows: dict[str, dict], ids: list[str]) -> None:
    for jid in ids:
        j = pool.job(jid)
        row = rows.get(jid)
        assert row is not None, f"no row for {jid} ({j.state})"
        assert (row["state"], row["attempts"], row["tries"], row["error_kind"]) == \
            (j.state, j.attempts, j.tries, j.error.kind if j.error else None), (jid, row, j)
        assert row["user"] == j.user and row["kind"] == j.kind
        assert row["finished_at"] == j.finished_at and row["started_at"] == j.started_at


class Background:
    """A consume loop on a thread, stopped at the end of the test."""

    def __init__(self, pool: Client, group: str, name: str, apply, **kw):
        self.stop = threading.Event()
        self.error: BaseException | None = None

        def run():
            try:
                pool.consume(group, name, apply, block_ms=100, stop=self.stop.is_set, **kw)
            except BaseException as e:  # surfaced by join()
                self.error = e
        self.t = threading.Thread(target=run, daemon=True)
        self.t.start()

    def join(self):
        self.stop.set()
        self.t.join(10)
        assert not self.t.is_alive()
        if self.error:
            raise self.error


def test_consumer_keeps_sqlite_in_step_with_every_job(h, tmp_path):
    h.daemon(workers=2)
    pool = client_of(h)
    assert pool.register_consumer_group("db") is True
    assert pool.register_consumer_group("db") is False
    table = db_sync.TaskTable(str(tmp_path / "tasks.db"))
    bg = Background(pool, "db", "c1", table.apply, resync=table.resync)
    ids = [pool.submit(f"u{i % 5}", "behave", {"echo": i}).id for i in range(30)]
    ids += [pool.submit("u9", "behave", {"final_error": "corrupt"}).id]
    run = pool.submit_run("u7", "behave", [{"key": f"k{i}", "payload": {"echo": i}} for i in range(5)])
    ids += [j.id for j in run.jobs]
    for jid in ids:
        h.wait_state(jid, ("completed", "failed"))
    wait_until(lambda: all(r["state"] in ("completed", "failed") for r in table_rows(tmp_path / "tasks.db").values())
               and len(table_rows(tmp_path / "tasks.db")) == len(ids), 20, what="rows in step")
    bg.join()
    rows = table_rows(tmp_path / "tasks.db")
    assert_in_step(pool, rows, ids)
    assert {rows[j.id]["key"] for j in run.jobs} == {f"k{i}" for i in range(5)}
    assert all(rows[j.id]["run_id"] == run.id for j in run.jobs)
    # every job's hash keeps the id of its last event: the row's version
    for jid in ids:
        assert rows[jid]["last_event_id"] == pool.r.hget(pool.k.job(jid), "event_id").decode()
    info = {g.group: g for g in pool.consumer_groups()}["db"]
    assert info.pending == 0 and info.lag == 0 and info.gap is False


def test_without_a_group_the_stream_stays_bounded(h):
    """No group: the housekeeper trims as before groups existed (newest ~max(1000, ...) kept)."""
    h.daemon(workers=2, extra="[events]\nmax_backlog = 1000\n")
    pool = client_of(h)
    ids = [pool.submit(f"u{i % 20}", "noop").id for i in range(600)]
    for jid in ids[-20:]:
        h.wait_state(jid)
    wait_until(lambda: all(h.job(j).state.value == "completed" for j in ids), 60, what="all done")
    wait_until(lambda: pool.r.xlen(pool.k.events) <= 1200, 10, what="stream trimmed")  # ~: a macro node more


def test_trim_keeps_what_a_group_has_not_acknowledged(redis_server):
    r = redis_server.client()
    k = keys("trim", "q")
    ids = [r.xadd(k.events, {"e": "{}"}).decode() for _ in range(3000)]
    r.xgroup_create(k.events, "slow", id="0")
    r.xgroup_create(k.events, "fast", id="0")
    r.xreadgroup("fast", "c", {k.events: ">"}, count=3000)
    r.xack(k.events, "fast", *ids)
    r.xreadgroup("slow", "c", {k.events: ">"}, count=100)  # 100 delivered, none acked
    rep = stream_trim.trim(r, k, max_backlog=5000)
    assert rep.dropped == 0 and r.xlen(k.events) == 3000  # slow still needs its first entry
    r.xack(k.events, "slow", *ids[:50])
    stream_trim.trim(r, k, max_backlog=5000)
    first = r.xrange(k.events, count=1)[0][0].decode()
    assert stream_id(first) <= stream_id(ids[50])  # nothing slow needs is gone
    assert r.xlen(k.events) <= 3000
    # past the cap: the oldest go, slow is marked with a gap, fast (caught up) is not
    rep = stream_trim.trim(r, k, max_backlog=1000)
    assert r.xlen(k.events) == 1000 and rep.dropped >= 1900 and rep.gaps == ["slow"]
    gap = json.loads(r.get(k.events_gap("slow")))
    assert gap["since"] == ids[50] and gap["first_kept"] == ids[2000]
    assert r.get(k.events_gap("fast")) is None
    # a group with nothing pending and caught up does not hold trimming back
    r.xgroup_destroy(k.events, "slow")
    r.delete(k.events_gap("slow"))
    stream_trim.trim(r, k, max_backlog=1000)
    assert r.xlen(k.events) < 200  # everything fast acknowledged may go (~: a macro node stays)


def stream_id(s):
    ms, _, seq = s.partition("-")
    return int(ms), int(seq)


def test_gap_is_reported_and_resync_makes_the_table_exact(h, tmp_path):
    port = free_port()
    cfg = h.config(workers=2, extra="[events]\nmax_backlog = 1000\n")
    cfg.write_text(cfg.read_text().replace('[metrics]\nlisten = ""', f'[metrics]\nlisten = "127.0.0.1:{port}"'))
    h.daemon()
    pool = client_of(h)
    db = tmp_path / "tasks.db"
    table = db_sync.TaskTable(str(db))
    pool.register_consumer_group("db")
    first = [pool.submit("u1", "noop").id for _ in range(5)]
    for jid in first:
        h.wait_state(jid)
    bg = Background(pool, "db", "c1", table.apply, resync=table.resync)
    wait_until(lambda: len(table_rows(db)) == 5, 10, what="first rows")
    bg.join()  # the consumer is down while 3 × max_backlog entries pass
    ids = [pool.submit(f"u{i % 30}", "noop").id for i in range(800)]  # ~4 entries a job
    wait_until(lambda: all(h.job(j).state.value == "completed" for j in ids), 90, what="all done")
    wait_until(lambda: pool.r.exists(pool.k.events_gap("db")), 10, what="gap marked")
    # the cap holds at each housekeeper pass (between two, the stream grows by what a second writes)
    wait_until(lambda: pool.r.xlen(pool.k.events) <= 1000, 5, what="stream within the cap")
    st = h.cli("status", "--json")
    assert st.returncode == 1, st.stdout
    view = json.loads(st.stdout)
    assert [c["group"] for c in view["consumers"] if c["gap"]] == ["db"]
    assert any("db" in p and "gap" in p for p in view["problems"])
    assert h.daemons[0].log_events("events_dropped_for_group", group="db")
    metrics = scrape(port)
    (dropped,) = [ln for ln in metrics.splitlines()
                  if ln.startswith('tender_pool_events_consumer_dropped_total{group="db"}')]
    gap = json.loads(pool.r.get(pool.k.events_gap("db")))
    assert float(dropped.split()[-1]) == gap["dropped"] > 0  # what the mark says the group lost
    groups = h.cli("events", "groups", "--json")
    assert groups.returncode == 0 and json.loads(groups.stdout)[0]["gap"] is True
    # the consumer comes back: resync, then the stream; the table is exact and the gap is gone
    bg = Background(pool, "db", "c1", table.apply, resync=table.resync)
    wait_until(lambda: not pool.r.exists(pool.k.events_gap("db")) and len(table_rows(db)) == 805, 30,
               what="resynced")
    bg.join()
    assert_in_step(pool, table_rows(db), first + ids)
    wait_until(lambda: h.cli("status", "--json").returncode == 0, 10, what="status healthy again")


def test_failing_apply_is_redelivered_and_a_poison_entry_is_parked(h, tmp_path):
    h.daemon(workers=1)
    pool = client_of(h)
    pool.register_consumer_group("db")
    poison = pool.submit("u1", "noop", job_id="poison").id
    good = [pool.submit("u2", "noop").id for _ in range(5)]
    for jid in [poison, *good]:
        h.wait_state(jid)
    seen: list[str] = []
    calls = {"n": 0}

    def apply(events):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("database down")  # the first batch: nothing may be acknowledged
        for ev in events:
            if ev.job_id == "poison":
                raise ValueError("poison")
        seen.extend(ev.id for ev in events)

    bg = Background(pool, "db", "c1", apply, park_after=3)
    wait_until(lambda: pool.r.llen(pool.k.events_parked("db")) >= 3, 30, what="poison parked")
    wait_until(lambda: {g.group: g for g in pool.consumer_groups()}["db"].pending == 0, 10, what="all acked")
    bg.join()
    parked = [json.loads(x) for x in pool.r.lrange(pool.k.events_parked("db"), 0, -1)]
    assert {json.loads(p["entry"])["job_id"] for p in parked} == {"poison"}
    assert all(p["tries"] == 3 and "poison" in p["error"] for p in parked)
    good_events = {sid.decode() for sid, f in pool.r.xrange(pool.k.events)
                   if json.loads(f[b"e"]).get("job_id") in good}
    assert good_events <= set(seen)
    assert len(seen) == len(set(seen))  # the good ones were acknowledged once applied: not re-applied


def test_a_dead_consumers_pending_entries_are_claimed(h, tmp_path):
    h.daemon(workers=1)
    pool = client_of(h)
    pool.register_consumer_group("db")
    ids = [pool.submit("u1", "noop").id for _ in range(5)]
    for jid in ids:
        h.wait_state(jid)
    # consumer "dead" read everything and died before acknowledging
    pool.r.xreadgroup("db", "dead", {pool.k.events: ">"}, count=1000)
    assert {g.group: g for g in pool.consumer_groups()}["db"].pending > 0
    table = db_sync.TaskTable(str(tmp_path / "t.db"))
    bg = Background(pool, "db", "alive", table.apply, claim_idle=0.5)
    wait_until(lambda: {g.group: g for g in pool.consumer_groups()}["db"].pending == 0, 15, what="claimed")
    bg.join()
    assert_in_step(pool, table_rows(tmp_path / "t.db"), ids)


def test_metrics_and_alert_rules_name_the_consumer_figures(h):
    import subprocess

    port = free_port()
    cfg = h.config(workers=1)
    cfg.write_text(cfg.read_text().replace('[metrics]\nlisten = ""', f'[metrics]\nlisten = "127.0.0.1:{port}"'))
    h.daemon()
    pool = client_of(h)
    pool.register_consumer_group("db")
    jid = pool.submit("u1", "noop").id
    h.wait_state(jid)

    text = wait_until(lambda: (lambda t: t if t and 'tender_pool_events_consumer_lag{group="db"}' in t else None)(
        scrape(port)), 15, what="consumer metrics")
    lag = [ln for ln in text.splitlines() if ln.startswith('tender_pool_events_consumer_lag{group="db"}')]
    assert float(lag[0].split()[-1]) >= 3  # queued, started, completed: none delivered yet
    assert "# TYPE tender_pool_events_consumer_dropped_total counter" in text  # served, no group's sample yet
    res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=20)
    assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr
    rules = ROOT / "deploy" / "prometheus" / "tender-pool.rules.yml"
    res = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True, timeout=20)
    assert res.returncode == 0, res.stdout + res.stderr
    import re
    named = set(re.findall(r"\btender_pool_[a-z0-9_]+", rules.read_text()))
    served = {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE ")}
    assert named and named <= served, named - served


def test_events_cli_register_groups_unregister_and_bad_input(h):
    h.config()
    out = h.cli("events", "register", "db")
    assert out.returncode == 0 and "registered db" in out.stdout, out.stderr
    assert "already" in h.cli("events", "register", "db").stdout
    groups = h.cli("events", "groups", "--json")
    assert groups.returncode == 0
    (g,) = json.loads(groups.stdout)
    assert g["group"] == "db" and g["lag"] == 0 and g["pending"] == 0 and g["gap"] is False
    assert "db" in h.cli("events", "groups").stdout
    bad = h.cli("events", "register", "two words")
    assert bad.returncode == 2 and "bad consumer group name" in bad.stderr
    assert h.cli("events", "unregister", "db").returncode == 0
    missing = h.cli("events", "unregister", "db")
    assert missing.returncode == 2 and "no such consumer group" in missing.stderr
    h.redis.stop()
    assert h.cli("events", "groups").returncode == 4


def test_aconsume_applies_with_an_async_apply(h, tmp_path):
    import asyncio

    h.daemon(workers=1)
    pool = client_of(h)
    pool.register_consumer_group("db")
    ids = [pool.submit("u1", "noop").id for _ in range(3)]
    for jid in ids:
        h.wait_state(jid)
    got: list = []

    async def apply(events):
        await asyncio.sleep(0)
        got.extend(ev for ev in events if ev.type == "job_completed")

    async def main():
        await pool.aconsume("db", "a1", apply, block_ms=100, stop=lambda: len(got) >= 3)
        await pool.aclose()
    asyncio.run(asyncio.wait_for(main(), 20))
    assert sorted(ev.job_id for ev in got) == sorted(ids)
    ev = got[0]
    assert ev.attempts == 1 and ev.tries == 0 and ev.worker and ev.user == "u1" and ev.kind == "noop"
    assert ev.finished_at.endswith("Z") and ev.started_at.endswith("Z") and ev.error is None


def test_resync_leaves_out_the_jobs_of_a_run_still_being_written(redis_server):
    """A gap's resync hands over every job changed since; the staged jobs of an unsealed run (no
    event yet, the run hash still ``staging``) are not jobs the platform will ever hear of."""
    import msgspec

    from tender_pool.client.consumer import Gap

    pool = Client(redis_server.url, prefix="rs", socket_timeout=3)
    pool.register_consumer_group("db")
    done = pool.submit("u1", "noop").id  # queued: it has an event id
    r, k = pool.r, pool.k
    r.hset(k.run("big"), mapping={"id": "big", "user": "u2", "kind": "noop", "state": "pending", "staging": "1"})
    r.hset(k.job("big/1"), mapping={"id": "big/1", "kind": "noop", "user": "u2", "payload": "{}", "state": "queued",
                                    "run": "big", "key": "a", "created_at": 1})
    r.hset(k.job("old"), mapping={"id": "old", "kind": "noop", "user": "u3", "payload": "{}", "state": "completed"})
    r.set(k.events_gap("db"), msgspec.json.encode(Gap(since="0-0", first_kept="0-1", dropped=1, at=0)))
    seen: list[str] = []
    pool.consume("db", "c1", lambda evs: None, resync=lambda jobs: seen.extend(s.job.id for s in jobs),
                 block_ms=50, stop=lambda: not r.exists(k.events_gap("db")))
    assert sorted(seen) == sorted([done, "old"])  # an old job without an event id is still resynced
