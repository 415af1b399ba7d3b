"""Record the SHA-256 of every Lua script the model mirrors into model/mirrors.json.

Run after re-checking the model against a changed script (tests/model/test_mirrors.py names the
script and the model step to re-check):  python model/record.py
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIRRORS = ROOT / "model" / "mirrors.json"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> int:
    data = json.loads(MIRRORS.read_text())
    for name, entry in data["scripts"].items():
        entry["sha256"] = sha256(ROOT / "slots" / "lua" / f"{name}.lua")
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        data["recorded_at_commit"] = head.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    MIRRORS.write_text(json.dumps(data, indent=2) + "\n")
    print(f"recorded {len(data['scripts'])} scripts in {MIRRORS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
