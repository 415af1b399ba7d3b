"""The client is a leaf user: importing it (and calling status()) loads redis, msgspec and only the
leaf modules of ours, none of the daemon's dependencies; the base install needs nothing else."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAEMON_DEPS = ("psutil", "structlog", "setproctitle", "prometheus_client", "click")
# the client's own modules and the store (the Redis schema) are all it may load of ours
LEAVES = {"tender_pool.store.keys", "tender_pool.store.records", "tender_pool.store.submission",
          "tender_pool.store.config", "tender_pool.store.scripts", "tender_pool.store.script_args",
          "tender_pool.store.connection", "tender_pool.store.sentinel", "tender_pool.store.cluster",
          "tender_pool.store.replication", "tender_pool.store.history_index", "tender_pool.store.digest",
          "tender_pool.store.context"}

PROBE = """
import json, sys
import tender_pool.client
from tender_pool.client import Client
after_import = sorted(sys.modules)
if len(sys.argv) > 1:
    c = Client(sys.argv[1], prefix="imp", status_socket="/nonexistent/status.sock")
    st = c.status()
    assert st.redis_ok and st.configured == 0, st
print(json.dumps({"import": after_import, "status": sorted(sys.modules)}))
"""


def _loaded(*args: str) -> dict[str, set[str]]:
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return {k: set(v) for k, v in json.loads(out.stdout).items()}


def _ours(mods: set[str]) -> set[str]:
    return {m for m in mods if m.startswith("tender_pool.") and m.count(".") >= 2
            and not m.startswith("tender_pool.client.")}


@pytest.mark.timeout(60)
def test_importing_the_client_loads_no_daemon_module_or_dependency():
    mods = _loaded()["import"]
    assert not [m for m in mods if m.split(".")[0] in DAEMON_DEPS]
    assert _ours(mods) <= LEAVES, _ours(mods) - LEAVES
    assert "redis" in mods and "msgspec" in mods


@pytest.mark.timeout(60)
def test_status_through_redis_loads_no_daemon_dependency_either(redis_server):
    mods = _loaded(redis_server.url)["status"]
    assert not [m for m in mods if m.split(".")[0] in DAEMON_DEPS]
    assert _ours(mods) <= LEAVES, _ours(mods) - LEAVES


@pytest.mark.timeout(10)
def test_the_base_install_is_redis_and_msgspec():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    base = {d.split("[")[0].split(">")[0].split("=")[0] for d in meta["project"]["dependencies"]}
    assert base == {"redis", "msgspec"}
    daemon = " ".join(meta["project"]["optional-dependencies"]["daemon"])
    for dep in ("click", "structlog", "psutil", "setproctitle", "prometheus-client"):
        assert dep in daemon
    assert meta["tool"]["setuptools"]["package-dir"]["tender_pool.client"] == "client"
