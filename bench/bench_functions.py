#!/usr/bin/env python3
"""Function handlers against command handlers, in one daemon (4 slots, private redis-server):

- no-op jobs/s, first start → last finish: a function handler (a fork of the slot per job) beside
  the command handler every other bench uses (``sh -c 'echo {}'``, posix_spawn'ed);
- a job whose module is heavy to import (``fnmods/heavy.py``, ~0.4-0.5 s of CPU): as a function
  handler (imported once per slot) and as a command handler (a new interpreter importing it per
  job): jobs/s and CPU per job (supervisor + slots + their reaped job processes, and Redis apart);
- the PSS of the supervisor, slots and fork servers with the heavy module imported, beside the PSS
  right after boot (``--no-heavy``: the no-op alone, the fork servers at their smallest).

Figures, not assertions; short by default (``--jobs``). The peer comparison is ``bench/compare``.

    .venv/bin/python bench/bench_functions.py [--jobs 1000] [--heavy-jobs 40] [--no-heavy]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "bench" / "peers"))
BIN = Path(sys.executable).with_name("tender-pool")

from measure import idle_pss, pss_mib, start_redis, tree  # noqa: E402
from tender_pool.client import Client  # noqa: E402

MODS = REPO / "bench" / "fnmods"
HEAVY_MARK = "# heavy\n"


def config(tmp: Path, sock: str, heavy: bool = True) -> Path:
    path = tmp / "bench.toml"
    text = f"""
[redis]
url = "unix://{sock}"
prefix = "fb"
[pool]
worker_count = 4
host_id = "bench-fn"
state_dir = "{tmp}/state"
heartbeat = 10
[status]
socket = "{tmp}/status.sock"
[metrics]
listen = ""
[extract]
check_archive = false
[handlers.fn_noop]
function = "noopfn:noop"
path = ["{MODS}"]
timeout = 30
per_user = 0
[handlers.cmd_noop]
command = ["/bin/sh", "-c", "echo {{}}"]
timeout = 30
per_user = 0
{HEAVY_MARK}[handlers.fn_heavy]
function = "heavy:work"
path = ["{MODS}"]
timeout = 60
per_user = 0
[handlers.cmd_heavy]
command = ["{sys.executable}", "{MODS / 'heavy.py'}"]
timeout = 60
per_user = 0
"""
    head, _, tail = text.partition(HEAVY_MARK)
    path.write_text(head + tail if heavy else head)
    return path


def cpu_of(root: int) -> dict:
    """CPU seconds of the daemon's live tree: the supervisor, the slots themselves, their fork
    servers, and the job processes the slots or the servers have reaped (a forked function child,
    or a spawned command)."""
    out = {"supervisor": 0.0, "slots": 0.0, "servers": 0.0, "jobs": 0.0}
    for p in tree([root]):
        try:
            t = p.cpu_times()
            server = "forkserver" in " ".join(p.cmdline())
        except psutil.Error:
            continue
        if p.pid == root:
            out["supervisor"] += t.user + t.system
        elif server:
            out["servers"] += t.user + t.system
            out["jobs"] += t.children_user + t.children_system
        else:
            out["slots"] += t.user + t.system
            out["jobs"] += t.children_user + t.children_system
    return out


def redis_cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def batch(q: Client, kind: str, n: int, daemon: int, redis_pid: int) -> dict:
    q.r.delete(q.k.finished)
    c0, r0 = cpu_of(daemon), redis_cpu(redis_pid)
    ids = [q.submit(f"u{i % 50}", kind, {}).id for i in range(n)]
    while q.r.zcard(q.k.finished) < n:
        time.sleep(0.05)
    c1, r1 = cpu_of(daemon), redis_cpu(redis_pid)
    pipe = q.r.pipeline()
    for j in ids:
        pipe.hmget(q.k.job(j), "started_at", "finished_at", "state")
    rows = pipe.execute()
    span = (max(int(r[1]) for r in rows) - min(int(r[0]) for r in rows)) / 1000
    bad = sum(1 for r in rows if r[2] != b"completed")
    part = {k: (c1[k] - c0[k]) / n * 1000 for k in c0}
    return {"n": n, "rate": n / span, "span": span, "bad": bad, "cpu_ms": sum(part.values()), "part": part,
            "redis_ms": (r1 - r0) / n * 1000}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--heavy-jobs", type=int, default=40)
    ap.add_argument("--no-heavy", action="store_true",
                    help="no heavy handlers: the fork servers import the no-op's module alone (bench/compare's case)")
    ap.add_argument("--log", help="write the daemon's log here (job_ran lines carry each attempt's seconds)")
    args = ap.parse_args()
    load0 = os.getloadavg()  # the machine is shared: the figures mean little without it
    tmp = Path(tempfile.mkdtemp(prefix="tp-fnbench-"))
    rp, sock = start_redis(tmp)
    d = None
    try:
        log = open(args.log, "w") if args.log else subprocess.DEVNULL
        d = subprocess.Popen([str(BIN), "run", "-c", str(config(tmp, sock, not args.no_heavy))], stderr=log, start_new_session=True)
        q = Client(f"unix://{sock}", prefix="fb")
        while len(psutil.Process(d.pid).children()) < 4:
            time.sleep(0.05)
        time.sleep(3.0)  # the slots import heavy.py (once each) before their first claim
        boot = pss_mib(tree([d.pid]))
        results = {}
        for kind, n in (("fn_noop", 100), ("cmd_noop", 100)):  # warm-up
            batch(q, kind, n, d.pid, rp.pid)
        for rep in range(2):  # interleaved, twice
            for kind in ("fn_noop", "cmd_noop"):
                results.setdefault(kind, []).append(batch(q, kind, args.jobs, d.pid, rp.pid))
        for kind, n in (("fn_heavy", args.heavy_jobs * 5), ("cmd_heavy", args.heavy_jobs)):
            if not args.no_heavy:
                results[kind] = [batch(q, kind, n, d.pid, rp.pid)]
        idle, _, parts = idle_pss([d.pid], 2.0)
        load = os.getloadavg()
    finally:
        if d is not None:
            d.send_signal(signal.SIGTERM)
            d.wait(30)
        rp.terminate()
        rp.wait(10)
    print(f"function vs command handlers, 4 slots, load average (1 min) {load0[0]:.1f} at the start, {load[0]:.1f} at "
          f"the end ({load[1]:.1f} over 5 min) on {os.cpu_count()} cores")
    print(f"{'kind':<10} {'jobs':>5} {'jobs/s':>7} {'CPU ms/job':>11} {'= slot':>7} {'+ srv':>6} {'+ job':>7}"
          f" {'+ sup':>6} {'Redis':>6}")
    for kind, rs in results.items():
        for r in rs:
            p = r["part"]
            print(f"{kind:<10} {r['n']:>5} {r['rate']:>7.0f} {r['cpu_ms']:>11.2f} {p['slots']:>7.2f} {p['servers']:>6.2f}"
                  f" {p['jobs']:>7.2f} {p['supervisor']:>6.2f} {r['redis_ms']:>6.2f}" + (f"  ({r['bad']} not completed)" if r["bad"] else ""))
    if not args.no_heavy:
        fh, ch = results["fn_heavy"][0], results["cmd_heavy"][0]
        print(f"heavy import: command / function CPU per job = {ch['cpu_ms'] / fh['cpu_ms']:.1f} x")
    what = "no-op module" if args.no_heavy else "heavy.py"
    print(f"PSS supervisor + 4 slots + their fork servers: right after boot ({what} imported in each server) {boot:.1f} MiB; "
          f"idle after the jobs {idle:.1f} MiB ({parts})")


if __name__ == "__main__":
    main()
