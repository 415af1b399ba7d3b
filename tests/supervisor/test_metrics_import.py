"""prometheus_client is imported only for ``[metrics] listen`` (``Supervisor._observe``): without it
neither the supervisor nor a slot loads it (the first job's start waited for that import:
``bench/bench_boot.py``, docs/benchmarks.md); with it, the slots inherit it from the supervisor and
/metrics counts what they report.

The daemon runs in a real process with real forks; ``Slot.__init__`` only notes, in the slot, which
modules it inherited.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from conftest import wait_until

RUNNER = """
import json, os, sys
from tender_pool.slots import slot
from tender_pool.store.config import load
from tender_pool.supervisor.daemon import Supervisor

real_init = slot.Slot.__init__

def init(self, *a, **kw):
    with open(sys.argv[2], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "prometheus_client": "prometheus_client" in sys.modules}) + "\\n")
    real_init(self, *a, **kw)

slot.Slot.__init__ = init
code = Supervisor(load(sys.argv[1], {})).run()
print(json.dumps({"prometheus_client": "prometheus_client" in sys.modules}), flush=True)
sys.exit(code)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> str | None:
    try:
        return urllib.request.urlopen(url, timeout=2).read().decode()
    except OSError:
        return None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("metrics", [False, True], ids=["no-metrics", "metrics"])
def test_prometheus_client_is_loaded_only_for_metrics(h, metrics):
    cfg = h.config(workers=2)
    url = None
    if metrics:
        port = free_port()
        cfg.write_text(cfg.read_text().replace('[metrics]\nlisten = ""', f'[metrics]\nlisten = "127.0.0.1:{port}"'))
        url = f"http://127.0.0.1:{port}/metrics"
    seen = h.tmp / "slots.jsonl"
    log = open(h.tmp / "daemon.log", "ab")
    p = subprocess.Popen([sys.executable, "-c", RUNNER, str(cfg), str(seen)], env=h.env(), stdout=subprocess.PIPE,
                         stderr=log, text=True, start_new_session=True)
    try:
        # Given: a running daemon whose slots noted what they inherited
        wait_until(lambda: seen.exists() and len(seen.read_text().splitlines()) == 2, 15, what="both slots")
        # When: a job runs (and, with /metrics, is counted there)
        h.wait_state(h.submit(), timeout=15)
        if url is not None:
            wait_until(lambda: 'tender_pool_jobs_finished_total{kind="behave",outcome="completed"} 1.0'
                       in (scrape(url) or ""), 10, what="the job counted on /metrics")
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    # Then: prometheus_client was loaded (by the supervisor, before the forks) only to serve /metrics
    assert p.returncode == 0, (h.tmp / "daemon.log").read_text()[-3000:]
    slots = [json.loads(line) for line in seen.read_text().splitlines()]
    assert [s["prometheus_client"] for s in slots] == [metrics, metrics]
    assert json.loads(out.splitlines()[-1]) == {"prometheus_client": metrics}
