#!/usr/bin/env python3
"""The ceiling of a process per attempt on this machine, no Redis, no supervisor: what the function
handlers' no-op rate (bench/bench_functions.py, bench/compare's tender-pool-fn) is a share of.

- ``served``: 4 drivers, each a slot's stand-in with a fork server of its own (``forkserver.ForkServer``,
  the no-op of ``bench/peers/jobs_fn.py`` loaded), launching one attempt after another and running
  each with ``runner.run`` as a slot does (pipes, pidfd, the result read): the fork server's whole
  cost per attempt, with nothing of the queue around it.
- ``bare``: 4 at a time, fork + ``os._exit(0)`` + wait in one process that imported what a fork server
  imports (``tender_pool.slots.forkserver`` and the no-op's module): the kernel's part alone.

Prints attempts/s and CPU ms per attempt of every process involved (drivers, servers, children).

    .venv/bin/python bench/bench_forkserver.py [--n 4000] [--mode served,bare]
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PEERS = str(REPO / "bench" / "peers")
SLOTS = 4


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _faults(pid: int) -> tuple[int, int]:
    """(minflt, cminflt) of a process: its own page faults, and its reaped children's."""
    f = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()
    return int(f[7]), int(f[8])


def served_driver(n: int, report: bool) -> None:
    import msgspec

    from tender_pool.slots import runner
    from tender_pool.slots.forkserver import ForkServer
    from tender_pool.store.config import Config
    from tender_pool.store.records import JobRecord

    req = {f.name: "x" for f in msgspec.structs.fields(JobRecord) if f.required}
    job = JobRecord(**dict(req, id="j", kind="noop", user="u", payload={}))
    server = ForkServer(msgspec.json.encode(Config()), -1)
    assert server.load("noop", "jobs_fn:noop", None, [PEERS]) is None
    f0 = (0, 0)
    for i in range(n):
        if i == 50:  # warmed up: the faults of the steady state
            f0 = _faults(server.pid)
        token = f"{i}.tok"
        proc = server.launch("noop", job, {"TENDER_POOL_ATTEMPT": token})
        res = runner.run(proc, b"", deadline=time.monotonic() + 30, kill_grace=1.0,
                         marker=("TENDER_POOL_ATTEMPT", token), tick=lambda: None)
        assert res.returncode == 0 and res.stdout == b'{"value":{}}', res
    f1 = _faults(server.pid)
    if report and n > 50:
        print(f"        page faults an attempt (one driver): server {(f1[0] - f0[0]) / (n - 50):.0f}, "
              f"child {(f1[1] - f0[1]) / (n - 50):.0f}", flush=True)
    server.stop()


def bare(n: int) -> None:
    sys.path.insert(0, PEERS)
    import jobs_fn  # noqa: F401 - what the server imports
    import tender_pool.slots.forkserver  # noqa: F401

    gc.freeze()
    running = done = started = 0
    while done < n:
        while running < SLOTS and started < n:
            if os.fork() == 0:
                os._exit(0)
            running += 1
            started += 1
        os.wait()
        running -= 1
        done += 1


def measure(mode: str, n: int) -> tuple[float, float]:
    """(attempts/s, CPU ms per attempt of the whole tree), the tree run in children of ours."""
    c0, t0 = _cpu(resource.RUSAGE_CHILDREN), time.monotonic()
    pids = []
    for k in range(SLOTS if mode == "served" else 1):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                served_driver(n // SLOTS, k == 0) if mode == "served" else bare(n)
            except BaseException:  # noqa: BLE001
                import traceback

                traceback.print_exc()
                code = 1
            os._exit(code)
        pids.append(pid)
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        assert status == 0, f"{mode} driver failed"
    t, c = time.monotonic() - t0, _cpu(resource.RUSAGE_CHILDREN) - c0
    return n / t, c / n * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--mode", default="served,bare")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    print(f"{SLOTS} at a time, {a.n} attempts a run, load average {os.getloadavg()[0]:.2f} at the start, "
          f"{os.cpu_count()} cores")
    for rep in range(a.reps):
        for mode in a.mode.split(","):
            rate, cpu = measure(mode, a.n)
            print(f"{mode:<7} rep {rep + 1}: {rate:7.0f} attempts/s  {cpu:6.3f} CPU ms/attempt (all processes)", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
