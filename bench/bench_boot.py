#!/usr/bin/env python3
"""Boot: launch of ``tender-pool run`` → the first job's start stamp, with one no-op job queued
before the launch (4 slots, the bench config). Prints each repetition and the median.

    .venv/bin/python bench/bench_boot.py [--reps 7] [--base REV]

With each figure, the part of it after the daemon's ``supervisor_started`` log line (forks, slot
start, claim; the part before is the interpreter and imports), from the daemon's own log.

``--base REV`` (repeatable): also boot the daemon of git revision REV (exported from this repository
and imported in place of this checkout's code: the same venv, jar and Redis; its bytecode compiled
first, as ``make setup`` compiles this checkout's), alternating with this checkout repetition by
repetition, so both are measured under the same load: a paired A/B. Run it with another venv's
python (one without the test extras, say) to measure that install: the daemon started is the
``tender-pool`` beside that python.
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_doc_overhead import export_base  # noqa: E402
from bench_pool import BIN, start_redis, write_config  # noqa: E402
from tender_pool.client import Client  # noqa: E402


def export(rev: str, tmp: Path) -> Path:
    """``rev``'s packages, compiled, for PYTHONPATH; its ``jvm/`` is this checkout's (the archive
    check at start finds the same jar and build script)."""
    path = export_base(rev, tmp)
    src = tmp / "base" / "src"
    (src / "jvm").symlink_to(REPO / "jvm")
    compileall.compile_dir(str(src), quiet=1, workers=0)
    return path


def log_gap(log: Path, first: str = "supervisor_started", then: str = "job_started") -> float | None:
    """Seconds from the daemon's first ``first`` log line to its first ``then`` (its own clock)."""
    at: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            e = json.loads(line)
            at.setdefault(e.get("event", ""), datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")).timestamp())
    return at[then] - at[first] if first in at and then in at else None


def once(tmp: Path, sock: str, name: str, log: Path, pythonpath: Path | None) -> float:
    prefix = f"boot{name}"
    cfg = write_config(tmp, sock, prefix)
    q = Client(f"unix://{sock}", prefix)
    jid = q.submit("u", "noop", {}).id
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    t0 = time.time()
    d = subprocess.Popen([str(BIN), "run", "-c", str(cfg)], stderr=open(log, "w"), start_new_session=True, env=env)
    try:
        while True:
            j = q.job(jid)
            if j.started_at is not None:
                return datetime.fromisoformat(j.started_at.replace("Z", "+00:00")).timestamp() - t0
            if d.poll() is not None:
                raise SystemExit(f"the daemon exited {d.returncode} before the job started; see {log}")
            time.sleep(0.002)
    finally:
        d.terminate()
        d.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--base", action="append", default=[], help="a git revision to compare with, alternating (repeatable)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tp-boot-"))
    variants: dict[str, Path | None] = {f"base {rev}": export(rev, tmp / f"rev{i}") for i, rev in enumerate(a.base)}
    variants["this checkout"] = None
    xs: dict[str, list[float]] = {v: [] for v in variants}
    gaps: dict[str, list[float]] = {v: [] for v in variants}
    rp, sock = start_redis(tmp)
    load0 = open("/proc/loadavg").read().split()[0]
    try:
        for i in range(a.reps):
            order = list(variants) if i % 2 == 0 else list(reversed(variants))
            for v in order:
                name = f"{i}-{list(variants).index(v)}"
                xs[v].append(once(tmp, sock, name, tmp / f"boot{name}.log", variants[v]))
                gap = log_gap(tmp / f"boot{name}.log")
                if gap is not None:
                    gaps[v].append(gap)
    finally:
        rp.terminate()
    load1 = open("/proc/loadavg").read().split()[0]
    print(f"launch → first start, s ({a.reps} repetitions each; load {load0} → {load1}):")
    for v, ys in xs.items():
        print(f"  {v:<22} median {statistics.median(ys):.3f} (min {min(ys):.3f}, max {max(ys):.3f}):",
              " ".join(f"{y:.3f}" for y in ys))
    print("supervisor_started → the first job_started, s (the daemon's log; the rest before it is imports):")
    for v, ys in gaps.items():
        if ys:
            print(f"  {v:<22} median {statistics.median(ys):.3f} (min {min(ys):.3f}, max {max(ys):.3f})")
    mine = xs["this checkout"]
    for v, ys in xs.items():
        if v != "this checkout":  # each repetition's pair, started one after the other: drift cancels
            d = [y - m for y, m in zip(ys, mine)]
            print(f"  {v} − this checkout, paired: median {statistics.median(d):+.3f} s (min {min(d):+.3f}, "
                  f"max {max(d):+.3f})")
    print(f"logs in {tmp}")


if __name__ == "__main__":
    main()
