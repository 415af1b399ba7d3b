"""The admin web is a client of the pool like any other: it imports ``tender_pool.client`` and
nothing else of ours (never the daemon's modules), and its pages carry no inline script or
unescaped output."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WEB = REPO / "web"


def test_web_imports_only_the_client_of_ours():
    for f in WEB.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for n in names:
                if n.startswith("tender_pool"):
                    assert n.startswith(("tender_pool.client", "tender_pool.web")), f"{f.name} imports {n}"


def test_importing_the_web_loads_no_daemon_module():
    code = ("import sys, tender_pool.web; print(' '.join(m for m in sys.modules if m.startswith(("
            "'tender_pool.slots.runner', 'tender_pool.supervisor.daemon', 'psutil', 'structlog', 'click'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_templates_have_no_inline_script_and_nothing_marked_safe():
    for f in (WEB / "templates").glob("*.html"):
        text = f.read_text()
        assert "|safe" not in text.replace(" ", "") and "Markup(" not in text, f.name
        assert "autoescape false" not in text, f.name
        for tag in re.findall(r"<script[^>]*>", text):
            assert "src=" in tag, f"{f.name}: inline script {tag}"
        assert not re.search(r"\son[a-z]+=", text), f"{f.name}: an inline event handler"
        assert "style=" not in text, f"{f.name}: an inline style (the CSP forbids it)"


def test_the_web_extra_and_its_files_are_packaged():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    web = " ".join(meta["project"]["optional-dependencies"]["web"])
    for dep in ("starlette", "jinja2", "uvicorn"):
        assert dep in web
    assert meta["tool"]["setuptools"]["package-dir"]["tender_pool.web"] == "web"
    assert set(meta["tool"]["setuptools"]["package-data"]["tender_pool.web"]) == {"templates/*.html", "static/*"}
    assert "chromium" in (REPO / "Makefile").read_text() and "chromium-driver" in (REPO / "Makefile").read_text()


def test_the_web_unit_verifies(tmp_path):
    exe = shutil.which("systemd-analyze")
    if not exe:
        pytest.fail("systemd-analyze is not installed (apt-get install systemd)")
    unit = tmp_path / "tender-pool-web.service"
    text = (REPO / "deploy" / "systemd" / "tender-pool-web.service").read_text()
    unit.write_text(text)
    out = subprocess.run([exe, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60)
    lines = [l for l in (out.stdout + out.stderr).splitlines()
             if "tender-pool-web" in l and "is not executable" not in l]
    assert lines == [], lines
    keys = dict(l.split("=", 1) for l in text.splitlines() if "=" in l and not l.lstrip().startswith("#"))
    assert keys["ExecStart"].endswith("tender-pool web -c /etc/tender-pool/tender-pool.toml --listen 127.0.0.1:9465")
    assert keys["RestartPreventExitStatus"] == "2" and keys["Group"] == "tender-pool"
