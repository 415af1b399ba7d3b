"""1,300 jobs over 100 users, runs cancelled and retried, slots SIGKILLed and Redis restarted, while two
consumers of one group (examples/db_sync.py processes) keep a SQLite table in step and are SIGKILLed
at random, some right between ``apply`` and the acknowledgement. Afterwards every row equals its
job, and the audit trigger saw no row move backwards."""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PYTHON, wait_until
from tender_pool.client import Client

pytestmark = pytest.mark.timeout(240)

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("db_sync", HERE.parents[2] / "examples" / "db_sync.py")
db_sync = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(db_sync)
AUDIT = """
CREATE TABLE IF NOT EXISTS audit (id TEXT, old_version INTEGER, new_version INTEGER, old_state TEXT, new_state TEXT);
CREATE TRIGGER IF NOT EXISTS tasks_audit AFTER UPDATE ON tasks BEGIN
  INSERT INTO audit VALUES (old.id, old.version, new.version, old.state, new.state);
END;
"""


def test_two_consumers_killed_at_random_keep_the_table_exact(h, tmp_path):
    rng = random.Random(20261202)
    d = h.daemon(workers=3)
    cfg = str(tmp_path / "a.toml")
    db = tmp_path / "tasks.db"
    pool = Client(h.redis.url, prefix=h.prefix, socket_timeout=3)
    pool.register_consumer_group("db")
    # the table and its audit trigger exist before any consumer writes
    db_sync.TaskTable(str(db))
    con = sqlite3.connect(db)
    con.executescript(AUDIT)
    con.close()

    procs: dict[str, subprocess.Popen] = {}
    kills = {"consumer": 0, "slot": 0}

    def start(name: str) -> None:
        env = dict(os.environ, TP_SYNC_DIE="0.02")
        procs[name] = subprocess.Popen([PYTHON, str(HERE / "sync_proc.py"), str(db), "-c", cfg, "--group", "db",
                                        "--consumer", name, "--batch", "50", "--claim-idle", "1"],
                                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def tend(kill: bool) -> None:
        for name, p in list(procs.items()):
            if p.poll() is not None:  # died by its own hand (between apply and ack)
                kills["consumer"] += 1
                start(name)
            elif kill:
                p.send_signal(signal.SIGKILL)
                p.wait(10)
                kills["consumer"] += 1
                start(name)

    start("c1")
    start("c2")
    try:
        ids: list[str] = []
        runs = []
        redis_restarted = False
        for wave in range(10):
            for i in range(110):
                u = f"u{rng.randrange(100)}"
                if rng.random() < 0.05:
                    ids.append(pool.submit(u, "behave", {"final_error": "corrupt"}).id)
                elif rng.random() < 0.1:
                    ids.append(pool.submit(u, "behave", {"sleep": 0.05}).id)
                else:
                    ids.append(pool.submit(u, "noop").id)
            items = [{"key": f"w{wave}-{i}", "payload": ({"final_error": "corrupt"} if i % 7 == 0 else {"echo": i})}
                     for i in range(20)]
            run = pool.submit_run(f"r{wave}", "behave", items)
            runs.append(run)
            ids += [j.id for j in run.jobs]
            if wave % 3 == 1:
                pool.cancel_run(run.id)
            time.sleep(0.3)
            tend(kill=True)  # one consumer or both, SIGKILLed
            if wave in (2, 6):
                pids = d.slot_pids()
                if pids:
                    os.kill(rng.choice(pids), signal.SIGKILL)
                    kills["slot"] += 1
            if wave == 5 and not redis_restarted:
                h.redis.restart(down_for=0.3)
                redis_restarted = True
        for run in runs[:3]:
            wait_until(lambda r=run: pool.run(r.id).state not in ("pending", "running"), 90, what="run ended")
            pool.retry_run(run.id)

        def settled() -> bool:
            tend(kill=False)
            return all(pool.job(j).state in ("completed", "failed", "cancelled", "skipped", "dead") for j in ids)
        wait_until(settled, 150, interval=0.5, what="every job ended")
        while kills["consumer"] < 10:
            tend(kill=True)
            time.sleep(0.2)

        def caught_up() -> bool:
            tend(kill=False)
            g = {x.group: x for x in pool.consumer_groups()}["db"]
            return g.lag == 0 and g.pending == 0
        wait_until(caught_up, 60, interval=0.5, what="consumers caught up")
    finally:
        for p in procs.values():
            p.kill()
            p.wait(10)

    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    rows = {r["id"]: dict(r) for r in con.execute("SELECT * FROM tasks")}
    backwards = con.execute("SELECT * FROM audit WHERE new_version <= old_version").fetchall()
    updates = con.execute("SELECT COUNT(*) FROM audit").fetchone()[0]
    con.close()
    assert kills["consumer"] >= 10 and kills["slot"] >= 1, kills
    assert not backwards, [dict(b) for b in backwards[:5]]
    assert updates > len(ids)  # rows were really updated through their transitions
    mismatched = []
    for jid in ids:
        j = pool.job(jid)
        row = rows.get(jid)
        want = (j.state, j.attempts, j.tries, j.error.kind if j.error else None)
        got = row and (row["state"], row["attempts"], row["tries"], row["error_kind"])
        if got != want:
            mismatched.append((jid, got, want))
    assert not mismatched, mismatched[:10]
    assert len(ids) >= 1300
