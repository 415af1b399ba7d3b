"""The shape of the code base: import direction, the namespace, the documented config."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import msgspec

from tender_pool.supervisor import config

REPO = Path(__file__).resolve().parents[1]


def imports(folder: str) -> dict[str, set[str]]:
    out = {}
    for f in (REPO / folder).rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        out[str(f.relative_to(REPO))] = names
    return out


def test_extract_imports_nothing_of_the_daemon():
    for f, names in imports("extract").items():
        bad = {n for n in names if n.startswith(("tender_pool.supervisor", "tender_pool.slots", "redis"))}
        assert not bad, f"{f} imports {bad}"


def test_only_the_run_command_imports_the_daemon():
    for folder in ("slots", "extract"):
        for f, names in imports(folder).items():
            assert "tender_pool.supervisor.daemon" not in names, f
    for f, names in imports("supervisor").items():
        if not f.endswith(("daemon.py", "cli.py", "lifecycle.py")):
            assert "tender_pool.supervisor.daemon" not in names, f


def test_our_code_never_imports_the_bare_folder_names():
    for folder in ("supervisor", "slots", "extract"):
        for f, names in imports(folder).items():
            bare = {n for n in names if n.split(".")[0] in ("supervisor", "slots", "extract")}
            assert not bare, f"{f} imports {bare}: use tender_pool.<name>"


def test_import_supervisor_does_not_resolve_to_our_folder(tmp_path):
    # From anywhere but the repo root, `supervisor` is not ours (Supervisor's package has that name).
    code = "import importlib.util as u; s = u.find_spec('supervisor'); print(s.origin if s else None)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert not out.startswith(str(REPO)), out
    import tender_pool.supervisor as ours
    assert Path(ours.__file__).resolve().parent == REPO / "supervisor"


def test_reference_config_documents_every_key():
    text = (REPO / "tender-pool.toml").read_text()
    cfg = config.load(str(REPO / "tender-pool.toml"), {})
    assert cfg.pool.worker_count == 4 and cfg.redis.url == "redis://127.0.0.1:6379/0"
    for section in ("redis", "pool", "extract", "status", "metrics"):
        struct = type(getattr(cfg, section))
        for field in msgspec.structs.fields(struct):
            assert re.search(rf"^\s*#?\s*{field.name}\s*=", text, re.M), f"[{section}] {field.name} is not documented"
