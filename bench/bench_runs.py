#!/usr/bin/env python3
"""Runs benchmark: one 1,000-job run against plain jobs, on a private redis-server and a real
`tender-pool run` with 4 slots and the `noop` handler (``sh -c 'cat; echo {}'``).

Prints, each measured in the same process and the same daemon:
- plain jobs: N ``Client.submit`` calls (one user per job, as the platform's single clicks), time
  to all completed, jobs/s, Redis commands per job;
- a run of N jobs (one user; ``per_user = 0`` so it may use every slot): ``submit_run`` time (items checked and hashed, one script call and
  the ``runs show`` read-back), time to ``run_finished``, jobs/s, commands per job;
- the same with a watcher: events delivered per second to ``Client.events`` (snapshot excluded;
  this is the run's own pace), the watcher's own commands apart, and the reader's speed replaying
  the finished run's whole stream (``events(since="0")``).

Commands are counted with ``INFO commandstats`` (commands run inside Lua included), XADD in its own
column (CONTRACT: event-stream writes are reported apart, not held against the per-job target);
the benchmark's own INFO calls are removed. Figures, not assertions: compare ratios of one run.

    .venv/bin/python bench/bench_runs.py [--jobs 1000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from conftest import Harness, RedisServer, wait_until  # noqa: E402

from tender_pool.client import Client  # noqa: E402

OWN = ("info", "zcount")  # our own observation (the pool never sends ZCOUNT)
# per_user = 0: a run's jobs may use every slot (one user's run would otherwise run one at a time)
NOOP = """
[handlers.noop]
command = ["/bin/sh", "-c", "cat >/dev/null; echo '{}'"]
timeout = 10
per_user = 0
"""
WATCHER = ("xread", "xinfo|stream", "xinfo", "xrevrange", "lrange", "multi", "exec", "hgetall", "hmget", "hget")


def stats(r) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in r.info("commandstats").items()}


def delta(a: dict, b: dict) -> dict[str, int]:
    return {k: b.get(k, 0) - a.get(k, 0) for k in b if b.get(k, 0) - a.get(k, 0)}


def settle(r, seconds: float = 0.6) -> None:
    """Let the daemon's periodic work after the last job (idle claims) not count against the next
    measurement: wait, then measure from a fresh snapshot."""
    time.sleep(seconds)


def per_job(d: dict[str, int], n: int) -> tuple[float, float]:
    d = {k: v for k, v in d.items() if k not in OWN}
    xadd = d.pop("xadd", 0)
    return sum(d.values()) / n, xadd / n


def plain(c: Client, r, n: int) -> dict:
    sec, us = r.time()
    since_ms = sec * 1000 + us // 1000
    s0 = stats(r)
    t0 = time.perf_counter()
    for i in range(n):
        c.submit(f"u{i}", "noop", {"i": i})
    t_sub = time.perf_counter() - t0
    wait_until(lambda: r.zcount(c.k.finished, since_ms, "+inf") >= n, 600, 0.02, "plain jobs")
    t_all = time.perf_counter() - t0
    d = delta(s0, stats(r))
    cmds, xadd = per_job(d, n)
    return {"submit_s": t_sub, "total_s": t_all, "cmds": cmds, "xadd": xadd, "top": top(d, n)}


def top(d: dict[str, int], n: int, k: int = 8) -> str:
    rows = sorted(((v / n, c) for c, v in d.items() if c not in OWN), reverse=True)[:k]
    return ", ".join(f"{c} {v:.1f}" for v, c in rows)


def run(c: Client, r, n: int, watch: bool) -> dict:
    items = [{"key": f"1.{i}", "payload": {"section": i}} for i in range(n)]
    delivered: list[float] = []
    watcher_cmds: dict[str, int] = {}
    s0 = stats(r)
    t0 = time.perf_counter()
    created = c.submit_run("bench", "noop", items, overwrite=True)
    t_sub = time.perf_counter() - t0
    done = threading.Event()

    def follow() -> None:
        w = Client(c.url, c.k.base.split(":")[0], "tender_parse")
        for ev in w.events(created.id):
            if ev.type != "snapshot":
                delivered.append(time.perf_counter())
        done.set()

    if watch:
        th = threading.Thread(target=follow, daemon=True)
        th.start()
        done.wait(600)
    polls = [0]

    def finished() -> bool:
        polls[0] += 1
        return c.r.hget(c.k.run(created.id), "state") in (b"completed", b"partial_success", b"failed")

    wait_until(finished, 600, 0.02, "run finished")
    t_all = time.perf_counter() - t0
    d = delta(s0, stats(r))
    d["hget"] = d.get("hget", 0) - polls[0]
    if watch:
        for k in WATCHER:
            if k in ("xread",):
                watcher_cmds[k] = d.pop(k, 0)
    cmds, xadd = per_job(d, n)
    out = {"submit_s": t_sub, "total_s": t_all, "cmds": cmds, "xadd": xadd, "top": top(d, n)}
    if watch and delivered:
        span = max(1e-9, delivered[-1] - delivered[0])
        out.update(events=len(delivered), events_per_s=len(delivered) / span, watcher=watcher_cmds)
        t1 = time.perf_counter()
        replayed = sum(1 for _ in c.events(created.id, since="0"))  # the reader's own speed
        out.update(replay_per_s=replayed / (time.perf_counter() - t1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    n = ap.parse_args().jobs
    with tempfile.TemporaryDirectory() as tmp:
        srv = RedisServer(Path(tmp))
        h = Harness(Path(tmp), srv)
        try:
            h.daemon(workers=4, heartbeat=2, handlers=NOOP)
            wait_until(lambda: len(h.daemons[0].slot_pids()) == 4, 30, what="4 slots")
            c = Client.from_config(str(Path(tmp) / "a.toml"))
            r = h.r
            plain(c, r, 20)  # warm up: scripts loaded, slots forked
            run(c, r, 20, False)
            settle(r)
            p = plain(c, r, n)
            settle(r)
            q = run(c, r, n, False)
            settle(r)
            w = run(c, r, n, True)
            print(f"{n} jobs, 4 slots, noop handler (sh per job), one machine")
            print(f"{'':28}{'submit s':>10}{'total s':>10}{'jobs/s':>10}{'cmds/job':>10}{'XADD/job':>10}")
            for name, x in (("plain jobs (submit each)", p), ("one run (submit_run)", q), ("one run, watched", w)):
                print(f"{name:28}{x['submit_s']:>10.3f}{x['total_s']:>10.2f}{n / x['total_s']:>10.0f}"
                      f"{x['cmds']:>10.1f}{x['xadd']:>10.2f}")
            for name, x in (("plain", p), ("run", q)):
                print(f"  {name} per job: {x['top']}")
            print(f"run / plain commands per job: {q['cmds'] / p['cmds']:.2f}")
            if "events" in w:
                print(f"watcher: {w['events']} events delivered, {w['events_per_s']:.0f} events/s "
                      f"(first to last: the run's pace), its own XREADs: {w['watcher'].get('xread', 0)}; "
                      f"replaying the finished run's stream: {w['replay_per_s']:.0f} events/s")
        finally:
            h.close()
            srv.stop()


if __name__ == "__main__":
    main()
