"""`status` stays bounded whatever Redis holds: tens of thousands of active runs are a count and the
20 newest, in the socket reply, `status --redis`, `Client.status()` and /metrics (CONTRACT.md, Status
JSON). Before: 49,157 open runs made a 17.6 MB reply, over the 16 MiB frame cap, and
`status` said no daemon answered."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from conftest import wait_until

from support.keyspace import keys
from tender_pool.client import Client
from tender_pool.supervisor.metrics import PoolCollector, PoolMetrics
from tender_pool.client.status_probe import QueueProbe
from tender_pool.client.status_protocol import CountersView



def open_runs(r, k, n: int, *, user_len: int = 16, start_ms: int | None = None, tag: str = "r") -> list[str]:
    """``n`` active runs as run_submit.lua leaves them (the run hash and its index entry), written in
    bulk: the volume of an import that opened runs faster than the pool finished them."""
    start_ms = start_ms if start_ms is not None else int(time.time() * 1000) - n - 10_000
    ids = []
    p = r.pipeline(transaction=False)
    for i in range(n):
        rid = f"{tag}{i:06d}"
        ids.append(rid)
        user = f"user{i % 97}".ljust(user_len, "x")
        p.hset(k.run(rid), mapping={"state": "pending", "user": user, "kind": "behave", "total": 3, "queued": 3,
                                    "created_at": start_ms + i})
        p.zadd(k.runs, {rid: start_ms + i})
        if len(p) >= 4000:
            p.execute()
    p.execute()
    return ids


def status(h, *args):
    out = h.cli("status", "--json", *args)
    return out.returncode, json.loads(out.stdout)


@pytest.mark.timeout(180)
def test_ten_thousand_big_active_runs_are_a_count_and_the_20_newest_everywhere(h):
    # Given a daemon, and 9,000 open runs with 2 KB user names (listed whole: ~19 MB > 16 MiB)
    d = h.daemon(workers=1)
    d.wait_slots(1)
    k = h.k
    n = 9000
    open_runs(h.r, k, n, user_len=2000)
    c = Client(h.redis.url, prefix=h.prefix)
    newest = [c.submit_run("late", "long", [{"key": f"x{i}", "payload": {"sleep": 50}}]).id for i in range(2)]
    # When status is asked on the socket
    wait_until(lambda: status(h)[1].get("runs_active", 0) >= n, 60, what="the daemon to count every run")
    code, st = status(h)
    # Then it answers (not "no daemon"), counts every run and lists the 20 newest, newest first
    assert code in (0, 1) and not st.get("error"), st.get("error")
    assert st["runs_active"] == n + 2
    assert len(st["runs"]) == 20
    assert [r["id"] for r in st["runs"][:2]] == newest[::-1]
    assert [r["id"] for r in st["runs"][2:]] == [f"r{i:06d}" for i in range(n - 1, n - 19, -1)]
    text = h.cli("status").stdout
    assert f"runs     {n + 2} active" in text and f"and {n + 2 - 10} more" in text
    # the Redis view, the client and the scrape: the same bound
    code, view = status(h, "--redis")
    assert view["runs_active"] == n + 2 and len(view["runs"]) == 20
    st2 = c.status()
    assert st2.runs_active == n + 2 and len(st2.runs) == 20
    probe = QueueProbe(h.r, k, 3600)
    sample = {s.name: s.value for fam in PoolCollector(PoolMetrics(["behave"]), lambda: [], CountersView(), probe,
                                                       lambda: None, lambda: 0).collect() for s in fam.samples}
    assert sample["tender_pool_runs_active"] == n + 2 and len(probe.runs) == 20


@pytest.mark.timeout(60)
def test_runs_that_end_without_an_event_leave_the_count_and_a_read_costs_a_bounded_amount(redis_server):
    prefix = "b" + uuid.uuid4().hex[:6]
    r = redis_server.client()
    k = keys(prefix)
    ids = open_runs(r, k, 3000)
    probe = QueueProbe(r, k, 3600)
    probe.read()
    assert probe.runs_active == 3000 and [x.id for x in probe.runs] == ids[::-1][:20]
    # runs that end behind the tracker's back (expired unsealed, deleted by hand): no run_finished
    p = r.pipeline(transaction=False)
    for rid in ids[:1500]:
        p.delete(k.run(rid))
    for rid in ids[-5:]:
        p.hset(k.run(rid), "state", "completed")
    p.execute()
    # each read re-checks the newest and a bounded slice of the rest: the count converges
    reads = 0
    while probe.runs_active != 1495 and reads < 10:
        probe.read()
        reads += 1
    assert probe.runs_active == 1495 and [x.id for x in probe.runs] == ids[::-1][5:25]
    # a read's Redis cost does not grow with the runs: count the commands one read sends
    before = int(r.info("stats")["total_commands_processed"])
    probe.read()
    cost = int(r.info("stats")["total_commands_processed"]) - before
    assert cost < 1200, cost  # 1495 runs; SWEEP (1000) + the newest + the queue figures


@pytest.mark.timeout(120)
def test_a_full_redis_is_a_problem_with_its_own_message_never_unreachable(h):
    """At maxmemory with writes refused, status used to say healthy (exit 0, no warning), and once
    the heartbeat was refused too, "redis unreachable". Memory is reported against
    maxmemory: a warning past 80 %, a problem with Redis's message while writes are refused."""
    d = h.daemon(workers=1)
    d.wait_slots(1)
    wait_until(lambda: status(h)[0] == 0, 15, what="healthy")
    code, st = status(h)
    assert st["redis_memory"]["maxmemory_bytes"] == 0 and st["redis_memory"]["used_bytes"] > 0
    # Given a Redis holding ~4 MB, its maxmemory set so that it is 85 % full
    p = h.r.pipeline(transaction=False)
    for i in range(4000):
        p.set(f"ballast:{i}", b"x" * 1000)
    p.execute()
    used = int(h.r.info("memory")["used_memory"])
    h.r.config_set("maxmemory", int(used / 0.85))
    # Then a warning, exit code unchanged
    wait_until(lambda: any("Redis memory at" in w for w in status(h)[1]["warnings"]), 15, what="memory warning")
    code, st = status(h)
    assert code == 0 and st["redis_ok"] is True and st["redis_memory"]["maxmemory_bytes"] == int(used / 0.85)
    # When it is over its maxmemory (every write refused, the daemon's heartbeat included)
    h.r.config_set("maxmemory", used // 2)
    oom = "OOM command not allowed when used memory > 'maxmemory'"
    wait_until(lambda: status(h)[0] == 1, 15, what="degraded")
    k = h.k
    wait_until(lambda: not h.r.exists(k.host(f"ha-{h.prefix}")), 15, what="the heartbeat refused (its key expired)")
    # Then a problem with Redis's own words; Redis answers, so it is not "unreachable"
    for _ in range(3):
        code, st = status(h)
        assert code == 1 and st["redis_ok"] is True, st
        assert "redis unreachable" not in st["problems"]
        assert any(p.startswith("Redis refuses writes: " + oom) for p in st["problems"]), st["problems"]
        time.sleep(0.5)
    text = h.cli("status").stdout
    assert "redis    ok, memory" in text and oom in text
    code, view = status(h, "--redis")
    assert view["redis_ok"] is True and any(oom in p for p in view["problems"])
    via_client = Client(h.redis.url, prefix=h.prefix).status()  # no socket given: the Redis view
    assert via_client.redis_ok is True and any(oom in p for p in via_client.problems)
    probe = QueueProbe(h.r, k, 3600)
    sample = {s.name: s.value for fam in PoolCollector(PoolMetrics(["behave"]), lambda: [], CountersView(), probe,
                                                       lambda: None, lambda: 0).collect() for s in fam.samples}
    assert sample["tender_pool_redis_writes_refused"] == 1 and sample["tender_pool_redis_maxmemory_bytes"] == used // 2
    # When memory is raised, healthy again
    h.r.config_set("maxmemory", 0)
    wait_until(lambda: status(h)[0] == 0, 30, what="healthy after maxmemory was raised")


def test_queued_counts_every_class_and_user_backlog(redis_server):
    """Interactive jobs wait in per-user backlogs (``hibacklog:<user>``) behind their user's one fair
    entry, as bulk ones do: the queue figures count them all."""
    client = Client(redis_server.url, prefix="q" + uuid.uuid4().hex[:6], socket_timeout=3)
    for i in range(5):
        client.submit("alice", "parse_markdown", {"n": i}, priority="interactive")
    client.submit("bob", "parse_markdown", {"n": 9}, priority="interactive")
    for i in range(3):
        client.submit("carol", "parse_markdown", {"n": i})
    stats = QueueProbe(client.r, client.k, 3600).read()
    assert stats.ready_hi == 6 and stats.ready_lo == 3 and stats.depth == 9
