"""Spin over the protocol model (model/protocol.pml, model/README.md): every interleaving of producer,
two slots on two hosts, their supervisors, the reaper, a canceller, heartbeat lapses and a lagging
replica, with a crash allowed at every step. Each run prints spin's states stored, depth and time; a
counterexample is printed one line per model step (tests/model/spin.py summarize).

The model mirrors store/lua at the commit in model/mirrors.json: the fixes of model/README.md's
"Findings" 1-3 and its three retry-path fixes (findings 4-6) included, and requeue.lua's
owned_elsewhere (a duplicate entry of a running job whose attempt's own list, its `proc`, holds it:
DUPS), and fairness's takeover (an interactive job taking its user's lock reserved for a bulk job,
which goes back to the wait list; job 0 is interactive). Seeded faults (copies of
the protocol with one defect each, among them each of those fixes undone) show spin finds them. Runs
that expect a counterexample search breadth-first, so theirs is a shortest one."""

from __future__ import annotations

import shutil
from collections.abc import Callable

import pytest

from .spin import FARM, Spec, Verdict, spec


def _show(capsys, what: str, v: Verdict) -> None:
    with capsys.disabled():
        extra = f", counterexample of {v.trail_steps} steps: {v.prop}" if v.errors else ""
        print(f"\n  model {what}: {v.stored} states stored, depth {v.depth}, {v.seconds:.1f} s "
              f"({v.cpu:.1f} s CPU), errors {v.errors}{extra}")
        if v.errors:
            print("    " + v.trail.replace("\n", "\n    "))


def test_spin_installed() -> None:
    assert shutil.which("spin") and shutil.which("tcc"), "make deps installs spin and tcc (APT_PACKAGES)"


# The Lua as it is (commit in model/mirrors.json): never two attempts of one job at once and never
# two jobs of one user at once (asserts at launch), no job lost, a running job in a processing list,
# no lock stranded, a running job holding its user's lock (Monitor, every state), one terminal state
# per job (every state write), every job settled once nothing can move (Quiesce), no deadlock.
SAFE = {
    "normal operation + 1 business retry": dict(RETRIES=1),
    "1 cancel": dict(CANCELS=1),
    "1 entry found far past its deadline": dict(LATES=1),
    "1 heartbeat lapse (fence, slot's own poll, expiry, reaper)": dict(LAPSES=1),
    "1 crash (any slot, supervisor, reaper, producer)": dict(CRASHES=1),
    # these reach a retried take.lua / settle_take.lua (a lost reply, NotReplicated): findings 4-6
    "1 Redis error (call lost or reply lost)": dict(ERRS=1),
    "1 replica lag (catch-up or failover)": dict(FREEZES=1),
    "1 lapse + 1 Redis error, 1 job": dict(LAPSES=1, ERRS=1, JOBS=1),
    # a copy of a running job's entry in another worker's list (a failover's leftover), found by that
    # slot's reconcile, its supervisor's or the reaper's requeue: requeue.lua's owned_elsewhere
    "1 duplicate entry of a running job": dict(DUPS=1),
    "1 duplicate entry + 1 Redis error, 1 job": dict(DUPS=1, ERRS=1, JOBS=1),
    "1 duplicate entry + 1 lapse, 1 job": dict(DUPS=1, LAPSES=1, JOBS=1),
    # the gap busy evidence alone left (finding 8, FAULT_REQUEUE_NO_PROC_CHECK below): a slot dies after its
    # take and is respawned with the same worker id before its dead list is requeued; the duplicate
    # is requeued elsewhere, the respawned slot restarts the job from its new list, and the dead
    # list's requeue finds the job running under its own worker id: the job's `proc` (the new list,
    # which holds the entry) now tells it that attempt is not the dead list's
    "1 duplicate entry + 1 crash, 1 job": dict(DUPS=1, CRASHES=1, JOBS=1),
    # fairness's takeover (start_job: an interactive job finding its user's lock reserved for a bulk
    # waiter takes it; the bulk job goes back to the wait list). Job 0 is interactive (HIJ, the
    # default): the retry, deadline, lapse and crash runs above reach it (job 0 back in ready while
    # the lock is reserved for the bulk job 1). The same world with every job bulk (no takeover):
    "normal operation + 1 business retry, every job bulk": dict(RETRIES=1, HIJ=255),
    # job 2 of user 0 and interactive (U2=0, HIJ=2; still --after job 0): the commit's own case,
    # reached with no fault: job 0 runs, job 1 parks, job 2 is queued; job 0's settle_take reserves
    # the lock for job 1 and its take part claims job 2 (ready:hi first), which takes the lock over
    "takeover by a queued interactive job (3 jobs of user 0)": dict(U2=0, HIJ=2),
    "takeover, 1 Redis error": dict(U2=0, HIJ=2, ERRS=1),
    "takeover, 1 entry found far past its deadline": dict(U2=0, HIJ=2, LATES=1),
    "takeover, 1 cancel": dict(U2=0, HIJ=2, CANCELS=1),
    "takeover, 1 business retry": dict(U2=0, HIJ=2, RETRIES=1),
}


# Each check's time limit covers a wait for the farm (tests/model/spin.py) to finish it.
@pytest.mark.timeout(300)
@pytest.mark.parametrize("what", list(SAFE))
def test_safety_holds(what: str, capsys) -> None:
    v = FARM.verdict(SPEC_OF["test_safety_holds"](what))
    _show(capsys, what, v)
    assert v.errors == 0, v.trail or v.output


@pytest.mark.timeout(300)
def test_every_job_settles_under_weak_fairness(capsys) -> None:
    """<>[] (every job that exists has ended, no lock held, nothing parked): no job lost, no lock
    stranded, every parked job promoted, and no cycle that avoids it."""
    v = FARM.verdict(SPEC_OF["test_every_job_settles_under_weak_fairness"]())
    _show(capsys, "liveness (settles), weak fairness", v)
    assert v.errors == 0, v.output


@pytest.mark.timeout(300)
def test_every_job_settles_under_weak_fairness_with_a_crash(capsys) -> None:
    """The same with one crash anywhere, in the one-job world (two jobs take ~1 min of CPU here;
    every safety run checks 'every job settles' at quiescence, crash included)."""
    v = FARM.verdict(SPEC_OF["test_every_job_settles_under_weak_fairness_with_a_crash"]())
    _show(capsys, "liveness (settles), weak fairness, 1 crash, 1 job", v)
    assert v.errors == 0, v.output


@pytest.mark.timeout(300)
def test_every_job_settles_under_weak_fairness_with_a_takeover(capsys) -> None:
    """The same in the takeover's world (three jobs of user 0, job 2 interactive): the bulk job the
    interactive one took the lock from is promoted again once that attempt ends."""
    v = FARM.verdict(SPEC_OF["test_every_job_settles_under_weak_fairness_with_a_takeover"]())
    _show(capsys, "liveness (settles), weak fairness, takeover (3 jobs of user 0)", v)
    assert v.errors == 0, v.output


# Seeded faults: each a copy of the protocol with one defect, under a budget the unfaulted model
# passes (SAFE above; one job is enough for most and keeps the breadth-first search small): spin
# finds each, and the property it names is the one the defect breaks.
SEEDED = {
    # requeue.lua without its owner re-check (l.15): the reaper judges host 0 dead, the host
    # heartbeats again and starts a job from the same list; the reaper's requeue takes it back anyway
    "FAULT_REQUEUE_NO_OWNER_CHECK": (dict(LAPSES=1, JOBS=1), "never two attempts of one job at once"),
    # the slot frees the user's lock in a call of its own, then settles: in between the job is
    # 'running' without its lock (the next job of the user may start; a crash there re-runs it)
    "FAULT_RELEASE_BEFORE_RESULT": (dict(JOBS=1), "a running job holds its user's lock"),
    # settle_job checks "not finished yet" instead of the token: a fenced attempt's settle lands
    # after the reaper requeued the job and another slot started it: that attempt's lock is stranded
    "FAULT_SETTLE_NO_FENCE": (dict(LAPSES=1, JOBS=1), "no lock stranded"),
    # finding 1's fix undone: requeue.lua 'deadline' without the judged-stamp re-check
    "FAULT_NO_STAMP_RECHECK": (dict(LATES=1, JOBS=1), "never two attempts of one job at once"),
    # finding 2's fix undone: take_job starts on a lapsing lease
    "FAULT_NO_LEASE_CHECK": (dict(LAPSES=1, JOBS=1), "never two attempts of one job at once"),
    # finding 3's fix undone: take_job starts a BLMOVE-given entry the reaper took back
    "FAULT_NO_LPOS_CHECK": (dict(LATES=1, JOBS=1), "a running job is in a processing list"),
    # finding 4's fix undone: take.lua retried after a lost reply: the first call parked the
    # BLMOVE's entry behind the user's lock; the lock's release promoted it back to ready; the retry
    # finds our list empty, falls back to the given entry and, skipping the LPOS check, starts a job
    # that is in no processing list (a crash of our slot would leave it 'running' for good). All
    # three jobs: the park needs the other job's lock, and the releasing slot's take part must take
    # a third job rather than the promoted one (a failover lands the same, FREEZES=1 with one job)
    "FAULT_TAKE_RETRY_NO_LPOS": (dict(ERRS=1), "a running job is in a processing list"),
    # finding 5's fix undone: take.lua retried after a call that did not run: the host's key
    # expired meanwhile and the retry skips the lease check: the attempt starts with no lease,
    # another host's reaper requeues it as a dead host's, a second attempt starts while the first runs
    "FAULT_TAKE_RETRY_NO_LEASE": (dict(LAPSES=1, ERRS=1, JOBS=1), "never two attempts of one job at once"),
    # finding 6's fix undone: settle_take.lua: the slot's own poll stopped the attempt (lease
    # lapsing), the lease is renewed, the settle puts the job back in ready and the take part re-takes
    # that very job; the reply is lost; the retry's settle part is fenced and removes every copy of
    # the id from our list (LREM proc 0 id), the new attempt's entry too, and its take part skips
    # the id: a running job that no slot runs
    "FAULT_SETTLE_TAKE_RETRY_REMOVES": (dict(LAPSES=1, ERRS=1, JOBS=1), "no job lost"),
    # requeue.lua without owned_elsewhere (finding 7): slot 1 runs the job; a copy of its entry
    # in slot 0's list (a failover's leftover) is requeued by slot 0's reconcile ('unclaim'): the
    # lock released, the job queued under the live attempt and started again
    "FAULT_REQUEUE_DUP_RUNNING": (dict(DUPS=1, JOBS=1), "never two attempts of one job at once"),
    # requeue.lua with busy evidence for every job and `proc` unread (finding 8): the former known gap.
    # The worker's slot dies after its take, before the launch; it is respawned (its boot clears
    # busy:<worker>) before its supervisor requeues the dead incarnation's list. A duplicate entry in
    # the other slot's list is requeued there (no busy evidence: the attempt is dead); the respawned
    # slot, the same worker, starts the job again from its new list; the supervisor's requeue of the
    # dead list finds the job running under its own worker id and requeues it: a second attempt
    "FAULT_REQUEUE_NO_PROC_CHECK": (dict(DUPS=1, CRASHES=1, JOBS=1), "never two attempts of one job at once"),
    # start_job's takeover (fairness; model/README.md, "the takeover") without its insert_before_bulk, in the world of three
    # jobs of user 0, job 2 interactive, no fault: job 0 runs, job 1 parks behind it, job 2 is
    # queued; job 0's settle_take releases the lock, reserving it for job 1 ('r:1', job 1 to ready),
    # and its take part claims job 2, which takes the lock over and LREMs job 1 from ready without
    # putting it back in wait:0: job 1 is 'waiting' in no list
    "FAULT_TAKEOVER_DROPS_WAITER": (dict(U2=0, HIJ=2), "no job lost"),
    # the same fault in the default world (job 0 interactive, 2 jobs): the reaper requeues job 0 far
    # past its deadline, the release reserves the lock for job 1, a slot claims job 0, which takes over
    "FAULT_TAKEOVER_DROPS_WAITER, after a requeue": (dict(LATES=1, JOBS=2), "no job lost"),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fault", list(SEEDED))
def test_seeded_fault_found(fault: str, capsys) -> None:
    prop = SEEDED[fault][1]
    v = FARM.verdict(SPEC_OF["test_seeded_fault_found"](fault))
    _show(capsys, f"seeded fault {fault}", v)
    assert v.errors == 1 and v.trail_steps > 0 and v.prop == prop, (v.prop, v.trail)


# Each test's check by the test function's name and parameters: tests/model/conftest.py hands the
# checks of the selected tests to the farm when collection ends.
SPEC_OF: dict[str, Callable[..., Spec]] = {
    "test_safety_holds": lambda what: spec(SAFE[what]),
    "test_every_job_settles_under_weak_fairness": lambda: spec({}, liveness=True),
    "test_every_job_settles_under_weak_fairness_with_a_crash": lambda: spec(dict(CRASHES=1, JOBS=1), liveness=True),
    "test_every_job_settles_under_weak_fairness_with_a_takeover": lambda: spec(dict(U2=0, HIJ=2), liveness=True),
    "test_seeded_fault_found": lambda fault: spec(SEEDED[fault][0], (fault.split(",")[0],), shortest=True),
}
