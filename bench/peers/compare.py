#!/usr/bin/env python3
"""bench/compare: tender-pool against RQ, ARQ (4 × max_jobs=1 and 1 × 4), Dramatiq and Celery, 4 workers
each, one private Redis, the same work, interleaved over repetitions; then the cost-flat table of
issue 12 (``bench/bench_scale.py``, in our venv). Run through ``bench/compare`` (it builds the peers' venv). Prints tables.

Per repetition and system: no-op and 10 ms jobs/s, each from a fresh start with the jobs already
queued (end to end from the worker launch, and first job start → last job finish); then one running
instance: pick-up latency idle (20 jobs/s) and at 50 % of that system's no-op capacity measured in
the same repetition, CPU per job by process over a batch, Redis commands and read events per job,
and last the idle PSS, once that instance has run all of it and been idle 2 s (``measure.idle_pss``,
as bench_pool.py reads it). Once per system and settings: a worker SIGKILLed mid-job (defaults in
parallel, waited for at most ``--recovery-wait`` s; best settings one at a time).
"""

from __future__ import annotations

import argparse
import subprocess
import shutil
import tempfile
import threading
import time
from pathlib import Path

from measure import RedisCounters, cpu_delta, cpu_of, idle_pss, machine, med_range, pct, start_redis, tree
from systems import Ours, all_systems


class Timeout(Exception):
    pass


def wait_done(s, n: int, limit: float) -> int:
    """Poll until ``s`` finished n jobs; returns the number of polls (each one Redis command)."""
    end, polls = time.monotonic() + limit, 0
    while True:
        polls += 1
        if s.done() >= n:
            return polls
        if time.monotonic() > end:
            raise Timeout(f"{s.name}: {s.done()}/{n} finished after {limit:.0f} s")
        time.sleep(0.01)


def throughput(s, counters: RedisCounters, kind: str, n: int) -> dict:
    s.reset()
    s.enqueue(kind, n)
    c0 = counters.snap()
    t0 = time.time()
    s.start()
    try:
        polls = wait_done(s, n, 300)
        c1 = counters.snap()
        recs = s.records()
    finally:
        s.stop()
    first, last = min(r[1] for r in recs), max(r[2] for r in recs)
    d = counters.delta(c0, c1)
    return {"e2e": n / (last - t0), "f2l": n / (last - first), "boot_s": first - t0,
            "cmds": (d["cmds"] - polls - 2) / n, "reads": (d["reads"] - polls - 2) / n, "xadd": d["xadd"] / n}


def floor(kind: str, n: int) -> float:
    """Jobs/s of our job command for ``kind`` alone, 4 at a time, started by ``xargs -P 4`` (C,
    fork + exec, nothing else): the most any pool can get on this machine from a process per job
    with these bodies. Ours is read against it (a pool's own cost is the gap)."""
    import sys
    import tomllib

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import pool_toml

    argv = tomllib.loads(pool_toml.HANDLERS)["handlers"][kind]["command"]
    t0 = time.monotonic()
    subprocess.run(["xargs", "-P", "4", "-n", "1", "--", *argv], input="\n".join(map(str, range(n))).encode(),
                   stdout=subprocess.DEVNULL, check=True)
    return n / (time.monotonic() - t0)


def latencies(s, since: float) -> list[float]:
    return [(st - enq) * 1000 for enq, st, _, _ in s.records() if enq >= since]


def running_phase(s, counters: RedisCounters, a: argparse.Namespace, capacity: float) -> dict:
    """One instance: pick-up idle, CPU per job over a batch, pick-up at 50 % load, then idle PSS."""
    s.reset()
    s.start()
    out: dict = {}
    try:
        if isinstance(s, Ours):
            s.wait_slots()
        s.enqueue("noop", 8)
        wait_done(s, 8, 120)
        time.sleep(2.0)
        # pick-up, idle: one job every 50 ms, or at a tenth of the capacity if slower (each finds the
        # workers idle)
        t = time.time()
        base = s.done()
        n = max(10, a.pickup // s.share)
        s.paced("noop", n, min(20.0, capacity / 10))
        wait_done(s, base + n, 300)
        lat = latencies(s, t)
        out["idle_p50"], out["idle_p99"] = pct(lat, 0.5), pct(lat, 0.99)
        # CPU per job, by process, over a batch queued in one go (Redis: the enqueue included)
        procs = tree(s.roots())
        c0, r0 = cpu_of(procs), counters.snap()
        base = s.done()
        n = max(20, a.cpu_jobs // s.share)
        s.enqueue("noop", n)
        wait_done(s, base + n, 300)
        c1, r1 = cpu_of(procs), counters.snap()
        out["cpu"] = cpu_split(s, c0, c1, n)
        out["cpu"]["redis"] = (r1["cpu"] - r0["cpu"]) * 1000 / n
        # pick-up at 50 % of this system's measured no-op capacity
        rate = 0.5 * capacity
        n = max(20, int(rate * a.load_s))
        t = time.time()
        base = s.done()
        s.paced("noop", n, rate)
        wait_done(s, base + n, 300)
        lat = latencies(s, t)
        out["load_rate"], out["load_p50"], out["load_p99"] = rate, pct(lat, 0.5), pct(lat, 0.99)
        # idle PSS: once this instance has run all of the above and been idle (measure.idle_pss, as
        # bench_pool.py reads it): a long-running daemon's figure, not its first seconds'
        out["pss"], procs, parts = idle_pss(s.roots())
        out["nproc"] = len(procs)
        print(f"  idle PSS {out['pss']:.1f} MiB after {s.done()} jobs: {parts}", flush=True)
    finally:
        s.stop()
    return out


def cpu_split(s, c0: dict, c1: dict, n: int) -> dict:
    """ms of CPU per job. Ours: supervisor, slots (their own Python), job processes (reaped by the
    slots). Peers: the worker processes, own + reaped children (RQ's work horses)."""
    if isinstance(s, Ours):
        sup = s.roots()[0]
        own_sup = c1.get(sup, (0, 0))[0] - c0.get(sup, (0, 0))[0]
        rest0 = {k: v for k, v in c0.items() if k != sup}
        rest1 = {k: v for k, v in c1.items() if k != sup}
        own, reaped = cpu_delta(rest0, rest1)
        return {"supervisor": own_sup * 1000 / n, "workers": own * 1000 / n, "jobs": reaped * 1000 / n}
    own, reaped = cpu_delta(c0, c1)
    return {"supervisor": 0.0, "workers": own * 1000 / n, "jobs": reaped * 1000 / n}


def recovery(s, mode: str, wait_s: float) -> dict:
    """SIGKILL the worker running the long job; time until the job starts again (or give up)."""
    out = {"mode": mode, "settings": s.settings[mode]}
    s.start(mode)
    try:
        if isinstance(s, Ours):
            s.wait_slots()
        base = s.done()
        s.enqueue("noop", 4)
        wait_done(s, base + 4, 120)
        s.enqueue_long()
        end = time.monotonic() + 60
        while (v := s.victim()) is None:
            if time.monotonic() > end:
                raise Timeout(f"{s.name}: the long job did not start")
            time.sleep(0.005)
        time.sleep(0.5)  # mid-job
        t_kill = time.time()
        for pid in v[1]:
            try:
                import os
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        end = time.monotonic() + wait_s
        while time.monotonic() < end:
            s.supervise()
            again = s.reran()
            if again is not None:
                out["after_s"] = again - t_kill
                break
            time.sleep(0.005)
        else:
            out["after_s"] = None
        out["restarted"] = s.restarted
    finally:
        s.stop()
    return out


def _share(res: dict, key: str, floor_xs: list[float]) -> str:
    import statistics

    ours = res.get("tender-pool", {}).get(key)
    if not ours or not floor_xs:
        return "—"
    return f"{100 * statistics.median(ours) / statistics.median(floor_xs):.0f} %"


def fmt(xs: list[float], nd: int = 0) -> str:
    m, lo, hi = med_range(xs)
    if m != m:
        return "—"
    f = f"{{:.{nd}f}}"
    return f.format(m) if len(xs) == 1 or lo == hi else f"{f.format(m)} ({f.format(lo)}–{f.format(hi)})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1 repetition, smaller counts")
    ap.add_argument("--reps", type=int)
    ap.add_argument("--only", help="comma-separated system names")
    ap.add_argument("--no-scale", action="store_true", help="skip the cost-flat table")
    ap.add_argument("--no-peers", action="store_true", help="only the cost-flat table")
    ap.add_argument("--no-recovery", action="store_true", help="skip the SIGKILL recovery runs (up to 120 s each)")
    a = ap.parse_args()
    a.reps = a.reps or (1 if a.quick else 3)
    a.jobs = 500 if a.quick else 2000
    a.sleep_jobs = 300 if a.quick else 1000
    a.pickup = 40 if a.quick else 200
    a.cpu_jobs = 500 if a.quick else 2000
    a.load_s = 4.0 if a.quick else 10.0
    a.recovery_wait = 120.0
    tmp = Path(tempfile.mkdtemp(prefix="tp-compare-"))
    rp, sock = start_redis(tmp)
    print(f"machine: {machine()}; redis-server pid {rp.pid} on {sock}; {a.reps} repetition(s)", flush=True)
    try:
        if not a.no_peers:
            peers_run(a, tmp, sock, rp.pid)
        if not a.no_scale:
            # bench/bench_scale.py, in our venv, on a private Redis of its own (it flushes it)

            repo = Path(__file__).resolve().parents[2]
            subprocess.run([str(repo / ".venv" / "bin" / "python"), str(repo / "bench" / "bench_scale.py"),
                            *(["--quick"] if a.quick else [])], check=False)
        print(f"\nmachine at the end: {machine()}")
    finally:
        from systems import LAUNCHED
        from measure import kill_group

        for p in LAUNCHED:
            if p.poll() is None:
                kill_group(p.pid)
        rp.kill()
        rp.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def peers_run(a, tmp: Path, sock: str, redis_pid: int) -> None:
    import redis

    systems = all_systems(sock, tmp)
    if a.only:
        keep = set(a.only.split(","))
        systems = [s for s in systems if s.name in keep]
    counters = RedisCounters(redis.Redis(unix_socket_path=sock), redis_pid)
    res: dict[str, dict[str, list]] = {s.name: {} for s in systems}

    def add(name: str, key: str, v) -> None:
        res[name].setdefault(key, []).append(v)

    floors: dict[str, list[float]] = {"noop": [], "sleep10": []}
    for rep in range(a.reps):
        for kind, n in (("noop", a.jobs), ("sleep10", a.sleep_jobs)):
            floors[kind].append(floor(kind, n))
        order = systems[rep % len(systems):] + systems[: rep % len(systems)]
        for s in order:
            print(f"rep {rep + 1}: {s.name} ({machine()})", flush=True)
            try:
                t = throughput(s, counters, "noop", max(20, a.jobs // s.share))
                for k in ("e2e", "f2l", "cmds", "reads", "xadd", "boot_s"):
                    add(s.name, f"noop_{k}", t[k])
                t = throughput(s, counters, "sleep10", max(20, a.sleep_jobs // s.share))
                add(s.name, "sleep_e2e", t["e2e"])
                add(s.name, "sleep_f2l", t["f2l"])
                p = running_phase(s, counters, a, res[s.name]["noop_f2l"][-1])
                for k, v in p.items():
                    if k == "cpu":
                        for ck, cv in v.items():
                            add(s.name, f"cpu_{ck}", cv)
                    else:
                        add(s.name, k, v)
            except (Timeout, subprocess.CalledProcessError) as e:
                print(f"  {s.name} failed in this repetition: {e}", flush=True)
                s.stop()
    rec: dict[str, list[dict]] = {s.name: [] for s in systems}
    if a.no_recovery:
        report(systems, res, rec, a, floors)
        return
    print("recovery: SIGKILL of the worker running a 3 s job", flush=True)
    counters.r.flushall()
    peers = [s for s in systems if not isinstance(s, Ours)]
    def guarded(s, mode: str) -> None:
        try:
            rec[s.name].append(recovery(s, mode, a.recovery_wait))
        except (Timeout, subprocess.CalledProcessError) as e:
            print(f"  {s.name} {mode}: {e}", flush=True)
            s.stop()

    threads = [threading.Thread(target=guarded, args=(s, "default")) for s in peers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in systems:
        counters.r.flushall()
        s.restarted = 0
        guarded(s, "best" if not isinstance(s, Ours) else "default")
    report(systems, res, rec, a, floors)


ROWS = [
    ("no-op jobs/s, first start → last finish", "noop_f2l", 0, max),
    ("no-op jobs/s, end to end from worker start", "noop_e2e", 0, max),
    ("10 ms jobs/s, first start → last finish", "sleep_f2l", 0, max),
    ("10 ms jobs/s, end to end from worker start", "sleep_e2e", 0, max),
    ("pick-up p50 idle, ms", "idle_p50", 1, min),
    ("pick-up p99 idle, ms", "idle_p99", 1, min),
    ("pick-up p50 at 50 % load, ms", "load_p50", 1, min),
    ("pick-up p99 at 50 % load, ms", "load_p99", 1, min),
    ("idle PSS of all worker processes, MiB", "pss", 1, min),
    ("Redis commands per job (Lua included)", "noop_cmds", 1, min),
    ("Redis read events per job (≈ round trips)", "noop_reads", 1, min),
    ("XADD per job", "noop_xadd", 1, min),
    ("CPU ms/job: worker processes' own", "cpu_workers", 2, min),
    ("CPU ms/job: job processes / forks", "cpu_jobs", 2, min),
    ("CPU ms/job: supervisor", "cpu_supervisor", 2, min),
    ("CPU ms/job: Redis (enqueue included)", "cpu_redis", 2, min),
    ("boot: launch → first job start, s", "noop_boot_s", 2, min),
]


def report(systems, res, rec, a, floors: dict[str, list[float]]) -> None:
    import statistics

    names = [s.name for s in systems]
    w0 = max(len(r[0]) for r in ROWS) + 2
    cols = [max(14, len(n) + 2) for n in names]
    print(f"\n{'':<{w0}}" + "".join(f"{n:>{c}}" for n, c in zip(names, cols)) + "   ours / best peer")
    for label, key, nd, best in ROWS:
        cells, meds = [], {}
        for n, c in zip(names, cols):
            xs = res[n].get(key, [])
            cells.append(f"{fmt(xs, nd):>{c}}")
            if xs:
                meds[n] = statistics.median(xs)
        peers = {n: v for n, v in meds.items() if not n.startswith("tender-pool")}
        ratios = []
        for ours in ("tender-pool", "tender-pool-fn"):  # commands; function handlers
            if ours in meds and peers:
                bn = best(peers, key=peers.get)
                if peers[bn]:
                    ratios.append(f"{'fn ' if ours.endswith('-fn') else ''}{meds[ours] / peers[bn]:.2f} ({bn})")
        ratio = "; ".join(ratios)
        print(f"{label:<{w0}}" + "".join(f" {x}" if len(x) >= c else x for x, c in zip(cells, cols)) + f"   {ratio}")
    print("\nthe job bodies alone, 4 at a time (xargs -P 4, no pool), jobs/s: no-op " + fmt(floors["noop"])
          + ", 10 ms " + fmt(floors["sleep10"]) + "; ours first → last as a share of it: no-op "
          + _share(res, "noop_f2l", floors["noop"]) + ", 10 ms " + _share(res, "sleep_f2l", floors["sleep10"]))
    print("\nload rate used (50 % of each system's median no-op capacity in that repetition), jobs/s: " + ", ".join(
        f"{n} {fmt(res[n].get('load_rate', []))}" for n in names))
    print("\nSIGKILL of the worker running a 3 s job (the job starting again, after the kill):")
    for s in systems:
        for r in rec[s.name]:
            v = r["after_s"]
            val = f"{v * 1000:.0f} ms" if v is not None and v < 1 else f"{v:.1f} s" if v is not None else \
                f"> {a.recovery_wait:.0f} s ({r['mode']}: {r['settings']})"
            extra = f"; restarted by the harness {r['restarted']}×" if r.get("restarted") else ""
            print(f"  {s.name:<12} {r['mode']:<8} {val:<60} [{r['settings']}{extra}]")
    print("\nnotes: ours pick-up = job hash created_at → started_at (Redis TIME, 1 ms resolution; stamped by "
          "take.lua, before the job process is spawned); peers = just before the enqueue call → the job "
          "function's first line. RQ runs 1/4 of the jobs (it forks per job), ARQ 1/20 (it polls every 0.5 s).")


if __name__ == "__main__":
    main()
