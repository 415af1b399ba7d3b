"""deploy/systemd: the unit passes `systemd-analyze verify`, and the production config example loads."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

SYSTEMD = Path(__file__).resolve().parents[3] / "deploy" / "systemd"
ALLOWED = re.compile(r"Command /opt/tender-pool/venv/bin/tender-pool is not executable")


def verify(unit_text: str, tmp_path: Path) -> list[str]:
    """Warnings about our unit from systemd-analyze verify, except ExecStart's missing program."""
    exe = shutil.which("systemd-analyze")
    if not exe:
        pytest.fail("systemd-analyze is not installed (apt-get install systemd)")
    unit = tmp_path / "tender-pool.service"
    unit.write_text(unit_text)
    out = subprocess.run([exe, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60)
    lines = [l for l in (out.stdout + out.stderr).splitlines() if l.strip()]
    return [l for l in lines if "tender-pool" in l and not ALLOWED.search(l)]


def test_unit_verifies_clean(tmp_path):
    text = (SYSTEMD / "tender-pool.service").read_text()
    assert verify(text, tmp_path) == []
    # the checker itself catches a broken unit (a typo'd key, a bad value)
    broken = text.replace("KillMode=mixed", "KillMode=mixd").replace("NoNewPrivileges=yes", "NoNewPrivilege=yes")
    problems = verify(broken, tmp_path)
    assert any("kill mode" in p.lower() for p in problems) and any("NoNewPrivilege" in p for p in problems), problems


def test_unit_has_what_the_issue_asks(tmp_path):
    keys = {}
    for line in (SYSTEMD / "tender-pool.service").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, v = line.split("=", 1)
            keys.setdefault(k.strip(), v.strip())
    assert keys["Type"] == "notify" and keys["NotifyAccess"] == "main" and keys["KillMode"] == "mixed"
    assert keys["ExecReload"] == "/bin/kill -HUP $MAINPID" and keys["RestartPreventExitStatus"] == "2"
    assert keys["Restart"] == "on-failure" and "StartLimitBurst" in keys and keys["WatchdogSec"]
    assert keys["EnvironmentFile"] == "-/etc/tender-pool/env"
    # TimeoutStopSec covers the drain the daemon does on SIGTERM
    from tender_pool.store.config import load

    example = (SYSTEMD / "tender-pool.toml.example").read_text().replace('group = "tender-pool"', 'group = "root"')
    (tmp_path / "prod.toml").write_text(example)
    cfg = load(str(tmp_path / "prod.toml"), {})
    assert int(keys["TimeoutStopSec"].rstrip("s")) > cfg.pool.drain_timeout + cfg.pool.kill_grace
    assert not cfg.embedded_redis and cfg.redis.url.startswith("redis://")
    assert cfg.status.socket.startswith("/run/tender-pool/")
    for d in cfg.pool.input_roots + [cfg.pool.results_dir]:
        assert f"-{d}" in keys["ReadWritePaths"].split(), d
