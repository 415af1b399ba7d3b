"""What the supervisor builds before forking its slots, so the slots share it instead of each
building its own copy (idle PSS, issue 22: docs/benchmarks.md, "Around a document, Redis per job,
boot, the fork server (later runs)"): the Lua texts every slot sends (``scripts.text``,
``scripts.batch_text``, cached per process).

The daemon runs in a real process with real forks; ``Slot.__init__`` only notes, in the slot, what
it inherited.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from conftest import wait_until

RUNNER = """
import json, os, sys
from tender_pool.slots import slot
from tender_pool.store import scripts
from tender_pool.store.config import load
from tender_pool.supervisor.daemon import Supervisor

real_init = slot.Slot.__init__

def init(self, *a, **kw):
    with open(sys.argv[2], "a") as f:
        f.write(json.dumps({"texts": scripts.text.cache_info().currsize,
                            "batches": scripts.batch_text.cache_info().currsize}) + "\\n")
    real_init(self, *a, **kw)

slot.Slot.__init__ = init
sys.exit(Supervisor(load(sys.argv[1], {})).run())
"""


@pytest.mark.timeout(60)
def test_slots_inherit_every_lua_text(h):
    from tender_pool.store import scripts

    cfg = h.config(workers=2)
    seen = h.tmp / "slots.jsonl"
    log = open(h.tmp / "daemon.log", "ab")
    p = subprocess.Popen([sys.executable, "-c", RUNNER, str(cfg), str(seen)], env=h.env(), stderr=log,
                         start_new_session=True)
    try:
        # Given: a running daemon whose slots noted, first thing, which Lua texts they inherited built
        wait_until(lambda: seen.exists() and len(seen.read_text().splitlines()) == 2, 15, what="both slots")
        p.send_signal(signal.SIGTERM)
        p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    # Then: every script's text and every batch's, built once in the supervisor before the forks
    slots = [json.loads(line) for line in seen.read_text().splitlines()]
    assert slots == [{"texts": len(scripts.NAMES), "batches": len(scripts.BATCHES)}] * 2
