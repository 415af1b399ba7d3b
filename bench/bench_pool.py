#!/usr/bin/env python3
"""Pool benchmark: throughput, pick-up latency, Redis commands per job, idle memory, crash recovery.

Runs a private redis-server on a Unix socket and a real `tender-pool run` with 4 slots and command
handlers, then prints a table. Figures, not assertions: the machines are noisy, so compare ratios of
rows taken in one run. ``make bench`` runs this quick table; the comparison with the peers, measured
the same way for every system, is ``bench/compare`` (``--peers`` here runs its quick version for
Dramatiq and RQ after this table).

    .venv/bin/python bench/bench_pool.py [--jobs 2000] [--peers]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import redis

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "bench" / "peers"))
BIN = Path(sys.executable).with_name("tender-pool")

import pool_toml  # noqa: E402
from measure import IDLE_SETTLE_S, breakdown, idle_pss, pss_mib, tree  # noqa: E402  (as bench/compare)
from tender_pool.client import Client  # noqa: E402


def start_redis(tmp: Path) -> tuple[subprocess.Popen, str]:
    sock = str(tmp / "redis.sock")
    p = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", sock, "--dir", str(tmp), "--save", "", "--appendonly", "yes",
         "--appendfsync", "everysec", "--loglevel", "warning"],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            if redis.Redis(unix_socket_path=sock).ping():
                break
        except redis.RedisError:
            time.sleep(0.02)
    return p, sock


def write_config(tmp: Path, sock: str, prefix: str) -> Path:
    return pool_toml.write(tmp / f"{prefix}.toml", sock, prefix, f"bench-{prefix}", tmp, pool="heartbeat = 10",
                           input_roots=(str(REPO / "jvm" / "training"),))


def wait_done(q: Client, ids: list[str], timeout: float = 600) -> None:
    end = time.monotonic() + timeout
    fin = q.k.finished
    while q.r.zcard(fin) < len(ids):
        if time.monotonic() > end:
            raise SystemExit(f"timed out: {q.r.zcard(fin)}/{len(ids)} finished")
        time.sleep(0.05)


def run_batch(q: Client, kind: str, n: int, daemon_pid: int) -> dict:
    q.r.delete(q.k.finished)
    c0 = int(q.r.info("stats")["total_commands_processed"])
    ids = []
    pipe_t0 = time.monotonic()
    for i in range(n):
        jid = q.submit(f"u{i % 50}", kind, {}).id
        ids.append(jid)
    enqueue_s = time.monotonic() - pipe_t0
    wait_done(q, ids)
    c1 = int(q.r.info("stats")["total_commands_processed"])
    pipe = q.r.pipeline()
    for j in ids:
        pipe.hmget(q.k.job(j), "started_at", "finished_at", "state")
    rows = pipe.execute()
    starts = [int(r[0]) for r in rows]
    ends = [int(r[1]) for r in rows]
    bad = sum(1 for r in rows if r[2] != b"completed")
    span = (max(ends) - min(starts)) / 1000
    return {"jobs": n, "jobs_per_s": n / span, "span_s": span, "not_completed": bad,
            # less the producer's own: 2 a job with a bare EVALSHA, + 2 for Client.submit's pipeline
            # (its SCRIPT EXISTS and the HGETALL read-back)
            "redis_cmds_per_job": (c1 - c0 - n * 4) / n, "enqueue_per_s": n / enqueue_s}


def pickup(q: Client, n: int = 200) -> dict:
    lat = []
    for i in range(n):
        jid = q.submit(f"p{i}", "noop", {}).id
        while True:
            v = q.r.hmget(q.k.job(jid), "created_at", "started_at", "state")
            if v[2] == b"completed":
                break
            time.sleep(0.002)
        lat.append(int(v[1]) - int(v[0]))
        time.sleep(0.02)
    lat.sort()
    return {"p50_ms": statistics.median(lat), "p99_ms": lat[int(len(lat) * 0.99) - 1], "max_ms": lat[-1]}


def parse_latency(q: Client, path: str, n: int = 20, warmup: int = 8) -> dict:
    """parse_markdown of one small document through the daemon: claim (started_at) → Markdown
    stored and the job settled (finished_at), Redis TIME. The first run starts the slot's warm JVM
    and imports the reader; it is reported apart, and ``warmup`` more runs let every slot start its
    JVM before the measured ones."""
    out = []
    for i in range(n + 1 + warmup):
        jid = q.submit(f"x{i}", "parse_markdown", {"file": path}).id
        while True:
            v = q.r.hmget(q.k.job(jid), "started_at", "finished_at", "state")
            if v[2] in (b"completed", b"failed"):
                break
            time.sleep(0.002)
        if v[2] != b"completed":
            raise SystemExit(f"parse_markdown failed: {q.record(jid)}")
        out.append(int(v[1]) - int(v[0]))
    first, rest = out[0], sorted(out[1 + warmup :])
    return {"first_ms": first, "p50_ms": statistics.median(rest), "p90_ms": rest[int(len(rest) * 0.9) - 1]}


def memory(pid: int, settle_s: float | None = None) -> dict:
    """PSS of the daemon's tree (warm JVMs excluded), with ``measure.idle_pss``'s settling when
    ``settle_s`` is given: the idle figure is read after work, as bench/compare reads it."""
    if settle_s is None:
        procs = tree([pid])
        pss, parts = pss_mib(procs), breakdown(procs)
    else:
        pss, procs, parts = idle_pss([pid], settle_s)
    rss = sum(p.memory_info().rss for p in procs)
    return {"processes": len(procs), "rss_mib": rss / 2**20, "pss_mib": pss, "parts": parts}


def recovery(q: Client, daemon_pid: int) -> float:
    jid = q.submit("crash", "long", {}).id
    while q.r.hget(q.k.job(jid), "state") != b"running":
        time.sleep(0.005)
    worker = q.r.hget(q.k.job(jid), "worker").decode()
    slot_no = worker.rsplit("slot", 1)[1]
    slot = next(p for p in psutil.Process(daemon_pid).children() if f"slot {slot_no} " in " ".join(p.cmdline()))
    t0 = time.monotonic()
    slot.kill()
    while q.r.hget(q.k.job(jid), "attempts") != b"2":
        time.sleep(0.002)
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--peers", action="store_true", help="also run Dramatiq and RQ on the same no-op work")
    ap.add_argument("--log", help="write the daemon's log here")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tp-bench-"))
    rp, sock = start_redis(tmp)
    try:
        cfg = write_config(tmp, sock, "bench")
        log = open(args.log, "w") if args.log else subprocess.DEVNULL
        d = subprocess.Popen([str(BIN), "run", "-c", str(cfg)], stderr=log, start_new_session=True)
        q = Client(f"unix://{sock}", "bench")
        while len(psutil.Process(d.pid).children()) < 4:
            time.sleep(0.05)
        time.sleep(1.5)
        boot = memory(d.pid)  # before any job: not the idle figure (the slots grow over their first jobs)
        noop = run_batch(q, "noop", args.jobs, d.pid)
        sl = run_batch(q, "sleep10", args.jobs, d.pid)
        time.sleep(1.0)
        pk = pickup(q)
        idle = memory(d.pid, settle_s=IDLE_SETTLE_S)  # after 2 × --jobs + 200 command-handler jobs, then idle
        doc = parse_latency(q, str(REPO / "jvm" / "training" / "notice.doc"))
        xls = parse_latency(q, str(REPO / "jvm" / "training" / "signin.xls"))
        parsed = memory(d.pid, settle_s=IDLE_SETTLE_S)  # slots with the .doc/.xls readers imported; JVMs apart
        rec = recovery(q, d.pid)
        d.send_signal(signal.SIGTERM)
        d.wait(30)
        rows = [
            ("no-op jobs/s (4 slots)", f"{noop['jobs_per_s']:.0f}", f"{args.jobs} jobs in {noop['span_s']:.2f} s, {noop['not_completed']} not completed"),
            ("10 ms-sleep jobs/s (4 slots)", f"{sl['jobs_per_s']:.0f}", f"{args.jobs} jobs in {sl['span_s']:.2f} s"),
            ("Redis commands per job", f"{noop['redis_cmds_per_job']:.1f}", "INFO total_commands_processed, incl. Lua-internal calls"),
            ("pick-up latency p50 / p99 (idle)", f"{pk['p50_ms']:.0f} / {pk['p99_ms']:.0f} ms", f"max {pk['max_ms']} ms; Redis TIME ms resolution"),
            ("idle RSS supervisor+slots", f"{idle['rss_mib']:.1f} MiB", f"{idle['processes']} processes"),
            ("idle PSS supervisor+slots", f"{idle['pss_mib']:.1f} MiB",
             f"after the jobs above, idle 2 s (as bench/compare): {idle['parts']}"),
            ("  PSS right after boot", f"{boot['pss_mib']:.1f} MiB", f"before any job: {boot['parts']}"),
            ("  PSS after parse_markdown jobs", f"{parsed['pss_mib']:.1f} MiB",
             f"readers imported in the slots, warm JVMs excluded: {parsed['parts']}"),
            ("parse_markdown small .doc, claim → stored", f"{doc['p50_ms']:.0f} / {doc['p90_ms']:.0f} ms",
             f"p50 / p90, warm JVM; first run {doc['first_ms']} ms (JVM start + imports)"),
            ("parse_markdown small .xls, claim → stored", f"{xls['p50_ms']:.0f} / {xls['p90_ms']:.0f} ms",
             f"p50 / p90, warm JVM; first run {xls['first_ms']} ms"),
            ("SIGKILLed slot's job running again", f"{rec * 1000:.0f} ms", "kill → attempt 2 started"),
            ("enqueue rate (one client)", f"{noop['enqueue_per_s']:.0f}/s", "enqueue.lua, one round trip each"),
        ]
        if args.peers:
            rows += peers(tmp, sock, args.jobs, noop["jobs_per_s"])
        w = max(len(r[0]) for r in rows)
        print(f"\n{'measure':<{w}}  {'value':>16}  note")
        for name, val, note in rows:
            print(f"{name:<{w}}  {val:>16}  {note}")
    finally:
        rp.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def peers(tmp: Path, sock: str, n: int, ours: float) -> list[tuple[str, str, str]]:
    """The peers are measured by bench/compare, first job start → last finish for everyone (this
    table's own figures above include no worker boot either); its quick run, Dramatiq and RQ."""
    rc = subprocess.run([str(REPO / "bench" / "compare"), "--quick", "--no-scale", "--only", "tender-pool,dramatiq,rq"]).returncode
    return [("peers", "see the table above" if rc == 0 else f"bench/compare exited {rc}", "bench/compare --quick")]


if __name__ == "__main__":
    main()
