"""Spin over the protocol model (model/protocol.pml, model/README.md): every interleaving of producer,
two slots on two hosts, their supervisors, the reaper, a canceller, heartbeat lapses and a lagging
replica, with a crash allowed at every step. Each run prints spin's "states stored"."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .spin import FIXES, Verdict, run



def _show(capsys, what: str, v: Verdict) -> None:
    with capsys.disabled():
        extra = f", counterexample of {v.trail_steps} steps" if v.errors else ""
        print(f"\n  model {what}: {v.stored} states stored, {v.seconds:.1f} s, errors {v.errors}{extra}")
        if v.errors:
            print("    " + v.trail.replace("\n", "\n    "))


def test_spin_installed() -> None:
    assert shutil.which("spin") and shutil.which("gcc"), "make deps installs spin (APT_PACKAGES)"


# With the three proposed protocol changes, the safety properties hold: never two attempts of one
# job at once (assert at launch), no job lost and no lock stranded (Monitor's invariant), one
# terminal state per job (assert in every state write), no deadlock (invalid end states).
SAFE = {
    "normal operation + 1 business retry": dict(RETRIES=1),
    "1 Redis error (call lost or reply lost)": dict(ERRS=1),
    "1 cancel": dict(CANCELS=1),
    "1 entry found far past its deadline": dict(LATES=1),
    "1 replica lag (catch-up or failover)": dict(FREEZES=1),
    "1 crash (any slot, supervisor, reaper, producer)": dict(CRASHES=1),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("what", list(SAFE))
def test_safety_holds_with_proposed_fixes(what: str, tmp_path: Path, capsys) -> None:
    v = run(tmp_path, SAFE[what], FIXES)
    _show(capsys, what, v)
    assert v.errors == 0, v.trail or v.output


@pytest.mark.timeout(120)
def test_every_job_settles_under_weak_fairness(tmp_path: Path, capsys) -> None:
    """<>[] (every job that exists has ended, no lock held, nothing parked): no job lost, no lock
    stranded, every parked job promoted."""
    v = run(tmp_path, {}, FIXES, liveness=True)
    _show(capsys, "liveness (settles), weak fairness", v)
    assert v.errors == 0, v.output


# The protocol as it is (commit in model/mirrors.json): spin's counterexamples, one per proposed fix.
AS_IS = {
    # the reaper judges an entry far past its deadline, the slot's start.lua re-stamps and runs it,
    # then requeue.lua ('deadline') takes it back without re-checking the stamp: a second attempt
    "deadline requeue after a fresh start": (dict(LATES=1), ("FIX_START_LPOS", "FIX_START_HOSTKEY")),
    # a slot reaching Redis while its host key has expired (supervisor stalled or cut off) starts a
    # job; the reaper requeues it as a dead host's; the heartbeat resumes and both attempts run
    "start while the host key is expired": (dict(LAPSES=1), ("FIX_STAMP_RECHECK", "FIX_START_LPOS")),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("what", list(AS_IS))
def test_protocol_as_is_counterexample(what: str, tmp_path: Path, capsys) -> None:
    budgets, flags = AS_IS[what]
    v = run(tmp_path, budgets, flags)
    _show(capsys, f"as is: {what}", v)
    assert v.errors == 1 and v.trail_steps > 0


@pytest.mark.timeout(60)
def test_seeded_fault_requeue_without_owner_check(tmp_path: Path, capsys) -> None:
    """A copy of requeue.lua without its owner re-check (l.12): the reaper judges a host dead, the host
    heartbeats again and starts a job in the same list, the reaper's requeue takes it back anyway."""
    v = run(tmp_path, dict(LAPSES=1), (*FIXES, "FAULT_REQUEUE_NO_OWNER_CHECK"))
    _show(capsys, "seeded fault: requeue.lua without the owner check", v)
    assert v.errors == 1 and "running[e]" in v.trail
