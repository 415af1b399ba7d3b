"""A producer thread for the failover tests: it submits ``<tag>-0``, ``<tag>-1``, … through a
``Client`` (the product's one producer path) as fast as the pool acknowledges them. A refused
submit (``NotReplicated``) or a failed one is sent again with the same id, as a platform does, so
``acked`` has no gaps: every id in it was acknowledged, and each must run exactly once."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import redis

from tender_pool.client import Client, NotReplicated, Unavailable
from tender_pool.store.config import load


class Producer:
    def __init__(self, cfg_path: Path, record: Path, *, tag: str, users: int, sleep: float):
        self.client = Client.for_config(load(str(cfg_path), {}))
        self.record, self.tag, self.users, self.sleep = record, tag, users, sleep
        self.acked: list[str] = []
        self.refused = 0  # NotReplicated: ran on a primary, too few replicas have it
        self.errors: list[str] = []  # no primary reachable, or a cluster slot moving
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True, name="producer")

    def __enter__(self) -> "Producer":
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join(20)
        self.client.close()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            jid = f"{self.tag}-{i}"
            try:
                self.client.submit(f"u{i % self.users}", "behave", {"record": str(self.record), "sleep": self.sleep},
                                   job_id=jid)
                self.acked.append(jid)
                i += 1
            except NotReplicated:
                self.refused += 1
            except (Unavailable, redis.RedisError) as e:
                self.errors.append(repr(e))
                time.sleep(0.02)
            time.sleep(0.005)


def attempts(record: Path, jid: str) -> list[tuple[int, float, float | None]]:
    """(attempt, start, end or None) per handler start of ``jid``, in wall-clock seconds, from the
    files tests/jobs/behave.py writes into ``record``: a job acknowledged once must have one."""
    out = []
    for f in record.glob(f"{jid}.*.start"):
        n = int(f.name.split(".")[-2])
        end = record / f"{jid}.{n}.end"
        out.append((n, json.loads(f.read_text())["t"], json.loads(end.read_text())["t"] if end.exists() else None))
    return sorted(out)
