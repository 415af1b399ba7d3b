#!/usr/bin/env python3
"""The database consumer against the pool: does one consumer keep up?

A private redis-server and a real ``tender-pool run`` (4 slots, no-op command handlers) run
``--jobs`` jobs with a consumer group registered and no consumer reading (so the pool runs at full
speed and every transition stays in the stream); the pool's transition rate is the stream's
growth over the burst. Then one consumer (``examples/db_sync.py``'s ``TaskTable``: SQLite, WAL,
one transaction a batch) applies the whole backlog: its events/s against the pool's, and Redis
memory per retained entry (``MEMORY USAGE`` of the stream / its length, and used_memory's growth).

    .venv/bin/python bench/bench_consumer.py [--jobs 4000] [--batch 100]
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_pool import BIN, start_redis, wait_done, write_config  # noqa: E402
from tender_pool.client import Client  # noqa: E402

_spec = importlib.util.spec_from_file_location("db_sync", REPO / "examples" / "db_sync.py")
db_sync = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(db_sync)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=100)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tp-bench-consumer-"))
    rp, sock = start_redis(tmp)
    d = None
    try:
        cfg = write_config(tmp, sock, "bench")
        pool = Client(f"unix://{sock}", prefix="bench", socket_timeout=10)
        pool.register_consumer_group("db")
        d = subprocess.Popen([str(BIN), "run", "-c", str(cfg)], stderr=subprocess.DEVNULL, start_new_session=True)
        q = Client(f"unix://{sock}", prefix="bench", socket_timeout=10)
        while len(psutil.Process(d.pid).children()) < 4:
            time.sleep(0.05)
        time.sleep(1.0)
        mem0 = int(q.r.info("memory")["used_memory"])
        len0 = q.r.xlen(q.k.events)
        ids = [q.submit(f"u{i % 50}", "noop", {}).id for i in range(a.jobs)]
        t0 = time.monotonic()
        first = None
        while q.r.zcard(q.k.finished) < len(ids):
            if first is None and q.r.xlen(q.k.events) > len0 + a.jobs:  # past the job_queued entries
                first = time.monotonic()
            time.sleep(0.01)
        wait_done(q, ids)
        t1 = time.monotonic()
        entries = q.r.xlen(q.k.events) - len0
        transitions = entries - a.jobs  # job_queued were written while submitting: the rest is the pool's
        pool_rate = transitions / (t1 - (first or t0))
        stream_bytes = int(q.r.memory_usage(q.k.events, samples=0) or 0)
        mem1 = int(q.r.info("memory")["used_memory"])
        d.send_signal(signal.SIGTERM)
        d.wait(30)
        d = None

        table = db_sync.TaskTable(str(tmp / "tasks.db"))
        applied = {"n": 0}

        def apply(events):
            table.apply(events)
            applied["n"] += len(events)

        c0 = time.monotonic()
        pool.consume("db", "bench", apply, batch=a.batch, block_ms=50,
                     stop=lambda: applied["n"] >= entries + len0)
        c1 = time.monotonic()
        rate = applied["n"] / (c1 - c0)
        rows = [
            ("pool transitions/s (4 slots, no-op command jobs)", f"{pool_rate:.0f}",
             f"{transitions} entries after the job_queued ones, {a.jobs} jobs"),
            ("one consumer, SQLite WAL, events/s", f"{rate:.0f}", f"{applied['n']} events, batch {a.batch}"),
            ("consumer / pool", f"{rate / pool_rate:.2f} ×", "≥ 1: it keeps up at full no-op speed"),
            ("Redis memory per retained entry", f"{stream_bytes / max(1, entries + len0):.0f} B",
             f"MEMORY USAGE of the stream / {entries + len0} entries (used_memory grew "
             f"{(mem1 - mem0) / max(1, entries):.0f} B an entry, job hashes and indexes included)"),
        ]
        w = max(len(r[0]) for r in rows)
        for name, val, note in rows:
            print(f"{name:<{w}}  {val:>10}  {note}")
    finally:
        if d is not None:
            d.kill()
        rp.kill()


if __name__ == "__main__":
    main()
