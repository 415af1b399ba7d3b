#!/usr/bin/env python3
"""Idle PSS of the pool with the default config (issue 22: "idle PSS < 64 MiB"): ``[metrics] listen``
on, as it is by default (on an ephemeral port here, so runs beside another daemon do not clash).

    .venv/bin/python bench/bench_idle.py [--rounds 3] [--jobs 300] [--base REV] [--no-metrics] [--doc]

Each round starts ``tender-pool run`` (4 slots), runs ``--jobs`` no-op command jobs, and reads the
idle PSS as bench/compare and bench_pool.py do (``measure.idle_pss``: 2 s idle, every process of
the daemon's tree but the warm JVMs), with the per-process breakdown. ``--doc``: then one
parse_markdown job of a small ``.doc`` (its warm JVM is left out, as ever), and the idle PSS again (a slot that has run a
document keeps a spare child forked ahead). ``--base REV``: the daemon of git revision REV too,
alternating round by round with this checkout (paired, as bench_boot.py).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_boot import export  # noqa: E402
from bench_pool import BIN, start_redis, wait_done, write_config  # noqa: E402
from measure import idle_pss  # noqa: E402
from tender_pool.client import Client  # noqa: E402


def one(tmp: Path, sock: str, prefix: str, pythonpath: Path | None, jobs: int, metrics: bool,
        doc: str | None) -> list[tuple[float, str]]:
    cfg = write_config(tmp, sock, prefix)
    if metrics:
        cfg.write_text(cfg.read_text().replace('listen = ""', 'listen = "127.0.0.1:0"'))
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    q = Client(f"unix://{sock}", prefix)
    d = subprocess.Popen([str(BIN), "run", "-c", str(cfg)], stderr=open(tmp / f"{prefix}.log", "w"),
                         start_new_session=True, env=env)
    try:
        while len(psutil.Process(d.pid).children()) < 4:
            time.sleep(0.05)
        ids = [q.submit(f"u{i % 50}", "noop", {}).id for i in range(jobs)]
        wait_done(q, ids)
        pss, _, parts = idle_pss([d.pid])
        out = [(pss, parts)]
        if doc:
            jid = q.submit("u0", "parse_markdown", {"file": doc}).id
            wait_done(q, [*ids, jid])
            if q.job(jid).state != "completed":
                raise SystemExit(f"parse_markdown: {q.job(jid)}")
            pss, _, parts = idle_pss([d.pid])
            out.append((pss, parts))
        return out
    finally:
        d.terminate()
        d.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--base", help="a git revision to compare with, alternating (paired)")
    ap.add_argument("--no-metrics", action="store_true", help='[metrics] listen = "" (not the default)')
    ap.add_argument("--doc", action="store_true", help="then one parse_markdown job, and the idle PSS again")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tp-idle-"))
    doc = None
    if a.doc:
        doc = str(REPO / "jvm" / "training" / "notice.doc")
    variants: dict[str, Path | None] = {"this": None}
    if a.base:
        variants = {f"base {a.base}": export(a.base, tmp / "rev"), "this": None}
    rp, sock = start_redis(tmp)
    got: dict[str, list[list[float]]] = {k: [] for k in variants}
    try:
        for r in range(a.rounds):
            for i, (name, path) in enumerate(variants.items()):
                res = one(tmp, sock, f"idle{r}x{i}", path, a.jobs, not a.no_metrics, doc)
                got[name].append([p for p, _ in res])
                load = open("/proc/loadavg").read().split()[:3]
                for label, (pss, parts) in zip(("no-op", "after a document"), res):
                    print(f"round {r} {name:>12} {label:>16}: {pss:5.1f} MiB  load {' '.join(load)}  {parts}",
                          flush=True)
    finally:
        rp.terminate()
        rp.wait()
    for name, runs in got.items():
        for j, label in enumerate(("no-op", "after a document")[: len(runs[0])]):
            v = [x[j] for x in runs]
            print(f"{name:>12} {label:>16}: median {statistics.median(v):.1f} MiB ({min(v):.1f}-{max(v):.1f})")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
