"""StatusBuilder's health rules and the pure formatters, without a daemon."""

import time
from dataclasses import dataclass

import msgspec
import pytest

from tender_pool.supervisor import render
from tender_pool.store.config import load
from tender_pool.supervisor.status_builder import StatusBuilder
from tender_pool.client.status_probe import QueueProbe
from tender_pool.client.status_protocol import CountersView
from tender_pool.supervisor.slot_table import SlotState
from tender_pool.slots.reports import Busy


@dataclass
class Slot:
    """The attributes StatusBuilder reads from the supervisor's slot table."""

    index: int
    worker_id: str
    pid: int = 0
    state: SlotState = SlotState.OFFLINE
    busy: Busy | None = None
    last_report: float = 0.0
    spawned_at: float = 0.0
    boot_error: str | None = None


class House:
    redis_ok, reclaimed = True, 2


def builder(h, slots):
    cfg = load(str(h.config()), {})
    probe = QueueProbe.for_config(cfg)
    return StatusBuilder(cfg, lambda: slots, CountersView(reclaimed=1), probe, lambda: House(), lambda: False, "inc")


@pytest.mark.timeout(30)
def test_a_job_past_its_deadline_makes_the_pool_degraded(h):
    now_ms = int(time.time() * 1000)
    a = Slot(1, "x-slot1", pid=1, state=SlotState.BUSY, last_report=time.monotonic())
    b = Slot(2, "x-slot2", pid=1, state=SlotState.BUSY, last_report=time.monotonic())
    # slow: timeout 1.5 s + kill_grace 0.5 s; a started 60 s ago, b just now
    a.busy = Busy("old", "slow", "u", None, "1.t", 1, now_ms - 60_000)
    b.busy = Busy("new", "slow", "v", None, "1.s", 1, now_ms)
    st = builder(h, [a, b]).build()
    assert st.busy == 2 and st.counters.reclaimed == 3 and st.redis_ok
    assert len(st.problems) == 1 and "x-slot1 job old past its deadline" in st.problems[0]
    text = render.format_status(msgspec.to_builtins(st))
    assert "degraded" in text and "! x-slot1 job old past its deadline" in text
    b.busy = None
    b.state = SlotState.OFFLINE
    a.busy.started_ms = now_ms
    st = builder(h, [a, b]).build()
    assert st.problems == ["x-slot2 offline"] and st.offline == 1 and st.online == 1


@pytest.mark.timeout(30)
def test_a_slot_that_cannot_boot_is_named_with_its_reason(h):
    a = Slot(1, "x-slot1", pid=1, state=SlotState.IDLE, last_report=time.monotonic())
    b = Slot(2, "x-slot2", state=SlotState.OFFLINE, boot_error="handler quick_parse: /opt/q: no such file")
    st = builder(h, [a, b]).build()
    assert st.problems == ["x-slot2 cannot boot: handler quick_parse: /opt/q: no such file"]


def test_formatters_are_pure_functions_of_the_json():
    st = {"version": 1, "configured": 1, "online": 1, "busy": 1, "idle": 0, "offline": 0, "queue_depth": 5,
          "waiting": 4, "queued": 1, "running": 1, "delayed": 1, "deferred": 2, "dead_letter": 0, "failed": 1,
          "redis_ok": True, "counters": {"succeeded": 3}, "problems": [], "host_id": "web1", "pid": 10,
          "uptime_s": 3700, "warnings": ["Redis maxmemory-policy is allkeys-lru: …"],
          "slots": [{"id": "web1-slot1", "pid": 11, "state": "busy", "kind": "parse_markdown", "job_id": "j9",
                     "user": "acme", "file": "/in/tender.docx", "started_at": "2026-01-01T10:00:00.000Z",
                     "elapsed_s": 75, "heartbeat_age_s": 0.4, "cpu_percent": 3.0, "rss_bytes": 50 << 20,
                     "tree_cpu_percent": 98.5, "tree_rss_bytes": 600 << 20, "heaviest": "java"}]}
    text = render.format_status(st)
    assert "healthy" in text and "waiting ~4 (estimate" in text and "up 1h01m" in text
    assert "depth 5 (queued 1, running 1, delayed 1, deferred 2)" in text
    assert "warning: Redis maxmemory-policy is allkeys-lru" in text  # a warning is not a problem
    row = text.splitlines()[-1].split()
    assert row == ["web1-slot1", "11", "busy", "parse_markdown", "j9", "acme", "/in/tender.docx", "10:00:00",
                   "1m15s", "0.4s", "3%", "50.0M", "98%", "600.0M", "java"]
    assert render.format_status({"error": "no daemon answers on /x: refused"}).endswith("refused")
