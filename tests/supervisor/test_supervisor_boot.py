"""A slot that cannot boot (exit ``SlotExit.BOOT_ERROR``) is not respawned; no slot booting ends `run`
with exit 3 (CONTRACT.md), so systemd shows why instead of a respawn every minute for ever.

The daemon runs in a real process with real forks; only ``Slot.__init__`` is made to fail (for the
slot indexes in ``BROKEN``), the way a broken environment would make it fail.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import wait_until

RUNNER = """
import sys
from tender_pool.slots import slot
from tender_pool.store.config import load
from tender_pool.supervisor.daemon import Supervisor

BROKEN = {broken}
real_init = slot.Slot.__init__

def init(self, cfg, index, *a, **kw):
    if index in BROKEN:
        raise RuntimeError(f"slot {{index}} cannot boot here")
    real_init(self, cfg, index, *a, **kw)

slot.Slot.__init__ = init
sys.exit(Supervisor(load(sys.argv[1], {{}})).run())
"""


def start(h, broken: set[int], workers: int) -> subprocess.Popen:
    cfg = h.config(workers=workers)
    log = open(h.tmp / "daemon.log", "ab")
    return subprocess.Popen([sys.executable, "-c", RUNNER.format(broken=sorted(broken)), str(cfg)], env=h.env(),
                            stdout=log, stderr=log, start_new_session=True)


def events(h, name: str) -> list[dict]:
    out = []
    for line in (h.tmp / "daemon.log").read_text(errors="replace").splitlines():
        if line.startswith("{") and f'"{name}"' in line:
            out.append(json.loads(line))
    return out


@pytest.mark.timeout(60)
def test_run_exits_3_when_no_slot_can_boot(h):
    p = start(h, {1, 2}, workers=2)
    try:
        assert p.wait(20) == 3
    finally:
        if p.poll() is None:
            p.kill()
    assert len(events(h, "slot_spawned")) == 2, "a slot that failed at boot was forked again"
    assert len(events(h, "slot_boot_failed_not_respawned")) == 2
    assert events(h, "no_slot_can_boot")


@pytest.mark.timeout(60)
def test_one_slot_failing_at_boot_is_left_down_and_the_others_work(h):
    p = start(h, {1}, workers=2)
    try:
        wait_until(lambda: events(h, "slot_boot_failed_not_respawned"), 15, what="the boot failure")
        status = wait_until(lambda: (lambda r: json.loads(r.stdout) if r.stdout else None)(h.cli("status", "--json")),
                            10, what="status")
        rows = {s["id"]: s["state"] for s in status["slots"]}
        assert sorted(rows.values()) == ["crash-looping", "idle"], rows
        h.wait_state(h.submit(), timeout=15)
        assert p.poll() is None
        assert len(events(h, "slot_spawned")) == 2
    finally:
        p.kill()
        p.wait(10)
