"""Function handlers' config: refusals at load (the import tried in a child process), the import
once per slot (not per job), a slot that cannot import (boot error, exit 3), and reloads: one whose
import fails keeps the old config; a good one re-imports by recycling the slots."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import psutil
import pytest

from conftest import JOBS, TENDER_POOL, wait_until

from .fnhelp import fn_handlers

REFUSALS = [
    ('timeout = 5', "handlers.x: x: one of command (an argv list) or function (\"module:qualname\")"),
    ('function = "fnjobs:echo"\ncommand = ["/bin/true"]\ntimeout = 5', "handlers.x: x: command or function, not both"),
    ('function = "fnjobs.echo"\ntimeout = 5', 'handlers.x.function: fnjobs.echo: "module:qualname" (dotted Python names)'),
    ('function = "no_such_module_here:f"\ntimeout = 5',
     "handlers.x.function: no_such_module_here:f: cannot import no_such_module_here: "
     "ModuleNotFoundError: No module named 'no_such_module_here'"),
    ('function = "fnbroken:f"\ntimeout = 5',
     "handlers.x.function: fnbroken:f: cannot import fnbroken: RuntimeError: DATABASE_URL is not set"),
    ('function = "fnjobs:nope"\ntimeout = 5', "handlers.x.function: fnjobs:nope: module fnjobs has no attribute nope"),
    ('function = "fnjobs:NOT_CALLABLE"\ntimeout = 5', "handlers.x.function: fnjobs:NOT_CALLABLE: fnjobs:NOT_CALLABLE is not callable (a int)"),
    ('function = "fnjobs:echo"\nafter_fork = "fnjobs:nope"\ntimeout = 5',
     "handlers.x.after_fork: fnjobs:nope: module fnjobs has no attribute nope"),
    ('function = "fnjobs:echo"', "handlers.x.timeout: None: required: a positive number of seconds"),
]


@pytest.mark.parametrize("body,message", REFUSALS, ids=[f"r{i}" for i in range(len(REFUSALS))])
def test_config_refusals(h, body, message):
    cfg = h.config(handlers=f'[handlers.x]\npath = ["{JOBS}"]\n{body}\n')
    p = subprocess.run([TENDER_POOL, "run", "-c", str(cfg)], env=h.env(), capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines == [f"config: {message}"], p.stderr


@pytest.mark.timeout(120)
def test_a_slow_import_happens_once_per_slot_not_per_job(h, monkeypatch):
    log = h.tmp / "imports.log"
    monkeypatch.setenv("FN_IMPORT_LOG", str(log))
    d = h.daemon(workers=2, handlers=fn_handlers(work=f'function = "fnslow:work"\ntimeout = 10\nper_user = 0\n'
                                                        f'path = ["{JOBS}"]'))
    slots = d.wait_slots(2)
    jobs = [h.submit(kind="work", user=f"u{i % 4}") for i in range(16)]
    ran_in = {h.wait_state(j, timeout=30).result["value"]["ppid"] for j in jobs}
    lines = log.read_text().splitlines()
    by_pid = [int(x.split()[0]) for x in lines]
    # one import in the config check's child, then one per slot (in its fork server, whose forks
    # run the jobs): 3, for 16 jobs
    assert len(lines) == 3, lines
    servers = {pid: psutil.Process(pid).ppid() for pid in by_pid[1:]}
    assert sorted(servers.values()) == sorted(slots) and ran_in <= set(servers)
    assert by_pid[0] not in slots and by_pid[0] not in servers
    assert all(e["seconds"] >= 0.5 for e in d.log_events("function_imported"))
    # `handlers` says what each kind runs and that every slot imported the function
    p = h.cli("handlers", "--json")
    assert p.returncode == 0, p.stderr
    rows = {r["kind"]: r for r in json.loads(p.stdout)}
    assert rows["work"]["type"] == "function" and rows["work"]["runs"] == "fnslow:work"
    assert rows["work"]["timeout"] == 10 and rows["work"]["per_user"] == 0 and rows["work"]["imported"] is True
    assert sorted(rows["work"]["imports"]) == [f"ha-{h.prefix}-slot1", f"ha-{h.prefix}-slot2"]
    assert rows["parse_markdown"]["type"] == "builtin" and rows["parse_markdown"]["imported"] is None
    text = h.cli("handlers").stdout
    assert "fnslow:work" in text and "yes (2/2 slots)" in text


@pytest.mark.timeout(120)
def test_an_import_longer_than_three_heartbeats_is_waited_for_not_killed_as_silence(h, monkeypatch):
    """A platform's import may take seconds (its framework, ORM, model SDK): the slot beats while
    its fork server imports, so the supervisor does not kill it as silent (3 heartbeats, 1.5 s
    here) and the import happens once per slot, not in a crash loop."""
    log = h.tmp / "imports.log"
    monkeypatch.setenv("FN_IMPORT_LOG", str(log))
    monkeypatch.setenv("FN_IMPORT_SECONDS", "3")
    d = h.daemon(workers=1, handlers=fn_handlers(work=f'function = "fnslow:work"\ntimeout = 10\n'
                                                        f'path = ["{JOBS}"]'))
    job = h.wait_state(h.submit(kind="work"), timeout=60)
    assert job.result["value"]["ppid"] != job.result["value"]["pid"]
    assert not d.log_events("slot_unresponsive_killing"), d.logs()[-3000:]
    assert len(log.read_text().splitlines()) == 2  # the config check's child, then the one slot's server
    assert [e["seconds"] >= 3 for e in d.log_events("function_imported")] == [True]


def test_the_import_check_reads_its_answer_whatever_the_module_prints(h):
    from tender_pool.store.config import check_functions, load

    cfg = load(str(h.config(handlers=f'[handlers.x]\nfunction = "fnnoisy:work"\ntimeout = 5\npath = ["{JOBS}"]\n')), {})
    check_functions(cfg)  # no ConfigError: the module's output did not spoil the answer
    cfg.handlers["x"].function = "fnnoisy:nope"
    with pytest.raises(Exception, match="module fnnoisy has no attribute nope"):
        check_functions(cfg)


@pytest.mark.timeout(60)
def test_no_slot_can_import_exits_3(h):
    d = h.daemon(workers=2, handlers=fn_handlers(work=f'function = "fnslotfail:work"\ntimeout = 10\npath = ["{JOBS}"]'))
    assert d.proc.wait(30) == 3
    failed = d.log_events("function_import_failed", kind="work")
    assert len(failed) == 2 and "only the slots lack" in failed[0]["error"]
    assert d.log_events("no_slot_can_boot")


@pytest.mark.timeout(60)
def test_a_slot_that_cannot_import_is_a_boot_error_shown_by_handlers_and_status(h, tmp_path, monkeypatch):
    monkeypatch.setenv("FN_SLOTFAIL_DIR", str(tmp_path))
    d = h.daemon(workers=2, handlers=fn_handlers(work=f'function = "fnslotfail:work"\ntimeout = 10\npath = ["{JOBS}"]')
                 + f'\n[handlers.plain]\ncommand = ["/bin/true"]\ntimeout = 5\n')
    wait_until(lambda: d.log_events("slot_boot_failed_not_respawned"), 30, what="a boot error")
    p = h.cli("handlers", "--json")
    assert p.returncode == 1, p.stderr
    rows = {r["kind"]: r for r in json.loads(p.stdout)}
    assert rows["work"]["imported"] is False and rows["plain"] == dict(rows["plain"], type="command", runs="/bin/true")
    errors = [v for v in rows["work"]["imports"].values() if v]
    assert list(rows["work"]["imports"].values()).count("") == 1
    assert errors == ["cannot import fnslotfail: ImportError: only the slots lack the platform's native library"]
    st = json.loads(h.cli("status", "--json").stdout)
    assert [s["state"] for s in st["slots"]].count("crash-looping") == 1
    assert any("cannot boot: handlers.work: cannot import fnslotfail" in x for x in st["problems"]), st["problems"]
    assert d.proc.poll() is None  # one slot runs: the daemon stays up


@pytest.mark.timeout(120)
def test_reloads(h, tmp_path):
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "vermod.py").write_text("VERSION = 1\n\ndef work(ctx):\n    return VERSION\n")
    body = f'function = "vermod:work"\ntimeout = 10\npath = ["{mods}"]'
    d = h.daemon(workers=1, handlers=fn_handlers(work=body))
    assert h.wait_state(h.submit(kind="work")).result == {"value": 1}
    # Given a config whose function no longer resolves, When reloaded, Then it is rejected and the
    # old config (and import) keeps running
    cfg = h.tmp / "a.toml"
    good = cfg.read_text()
    cfg.write_text(good.replace('"vermod:work"', '"vermod:gone"'))
    os.kill(d.pid, signal.SIGHUP)
    wait_until(lambda: d.log_events("reload_rejected"), 30, what="reload rejected")
    err = d.log_events("reload_rejected")[0]["error"]
    assert err == "config: handlers.work.function: vermod:gone: module vermod has no attribute gone"
    assert h.wait_state(h.submit(kind="work")).result == {"value": 1}
    # Given new code on disk and the config unchanged, When reloaded, Then the slots re-import it
    cfg.write_text(good)
    (mods / "vermod.py").write_text("VERSION = 22\n\ndef work(ctx):\n    return VERSION\n")
    os.kill(d.pid, signal.SIGHUP)
    wait_until(lambda: d.log_events("reloaded"), 30, what="reloaded")
    wait_until(lambda: len(d.log_events("function_imported")) == 2, 30, what="re-imported")
    assert h.wait_state(h.submit(kind="work")).result == {"value": 22}


@pytest.mark.timeout(120)
def test_a_reload_whose_import_is_slow_does_not_stop_the_supervisor(h, tmp_path):
    mods = tmp_path / "mods"
    mods.mkdir()
    # slow to import in the config check's child only (the slots import it at once)
    (mods / "slowcheck.py").write_text("import sys, time\nif sys.argv[1:2] != ['run']:\n    time.sleep(3)\n"
                                       "def work(ctx):\n    return 1\n")
    d = h.daemon(workers=2, handlers=fn_handlers(work=f'function = "slowcheck:work"\ntimeout = 10\npath = ["{mods}"]'))
    slots = d.wait_slots(2, timeout=30)
    # When a reload's import check runs for 3 s, and a slot dies meanwhile
    os.kill(d.pid, signal.SIGHUP)
    wait_until(lambda: d.log_events("reload_checking_functions"), 10, what="the check started")
    os.kill(slots[0], signal.SIGKILL)
    # Then the main loop goes on (the dead slot is replaced before the reload is adopted), and the
    # check's child is not taken for a dead job's leftover
    wait_until(lambda: d.log_events("reloaded"), 30, what="reloaded")
    events = [e["event"] for e in d.log_events() if e.get("event") in ("slot_exited", "slot_spawned", "reloaded")]
    assert events.index("slot_exited") < events.index("reloaded")
    respawned = [i for i, e in enumerate(events) if e == "slot_spawned" and i > events.index("slot_exited")]
    assert respawned and respawned[0] < events.index("reloaded"), events
    assert not d.log_events("reload_rejected")
    assert h.wait_state(h.submit(kind="work")).result == {"value": 1}
