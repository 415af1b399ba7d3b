"""The model mirrors slots/lua/*.lua as recorded in model/mirrors.json: a changed script fails here
until the model's step is re-checked and the hashes re-recorded (python model/record.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MIRRORS = json.loads((ROOT / "model" / "mirrors.json").read_text())


# The model mirrors the protocol as of commit 4f46156. Since then set_state, the per-user fairness
# backlog, per-kind semaphores and the combined take/settle_take steps changed these scripts, and the
# model has not been re-checked against them: each is an expected failure until it is (then re-record
# with `python model/record.py`, which turns these into passes, and drop the name from this set).
NOT_RECHECKED = {"lib", "enqueue", "start", "settle", "requeue", "cancel", "promote_due"}


@pytest.mark.timeout(10)
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason="changed since modelled (4f46156): re-check the model"))
    if n in NOT_RECHECKED else n
    for n in sorted(MIRRORS["scripts"])
])
def test_script_unchanged_since_modelled(name: str) -> None:
    entry = MIRRORS["scripts"][name]
    now = hashlib.sha256((ROOT / "slots" / "lua" / f"{name}.lua").read_bytes()).hexdigest()
    assert now == entry["sha256"], (
        f"slots/lua/{name}.lua changed: re-check the model's step {entry['model_step']} in "
        f"model/protocol.pml and re-record (python model/record.py)"
    )


@pytest.mark.timeout(10)
def test_every_step_named_in_the_model() -> None:
    text = (ROOT / "model" / "protocol.pml").read_text()
    for name in MIRRORS["scripts"]:
        assert f"{name}.lua" in text, f"the model names no step mirroring {name}.lua"
