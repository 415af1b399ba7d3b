"""Keep the platform's task table in step with the pool: a consumer of the queue-wide event stream
that upserts one row per job into SQLite.

    python examples/db_sync.py tasks.db [-c tender-pool.toml] [--group platform-db] [--consumer $HOSTNAME]

Run one or several (one consumer name each): a group shares the entries between its consumers, and
entries a killed consumer had not acknowledged are claimed by another after ``claim_idle`` seconds.
Every event is applied at least once, so the upsert must be idempotent and must never move a row
backwards: it writes only when the event's stream id is newer than the row's (``version``: the id's
milliseconds × 10⁶ + its sequence number, one integer every database compares). A re-delivered
event, an event that a claimed batch delivers after a newer one, or a resync snapshot older than
the row changes nothing.

The same upsert for PostgreSQL (``ON CONFLICT … WHERE``) and MySQL (assignments in order, ``version``
last) is in the README, section "Keeping the platform's database in step".
"""

from __future__ import annotations

import argparse
import os
import socket
import sqlite3
import sys
import time
from typing import Iterable

from tender_pool.client import Client, Event, JobSnapshot, Unavailable

SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id            TEXT PRIMARY KEY,
    user          TEXT NOT NULL,
    kind          TEXT NOT NULL,
    run_id        TEXT,
    key           TEXT,
    state         TEXT NOT NULL,
    attempts      INTEGER NOT NULL,
    tries         INTEGER NOT NULL,
    error_kind    TEXT,
    started_at    TEXT,
    finished_at   TEXT,
    last_event_id TEXT NOT NULL,
    version       INTEGER NOT NULL
)
"""

UPSERT = """
INSERT INTO tasks (id, user, kind, run_id, key, state, attempts, tries, error_kind, started_at, finished_at,
                   last_event_id, version)
VALUES (:id, :user, :kind, :run_id, :key, :state, :attempts, :tries, :error_kind, :started_at, :finished_at,
        :last_event_id, :version)
ON CONFLICT (id) DO UPDATE SET
    user = excluded.user, kind = excluded.kind, run_id = excluded.run_id, key = excluded.key,
    state = excluded.state, attempts = excluded.attempts, tries = excluded.tries,
    error_kind = excluded.error_kind, started_at = excluded.started_at, finished_at = excluded.finished_at,
    last_event_id = excluded.last_event_id, version = excluded.version
WHERE excluded.version > tasks.version
"""

ROW_EVENTS = frozenset({"job_queued", "job_waiting", "job_started", "job_completed", "job_failed", "job_skipped",
                        "job_cancelled"})


def version(stream_id: str | None) -> int:
    """A stream id ``<ms>-<seq>`` as one integer that orders like the id (0 for none)."""
    if not stream_id:
        return 0
    ms, _, seq = stream_id.partition("-")
    return int(ms) * 1_000_000 + int(seq or 0)


def row_of_event(ev: Event) -> dict | None:
    if ev.type not in ROW_EVENTS:  # progress and run events change no task row
        return None
    err = ev.error or None
    return {"id": ev.job_id, "user": ev.user, "kind": ev.kind, "run_id": ev.run_id, "key": ev.key or None,
            "state": ev.job_state, "attempts": ev.attempts, "tries": ev.tries,
            "error_kind": err.kind if err else None, "started_at": ev.started_at, "finished_at": ev.finished_at,
            "last_event_id": ev.id, "version": version(ev.id)}


def row_of_snapshot(s: JobSnapshot) -> dict:
    j = s.job
    return {"id": j.id, "user": j.user, "kind": j.kind, "run_id": s.run_id, "key": s.key, "state": j.state, "attempts": j.attempts, "tries": j.tries,
            "error_kind": j.error.kind if j.error else None, "started_at": j.started_at,
            "finished_at": j.finished_at, "last_event_id": s.event_id or "0-0", "version": version(s.event_id)}


class TaskTable:
    """The SQLite side: one transaction per batch, WAL so readers never wait for the consumer."""

    def __init__(self, path: str):
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(SCHEMA)

    def upsert(self, rows: Iterable[dict]) -> None:
        rows = [r for r in rows if r is not None]
        if not rows:
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.executemany(UPSERT, rows)
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def apply(self, events: list[Event]) -> None:
        self.upsert(row_of_event(ev) for ev in events)

    def resync(self, jobs: list[JobSnapshot]) -> None:
        self.upsert(row_of_snapshot(s) for s in jobs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db")
    ap.add_argument("-c", "--config", default=None)
    ap.add_argument("--group", default="platform-db")
    ap.add_argument("--consumer", default=f"{socket.gethostname()}-{os.getpid()}")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--claim-idle", type=float, default=30)
    a = ap.parse_args(argv)
    table = TaskTable(a.db)
    pool = Client.from_config(a.config)
    while True:  # Redis restarting or failing over: wait and go on from the group's position
        try:
            pool.register_consumer_group(a.group)
            pool.consume(a.group, a.consumer, table.apply, resync=table.resync, batch=a.batch,
                         claim_idle=a.claim_idle)
        except Unavailable as e:
            print(f"db_sync: {e}; retrying in 1 s", file=sys.stderr)
            time.sleep(1)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
