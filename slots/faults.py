"""Named crash checkpoints, for tests that kill real processes at the dangerous instants.

With ``TENDER_POOL_FAULTS=after_claim,before_ack`` and ``TENDER_POOL_FAULT_DIR=/some/dir`` in its
environment, a process reaching a named checkpoint writes ``<dir>/<name>`` (its pid) and stops itself
with SIGSTOP. The test then inspects Redis at exactly that instant and SIGKILLs the pid: no
sleep-then-kill races. Each checkpoint fires once per fault dir (the file marks it), so the restarted
process runs through. Without the variables this is one dict lookup per checkpoint.

Checkpoints: ``after_claim`` (slot: BLMOVE done, take.lua not yet), ``after_stamp`` (slot: started,
child not yet spawned), ``before_ack`` (slot: child finished, settle not yet), ``after_settle_take``
(slot: a combined settle started the next attempt in Redis, its child not yet spawned),
``child_reported`` (a forked job child: its exit code reported, its exit not yet: a child that
hangs after its report), ``mid_requeue`` (supervisor: a dead slot's job tree killed, its list not yet requeued),
``slot_forked`` (a slot just forked, the supervisor's signal handlers still its own),
``supervisor_busy`` (supervisor: a slot reported a running child).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

_ARMED = frozenset(filter(None, os.environ.get("TENDER_POOL_FAULTS", "").split(",")))
_DIR = os.environ.get("TENDER_POOL_FAULT_DIR", "")


def checkpoint(name: str) -> None:
    if name not in _ARMED or not _DIR:
        return
    mark = Path(_DIR) / name
    try:
        fd = os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    os.kill(os.getpid(), signal.SIGSTOP)
