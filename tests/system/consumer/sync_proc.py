"""examples/db_sync.py as a process the chaos test SIGKILLs; with TP_SYNC_DIE (a probability) it
also kills itself right after ``apply`` committed and before the loop acknowledges: the instant
where at-least-once delivery must re-apply without moving a row backwards."""

import importlib.util
import os
import random
import signal
import sys
from pathlib import Path

spec = importlib.util.spec_from_file_location("db_sync", Path(__file__).resolve().parents[3] / "examples" / "db_sync.py")
db_sync = importlib.util.module_from_spec(spec)
spec.loader.exec_module(db_sync)

die = float(os.environ.get("TP_SYNC_DIE", "0"))
apply = db_sync.TaskTable.apply


def apply_then_maybe_die(self, events):
    apply(self, events)
    if die and random.random() < die:
        os.kill(os.getpid(), signal.SIGKILL)


db_sync.TaskTable.apply = apply_then_maybe_die
sys.exit(db_sync.main())
