"""Shared fixtures for the extraction tests: the test corpus (may be absent locally) and the built JVM CLI."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _fail_or_skip(msg: str):
    # On CI a missing corpus or jar is a broken setup, not a reason to go green.
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    d = Path(os.environ.get("TENDER_POOL_CORPUS") or REPO.parent / "shared" / "corpus")
    if not (d / "manifest.json").is_file():
        _fail_or_skip(f"test corpus not found at {d} (set TENDER_POOL_CORPUS)")
    return d


@pytest.fixture(scope="session")
def manifest(corpus_dir: Path) -> dict[str, dict]:
    data = json.loads((corpus_dir / "manifest.json").read_text(encoding="utf-8"))
    return {Path(e["file"]).name: e for e in data["files"]}


@pytest.fixture(scope="session")
def jvm_build() -> Path:
    """Runs jvm/build.sh once per session (idempotent, ~0.2 s when up to date) and returns the jar dir."""
    script = REPO / "jvm" / "build.sh"
    try:
        r = subprocess.run([str(script)], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        _fail_or_skip(f"jvm/build.sh could not run: {e}")
    if r.returncode != 0:
        _fail_or_skip(f"jvm/build.sh failed (is openjdk-17-jdk / libapache-poi-java installed?):\n{r.stderr[-2000:]}")
    jar = next((line.split(": ", 1)[1] for line in r.stdout.splitlines() if line.startswith("jar: ")), None)
    if not jar or not Path(jar).is_file():
        _fail_or_skip(f"jvm/build.sh printed no jar:\n{r.stdout}")
    return Path(jar).parent
