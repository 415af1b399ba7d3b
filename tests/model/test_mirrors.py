"""The model mirrors store/lua/*.lua as recorded in model/mirrors.json: a changed script fails here
until the model's step is re-checked and the hashes re-recorded (python model/record.py)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("model_record", ROOT / "model" / "record.py")
record = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(record)  # type: ignore[union-attr]
MIRRORS = record.load(ROOT)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("name", sorted(MIRRORS["scripts"]))
def test_script_unchanged_since_modelled(name: str) -> None:
    entry = MIRRORS["scripts"][name]
    now = record.sha256(record.lua(ROOT, name))
    assert now == entry["sha256"], (
        f"store/lua/{name}.lua changed since the model was checked ({MIRRORS['modeled_at_commit']}): re-check "
        f"the model's step {entry['model_step']} in model/protocol.pml, then re-record (python model/record.py)"
    )


@pytest.mark.timeout(10)
def test_every_script_mirrored_or_declared_not_modelled() -> None:
    """A new script fails here until mirrors.json says which model step mirrors it, or why none."""
    assert record.unclassified(ROOT) == set()


@pytest.mark.timeout(10)
def test_every_step_named_in_the_model() -> None:
    text = (ROOT / "model" / "protocol.pml").read_text()
    for name in MIRRORS["scripts"]:
        assert f"{name}.lua" in text, f"the model names no step mirroring {name}.lua"


def _copy(tmp: Path) -> Path:
    """store/lua and a mirrors.json recording exactly those bytes (independent of whether the real
    tree is in step, which the test above checks)."""
    (tmp / "model").mkdir()
    shutil.copytree(ROOT / "store" / "lua", tmp / "store" / "lua")
    data = record.load(ROOT)
    for name, entry in data["scripts"].items():
        entry["sha256"] = record.sha256(record.lua(tmp, name))
    (tmp / "model" / "mirrors.json").write_text(json.dumps(data))
    return tmp


def _first_code_byte(text: bytes) -> int:
    """The offset of the first letter of the first line that is not a comment."""
    at = 0
    for line in text.split(b"\n"):
        if line and not line.startswith(b"--"):
            return at + len(line) - len(line.lstrip())
        at += len(line) + 1
    raise AssertionError("no code")


@pytest.mark.timeout(10)
def test_a_changed_script_fails_the_check(tmp_path: Path) -> None:
    """The check above is not vacuous: in a copy of the tree, one changed byte in a mirrored
    script or lib part (and nothing else) is what it reports; a removed script too; an unmirrored
    new script or part is reported as unclassified."""
    root = _copy(tmp_path)
    assert record.stale(root) == {}
    for name in ("take", "lib/terminal"):
        path = record.lua(root, name)
        before = path.read_bytes()
        at = _first_code_byte(before)  # e.g. `return` → `Return`
        path.write_bytes(before[:at] + before[at : at + 1].swapcase() + before[at + 1 :])
        assert len(path.read_bytes()) == len(before) and path.read_bytes() != before
        assert set(record.stale(root)) == {name}
        path.write_bytes(before)
    record.lua(root, "requeue").unlink()
    assert record.stale(root)["requeue"][1] == "missing"
    (root / "store" / "lua" / "steal.lua").write_text("return 1\n")
    (root / "store" / "lua" / "lib" / "shortcut.lua").write_text("-- needs:\n")
    assert record.unclassified(root) == {"steal", "lib/shortcut"}
