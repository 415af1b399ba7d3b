"""``status`` tells what would lose or fail jobs silently: Redis
settings that drop data are ``warnings`` (exit code unchanged); a results or state directory that
cannot be written is a ``problem`` (degraded, exit 1)."""

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import wait_until

from tender_pool.store.config import load
from tender_pool.supervisor.status_builder import StatusBuilder
from tender_pool.client.status_probe import QueueProbe
from tender_pool.client.status_protocol import CountersView
from tender_pool.supervisor.slot_table import SlotState


@pytest.mark.timeout(60)
def test_redis_that_can_lose_jobs_is_a_warning_not_a_problem(h):
    # Given a Redis with persistence off (no AOF, no RDB save points) and an evicting policy
    h.r.config_set("appendonly", "no")
    h.r.config_set("save", "")
    h.r.config_set("maxmemory-policy", "allkeys-lru")
    d = h.daemon(workers=1)
    d.wait_slots(1)
    # When status is asked
    out = wait_until(lambda: (lambda o: o if o.returncode == 0 else None)(h.cli("status", "--json")), 15,
                     what="status answers healthy")
    st = json.loads(out.stdout)
    # Then both are warnings, and the pool is still healthy (exit 0, no problems)
    assert st["problems"] == [] and len(st["warnings"]) == 2, st["warnings"]
    assert "persistence is off" in st["warnings"][0] and "allkeys-lru" in st["warnings"][1]
    assert "warning: Redis persistence is off" in h.cli("status").stdout
    view = json.loads(h.cli("status", "--redis", "--json").stdout)
    assert len(view["warnings"]) == 2
    assert d.stop() == 0


@pytest.mark.timeout(60)
def test_a_redis_that_keeps_jobs_gives_no_warning(h):
    # (the fixture's server: AOF on, noeviction)
    d = h.daemon(workers=1)
    d.wait_slots(1)
    out = wait_until(lambda: (lambda o: o if o.returncode == 0 else None)(h.cli("status", "--json")), 15,
                     what="status answers healthy")
    assert json.loads(out.stdout)["warnings"] == []
    assert d.stop() == 0


@dataclass
class Slot:
    index: int
    worker_id: str
    pid: int = 0
    state: SlotState = SlotState.IDLE
    busy: None = None
    last_report: float = 0.0
    spawned_at: float = 0.0


class House:
    redis_ok, reclaimed = True, 0


@pytest.fixture
def small_fs(tmpfs):
    """A 1 MiB tmpfs of our own (a real file system to fill up and remount read-only)."""
    return tmpfs("1m")


def builder_for(h, results: Path) -> StatusBuilder:
    cfg_path = h.config()
    text = cfg_path.read_text().replace("[pool]\n", f'[pool]\nresults_dir = "{results}"\n', 1)
    cfg_path.write_text(text)
    cfg = load(str(cfg_path), {})
    slot = Slot(1, "x-slot1", pid=1, last_report=time.monotonic())
    return StatusBuilder(cfg, lambda: [slot], CountersView(), QueueProbe.for_config(cfg), lambda: House(),
                         lambda: False, "inc")


@pytest.mark.timeout(30)
def test_a_full_or_read_only_results_dir_is_a_problem(h, small_fs):
    results = small_fs / "results"
    results.mkdir()
    assert builder_for(h, results).build().problems == []
    # When the file system is full
    with open(small_fs / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    st = builder_for(h, results).build()
    # Then status names the directory and why (before: healthy while every job failed)
    assert st.problems == [f"pool.results_dir {results}: file system full (no space left)"], st.problems
    # When it is read-only instead
    (small_fs / "filler").unlink()
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    st = builder_for(h, results).build()
    assert st.problems == [f"pool.results_dir {results}: read-only file system"], st.problems


@pytest.mark.timeout(30)
def test_a_state_dir_that_is_not_a_directory_is_a_problem(h, tmp_path):
    cfg_path = h.config()
    state = tmp_path / "state-a"
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    cfg_path.write_text(cfg_path.read_text().replace(f'state_dir = "{state}"', f'state_dir = "{blocker}/state"'))
    cfg = load(str(cfg_path), {})
    st = StatusBuilder(cfg, lambda: [], CountersView(), QueueProbe.for_config(cfg), lambda: House(),
                       lambda: False, "inc").build()
    assert f"pool.state_dir {blocker}/state: {blocker} is not a directory" in st.problems, st.problems
