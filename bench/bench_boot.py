#!/usr/bin/env python3
"""Boot: launch of ``tender-pool run`` → the first job's start stamp, with one no-op job queued
before the launch (4 slots, the bench config). Prints each repetition and the median, plus the
log's own timeline of the first repetition (``--timeline``)."""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_pool import BIN, start_redis, write_config  # noqa: E402
from tender_pool.client import Client  # noqa: E402


def once(tmp: Path, sock: str, i: int, log: Path) -> float:
    prefix = f"boot{i}"
    cfg = write_config(tmp, sock, prefix)
    q = Client(f"unix://{sock}", prefix)
    jid = q.submit("u", "noop", {}).id
    t0 = time.time()
    d = subprocess.Popen([str(BIN), "run", "-c", str(cfg)], stderr=open(log, "w"), start_new_session=True)
    try:
        while True:
            j = q.job(jid)
            if j.started_at is not None:
                return datetime.fromisoformat(j.started_at.replace("Z", "+00:00")).timestamp() - t0
            time.sleep(0.002)
    finally:
        d.terminate()
        d.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tp-boot-"))
    rp, sock = start_redis(tmp)
    try:
        xs = [once(tmp, sock, i, tmp / f"boot{i}.log") for i in range(a.reps)]
    finally:
        rp.terminate()
    print("launch → first start, s:", " ".join(f"{x:.3f}" for x in xs))
    print(f"median {statistics.median(xs):.3f} (min {min(xs):.3f}, max {max(xs):.3f}); load {open('/proc/loadavg').read().split()[0]}")
    print(f"logs in {tmp}")


if __name__ == "__main__":
    main()
