"""The shape of the code base: import direction, the namespace, the documented config."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import msgspec

from tender_pool.store import config

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
    for folder in PACKAGES:
        for f, names in imports(folder).items():
            bare = {n for n in names if n.split(".")[0] in PACKAGES}
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


# --- the module graph -------------------------------------------------------------------------------

PACKAGES = {"store": "tender_pool.store", "client": "tender_pool.client", "slots": "tender_pool.slots",
            "supervisor": "tender_pool.supervisor", "extract": "tender_pool.extract", "web": "tender_pool.web"}
# The folder graph (README "Architecture"): a package may import only these packages of ours.
ALLOWED = {
    "store": set(),                      # the Redis schema: imports nothing of ours
    "extract": set(),                    # runs inside a job's child
    "client": {"store"},                 # what the platform imports
    "slots": {"store", "extract"},       # the slot's steps
    "supervisor": {"store", "client", "slots", "extract", "web"},
    "web": {"client"},                   # the admin app uses only the client
}
# Only these supervisor modules may import web (the `tender-pool web` command).
WEB_USERS = {"tender_pool.supervisor.cli"}


def module_graph() -> tuple[dict[str, set[str]], dict[str, list[tuple[str, str]]]]:
    """Every module of ours → the modules of ours it imports (at any depth in the file, so a lazy
    import inside a function counts too), and → the (module, name) pairs it imports by name."""
    graph: dict[str, set[str]] = {}
    names: dict[str, list[tuple[str, str]]] = {}
    mods = {}
    for folder, pkg in PACKAGES.items():
        for f in (REPO / folder).rglob("*.py"):
            rel = f.relative_to(REPO / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            mods[".".join([pkg, *parts])] = (f, f.name == "__init__.py")
    for mod, (f, is_pkg) in mods.items():
        base = mod if is_pkg else mod.rsplit(".", 1)[0]
        deps, by_name = set(), []
        for node in ast.walk(ast.parse(f.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    up = base.split(".")
                    up = up[: len(up) - (node.level - 1)]
                    src = ".".join(up + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                for a in node.names:
                    sub = f"{src}.{a.name}"
                    if sub in mods:  # `from . import control`: a module, not a name
                        targets.append(sub)
                    else:
                        targets.append(src)
                        by_name.append((src, a.name))
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    deps.add(t)
        graph[mod] = deps
        names[mod] = [(m, n) for m, n in by_name if m in mods]
    return graph, names


def test_module_graph_is_acyclic():
    graph, _ = module_graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycle = stack[stack.index(d):] + [d]
                raise AssertionError("import cycle: " + " → ".join(cycle))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_no_module_imports_another_modules_private_names():
    _, names = module_graph()
    bad = [f"{m} imports {src}.{n}" for m, pairs in names.items() for src, n in pairs
           if n.startswith("_") and not n.startswith("__") and src != m]
    assert not bad, bad


def test_every_folder_is_covered_by_the_graph():
    on_disk = {p.parent.name for p in REPO.glob("*/__init__.py")}
    assert on_disk == set(PACKAGES), on_disk ^ set(PACKAGES)


def test_packages_import_only_what_the_folder_graph_allows():
    graph, _ = module_graph()
    bad = []
    for m, deps in graph.items():
        home = m.split(".")[1]
        for d in deps:
            there = d.split(".")[1]
            if there == home:
                continue
            if there not in ALLOWED[home] or (there == "web" and m not in WEB_USERS):
                bad.append(f"{m} imports {d}")
    assert not bad, bad


def test_the_folder_graph_has_no_cycle():
    seen: dict[str, int] = {}

    def visit(p: str, path: list[str]) -> None:
        assert seen.get(p) != 1, "folder cycle: " + " → ".join(path + [p])
        if seen.get(p) == 2:
            return
        seen[p] = 1
        for q in ALLOWED[p]:
            visit(q, path + [p])
        seen[p] = 2

    for p in ALLOWED:
        visit(p, [])


def test_no_module_reaches_into_another_modules_private_attributes():
    """``runner._killpg(...)`` is as private as ``from .runner import _killpg``."""
    graph, _ = module_graph()
    ours = set(graph)
    bad = []
    for folder in PACKAGES:
        for f in (REPO / folder).rglob("*.py"):
            tree = ast.parse(f.read_text())
            aliases = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    for a in node.names:
                        if a.name != "*" and (a.asname or a.name) and any(m.endswith("." + a.name) for m in ours):
                            aliases.add(a.asname or a.name)
                elif isinstance(node, ast.Import):
                    for a in node.names:
                        if a.name in ours and a.asname:
                            aliases.add(a.asname)
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                        and node.attr.startswith("_") and not node.attr.startswith("__")):
                    bad.append(f"{f.relative_to(REPO)}:{node.lineno} {node.value.id}.{node.attr}")
    assert not bad, bad
