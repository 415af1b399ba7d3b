"""Runs one real Slot in this process (not a test): ``slot_probe.py CONFIG N`` steps it until N
jobs have finished and prints, as JSON, the round trips its FastLane made, the writes it made
to its report pipe, and its CPU time (its own, not the jobs') and wall time per job. A separate process because a slot reaps every child of its own (the test
runner's redis-server would be one)."""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time

from tender_pool.slots import slot as slot_mod
from tender_pool.store.config import load
from tender_pool.store.keys import Keys


def main() -> None:
    cfg = load(sys.argv[1], {})
    n = int(sys.argv[2])
    rfd, wfd = os.pipe()
    frames = bytearray()
    threading.Thread(target=lambda: [frames.extend(os.read(rfd, 65536)) for _ in iter(int, 1)], daemon=True).start()
    s = slot_mod.Slot(cfg, 1, "probe-slot1", Keys(cfg.redis.prefix, cfg.pool.queue).proc("probe", "1", 1, 1), "probe:1", wfd)
    # the host's lease, as its supervisor's heartbeat keeps it (a take starts nothing without one)
    s.q.r.set(s.q.k.host(cfg.pool.host_id), "probe", px=int(3 * cfg.pool.heartbeat * 1000))
    writes = 0
    real_write = os.write

    def counting_write(fd, data):
        nonlocal writes
        if fd == wfd:
            writes += 1
        return real_write(fd, data)

    trips = 0
    real_send = s.q.fast._send

    def counting_send(commands):
        nonlocal trips
        trips += 1
        return real_send(commands)

    os.write = counting_write  # type: ignore[assignment]
    s.q.fast._send = counting_send  # type: ignore[method-assign]
    deadline = time.monotonic() + 60
    ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    # A busy slot holds its next job (``next``); only between jobs is the count looked at.
    while (getattr(s, "next", None) is not None or s.q.r.zcard(s.q.k.finished) < n) and time.monotonic() < deadline:
        s.step(time.monotonic())
    ru1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    print(json.dumps({"jobs": int(s.q.r.zcard(s.q.k.finished)), "round_trips": trips, "report_writes": writes,
                      "slot_cpu_ms_per_job": round(cpu * 1000 / n, 3), "wall_ms_per_job": round((t1 - t0) * 1000 / n, 3)}))


if __name__ == "__main__":
    main()
