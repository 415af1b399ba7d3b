"""``status --redis`` judges hosts by their heartbeat key: a cleanly stopped host
drops out at once, a killed host's slot table and busy states with its heartbeat, not 12 minutes
later."""

import json
import os
import signal
import time

import msgspec
import pytest
from conftest import wait_until

from support.keyspace import keys
from tender_pool.client.status_client import live_hosts
from tender_pool.client.status_protocol import HostSlots, SlotRow
from tender_pool.store.records import BusyState


def redis_view(h):
    out = h.cli("status", "--redis", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.timeout(60)
def test_a_killed_hosts_busy_states_drop_out_with_its_heartbeat(h):
    # Given a host (heartbeat 0.5 s) running a long job, seen by status --redis
    d = h.daemon(workers=2, heartbeat=0.5)
    d.wait_slots(2)
    job = h.submit(kind="long", user="u", payload={"sleep": 30})
    wait_until(lambda: [b["job_id"] for b in redis_view(h)["busy"]] == [job], 10, what="busy state shown")
    view = redis_view(h)
    assert [x["host_id"] for x in view["hosts"]] == [f"ha-{h.prefix}"]
    busy_keys = list(h.r.scan_iter(match=h.k.busy("*")))
    assert len(busy_keys) == 1
    # When the whole host dies (the supervisor SIGKILLed; its slots follow it, nothing is cleaned up)
    os.kill(d.pid, signal.SIGKILL)
    d.proc.wait(5)
    t0 = time.monotonic()
    # Then within 3 heartbeats (+ a margin) it is gone from the view, busy state included, although
    # that busy state's own TTL keeps it in Redis for the longest timeout + 2 minutes (before: shown
    # for those ~12 minutes)
    wait_until(lambda: (lambda v: v["hosts"] == [] and v["busy"] == [])(redis_view(h)), 5, what="host dropped out")
    assert time.monotonic() - t0 < 3.5
    assert h.r.exists(*busy_keys) == 1 and h.r.pttl(busy_keys[0]) > 600_000
    # and nothing counts it as busy: waiting = depth (its job still unfinished: running, in its list)
    view = redis_view(h)
    assert view["queue_depth"] == 1 and view["waiting"] == 1 and view["queue"]["processing"] == 1


@pytest.mark.timeout(60)
def test_a_cleanly_stopped_host_drops_out_at_once(h):
    # Given a host with a 2 s heartbeat (its keys live 6 s), seen by status --redis
    d = h.daemon(workers=1, heartbeat=2)
    d.wait_slots(1)
    wait_until(lambda: len(redis_view(h)["hosts"]) == 1, 10, what="host table")
    # When it stops cleanly
    assert d.stop() == 0
    # Then status --redis no longer shows it (before: shown as live for 3 heartbeats, 6 s here)
    view = redis_view(h)
    assert view["hosts"] == [] and view["busy"] == [], view


def test_busy_states_are_shown_only_for_live_hosts_and_their_current_slots():
    row = lambda wid, pid: SlotRow(id=wid, pid=pid, state="busy")  # noqa: E731
    tables = [HostSlots("web1", "inc1", 10, 0, [row("web1-slot1", 11), row("web1-slot2", 12)]),
              HostSlots("web2", "old", 20, 0, [row("web2-slot1", 21)])]
    busy = [BusyState("web1-slot1", 11, "k", "j1", "u", None, 1),  # live, current slot
            BusyState("web1-slot2", 99, "k", "j2", "u", None, 1),  # live host, a previous incarnation's slot
            BusyState("web2-slot1", 21, "k", "j3", "u", None, 1),  # web2 live (restarted, no new table yet)
            BusyState("web3-slot1", 31, "k", "j4", "u", None, 1),  # web3 dead: no host key
            BusyState("web4-slot1", 41, "k", "j5", "u", None, 1)]  # web4 live, no table yet
    holders = {"web1": b"inc1|boot|10", "web2": b"new|boot|22", "web3": None, "web4": b"i4|b|40"}
    hosts, shown = live_hosts(tables, busy, holders)
    assert [t.host_id for t in hosts] == ["web1"]
    assert [b.job_id for b in shown] == ["j1", "j3", "j5"]
    assert msgspec.json.decode(msgspec.json.encode(hosts[0]), type=HostSlots) == hosts[0]


def calls(h, cmd: str) -> int:
    return int(h.r.info("commandstats").get(f"cmdstat_{cmd}", {}).get("calls", 0))


@pytest.mark.timeout(60)
def test_the_redis_view_reads_its_hosts_without_walking_the_keyspace(h):
    # Given a busy host and a keyspace full of other things (another queue's 20,000 keys)
    d = h.daemon(workers=2, heartbeat=0.5)
    d.wait_slots(2)
    other = keys("other", "q")
    p = h.r.pipeline(transaction=False)
    for i in range(20_000):
        p.set(other.job(str(i)), "x")
    p.execute()
    job = h.submit(kind="long", user="u", payload={"sleep": 30})
    wait_until(lambda: [b["job_id"] for b in redis_view(h)["busy"]] == [job], 10, what="busy state shown")
    # When status --redis reads the pool
    scans = calls(h, "scan")
    view = redis_view(h)
    # Then it found the host and its busy slot from the `hosts` list, with no SCAN (which walked the
    # whole keyspace: 0.4 s at 2 × 10⁵ keys)
    assert calls(h, "scan") == scans
    assert [x["host_id"] for x in view["hosts"]] == [f"ha-{h.prefix}"]
    assert [b["job_id"] for b in view["busy"]] == [job]
    assert h.r.zscore(h.k.hosts, f"ha-{h.prefix}") is not None
