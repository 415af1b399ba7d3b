"""The slot's fork server on its own (slots/forkserver.py): it imports the platform's module and
little else (a fork of it is cheap because it is small), its children are session leaders whose
exit status comes back to the slot, an import failure is an answer (not a dead server), and a server
that died between attempts is started again with every handler loaded again."""

from __future__ import annotations

import os
import signal
import time

import msgspec
import pytest

from tender_pool.slots import forkserver, runner
from tender_pool.slots.forkserver import ForkServer, ServerGone
from tender_pool.store.config import Config
from tender_pool.store.records import JobRecord

MODULE = '''
import os, sys

def light(ctx):
    heavy = ("redis", "psutil", "structlog", "tender_pool.client.client", "tender_pool.slots.runner")
    # what a fork server needs no more (each forked attempt copies the page tables of what it imported)
    light = ("msgspec", "typing", "socket", "signal", "json", "fcntl", "traceback", "tender_pool.store.records")
    status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
    return {"loaded": [m for m in heavy if m in sys.modules], "unneeded": [m for m in light if m in sys.modules],
            "pid": os.getpid(), "ppid": os.getppid(),
            "sid": os.getsid(0), "id": ctx.id, "attempt": ctx.attempt,
            "blocked": status["SigBlk"], "ignored": status["SigIgn"]}

def exit7(ctx):
    os._exit(7)

def env(ctx):
    import subprocess
    sh = subprocess.run(["sh", "-c", "echo $TENDER_POOL_ATTEMPT $TENDER_POOL_PROGRESS_FD"], capture_output=True, text=True)
    return {"py": os.environ.get("TENDER_POOL_ATTEMPT"), "sh": sh.stdout.split(), "fd": ctx._fd}
'''


def job() -> JobRecord:
    base = {"id": "j1", "kind": "light", "user": "u", "payload": {}}
    req = {f.name: base.get(f.name, "x") for f in msgspec.structs.fields(JobRecord) if f.required}
    return JobRecord(**req)


def attempt(server: ForkServer, name: str, token: str = "1.tok") -> runner.RunResult:
    proc = server.launch(name, job(), {"TENDER_POOL_ATTEMPT": token})
    return runner.run(proc, b"", deadline=time.monotonic() + 20, kill_grace=1.0,
                      marker=("TENDER_POOL_ATTEMPT", token), tick=lambda: None)


@pytest.fixture
def server(tmp_path):
    (tmp_path / "fsmod.py").write_text(MODULE)
    s = ForkServer(msgspec.json.encode(Config()), -1)
    yield s, str(tmp_path)
    s.stop()


@pytest.mark.timeout(60)
def test_a_small_server_whose_children_report_back(server):
    s, path = server
    assert s.load("light", "fsmod:light", None, [path]) is None
    assert s.load("exit7", "fsmod:exit7", None, [path]) is None
    # An import failure is the preload's answer; the server goes on
    assert "cannot import nosuchmod" in s.load("bad", "nosuchmod:f", None, [path])
    res = attempt(s, "light")
    assert res.returncode == 0 and res.stopped is None, res
    v = msgspec.json.decode(res.stdout)["value"]
    # the server imported neither the client package (redis-py) nor the slot's modules
    assert v["loaded"] == []
    # nor a serializer, typing or the stdlib's enum-building wrappers: marshal between the slot and
    # the server, json's C encoder for the result (msgspec only for what it cannot encode)
    assert v["unneeded"] == [], v["unneeded"]
    # the child: forked by the server, a session leader, given the job and the attempt's token
    assert v["ppid"] == s.pid and v["sid"] == v["pid"] and (v["id"], v["attempt"]) == ("j1", "1.tok")
    # the signals the server blocks are unblocked in the child, with their default dispositions:
    # the child's mask of the standard signals (1-31) is the slot's (this process's), and so is its
    # ignored set but for those held signals, which are never ignored in a child (a slot ignores
    # SIGINT; a run started in the background inherits SIGINT ignored too)
    mine = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
    held = sum(1 << (int(sig) - 1) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1,
                                                signal.SIGUSR2))
    std = [(int(a, 16) & 0x7FFFFFFF, int(b, 16) & 0x7FFFFFFF) for a, b in ((v["blocked"], v["ignored"]),
                                                                           (mine["SigBlk"], mine["SigIgn"]))]
    assert std[0] == (std[1][0], std[1][1] & ~held), v
    # a plain exit's status comes back through the server
    assert attempt(s, "exit7").returncode == 7


@pytest.mark.timeout(60)
def test_a_server_that_died_is_started_again_with_its_handlers(server):
    s, path = server
    assert s.load("light", "fsmod:light", None, [path]) is None
    first = s.pid
    assert attempt(s, "light").returncode == 0
    os.kill(first, signal.SIGKILL)
    time.sleep(0.2)  # a zombie now: the next launch reaps it (alive) and starts another
    res = attempt(s, "light")
    assert res.returncode == 0, res
    assert s.pid != first and msgspec.json.decode(res.stdout)["value"]["ppid"] == s.pid


@pytest.mark.timeout(60)
def test_a_server_that_dies_once_the_start_is_sent_is_replaced_and_the_start_sent_again(server, monkeypatch):
    # A server killed with its last child may still be exiting when the next launch checks it
    # (the slot reads nothing from it during an attempt): the Start goes out, and the answer is EOF.
    s, path = server
    assert s.load("light", "fsmod:light", None, [path]) is None
    first = s.pid
    victims = [first]
    send = forkserver._send

    def send_then_die(sock, body, fds=None):
        if not (fds and victims):
            return send(sock, body, fds)
        victim = victims.pop()
        os.kill(victim, signal.SIGSTOP)  # it never reads the Start: dead before it could answer,
        send(sock, body, fds)  # however the two are scheduled
        os.kill(victim, signal.SIGKILL)

    monkeypatch.setattr(forkserver, "_send", send_then_die)
    res = attempt(s, "light")
    assert res.returncode == 0, res
    assert s.pid != first and msgspec.json.decode(res.stdout)["value"]["ppid"] == s.pid


@pytest.mark.timeout(60)
def test_each_attempt_sees_its_own_environment_in_python_and_in_its_subprocesses(server):
    # The server writes it before the fork, in place (forkserver._Env): the next attempt's token,
    # a longer one (a new buffer), then the first again, each seen by os.environ and by a shell
    s, path = server
    assert s.load("env", "fsmod:env", None, [path]) is None
    for token in ("1.aaaa", "2." + "b" * 300, "3.cc"):
        v = msgspec.json.decode(attempt(s, "env", token).stdout)["value"]
        assert v["py"] == token and v["sh"] == [token, str(v["fd"])], v


def test_the_child_encodes_as_msgspec_does_importing_it_only_for_what_json_cannot_encode():
    # store.context.encode_json: json's C encoder for plain JSON, msgspec for the rest (and its errors)
    import datetime
    import math
    import subprocess
    import sys
    import uuid

    from tender_pool.store.context import encode_json

    plain = {"a": [1, -2, 2 ** 70, 0.1, 1e300, "é\u2028\"\\\n", None, True, False], "b": {}, "c": [], "": "x"}
    assert encode_json(plain) == msgspec.json.encode(plain) or msgspec.json.decode(encode_json(plain)) == plain
    for value in (math.nan, math.inf, datetime.date(2024, 5, 1), uuid.UUID(int=7), (1, 2), {1: "a"}):
        assert encode_json({"value": value}) == msgspec.json.encode({"value": value})
    for bad in (object(), {"x": 1j}):
        with pytest.raises(TypeError):
            encode_json(bad)
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(RecursionError):
        encode_json(cycle)
    # plain JSON never imports msgspec (a child of the fork server would pay its import)
    code = ("import sys; from tender_pool.store.context import encode_json; "
            "assert encode_json({'value': [1, 'x', None, {'k': 0.5}]}) == b'{\"value\":[1,\"x\",null,{\"k\":0.5}]}'; "
            "print('msgspec' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.timeout(60)
def test_a_slow_import_ticks_and_one_past_its_limit_is_the_problem(server, tmp_path):
    s, path = server
    (tmp_path / "fsslow.py").write_text("import time\ntime.sleep(0.6)\n\ndef f(ctx):\n    return 1\n")
    (tmp_path / "fshang.py").write_text("import time\ntime.sleep(60)\n\ndef f(ctx):\n    return 1\n")
    ticks: list[float] = []
    assert s.load("slow", "fsslow:f", None, [path], tick=lambda: ticks.append(time.monotonic())) is None
    assert len(ticks) >= 3  # ~every 0.1 s of a 0.6 s import
    t0 = time.monotonic()
    problem = s.load("hang", "fshang:f", None, [path], tick=lambda: None, limit=0.5)
    assert problem == "importing it took more than 0.5 s" and time.monotonic() - t0 < 5
    assert not s.alive()  # the server stuck in the import is gone; the next load starts another
    assert s.load("slow2", "fsslow:f", None, [path]) is None


@pytest.mark.timeout(60)
def test_a_restarted_server_that_cannot_import_again_names_the_function(server, tmp_path):
    s, path = server
    (tmp_path / "fsgone.py").write_text("def f(ctx):\n    return 1\n")
    assert s.load("gone", "fsgone:f", None, [path]) is None
    (tmp_path / "fsgone.py").unlink()
    s.stop()  # the next attempt starts a new server, which imports every loaded function again
    with pytest.raises(ServerGone, match="cannot import fsgone:f"):
        s._ensure()
