#!/usr/bin/env python3
"""What the shared Lua costs each script call: the whole library in front of every script (as when
it was one ``lib.lua``) against only the parts the script needs (``store/scripts.py``).

Redis caches a script's compiled chunk by SHA, but every EVALSHA runs the chunk from its top, so
each ``local function`` and constant table of the prelude is built again on every call. Printed:

- bytes of each script's text as sent (``SCRIPT LOAD`` / first EVALSHA), whole library and needs;
- for small scripts (``stamp``, ``progress``, ``unstick``, ``busy_clear``) and one big one
  (``requeue``), on a private redis-server (no persistence, a Unix socket): the server's own CPU
  per call (``INFO commandstats`` ``usec_per_call`` of evalsha) and the client's wall time per
  EVALSHA round trip, best of ``--rounds`` rounds of ``--calls`` calls.

    .venv/bin/python bench/bench_lua_prelude.py [--calls 20000] [--rounds 3]

Measured here (2 shared cores, load average ~4, redis 7, best of 3 × 20000): Redis CPU per EVALSHA,
whole library → needs only: stamp 17.9 → 10.4 µs, progress 12.1 → 5.6, unstick 14.9 → 6.7,
busy_clear 15.9 → 3.8, requeue 23.1 → 13.2; text sent, as one lib.lua (34,059 bytes) was
prepended before: stamp 34,581 → 1,214 bytes, progress 35,275 → 4,455, requeue 39,205 → 27,249. The
slot's hot path (take, settle_take, start, settle) needs every part: its text is the whole library
(take 36,179 → 39,656 bytes: the part headers and lib/keys.lua).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from tender_pool.store import scripts

SMALL = ("stamp", "progress", "unstick", "busy_clear", "requeue")


def whole(name: str) -> str:
    """The script behind every lib part, as it was sent before the split."""
    return scripts.prelude(*scripts.parts()) + scripts.source(name)


def server(root: Path) -> tuple[subprocess.Popen, redis.Redis]:
    sock = str(root / "redis.sock")
    proc = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", "0", "--unixsocket", sock, "--save", "",
         "--appendonly", "no", "--dir", str(root), "--loglevel", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = redis.Redis(unix_socket_path=sock)
    for _ in range(200):
        try:
            r.ping()
            return proc, r
        except redis.ConnectionError:
            time.sleep(0.02)
    raise RuntimeError("redis-server did not answer")


def call_args(name: str) -> tuple[list[str], list]:
    """Keys and arguments for one cheap call of ``name`` (state set up by ``setup``)."""
    b = "tp:{q}"
    return {
        "stamp": ([f"{b}:proc:h:i:1.1", f"{b}:started"], []),
        "progress": ([f"{b}:job:j1", f"{b}:run:-", f"{b}:events:run:-", f"{b}:events"],
                     ["j1", "stale-token", '{"progress": 0.5}']),  # fenced: reads one hash, writes nothing
        "unstick": ([f"{b}:lock:u", f"{b}:wait:u", f"{b}:waitusers", f"{b}:ready:lo", f"{b}:ready:hi"],
                    ["u", 60000]),  # the lock is held: answers '' at once
        "busy_clear": ([f"{b}:busy:w"], ["j1"]),
        "requeue": ([f"{b}:proc:h:i:1.1", f"{b}:job:x", f"{b}:started", f"{b}:lock:u", f"{b}:wait:u",
                     f"{b}:waitusers", f"{b}:ready:lo", f"{b}:finished", f"{b}:deps:x",
                     f"{b}:events", f"{b}:active", f"{b}:inready", f"{b}:backlog:u", f"{b}:run:-",
                     f"{b}:events:run:-", f"{b}:runwait:-", f"{b}:runjobs:-", f"{b}:sem:k:u", f"{b}:semwait:k:u",
                     f"{b}:proclists", f"{b}:host:-", f"{b}:ready:hi"],
                    ["x", "crash", "", 3, 60000, 600, "u", "0", ""]),  # not in the list: 'gone'
    }[name]


def setup(r: redis.Redis) -> None:
    r.flushall()
    r.rpush("tp:{q}:proc:h:i:1.1", "a", "b")
    r.hset("tp:{q}:job:j1", mapping={"token": "1.x", "state": "running"})
    r.set("tp:{q}:lock:u", "1.x")


def measure(r: redis.Redis, text: str, name: str, calls: int) -> tuple[float, float]:
    """(Redis µs per call, client µs per round trip) of ``calls`` EVALSHAs of ``text``."""
    sha = r.script_load(text)
    keys, args = call_args(name)
    r.config_resetstat()
    t = time.perf_counter()
    for _ in range(calls):
        r.evalsha(sha, len(keys), *keys, *args)
    wall = (time.perf_counter() - t) / calls * 1e6
    stats = r.info("commandstats").get("cmdstat_evalsha", {})
    return float(stats.get("usec_per_call", 0.0)), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()

    print("bytes of each script's text as Redis runs it")
    print(f"{'script':16} {'whole lib':>10} {'needs':>8}  parts")
    for name in sorted(scripts.NAMES):
        needs = scripts.closure(scripts.needs_of(scripts.source(name)))
        print(f"{name:16} {len(whole(name)):>10} {len(scripts.text(name)):>8}  {', '.join(needs) or '-'}")
    many = scripts.source("requeue_many")
    print(f"{'requeue (batch)':16} {len(scripts.prelude(*scripts.parts())) + len(scripts.batch_text('requeue')) - len(scripts.prelude(*scripts.needs_of(scripts.source('requeue')), *scripts.needs_of(many))):>10} "
          f"{len(scripts.batch_text('requeue')):>8}")

    with tempfile.TemporaryDirectory(prefix="tp-prelude-") as tmp:
        proc, r = server(Path(tmp))
        try:
            print(f"\nper EVALSHA, best of {a.rounds} × {a.calls} calls (Redis CPU = commandstats usec_per_call)")
            print(f"{'script':12} {'Redis µs whole':>15} {'needs':>7} {'saved':>7}   {'client µs whole':>16} {'needs':>7}")
            for name in SMALL:
                best = {}
                for label, text in (("whole", whole(name)), ("needs", scripts.text(name))):
                    runs = []
                    for _ in range(a.rounds):
                        setup(r)
                        runs.append(measure(r, text, name, a.calls))
                    best[label] = (min(x[0] for x in runs), min(x[1] for x in runs))
                w, n = best["whole"], best["needs"]
                print(f"{name:12} {w[0]:>15.2f} {n[0]:>7.2f} {w[0] - n[0]:>7.2f}   {w[1]:>16.1f} {n[1]:>7.1f}")
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
