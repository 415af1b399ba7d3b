#!/usr/bin/env python3
"""Redis Cluster sizing: the Redis CPU a no-op job costs on the master owning its queue's slot.

Starts a local cluster (3 masters, 3 replicas; tests/support/cluster.py) and one `tender-pool run`
with 4 slots on a ``redis+cluster://`` URL, submits ``--jobs`` no-op command jobs in a burst and
reads, on the queue's master, INFO ``used_cpu_sys + used_cpu_user`` and ``total_commands_processed``
before and after (minus the same master's idle CPU over as long). Prints the figures and the
sizing that follows from them (docs/benchmarks.md, "Redis Cluster").

    .venv/bin/python bench/bench_cluster.py [--jobs 1000]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
BIN = Path(sys.executable).with_name("tender-pool")

from conftest import write_config  # noqa: E402
from support.cluster import started  # noqa: E402
from tender_pool.client import Client  # noqa: E402

QUEUE = "tender_parse"


def commandstats(node) -> dict[str, tuple[int, float]]:
    with node.client() as c:
        return {k: (int(v["calls"]), float(v["usec"])) for k, v in c.info("commandstats").items()}


def cpu_and_commands(node) -> tuple[float, int]:
    with node.client() as c:
        cpu, stats = c.info("cpu"), c.info("stats")
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]), int(stats["total_commands_processed"])


class _Plain:
    """One redis-server on a free TCP port with the cluster nodes' settings, cluster mode off."""

    def __init__(self, root: Path):
        from support.sentinel import Node, free_port, wait_until

        port = free_port()
        self.node_ = Node("plain", port, root, ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir",
                                                str(root), "--appendonly", "no", "--save", "", "--logfile", "redis.log"])
        self.node_.start()
        wait_until(self.node_.ping, 10, what="redis-server")
        self.url = f"redis://127.0.0.1:{port}/0"

    def owner(self, _key: str) -> int:
        return self.node_.port

    def node(self, _port: int):
        return self.node_

    def stop(self) -> None:
        self.node_.kill()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--plain", action="store_true", help="the same on one plain redis-server (TCP), for the ratio")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    cluster = started(tmp) if not args.plain else _Plain(tmp)
    daemon = None
    try:
        prefix = "b" + uuid.uuid4().hex[:6]
        cfg = write_config(tmp / "c.toml", redis_url=cluster.url, prefix=prefix, host_id="bench", workers=4,
                           heartbeat=1, state_dir=tmp)
        log = open(tmp / "daemon.log", "ab")
        daemon = subprocess.Popen([str(BIN), "run", "-c", str(cfg)], stdout=log, stderr=log, start_new_session=True)
        q = Client(cluster.url, prefix, QUEUE)
        warm = [q.submit("w", "noop", {}).id for _ in range(20)]
        while any((j := q.record(jid)) is None or j.state.value != "completed" for jid in warm):
            time.sleep(0.2)
        master = cluster.node(cluster.owner(QUEUE))
        idle0, icmd0 = cpu_and_commands(master)
        time.sleep(3)
        idle1, icmd1 = cpu_and_commands(master)
        idle_per_s, idle_cmds_per_s = (idle1 - idle0) / 3, (icmd1 - icmd0) / 3
        stats0 = commandstats(master)
        cpu0, cmd0 = cpu_and_commands(master)
        t0 = time.monotonic()
        jids = [q.submit(f"u{i % 20}", "noop", {}).id for i in range(args.jobs)]
        while (j := q.record(jids[-1])) is None or j.state.value != "completed":
            time.sleep(0.2)
        wall = time.monotonic() - t0
        cpu1, cmd1 = cpu_and_commands(master)  # before the check below, whose reads are not a job's
        stats1 = commandstats(master)
        while any(q.record(jid).state.value != "completed" for jid in jids):
            time.sleep(0.2)
        per_job_ms = ((cpu1 - cpu0) - idle_per_s * wall) / args.jobs * 1000
        cmds = ((cmd1 - cmd0) - idle_cmds_per_s * wall) / args.jobs
        print(f"jobs {args.jobs} in {wall:.1f} s ({args.jobs / wall:.0f}/s, 4 slots, 2 shared cores)")
        print(f"queue master {master.port}: Redis CPU per job {per_job_ms:.3f} ms "
              f"(idle {idle_per_s * 1000:.1f} ms/s subtracted), commands per job {cmds:.1f} "
              f"(idle {idle_cmds_per_s:.0f}/s subtracted) "
              "(incl. Lua-internal calls and replication's REPLCONF)")
        top = sorted(((stats1[k][0] - stats0.get(k, (0, 0))[0], stats1[k][1] - stats0.get(k, (0, 0))[1], k)
                      for k in stats1), reverse=True)[:12]
        print("per job, by command (calls, µs inside Redis): " + ", ".join(
            f"{k.removeprefix('cmdstat_')} {n / args.jobs:.2f} ({us / args.jobs:.0f})" for n, us, k in top if n))
        ceiling = 1000 / per_job_ms
        print(f"one master's core at 100 %: {ceiling:,.0f} jobs/s; at 50 % (headroom): {ceiling / 2:,.0f} jobs/s")
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(20)
            except subprocess.TimeoutExpired:
                daemon.kill()
        cluster.stop()


if __name__ == "__main__":
    main()
