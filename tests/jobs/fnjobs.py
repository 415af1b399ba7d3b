"""Function handlers that behave and misbehave on request, for tests/system/functions (the function-kind
twin of behave.py). Configured as ``function = "fnjobs:<name>"`` with ``path`` = this directory.

``payload["record"]`` (a directory), when given, gets ``<id>.<attempt n>.start`` with the pid, the
parent (the slot), the process group and session, the attempt token and ``owns()``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time

from tender_pool.client import Final

NOT_CALLABLE = 42
STATE = {"count": 0}  # module state: each attempt sees the slot's copy, never another attempt's change
AFTER_FORK: list[int] = []  # pids after_fork ran in (a copy per attempt, like STATE)


def after_fork() -> None:
    AFTER_FORK.append(os.getpid())


def _mark(ctx, what: str = "start", **extra) -> None:
    rec = ctx.payload.get("record")
    if not rec:
        return
    n = len([f for f in os.listdir(rec) if f.startswith(f"{ctx.id}.") and f.endswith(".start")]) + 1
    name = f"{ctx.id}.{n}.{what}" if what == "start" else f"{ctx.id}.{what}"
    with open(os.path.join(rec, name + ".tmp"), "w") as f:
        json.dump({"t": time.time(), "pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0),
                   "sid": os.getsid(0), "attempt": ctx.attempt, **extra}, f)
    os.replace(os.path.join(rec, name + ".tmp"), os.path.join(rec, name))


def echo(ctx):
    """Returns ``payload["value"]`` when given, else what the context says."""
    _mark(ctx)
    if "value" in ctx.payload:
        return ctx.payload["value"]
    return {"id": ctx.id, "kind": ctx.kind, "user": ctx.user, "payload": ctx.payload, "attempt": ctx.attempt,
            "run_id": ctx.run_id, "key": ctx.key, "pid": os.getpid(), "after_fork": AFTER_FORK,
            "env_attempt": os.environ.get("TENDER_POOL_ATTEMPT")}


async def aecho(ctx):
    """The async twin: awaits on the child's own loop, streams, returns what it saw."""
    _mark(ctx)
    await asyncio.sleep(0.01)
    ctx.chunk("async ")
    ctx.chunk("works")
    loop = asyncio.get_running_loop()
    return {"value": ctx.payload.get("value"), "loop": type(loop).__name__, "after_fork": AFTER_FORK}


def final(ctx):
    raise Final(ctx.payload["kind"], ctx.payload.get("message", "gave up"))


def _inner(n: int) -> None:
    raise ValueError(f"boom {n}")


def boom(ctx):
    _mark(ctx)
    _inner(7)


def unencodable(ctx):
    return {"x": object()}


def exit9(ctx):
    _mark(ctx)
    print("about to exit 9", flush=True)
    os._exit(9)


def hang(ctx):
    """Never returns; spawns a grandchild in its own group first (pid in <id>.grandchild)."""
    p = subprocess.Popen(["sleep", "300"])
    _mark(ctx, grandchild=p.pid)
    if ctx.payload.get("ignore_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(0.05)


def escape(ctx):
    """Leaves a setsid'd sleeper and a double-forked one behind, then returns (or hangs)."""
    a = subprocess.Popen(["sleep", "300"], start_new_session=True)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        g = os.fork()
        if g == 0:
            time.sleep(300)
            os._exit(0)
        os.write(w, str(g).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    forked = int(os.read(r, 64))
    _mark(ctx, escaped=a.pid, forked=forked)
    if ctx.payload.get("hang"):
        while True:
            time.sleep(0.05)
    return {"escaped": a.pid, "forked": forked}


def crash_slot(ctx):
    """SIGKILLs its slot on the first attempt, then returns on the re-run."""
    rec = ctx.payload["record"]
    _mark(ctx)
    first = not os.path.exists(os.path.join(rec, f"{ctx.id}.crashed"))
    if first:
        open(os.path.join(rec, f"{ctx.id}.crashed"), "w").close()
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(30)
    return {"pid": os.getpid(), "slot": os.getppid()}


def counter(ctx):
    STATE["count"] += 1
    return STATE["count"]


def progress(ctx):
    """progress, then ``n`` chunks as fast as it can, then a last progress."""
    ctx.progress(0.1, "starting")
    for i in range(ctx.payload.get("n", 50)):
        ctx.chunk(f"<{i}>")
        if ctx.payload.get("gap"):
            time.sleep(ctx.payload["gap"])
    ctx.progress(1.0, "done")
    return {"chunks": ctx.payload.get("n", 50)}


def owns_watch(ctx):
    """Records owns() now, then polls it until it turns False (or 20 s), and records that."""
    _mark(ctx, owns=ctx.owns())
    end = time.time() + 20
    while time.time() < end and ctx.owns():
        time.sleep(0.01)
    _mark(ctx, "lost", owns=ctx.owns())
    time.sleep(30)
