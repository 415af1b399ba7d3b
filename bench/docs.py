#!/usr/bin/env python3
"""bench/docs: real documents (issue 22) — the corpus against a replica of the platform's current
architecture and against tender-pool, interleaved repetitions, and the extraction ceiling. Run through
``bench/docs`` (it builds ARQ's venv as bench/compare does). Prints a table; figures, not assertions.

    bench/docs [--quick] [--reps N] [--copies N] [--users N]

The workload: every corpus document with ``expect: ok`` ($TENDER_POOL_CORPUS, default
/work/shared/corpus, manifest.json), each × ``--copies`` (6; ``--quick`` 2), job i for user
``u<i mod --users>`` (20), all queued first, then the workers launched. One private redis-server
(``measure.start_redis``), flushed between systems.

- **replica** (``peers/replica_arq.py``): 4 ``arq`` processes with ``max_jobs=1`` in ARQ's own venv,
  the per-user lock with ``Retry(defer)``, a new runner process per job (``peers/replica_runner.py``,
  ``start_new_session=True``, our readers; a cold JVM per .doc/.xls).
- **tender-pool**: ``tender-pool run``, 4 slots, default settings (``pool_toml``: input_roots the
  corpus), ``parse_markdown`` jobs queued with ``Client.submit`` (bulk).
- **ceiling**: the same documents through ``extract()`` in-process, 2 processes each taking the next
  document (a warm JVM each for .doc/.xls): no pool, no Redis (``--ceiling-worker``).

Per system and repetition: documents/s (first start → last finish, and launch → last finish); CPU per
document of every process (the launched trees from their launch, their reaped children included: runners,
JVMs, forked job children; plus redis-server from after the enqueue); claim → done per format; another
user's small .doc submitted once a quarter of the batch has finished (ours ``priority="interactive"``,
the replica's one ARQ queue has no other), submit → result; then, the batch done, that .doc alone 3 times
(claim → done); peak RSS and PSS of all processes (launched trees, warm JVMs included, and redis-server),
sampled from /proc every ``SAMPLE_S``; boot (launch → first start). The Markdown of every job is compared
across the systems (and the ceiling): identical per file, mismatches counted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE / "peers"))
sys.path.insert(0, str(HERE))

SAMPLE_S = 0.2  # /proc sampling period for the peak RSS / PSS
QUARTER = 0.25  # the small document is submitted once this share of the batch has finished
ALONE = 3  # the small document alone, this many times
LIMIT_S = 1800.0


def corpus_dir() -> Path:
    return Path(os.environ.get("TENDER_POOL_CORPUS", "/work/shared/corpus"))


def documents() -> list[tuple[str, str]]:
    """(absolute path, kind) of every ``expect: ok`` document, in manifest order."""
    m = json.loads((corpus_dir() / "manifest.json").read_text())
    return [(str(corpus_dir() / e["file"]), e["kind"]) for e in m["files"] if e.get("expect") == "ok"]


def fmt_of(path: str) -> str:
    return Path(path).suffix.lower().lstrip(".")


def digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


# --- measuring -------------------------------------------------------------------------------------


class Sampler(threading.Thread):
    """Peak sums of RSS and PSS over every process under ``roots()`` (java included) and ``extra``
    pids, one /proc pass every ``SAMPLE_S``."""

    def __init__(self, roots, extra: list[int]):
        super().__init__(daemon=True)
        self.roots, self.extra = roots, extra
        self.stop_ev = threading.Event()
        self.rss = self.pss = 0.0
        self.samples = 0
        self.at_peak: dict[str, list[float]] = {}  # kind → [processes, RSS MiB, PSS MiB] in the peak PSS sample

    def run(self) -> None:
        import psutil
        from measure import tree

        while not self.stop_ev.is_set():
            procs = tree(self.roots() + self.extra, exclude=())
            rss = pss = 0
            parts: dict[str, list[float]] = {}
            for p in procs:
                try:
                    m = p.memory_full_info()
                    kind = kind_of(p)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                rss += m.rss
                pss += m.pss
                part = parts.setdefault(kind, [0, 0.0, 0.0])
                part[0] += 1
                part[1] += m.rss / 2**20
                part[2] += m.pss / 2**20
            if pss / 2**20 > self.pss:
                self.at_peak = parts
            self.rss, self.pss = max(self.rss, rss / 2**20), max(self.pss, pss / 2**20)
            self.samples += 1
            self.stop_ev.wait(SAMPLE_S)

    def stop(self) -> None:
        self.stop_ev.set()
        self.join()


def kind_of(p) -> str:
    """supervisor / slot / job child (a slot's fork) / java / runner / arq / redis-server."""
    title = " ".join(p.cmdline())
    if title.startswith("tender-pool: "):
        k = title.split()[1]
        return {"slot": "slot", "supervisor": "supervisor"}.get(k, f"tender-pool {k}")
    if p.name() == "java":
        return "java"
    if "replica_runner.py" in title:
        return "runner"
    if "replica_arq" in title:
        return "arq worker"
    return p.name()


def tree_cpu(roots: list[int]) -> dict[int, tuple[str, float, float]]:
    """pid → (name, own CPU s, reaped children's CPU s) of every live process under ``roots``."""
    import psutil
    from measure import tree

    out = {}
    for p in tree(roots, exclude=()):
        try:
            c = p.cpu_times()
            title = " ".join(p.cmdline())
            name = title.split()[1] if title.startswith("tender-pool: ") else p.name()
            out[p.pid] = (name, c.user + c.system, c.children_user + c.children_system)
        except psutil.NoSuchProcess:
            pass
    return out


def redis_cpu(pid: int) -> float:
    import psutil

    c = psutil.Process(pid).cpu_times()
    return c.user + c.system


def wait_for(cond, limit: float, what: str, step: float = 0.02) -> None:
    end = time.monotonic() + limit
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError(what)
        time.sleep(step)


# --- the systems -----------------------------------------------------------------------------------


class Replica:
    name = "replica"

    def __init__(self, sock: str, tmp: Path):
        import redis
        from systems import Peer

        class _P(Peer):
            system = "replica"

            def commands(self):
                from systems import ARQ_PY

                return [([str(ARQ_PY.with_name("arq")), "replica_arq.WorkerSettings"], {}) for _ in range(4)]

        self.out = tmp / "replica-md"
        self.peer = _P("replica", sock, tmp)
        self.extra = {"BENCH_REPLICA_OUT": str(self.out), "BENCH_REPLICA_PY": str(REPO / ".venv" / "bin" / "python")}
        self.peer.env = self._env(self.peer.env)
        self.r = redis.Redis(unix_socket_path=sock)
        self.tmp = tmp

    def _env(self, base):
        """Peer.env (the socket, the queue name, PYTHONPATH=bench/peers) plus where the runner writes and
        which python runs it: ours, so the runner imports our readers, not anything of ARQ's venv."""
        def env(extra=None):
            e = base(extra)
            e.update(self.extra)
            return e
        return env

    def enqueue(self, jobs: list[tuple[str, str]]) -> list[str]:
        from systems import ARQ_PY

        f = self.tmp / "replica-jobs.json"
        f.write_text(json.dumps(jobs))
        r = subprocess.run([str(ARQ_PY), str(HERE / "peers" / "replica_ctl.py"), str(f)], env=self.peer.env(),
                           cwd=HERE / "peers", check=True, capture_output=True, text=True)
        return r.stdout.split()

    def records(self) -> list[dict]:
        return [json.loads(x) for x in self.r.lrange("bench:docs:replica", 0, -1)]

    def done(self) -> int:
        return self.r.llen("bench:docs:replica")

    def run(self, jobs, small: str, redis_pid: int) -> dict:
        shutil.rmtree(self.out, ignore_errors=True)
        self.out.mkdir()
        self.r.flushall()
        n = len(jobs)
        ids = self.enqueue(jobs)
        rc0 = redis_cpu(redis_pid)
        t_launch = time.time()
        self.peer.start()
        sampler = Sampler(self.peer.roots, [redis_pid])
        sampler.start()
        try:
            wait_for(lambda: self.done() >= int(n * QUARTER), LIMIT_S, "replica: a quarter of the batch")
            small_id = self.enqueue([("late", small)])[0]
            wait_for(lambda: self.done() >= n + 1, LIMIT_S, "replica: the batch")
            cpu = tree_cpu(self.peer.roots())
            rc1 = redis_cpu(redis_pid)
            sampler.stop()
            recs = {x["id"]: x for x in self.records()}
            alone = []
            for i in range(ALONE):
                aid = self.enqueue([(f"alone{i}", small)])[0]
                wait_for(lambda: self.done() >= n + 2 + i, 120, "replica: the small document alone")
                a = next(x for x in self.records() if x["id"] == aid)
                alone.append(a["t1"] - a["t0"])
        finally:
            sampler.stop()
            self.peer.stop()
        batch = [recs[i] for i in ids]
        deferred = int(self.r.get("bench:docs:replica:deferred") or 0)
        s = recs[small_id]
        own = sum(v[1] for v in cpu.values())
        reaped = sum(v[2] for v in cpu.values())
        md = {}
        for (user, path), jid in zip(jobs, ids):
            p = self.out / f"{jid}.md"
            md.setdefault(path, []).append(digest(p.read_text("utf-8")) if p.exists() else "missing")
        first, last = min(x["t0"] for x in batch), max(x["t1"] for x in batch)
        return {
            "f2l": n / (last - first), "e2e": n / (last - t_launch), "boot": first - t_launch,
            "cpu": (own + reaped + rc1 - rc0) * 1000 / (n + 1),
            "cpu_parts": {"arq workers' own": own * 1000 / (n + 1),
                          "runners + cold JVMs (reaped)": reaped * 1000 / (n + 1),
                          "redis": (rc1 - rc0) * 1000 / (n + 1)},
            "busy": (own + reaped + rc1 - rc0) / (max(last, s["t1"]) - t_launch),
            "claim": {f: [x["t1"] - x["t0"] for x in batch if fmt_of(x["file"]) == f]
                      for f in {fmt_of(p) for _, p in jobs}},
            "small": s["t1"] - s["t_enq"], "small_claim": s["t1"] - s["t0"], "alone": statistics.median(alone),
            "rss": sampler.rss, "pss": sampler.pss, "samples": sampler.samples, "at_peak": sampler.at_peak,
            "failed": sum(1 for x in batch if not x["ok"]), "md": md, "collisions": deferred,
            "errors": sorted({x["err"].strip().splitlines()[-1]
                              for x in batch if not x["ok"] and x["err"].strip()})[:3],
        }


class Ours:
    name = "tender-pool"

    def __init__(self, sock: str, tmp: Path):
        import pool_toml
        from tender_pool.client import Client

        self.cfg = pool_toml.write(tmp / "docs.toml", sock, "bench", "bench-docs", tmp,
                                   input_roots=(str(corpus_dir()),))
        self.c = Client.from_config(str(self.cfg))
        self.r = self.c.r
        self.tmp = tmp
        self.d: subprocess.Popen | None = None

    def done(self) -> int:
        return self.r.zcard(self.c.k.finished)

    def roots(self) -> list[int]:
        return [self.d.pid] if self.d else []

    def stamps(self, jid: str) -> tuple[float, float, str, int]:
        s, f, st, w = self.r.hmget(self.c.k.job(jid), "started_at", "finished_at", "state", "waits")
        return int(s) / 1000, int(f) / 1000, st.decode(), int(w or 0)

    def run(self, jobs, small: str, redis_pid: int) -> dict:
        from measure import kill_group

        self.r.flushall()
        shutil.rmtree(self.tmp / "results", ignore_errors=True)
        n = len(jobs)
        ids = [self.c.submit(user, "parse_markdown", {"file": path}).id for user, path in jobs]
        rc0 = redis_cpu(redis_pid)
        log = open(self.tmp / "docs-ours.log", "ab")
        t_launch = time.time()
        self.d = subprocess.Popen([str(REPO / ".venv" / "bin" / "tender-pool"), "run", "-c", str(self.cfg)],
                                  stdout=log, stderr=log, start_new_session=True)
        sampler = Sampler(self.roots, [redis_pid])
        sampler.start()
        try:
            wait_for(lambda: self.done() >= int(n * QUARTER), LIMIT_S, "ours: a quarter of the batch")
            t_sub = time.time()
            small_id = self.c.submit("late", "parse_markdown", {"file": small}, priority="interactive").id
            wait_for(lambda: self.done() >= n + 1, LIMIT_S, "ours: the batch")
            cpu = tree_cpu(self.roots())
            rc1 = redis_cpu(redis_pid)
            sampler.stop()
            alone = []
            for i in range(ALONE):
                aid = self.c.submit(f"alone{i}", "parse_markdown", {"file": small}, priority="interactive").id
                wait_for(lambda: self.done() >= n + 2 + i, 120, "ours: the small document alone")
                s0, f0, *_ = self.stamps(aid)
                alone.append(f0 - s0)
            recs = {j: self.stamps(j) for j in ids}
            md = {}
            failed = 0
            for (user, path), jid in zip(jobs, ids):
                if recs[jid][2] == "completed":
                    md.setdefault(path, []).append(digest(self.c.markdown(jid)))
                else:
                    failed += 1
                    md.setdefault(path, []).append("failed")
        finally:
            sampler.stop()
            if self.d is not None:
                self.d.terminate()
                try:
                    self.d.wait(30)
                except subprocess.TimeoutExpired:
                    pass
                kill_group(self.d.pid)
                self.d.wait()
                self.d = None
        s_start, s_fin, *_ = self.stamps(small_id)
        first = min(v[0] for v in recs.values())
        last = max(v[1] for v in recs.values())
        parts: dict[str, float] = {}
        for name, own, reaped in cpu.values():
            key = {"supervisor": "supervisor", "slot": "slots' own", "java": "warm JVMs"}.get(name, name)
            parts[key] = parts.get(key, 0.0) + own * 1000 / (n + 1)
            if reaped:
                k2 = "job children (reaped by slots)" if name == "slot" else f"reaped by {key}"
                parts[k2] = parts.get(k2, 0.0) + reaped * 1000 / (n + 1)
        parts["redis"] = (rc1 - rc0) * 1000 / (n + 1)
        total = sum(own + reaped for _, own, reaped in cpu.values()) + rc1 - rc0
        return {
            "f2l": n / (last - first), "e2e": n / (last - t_launch), "boot": first - t_launch,
            "cpu": total * 1000 / (n + 1), "cpu_parts": parts, "busy": total / (max(last, s_fin) - t_launch),
            "claim": {f: [recs[j][1] - recs[j][0] for (u, p), j in zip(jobs, ids) if fmt_of(p) == f]
                      for f in {fmt_of(p) for _, p in jobs}},
            "small": s_fin - t_sub, "small_claim": s_fin - s_start, "alone": statistics.median(alone),
            "rss": sampler.rss, "pss": sampler.pss, "samples": sampler.samples, "at_peak": sampler.at_peak,
            "failed": failed, "md": md,
            "collisions": sum(v[3] for v in recs.values()),
        }


def ceiling(jobs, tmp: Path) -> dict:
    """The extraction ceiling, in a process of our venv (``--ceiling-worker``)."""
    f = tmp / "ceiling-jobs.json"
    f.write_text(json.dumps([p for _, p in jobs]))
    r = subprocess.run([str(REPO / ".venv" / "bin" / "python"), __file__, "--ceiling-worker", str(f)],
                       check=True, capture_output=True, text=True)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    md: dict[str, list[str]] = {}
    claim: dict[str, list[float]] = {}
    for path, t0, t1, h in out["docs"]:
        md.setdefault(path, []).append(h)
        claim.setdefault(fmt_of(path), []).append(t1 - t0)
    n = len(out["docs"])
    first, last = min(d[1] for d in out["docs"]), max(d[2] for d in out["docs"])
    return {"f2l": n / (last - first), "cpu": out["cpu_s"] * 1000 / n, "busy": out["cpu_s"] / (last - first),
            "claim": claim, "md": md, "failed": sum(1 for d in out["docs"] if d[3] == "failed"),
            "cpu_parts": {"2 extracting processes + their warm JVMs": out["cpu_s"] * 1000 / n}}


def ceiling_worker(listfile: str) -> None:
    """2 forked processes take the next document from a shared queue and ``extract()`` it in-process
    (a warm JVM each for .doc/.xls); prints one JSON line: per document (path, start, end, Markdown
    digest) and the CPU seconds of this process and every process it and its children reaped."""
    import multiprocessing as mp
    import resource

    paths = json.loads(Path(listfile).read_text())
    ctx = mp.get_context("fork")
    todo, done = ctx.Queue(), ctx.Queue()
    for p in paths:
        todo.put(p)
    for _ in range(2):
        todo.put(None)

    def work() -> None:
        from tender_pool.extract.api import extract
        from tender_pool.extract.errors import ExtractError
        from tender_pool.extract.jvm import WarmJvm

        warm = WarmJvm()
        try:
            while (p := todo.get()) is not None:
                t0 = time.time()
                try:
                    x = extract(p, timeout=600, jvm=warm if fmt_of(p) in ("doc", "xls") else None)
                    h = digest(x.markdown)
                except ExtractError:
                    h = "failed"
                done.put((p, t0, time.time(), h))
        finally:
            warm.close()

    procs = [ctx.Process(target=work) for _ in range(2)]
    for pr in procs:
        pr.start()
    docs = [done.get() for _ in paths]
    for pr in procs:
        pr.join()
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    print(json.dumps({"docs": docs, "cpu_s": cpu}))


# --- report ----------------------------------------------------------------------------------------


def fmt(xs: list[float], nd: int = 2) -> str:
    from measure import med_range

    m, lo, hi = med_range(xs)
    if m != m:
        return "—"
    f = f"{{:.{nd}f}}"
    return f.format(m) if len(xs) == 1 or lo == hi else f"{f.format(m)} ({f.format(lo)}–{f.format(hi)})"


def med(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def report(res: dict[str, list[dict]], formats: list[str], a, n: int, distinct: int, small: str,
           loads: list[str]) -> None:
    from measure import pct

    names = ["replica", "tender-pool", "ceiling"]
    rows: list[tuple[str, list[str], str]] = []

    def col(name: str, key: str, fn=lambda r, k: r[k]) -> list[float]:
        return [fn(r, key) for r in res.get(name, []) if key in r or key == "*"]

    def ratio(x: float, y: float) -> str:
        return f"{x / y:.2f}" if y == y and x == x and y else "—"

    def row(label: str, key: str, nd: int, fn=lambda r, k: r[k], rat=None, names_=names) -> None:
        cells = [fmt(col(nm, key, fn), nd) if nm in names_ else "" for nm in names]
        r_txt = rat(med(col("replica", key, fn)), med(col("tender-pool", key, fn))) if rat else ""
        rows.append((label, cells, r_txt))

    faster = lambda rep, ours: f"{ours / rep:.2f} ×" if rep else "—"  # noqa: E731
    less = lambda rep, ours: f"{rep / ours:.2f} × less" if ours else "—"  # noqa: E731
    row("documents/s, first start → last finish", "f2l", 2, rat=faster)
    row("documents/s, launch → last finish", "e2e", 2, rat=faster, names_=names[:2])
    row("CPU ms per document, all processes", "cpu", 1, rat=less)
    row("busy cores (CPU s ÷ wall s)", "busy", 2, names_=names)
    for f in formats:
        for q, lab in ((0.5, "median"), (0.95, "p95")):
            row(f".{f} claim → done {lab}, s", "claim", 2,
                fn=lambda r, k, f=f, q=q: pct(r[k].get(f, []), q),
                rat=lambda rep, ours: f"{rep / ours:.1f} ×" if ours else "—")
    row("small .doc during the batch: submit → result, s", "small", 3,
        rat=lambda rep, ours: f"{rep / ours:.0f} ×" if ours else "—",
        names_=names[:2])
    row("  its claim → done in the batch, s", "small_claim", 3, names_=names[:2])
    row("  the same .doc alone: claim → done, s", "alone", 3, names_=names[:2])
    row("peak RSS of all processes, MiB", "rss", 0, rat=lambda rep, ours: f"{ours / rep:.2f} ×", names_=names[:2])
    row("peak PSS of all processes, MiB", "pss", 0, rat=lambda rep, ours: f"{ours / rep:.2f} ×", names_=names[:2])
    row("boot: launch → first start, s", "boot", 2, rat=lambda rep, ours: f"{ours / rep:.2f} ×", names_=names[:2])
    w0 = max(len(r[0]) for r in rows) + 2
    widths = [max(len(nm), *(len(r[1][i]) for r in rows)) + 2 for i, nm in enumerate(names)]
    print(f"\n{n} documents ({distinct} distinct × {a.copies}, {a.users} users), {a.reps} repetition(s); "
          f"small .doc: {Path(small).name}; medians, min–max in brackets")
    print(f"{'':<{w0}}" + "".join(f"{nm:>{w}}" for nm, w in zip(names, widths)) + "   tender-pool vs replica")
    for label, cells, r_txt in rows:
        print(f"{label:<{w0}}" + "".join(f"{c:>{w}}" for c, w in zip(cells, widths)) + f"   {r_txt}")
    print("\nCPU ms per document by process (medians):")
    for nm in names:
        parts: dict[str, list[float]] = {}
        for r in res.get(nm, []):
            for k, v in r["cpu_parts"].items():
                parts.setdefault(k, []).append(v)
        print(f"  {nm}: " + ", ".join(f"{k} {med(v):.1f}" for k, v in parts.items()))
    # Markdown: every job's text against the first tender-pool copy of its file
    ref: dict[str, str] = {}
    for r in res.get("tender-pool", []) + res.get("replica", []) + res.get("ceiling", []):
        for path, hs in r["md"].items():
            ref.setdefault(path, hs[0])
    bad_files, bad_jobs, jobs = set(), {nm: 0 for nm in names}, {nm: 0 for nm in names}
    for nm in names:
        for r in res.get(nm, []):
            for path, hs in r["md"].items():
                for h in hs:
                    jobs[nm] += 1
                    if h != ref[path]:
                        bad_jobs[nm] += 1
                        bad_files.add(Path(path).name)
    print(f"\nMarkdown: {distinct - len(bad_files)} of {distinct} files identical in every job of every system; "
          "jobs differing from tender-pool's first copy: "
          + ", ".join(f"{nm} {bad_jobs[nm]}/{jobs[nm]}" for nm in names)
          + (f" ({', '.join(sorted(bad_files)[:8])})" if bad_files else ""))
    print("failed jobs: " + ", ".join(f"{nm} {sum(r['failed'] for r in res.get(nm, []))}" for nm in names)
          + "".join(f"; replica errors: {r['errors']}" for r in res.get("replica", [])[:1] if r.get("errors")))
    print("a job found its user's lock taken (replica: Retry(defer=0.5 s) raised; ours: parked, job hash `waits`): "
          + ", ".join(f"{nm} {fmt([r['collisions'] for r in res.get(nm, [])], 0)}" for nm in names[:2]))
    print("at the peak PSS sample, by process kind (processes, RSS, PSS MiB; each run):")
    for nm in names[:2]:
        for r in res.get(nm, []):
            print(f"  {nm}: " + "; ".join(f"{k} ×{v[0]} {v[1]:.0f} / {v[2]:.0f}"
                                          for k, v in sorted(r["at_peak"].items(), key=lambda kv: -kv[1][2])))
    print("PSS samples per run: " + ", ".join(f"{nm} {fmt([r['samples'] for r in res.get(nm, [])], 0)}"
                                                for nm in names[:2]))
    # the targets, as ratios of this run's medians
    rep, ours, ceil = ({k: med(col(nm, k)) for k in ("f2l", "cpu", "pss", "small", "alone")} for nm in names)
    print("\nissue 22's targets (medians of this run):")
    tg = [
        ("documents/s ≥ 6 × the replica's", ours["f2l"] / rep["f2l"], "×", ours["f2l"] / rep["f2l"] >= 6),
        ("CPU per document ≤ 1/6 of the replica's (replica ÷ ours ≥ 6)", rep["cpu"] / ours["cpu"], "×",
         rep["cpu"] / ours["cpu"] >= 6),
        ("peak PSS ≤ the replica's (ours ÷ replica ≤ 1)", ours["pss"] / rep["pss"], "×", ours["pss"] <= rep["pss"]),
        ("small .doc submit → result ≤ alone claim → done + 10 ms",
         (ours["small"] - ours["alone"]) * 1000, "ms over", ours["small"] <= ours["alone"] + 0.010),
        ("pool ≥ 90 % of the extraction ceiling (documents/s)", 100 * ours["f2l"] / ceil["f2l"], "%",
         ours["f2l"] >= 0.9 * ceil["f2l"]),
        ("  and CPU per document: ceiling ÷ ours", ceil["cpu"] / ours["cpu"], "×", None),
    ]
    for label, v, unit, met in tg:
        m = "" if met is None else ("met" if met else "not met")
        print(f"  {label:<66} {v:8.2f} {unit:<8} {m}")
    print("\nload average before each system: " + "; ".join(loads))


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--ceiling-worker":
        ceiling_worker(sys.argv[2])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1 repetition, each document × 2")
    ap.add_argument("--reps", type=int)
    ap.add_argument("--copies", type=int, help="copies of each distinct document (6; --quick 2)")
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--only", help="comma-separated: replica,tender-pool,ceiling")
    ap.add_argument("--docs", type=int, help="only the first N distinct documents (a smoke test)")
    a = ap.parse_args()
    a.reps = a.reps or (1 if a.quick else 3)
    a.copies = a.copies or (2 if a.quick else 6)
    from measure import machine, start_redis

    docs = documents()[: a.docs or None]
    jobs = [(f"u{i % a.users}", p) for i, (p, _) in enumerate(d for _ in range(a.copies) for d in docs)]
    small = min((p for p, k in docs if k == "doc"), key=lambda p: os.path.getsize(p))
    formats = [f for f in ("doc", "xls", "docx", "xlsx", "pdf") if any(k == f for _, k in docs)]
    tmp = Path(tempfile.mkdtemp(prefix="tp-docs-"))
    rp, sock = start_redis(tmp)
    print(f"machine: {machine()}; {len(jobs)} documents; redis-server pid {rp.pid}", flush=True)
    systems: dict[str, object] = {"replica": Replica(sock, tmp), "tender-pool": Ours(sock, tmp), "ceiling": None}
    order = [s for s in systems if not a.only or s in a.only.split(",")]
    res: dict[str, list[dict]] = {s: [] for s in systems}
    loads = []
    try:
        for rep in range(a.reps):
            for name in order[rep % len(order):] + order[: rep % len(order)]:
                print(f"rep {rep + 1}: {name} ({machine()})", flush=True)
                loads.append(f"{name} {os.getloadavg()[0]:.2f}")
                t = time.monotonic()
                try:
                    r = ceiling(jobs, tmp) if name == "ceiling" else systems[name].run(jobs, small, rp.pid)
                except (TimeoutError, subprocess.CalledProcessError) as e:
                    print(f"  {name} failed: {e}", flush=True)
                    continue
                res[name].append(r)
                print(f"  {r['f2l']:.2f} documents/s, {r['cpu']:.1f} CPU ms/document, {time.monotonic() - t:.0f} s",
                      flush=True)
        report(res, formats, a, len(jobs), len(docs), small, loads)
        print(f"\nmachine at the end: {machine()}")
    finally:
        from measure import kill_group
        from systems import LAUNCHED

        for p in LAUNCHED:
            if p.poll() is None:
                kill_group(p.pid)
        rp.kill()
        rp.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
