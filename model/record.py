"""Record the SHA-256 of every Lua script and lib part the model mirrors into model/mirrors.json.

Run after re-checking the model against a changed script (tests/model/test_mirrors.py names the
script and the model step to re-check):  python model/record.py [--modeled-at <commit>]

``modeled_at_commit`` is the commit whose Lua the model was checked against: by default the last
commit that changed a mirrored script. The scripts must be committed as they are (a hash of
uncommitted Lua would name no commit): the script refuses otherwise, unless --force.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIRRORS = ROOT / "model" / "mirrors.json"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lua(root: Path, name: str) -> Path:
    return root / "store" / "lua" / f"{name}.lua"


def load(root: Path = ROOT) -> dict:
    return json.loads((root / "model" / "mirrors.json").read_text())


def stale(root: Path = ROOT) -> dict[str, tuple[str, str]]:
    """Mirrored scripts whose bytes are not the ones recorded: name -> (recorded, now); now is
    'missing' for a script that is gone."""
    out = {}
    for name, entry in load(root)["scripts"].items():
        path = lua(root, name)
        now = sha256(path) if path.exists() else "missing"
        if now != entry["sha256"]:
            out[name] = (entry["sha256"], now)
    return out


def on_disk(root: Path = ROOT) -> set[str]:
    """Every script in store/lua and every lib part in store/lua/lib (as ``lib/<part>``): the Lua
    Redis runs is a script joined behind the parts it needs (store/scripts.py), so a part is
    mirrored, or declared not modelled, on its own."""
    lua = root / "store" / "lua"
    return {p.stem for p in lua.glob("*.lua")} | {f"lib/{p.stem}" for p in (lua / "lib").glob("*.lua")}


def unclassified(root: Path = ROOT) -> set[str]:
    """Scripts and lib parts that are neither mirrored nor listed as not modelled (a new one must
    be one or the other)."""
    data = load(root)
    known = set(data["scripts"]) | set(data["not_modeled"])
    return on_disk(root) - known


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modeled-at", help="the commit whose Lua the model mirrors (default: the last one changing it)")
    ap.add_argument("--force", action="store_true", help="record even with uncommitted changes to the scripts")
    a = ap.parse_args(argv)
    data = load()
    paths = [str(lua(ROOT, n).relative_to(ROOT)) for n in data["scripts"]]
    try:
        dirty = _git("status", "--porcelain", "--", *paths)
        head = _git("rev-parse", "--short", "HEAD")
        last = _git("log", "-1", "--format=%h", "--", *paths)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"git: {e}", file=sys.stderr)
        return 2
    if dirty and not a.force:
        print(f"uncommitted changes to mirrored scripts (commit them, or --force):\n{dirty}", file=sys.stderr)
        return 1
    for name, entry in data["scripts"].items():
        entry["sha256"] = sha256(lua(ROOT, name))
    data["modeled_at_commit"] = a.modeled_at or last
    data["recorded_at_commit"] = head
    MIRRORS.write_text(json.dumps(data, indent=2) + "\n")
    print(f"recorded {len(data['scripts'])} scripts in {MIRRORS.relative_to(ROOT)} "
          f"(modeled at {data['modeled_at_commit']}, recorded at {head})")
    missing = unclassified()
    if missing:
        print(f"not classified in mirrors.json (mirror or not_modeled): {', '.join(sorted(missing))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
