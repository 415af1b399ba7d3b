#!/usr/bin/env python3
"""The pool's own time around a document (issue 22): a small corpus ``.doc`` and ``.xls`` through a
real daemon with 1 slot (warm JVM), one job at a time, and what of its claim → stored is not the
extraction's own time. Figures, not assertions.

    .venv/bin/python bench/bench_doc_overhead.py [-n 30] [--rounds 3] [--base REV]

Per job: claim → stored = the job's ``finished_at − started_at`` (Redis's clock, ms: take.lua's start
stamp to settle.lua's), the extraction's own time = ``timings.extraction + timings.conversion`` of the
job's metadata file (``jvm`` shown as well), and their difference, the pool's overhead. Where the
metadata has them (this checkout), the pool's steps ``timings.pool_*`` are printed too (medians).

``--base REV`` (repeatable): also run the daemon of git revision REV (exported from this repository into a temporary
directory and imported in place of this checkout's code, the same venv, jar and Redis), interleaved
with this checkout round by round (``--rounds``), so the two are compared under the same load: a
paired A/B. Each round starts a fresh daemon, warms it (``WARM`` jobs per format, JVM started), then
runs ``-n / --rounds`` jobs per format, each submitted once the previous one is stored.
One private redis-server (Unix socket, AOF everysec) for all.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE / "peers"))
sys.path.insert(0, str(HERE))

WARM = 4  # jobs per format before measuring (JVM start, first fork, caches)
PACKAGES = ("store", "supervisor", "slots", "extract", "client", "web")


def corpus_dir() -> Path:
    return Path(os.environ.get("TENDER_POOL_CORPUS", "/work/shared/corpus"))


def small_files() -> dict[str, str]:
    """The smallest ``expect: ok`` .doc and .xls of the corpus that are not fuzzer cases."""
    m = json.loads((corpus_dir() / "manifest.json").read_text())
    out: dict[str, str] = {}
    for fmt in ("doc", "xls"):
        cands = [corpus_dir() / e["file"] for e in m["files"]
                 if e.get("expect") == "ok" and e["file"].lower().endswith("." + fmt) and "fuzz" not in e["file"].lower()]
        out[fmt] = str(min(cands, key=lambda p: p.stat().st_size))
    return out


def export_base(rev: str, tmp: Path) -> Path:
    """``rev``'s packages under ``tmp/base/pkg/tender_pool`` (put first on PYTHONPATH: a regular
    package found before the editable install's finder)."""
    src = tmp / "base" / "src"
    src.mkdir(parents=True)  # tmp: one directory per revision
    arch = subprocess.run(["git", "-C", str(REPO), "archive", rev, *PACKAGES], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=arch, check=True)
    # its bytecode, as `make setup` compiles this checkout's: with PYTHONDONTWRITEBYTECODE=1 a base
    # without it compiled every module a job's child imports lazily, in every child (its extraction
    # measured 2-4 × slower than the same code's here)
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(src)], check=True, capture_output=True)
    pkg = tmp / "base" / "pkg" / "tender_pool"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name in PACKAGES:
        (pkg / name).symlink_to(src / name)
    return pkg.parent


def config(path: Path, sock: str, tmp: Path) -> Path:
    import pool_toml

    pool_toml.write(path, sock, "bench", "bench-overhead", tmp, input_roots=(str(corpus_dir()),))
    path.write_text(path.read_text().replace("worker_count = 4", "worker_count = 1"))
    return path


class Daemon:
    def __init__(self, cfg: Path, tmp: Path, pythonpath: Path | None):
        from tender_pool.client import Client

        self.c = Client.from_config(str(cfg))
        self.r = self.c.r
        self.steps = pythonpath is None  # this checkout records the pool's steps; a base may not (0.3 s)
        env = dict(os.environ, TENDER_POOL_JVM_DIR=str(REPO / "jvm" / "build"))
        if pythonpath is not None:
            env["PYTHONPATH"] = str(pythonpath)
        self.log = open(tmp / f"daemon-{pythonpath.parent.parent.name if pythonpath else 'this'}.log", "ab")
        self.p = subprocess.Popen([str(REPO / ".venv" / "bin" / "tender-pool"), "run", "-c", str(cfg)],
                                  stdout=self.log, stderr=self.log, start_new_session=True, env=env)

    def one(self, user: str, path: str) -> dict:
        jid = self.c.submit(user, "parse_markdown", {"file": path}, priority="interactive").id
        key = self.c.k.job(jid)
        end = time.monotonic() + 60
        while True:
            state = self.r.hget(key, "state")
            if state in (b"completed", b"failed", b"dead", b"cancelled"):
                break
            if time.monotonic() > end:
                raise SystemExit(f"job {jid} not done after 60 s")
            time.sleep(0.003)
        s, f = self.r.hmget(key, "started_at", "finished_at")
        job = self.c.job(jid)
        if job.state != "completed":
            raise SystemExit(f"job {jid} {job.state}: {job.error}")
        meta = json.loads(Path(job.result["metadata_path"]).read_text())
        end = time.monotonic() + 1.0
        while "pool_settle" not in meta["timings"] and time.monotonic() < (end if self.steps else end - 0.7):
            time.sleep(0.002)  # the slot adds its steps to the file right after the settle
            meta = json.loads(Path(job.result["metadata_path"]).read_text())
        return {"claim_stored": int(f) - int(s), "timings": meta["timings"]}

    def spare_memory(self) -> tuple[int, int] | None:
        """(PSS, USS) bytes of the slot's children other than its JVM (a spare child forked ahead), or None."""
        import psutil

        try:
            slots = [c for c in psutil.Process(self.p.pid).children() if "slot" in " ".join(c.cmdline())]
            kids = [k for s in slots for k in s.children() if "java" not in k.name()]
            if not kids:
                return None
            mem = [k.memory_full_info() for k in kids]
            return sum(m.pss for m in mem), sum(m.uss for m in mem)
        except psutil.Error:
            return None

    def stop(self) -> None:
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
        self.log.close()


def fmt(xs: list[float], nd: int = 1) -> str:
    if not xs:
        return "–"
    return f"{statistics.median(xs):.{nd}f} ({min(xs):.{nd}f}–{max(xs):.{nd}f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=30, help="measured jobs per format and variant")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (daemon logs)")
    ap.add_argument("--base", action="append", default=[], help="a git revision to compare with, interleaved (repeatable)")
    a = ap.parse_args()
    from measure import start_redis

    files = small_files()
    tmp = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    rp, sock = start_redis(tmp)
    variants: dict[str, Path | None] = {}
    for rev in a.base:
        variants[f"base {rev}"] = export_base(rev, tmp / rev)
    variants["this checkout"] = None
    res: dict[str, dict[str, list[dict]]] = {v: {f: [] for f in files} for v in variants}
    load0 = open("/proc/loadavg").read().split()[:3]
    per_round = max(1, a.n // a.rounds)
    spare_mem: dict[str, list[tuple[int, int]]] = {}
    try:
        cfg = config(tmp / "pool.toml", sock, tmp)
        for rnd in range(a.rounds):
            order = list(variants) if rnd % 2 == 0 else list(reversed(variants))
            for v in order:
                import redis as _redis

                _redis.Redis(unix_socket_path=sock).flushall()
                shutil.rmtree(tmp / "results", ignore_errors=True)
                d = Daemon(cfg, tmp, variants[v])
                try:
                    for f, path in files.items():
                        for i in range(WARM):
                            d.one(f"warm{i}", path)
                    time.sleep(0.2)
                    mem = d.spare_memory()
                    if mem is not None:
                        spare_mem.setdefault(v, []).append(mem)
                    for i in range(per_round):
                        for f, path in files.items():
                            res[v][f].append(d.one(f"u{i % 3}", path))
                finally:
                    d.stop()
    finally:
        rp.terminate()
        rp.wait()
        if a.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    load1 = open("/proc/loadavg").read().split()[:3]
    print(f"files: {', '.join(Path(p).name + f' ({Path(p).stat().st_size} B)' for p in files.values())}")
    print(f"1 slot, warm JVM, {per_round * a.rounds} jobs per format and variant in {a.rounds} interleaved rounds; "
          f"ms, median (min–max); loadavg before {' '.join(load0)}, after {' '.join(load1)}")
    for v, mems in spare_mem.items():
        print(f"{v}: the idle slot's spare child: PSS {max(m[0] for m in mems) / 2**20:.2f} MiB, "
              f"USS {max(m[1] for m in mems) / 2**20:.2f} MiB (max of {len(mems)} rounds)")
    for f in files:
        print(f"\n.{f}")
        steps = sorted({k for v in variants for r in res[v][f] for k in r["timings"] if k.startswith("pool_")},
                       key=lambda k: min(list(r["timings"]).index(k) for v in variants for r in res[v][f]
                                         if k in r["timings"]))
        rows = [("claim → stored", lambda r: r["claim_stored"]),
                ("extraction's own (extraction + conversion)",
                 lambda r: 1000 * (r["timings"]["extraction"] + r["timings"]["conversion"])),
                ("  of which jvm", lambda r: 1000 * r["timings"].get("jvm", 0.0)),
                ("pool's overhead (claim → stored − own)",
                 lambda r: r["claim_stored"] - 1000 * (r["timings"]["extraction"] + r["timings"]["conversion"]))]
        rows += [(f"  {k}", (lambda k: lambda r: 1000 * r["timings"][k] if k in r["timings"] else None)(k))
                 for k in steps]
        print(f"  {'':44s}" + "".join(f"{v:>26s}" for v in variants))
        for label, fn in rows:
            cells = []
            for v in variants:
                xs = [x for x in (fn(r) for r in res[v][f]) if x is not None]
                cells.append(fmt(xs, 2 if label.startswith("  pool") else 1))
            print(f"  {label:44s}" + "".join(f"{c:>26s}" for c in cells))


if __name__ == "__main__":
    main()
