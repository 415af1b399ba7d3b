"""Redis commands per job, counted with INFO commandstats (Lua-internal calls
included), XADD in its own column. Not a test: ``python tests/system/runs/count_commands.py [N]`` prints
one line per mode (plain jobs; run jobs when the runs scripts exist).

It starts its own redis-server and daemon (4 slots, the ``noop`` handler) in a temp dir."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from conftest import Harness, RedisServer, wait_until  # noqa: E402


def stats(r) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in r.info("commandstats").items()}


def delta(a: dict, b: dict) -> dict[str, int]:
    return {k: b.get(k, 0) - a.get(k, 0) for k in b if b.get(k, 0) - a.get(k, 0)}


def measure(h: Harness, n: int, submit) -> tuple[float, float, dict]:
    r = h.r
    s0 = stats(r)
    ids = submit(n)
    wait_until(lambda: all(r.hget(h.k.job(j), "state") in (b"completed",) for j in ids), 120, what="all")
    time.sleep(0.3)
    s1 = stats(r)
    d = delta(s0, s1)
    for k in ("info", "hget", "eval"):  # our own observation
        d.pop(k, None)
    # the housekeeper's periodic work (promote_due, heartbeats, reaper) is part of the pool's cost
    xadd = d.pop("xadd", 0)
    total = sum(d.values())
    return total / n, xadd / n, {k: round(v / n, 2) for k, v in sorted(d.items(), key=lambda kv: -kv[1])}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        srv = RedisServer(tmp_path)
        try:
            h = Harness(tmp_path, srv)
            h.daemon(workers=4)
            time.sleep(2)

            def plain(k):  # Client.submit: the enqueue script and the job's read-back (HGETALL)
                return [h.submit("noop", f"u{i % 50}") for i in range(k)]

            measure(h, 20, plain)  # warm up (script loads)
            per, xadd, br = measure(h, n, plain)
            print(f"plain jobs: {per:.1f} commands/job (XADD apart: {xadd:.2f}/job)  {br}")
            c = h.client()
            run_submit = True
            if run_submit:
                def runs(k):
                    ids = []
                    for u in range(50):
                        run = c.submit_run(f"u{u}", "noop", [{"key": str(i), "payload": {"i": i, "u": u, "t": time.time()}}
                                                             for i in range(k // 50)])
                        ids += [j.decode() for j in h.r.lrange(h.k.runjobs(run.id), 0, -1)]
                    return ids
                runs(50)
                per_r, xadd_r, br_r = measure(h, n, runs)
                print(f"run jobs:   {per_r:.1f} commands/job (XADD apart: {xadd_r:.2f}/job)  {br_r}")
                print(f"run / plain: {per_r / per:.2f}")
            h.close()
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
