"""Redis time per script call of a large run's submission (issue 17 item 2): staging chunks
(run_submit.lua) and queuing chunks (run_queue.lua), from SLOWLOG, on a private redis-server.

    .venv/bin/python bench/bench_run_submit.py [--items 80000] [--priority bulk]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time

import redis

from tender_pool.client import Client


def cpu(r: redis.Redis) -> float:
    """Redis's own CPU seconds so far (user + sys, main thread and all)."""
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def checked(items: list[dict]) -> list:
    from tender_pool.client.items import check_items

    return check_items(items)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=80_000)
    ap.add_argument("--priority", default="bulk")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="bench-run-submit-")
    sock = os.path.join(d, "redis.sock")
    srv = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no",
                            "--dir", d], stdout=subprocess.DEVNULL)
    try:
        r = redis.Redis(unix_socket_path=sock)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        r.config_set("slowlog-log-slower-than", 0)
        r.config_set("slowlog-max-len", 1_000_000)
        c = Client(f"unix://{sock}", prefix="b", socket_timeout=10)
        items = [{"key": f"1.{i}", "payload": {"section": f"1.{i}", "title": "Bill of quantities, part " + str(i)}}
                 for i in range(a.items)]
        shas = {n: c._scripts[n].sha.encode() for n in ("run_submit", "run_queue")}
        r.slowlog_reset()
        its = checked(items)
        queue = c.writer.queue
        c.writer.queue = lambda *a, **kw: (False, 0)  # staging alone first, then the queuing
        t0, cpu0 = time.perf_counter(), cpu(r)
        c.writer.submit("b1", "u1", "k", its, priority=a.priority, max_parallel=0, overwrite=False,
                        retention_s=c.retention_s)
        cpu_stage = cpu(r) - cpu0
        queue("b1", c.retention_s)
        wall, cpu_s = time.perf_counter() - t0, cpu(r) - cpu0
        run = c.run("b1")
        log = r.slowlog_get(1_000_000)
        print(f"{a.items} items ({a.priority}): {run.counts.total} jobs, submit_run {wall:.2f} s wall "
              f"(load {os.getloadavg()[0]:.1f}); Redis CPU {cpu_s:.2f} s = {cpu_s / a.items * 1e6:.1f} µs an item "
              "(SLOWLOG's durations below are wall time: a loaded machine descheduling Redis inflates them)")
        print(f"Redis CPU per item: staging {cpu_stage / a.items * 1e6:.1f} µs, queuing "
              f"{(cpu_s - cpu_stage) / a.items * 1e6:.1f} µs")
        print("| script | calls | median ms | p99 ms | max ms | µs per item |")
        print("|---|---|---|---|---|---|")
        for name, sha in shas.items():
            us = sorted(e["duration"] for e in log if e["command"].split()[:2] == [b"EVALSHA", sha])
            per = sum(us) / a.items
            print(f"| {name} | {len(us)} | {statistics.median(us) / 1000:.2f} | {us[int(len(us) * 0.99) - 1] / 1000:.2f} "
                  f"| {us[-1] / 1000:.2f} | {per:.1f} |")
    finally:
        srv.kill()


if __name__ == "__main__":
    main()
