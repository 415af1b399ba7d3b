"""The supervisor's loop, one ``step(now)`` at a time, with a fixed clock and no processes.

``FakeOps`` stands in for fork/kill/waitpid (huey's ``loop(now)`` tests are the model): a "slot" is a
pid and the write end of a real pipe, so reports travel the real framing. ``FakeHouse`` records the
lists the loop hands over for requeueing. Nothing here forks, sleeps or talks to Redis.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from conftest import write_config
from support.keyspace import keys
from tender_pool.slots.reports import Reporter
from tender_pool.supervisor import control
from tender_pool.store.config import load
from tender_pool.supervisor.daemon import STALL_S, Supervisor
from tender_pool.supervisor.notify import Notifier
from tender_pool.supervisor.slot_table import CRASH_LOOP_AFTER, Intent
from tender_pool.supervisor.slot_table import SlotState
from tender_pool.slots.reports import AttemptEnd, Beat, Busy, Finished, Idle, SlotExit

pytestmark = pytest.mark.timeout(10)

HB = 0.5  # heartbeat: a slot silent for 1.5 s is killed


class FakeOps:
    def __init__(self):
        self.next_pid = 1000
        self.exits: list[tuple[int, int]] = []
        self.signals: list[tuple[int, int]] = []
        self.trees: list[int] = []  # pids whose job tree was killed, in order
        self.stopped: list[tuple[int, int]] = []  # (job group, signal) the fence sent
        self.writers: dict[int, Reporter] = {}
        self.forks = 0

    def fork(self, s, close):
        r, w = os.pipe()
        os.set_blocking(r, False)
        self.next_pid += 1
        self.forks += 1
        self.writers[self.next_pid] = Reporter(w)
        return self.next_pid, r

    def kill(self, pid, sig):
        self.signals.append((pid, sig))

    def waitpid(self):
        return self.exits.pop(0) if self.exits else (0, 0)

    def stop_attempt(self, busy, sig):
        self.stopped.append((busy.child_pid, sig))
        return []

    def kill_job_tree(self, s, busy, keep):
        self.trees.append(s.pid)
        return []

    # --- test helpers ---
    def report(self, pid, *reps):
        for rep in reps:
            self.writers[pid].send(rep)

    def exit(self, pid, code=None, sig=None):
        self.exits.append((pid, (code << 8) if code is not None else sig))

    def sent(self, sig):
        return [p for p, s in self.signals if s == sig]


class FakeHouse:
    def __init__(self):
        self.handed: list[tuple[str, str]] = []
        self.stuck: set[str] = set()
        self.open = 0
        self.taken_over = None
        self.last_ok = float("inf")  # when the last heartbeat write was sent: never lapses unless a test says so
        self.lapsed = False

    def requeue_later(self, proc, reason, slot=""):
        self.handed.append((proc, reason))

    def pending(self):
        return self.open

    def take_stuck(self):
        out, self.stuck = self.stuck, set()
        return out


@pytest.fixture
def make(tmp_path):
    made = []

    def _make(workers=2, **kw):
        path = write_config(tmp_path / "a.toml", redis_url=f"unix://{tmp_path}/none.sock", prefix="t", host_id="h",
                            workers=workers, heartbeat=HB, state_dir=tmp_path, fence="default", **kw)
        ops = FakeOps()
        sup = Supervisor(load(str(path), {}), ops=ops, notifier=Notifier(env={}))
        sup.house = FakeHouse()
        made.append((sup, ops))
        return sup, ops

    yield _make
    for sup, ops in made:
        for s in sup.table.slots:
            if s.read_fd >= 0:
                os.close(s.read_fd)
        for w in ops.writers.values():
            os.close(w.fd)
        for fd in (sup.wake_r, sup.wake_fd):
            os.close(fd)
        sup.sel.close()


def pids(sup):
    return [s.pid for s in sup.table.slots]


def busy(job="j1"):
    return Busy(job_id=job, kind="behave", user="u", file=None, token="1.x", attempt=1, started_ms=0, child_pid=77)


def test_first_step_forks_every_slot_and_reports_make_them_idle(make):
    sup, ops = make(workers=2)
    assert sup.step(0.0) is None
    assert ops.forks == 2 and all(s.state is SlotState.STARTING for s in sup.table.slots)
    assert [s.proc for s in sup.table.slots] == [keys("t").proc("h", sup.incarnation, i, 1) for i in (1, 2)]
    a, b = pids(sup)
    ops.report(a, Idle())
    ops.report(b, Beat())
    sup.step(0.1)
    assert [s.state for s in sup.table.slots] == [SlotState.IDLE, SlotState.IDLE]
    ops.report(a, busy())
    sup.step(0.2)
    assert sup.table.slots[0].state is SlotState.BUSY and sup.table.slots[0].busy.job_id == "j1"


def test_respawn_backoff_doubles_then_crash_looping(make):
    sup, ops = make(workers=1)
    sup.step(0.0)
    t = 0.0
    delays = []
    for _ in range(CRASH_LOOP_AFTER):
        pid = pids(sup)[0]
        t += 0.1
        ops.exit(pid, code=1)
        sup.step(t)  # died fast, idle: not a job's fault
        s = sup.table.slots[0]
        assert s.pid == 0 and sup.house.handed[-1][1] == "crash"
        delays.append(round(s.respawn_at - t, 3))
        sup.step(s.respawn_at - 0.01)
        assert s.pid == 0, "respawned before its backoff"
        t = s.respawn_at
        sup.step(t)
        assert s.pid != 0
    assert delays == [0.5, 1.0, 2.0]
    assert sup.counters.slot_restarts == CRASH_LOOP_AFTER
    # the third fast death in a row showed as crash-looping while it waited
    ops.exit(pids(sup)[0], code=1)
    sup.step(t + 0.1)
    assert sup.table.slots[0].state is SlotState.CRASH_LOOPING


def test_a_death_while_running_a_job_is_the_jobs_not_the_slots(make):
    # poison jobs that kill their slot must not make the slot crash-loop
    sup, ops = make(workers=1)
    sup.step(0.0)
    t = 0.0
    for i in range(6):
        pid = pids(sup)[0]
        ops.report(pid, Idle(), busy(f"poison{i}"))
        t += 0.05
        sup.step(t)
        ops.exit(pid, sig=signal.SIGKILL)
        t += 0.05
        sup.step(t)
        s = sup.table.slots[0]
        assert s.pid != 0, "a job's death must be respawned at once"
        assert s.state is SlotState.STARTING and s.fast_deaths == 0
    assert ops.trees == [1001, 1002, 1003, 1004, 1005, 1006]  # each job tree killed before its requeue
    assert [r for _, r in sup.house.handed] == ["crash"] * 6


def test_good_work_resets_the_fast_death_count(make):
    sup, ops = make(workers=1)
    sup.step(0.0)
    ops.exit(pids(sup)[0], code=1)
    sup.step(0.1)
    sup.step(0.6)  # respawned after 0.5 s
    ops.exit(pids(sup)[0], code=1)
    sup.step(0.7)
    s = sup.table.slots[0]
    assert s.fast_deaths == 2
    sup.step(s.respawn_at)
    ops.report(s.pid, Idle(), busy(), Finished(kind="behave", outcome=AttemptEnd.COMPLETED), Idle())
    sup.step(s.respawn_at + 0.1)
    assert s.fast_deaths == 0 and sup.counters.succeeded == 1


def test_boot_error_is_not_respawned_and_the_daemon_exits_3_when_no_slot_can_boot(make):
    sup, ops = make(workers=2)
    sup.step(0.0)
    a, b = pids(sup)
    ops.exit(a, code=SlotExit.BOOT_ERROR)
    assert sup.step(0.1) is None
    s1 = sup.table.slots[0]
    assert s1.state is SlotState.CRASH_LOOPING and s1.boot_error and s1.pid == 0
    for t in (1.0, 5.0, 100.0):
        assert sup.step(t) is None and s1.pid == 0, "a boot error is never respawned"
    ops.exit(b, code=SlotExit.BOOT_ERROR)
    assert sup.step(100.1) == 3  # nothing running, nothing to requeue: exit 3 at once
    assert all(s.boot_error for s in sup.table.slots)


def test_one_slot_failing_at_boot_does_not_stop_the_others(make):
    sup, ops = make(workers=2)
    sup.step(0.0)
    a, b = pids(sup)
    ops.report(b, Idle())
    ops.exit(a, code=SlotExit.BOOT_ERROR)
    for t in (0.1, 0.5, 1.0):
        ops.report(b, Beat())
        assert sup.step(t) is None
    assert sup.table.slots[1].state is SlotState.IDLE


def test_drain_waits_for_jobs_then_aborts_at_the_deadline(make):
    sup, ops = make(workers=2)
    sup.step(0.0)
    a, b = pids(sup)
    ops.report(a, Idle(), busy())
    ops.report(b, Idle())
    sup.step(0.1)
    sup.signals.append(signal.SIGTERM)
    assert sup.step(0.2) is None
    assert sorted(ops.sent(signal.SIGTERM)) == [a, b]
    assert all(s.state is SlotState.STOPPING and s.intent is Intent.DRAIN for s in sup.table.slots)
    ops.exit(b, code=0)  # the idle one leaves at once
    assert sup.step(0.3) is None
    assert sup.table.slots[1].pid == 0 and ops.forks == 2, "nothing is respawned while draining"
    assert sup.house.handed[-1][1] == "drain"
    drain_deadline = 0.2 + sup.cfg.pool.drain_timeout
    sup.step(drain_deadline - 0.1)
    assert ops.sent(signal.SIGUSR1) == []
    sup.step(drain_deadline)
    assert ops.sent(signal.SIGUSR1) == [a]  # drain timeout: the slot kills its job and puts it back
    sup.step(drain_deadline + sup.cfg.pool.kill_grace + 5)
    assert ops.sent(signal.SIGKILL) == [a]
    ops.exit(a, sig=signal.SIGKILL)
    sup.house.open = 1  # its list is still being requeued: the daemon waits
    assert sup.step(drain_deadline + 7) is None
    sup.house.open = 0
    assert sup.step(drain_deadline + 7.1) == 0


def test_second_stop_signal_kills_now(make):
    sup, ops = make(workers=1)
    sup.step(0.0)
    sup.signals.extend([signal.SIGTERM])
    sup.step(0.1)
    sup.signals.extend([signal.SIGINT])
    sup.step(0.2)
    assert set(ops.sent(signal.SIGKILL)) == set(pids(sup)) and ops.sent(signal.SIGUSR1) == []


def test_scale_grows_and_shrinks_idle_slots_first_never_killing_a_job(make):
    sup, ops = make(workers=2)
    sup.step(0.0)
    a, b = pids(sup)
    ops.report(a, Idle(), busy())
    ops.report(b, Idle())
    sup.step(0.1)
    sup.controls.append(control.Command("scale", 3))
    sup.step(0.2)
    assert len(sup.table.slots) == 3 and ops.forks == 3
    c = pids(sup)[2]
    ops.report(c, Idle())
    sup.controls.append(control.Command("scale", 1))
    sup.step(0.3)
    assert sorted(ops.sent(signal.SIGTERM)) == sorted([b, c]) and ops.sent(signal.SIGKILL) == []
    assert sup.table.slots[0].intent is Intent.RUN  # the busy one stays
    ops.exit(b, code=0)
    ops.exit(c, code=0)
    sup.step(0.4)
    assert [s.worker_id for s in sup.table.slots] == ["h-slot1"] and ops.forks == 3
    assert sup.counters.slot_restarts == 0
    # grow again: the new position gets a list name never used before
    sup.controls.append(control.Command("scale", 2))
    sup.step(0.5)
    assert sup.table.slots[1].proc.endswith(":2.2")


def test_drain_request_pauses_until_scale(make):
    sup, ops = make(workers=2)
    sup.step(0.0)
    a, b = pids(sup)
    ops.report(a, Idle(), busy())
    ops.report(b, Idle())
    sup.controls.append(control.Command("drain"))
    sup.step(0.1)
    ops.exit(b, code=0)
    sup.step(0.2)
    sup.step(60.0)
    assert sup.table.slots[1].pid == 0 and ops.forks == 2, "a paused pool respawns nothing"
    sup.controls.append(control.Command("scale", 2))
    sup.step(60.1)
    assert sup.table.slots[1].pid != 0 and ops.forks == 3
    assert sup.table.slots[0].intent is Intent.RECYCLE  # still finishing its job; forked again after
    ops.exit(a, code=0)
    sup.step(60.2)
    assert sup.table.slots[0].pid != 0 and ops.forks == 4 and sup.counters.slot_restarts == 0


def test_reload_recycles_each_slot_after_its_job(make):
    sup, ops = make(workers=2)
    sup.step(0.0)
    a, b = pids(sup)
    ops.report(a, Idle(), busy())
    ops.report(b, Idle())
    sup.step(0.1)
    path = sup.cfg.source
    text = open(path).read()
    open(path, "w").write(text.replace("kill_grace = 0.5", "kill_grace = 0.7"))  # a slot setting
    sup.signals.append(signal.SIGHUP)
    sup.step(0.2)
    assert sup.cfg.pool.kill_grace == 0.7
    assert sorted(ops.sent(signal.SIGTERM)) == sorted([a, b])
    ops.exit(b, code=0)
    sup.step(0.3)
    assert sup.table.slots[1].pid not in (0, b) and sup.table.slots[0].pid == a  # b forked again at once
    assert sup.counters.slot_restarts == 0


def test_silent_slot_is_killed_once_per_silence(make):
    sup, ops = make(workers=2)
    sup.step(0.0)
    a, b = pids(sup)
    t = 0.0
    while t < 3 * HB + 0.5:
        t += 0.25
        ops.report(b, Beat())
        sup.step(t)
        if t <= 3 * HB:
            assert ops.sent(signal.SIGKILL) == []
    assert ops.sent(signal.SIGKILL) == [a]
    sup.step(t + 0.25)
    assert ops.sent(signal.SIGKILL) == [a], "one kill per silence; the death path follows"


def test_queued_reports_are_read_before_judging_and_a_stall_of_the_loop_kills_nobody(make):
    # after SIGSTOP/SIGCONT of the supervisor, healthy slots are not killed
    sup, ops = make(workers=2)
    sup.step(0.0)
    a, b = pids(sup)
    ops.report(a, Idle())
    ops.report(b, Idle())
    sup.step(0.1)
    # the supervisor is stopped for 40 s: a keeps beating into its pipe, b (a job child) is quiet
    for _ in range(40):
        ops.report(a, Beat())
    sup.step(40.1)
    assert ops.sent(signal.SIGKILL) == []
    assert sup.table.slots[0].last_report == 40.1
    # b really is wedged: judged on a fresh window from the resume, it is killed 3 heartbeats later
    t = 40.1
    while t < 40.1 + 3 * HB + 0.3:
        t += 0.25
        ops.report(a, Beat())
        sup.step(t)
    assert ops.sent(signal.SIGKILL) == [b]
    assert STALL_S < 40


def test_a_list_the_housekeeper_found_stuck_gets_its_slot_killed(make):
    # the handover survives every loop
    sup, ops = make(workers=2)
    sup.step(0.0)
    a, b = pids(sup)
    for t in (0.1, 0.2):
        ops.report(a, Beat())
        ops.report(b, Beat())
        sup.step(t)
    sup.house.stuck.add(sup.table.slots[1].proc)
    ops.report(a, Beat())
    ops.report(b, Beat())
    sup.step(0.3)
    assert ops.sent(signal.SIGKILL) == [b]


def test_step_uses_only_the_clock_it_is_given(make, monkeypatch):
    sup, ops = make(workers=2)

    def forbidden():
        raise AssertionError("step read the real clock")

    sup.step(0.0)
    a, b = pids(sup)
    monkeypatch.setattr(time, "monotonic", forbidden)
    ops.report(a, Idle(), busy(), Finished(kind="behave", outcome=AttemptEnd.COMPLETED), Idle())
    ops.exit(b, code=1)
    sup.signals.append(signal.SIGTERM)
    for t in (0.1, 0.2, 10.0):
        sup.step(t)


def test_the_fence_stops_running_jobs_once_heartbeats_lapse_and_rearms_after(make):
    # a host whose last heartbeat write was sent longer than pool.fence ago kills its jobs
    # (SIGUSR1: the slot kills the attempt's group and puts the job back) before any other host may
    # reclaim them (3 heartbeats); an idle slot is left alone; a stall shorter than the fence kills nothing.
    sup, ops = make(workers=2)
    fence = sup.cfg.pool.fence
    assert HB <= fence and fence + sup.cfg.pool.kill_grace + HB / 3 <= 3 * HB + 1e-9
    sup.step(0.0)
    a, b = pids(sup)
    ops.report(a, Idle(), busy())
    ops.report(b, Idle())
    sup.house.last_ok = 0.0
    sup.step(0.1)
    assert 0 < sup.timeout(0.1) <= fence - 0.1 + 1e-9, "the loop wakes for the fence deadline"
    for t in (0.2, fence - 0.05):
        ops.report(a, Beat())
        ops.report(b, Beat())
        sup.step(t)
    assert ops.sent(signal.SIGUSR1) == [], "a lapse shorter than the fence kills nothing"
    ops.report(a, Beat())
    ops.report(b, Beat())
    sup.step(fence + 0.01)
    assert ops.sent(signal.SIGUSR1) == [a], "only the busy slot is fenced"
    assert ops.stopped == [(77, signal.SIGTERM)], "the supervisor stops the attempt's group itself"
    sup.step(fence + 0.01 + sup.cfg.pool.kill_grace)
    assert ops.stopped == [(77, signal.SIGTERM), (77, signal.SIGKILL)]
    assert sup.table.slots[0].intent is Intent.RECYCLE and sup.table.slots[0].state is SlotState.STOPPING
    sup.step(fence + 0.2)
    assert ops.sent(signal.SIGUSR1) == [a], "once per lapse"
    # heartbeats flow again: re-armed
    sup.house.last_ok = fence + 0.3
    sup.step(fence + 0.35)
    assert sup.fenced_at is None


def test_a_heartbeat_that_finds_the_host_key_expired_fences_at_once(make):
    sup, ops = make(workers=1)
    sup.step(0.0)
    (a,) = pids(sup)
    ops.report(a, Idle(), busy())
    sup.step(0.1)
    sup.house.lapsed = True  # the housekeeper's SET … GET returned nothing: we were taken for dead
    sup.step(0.2)
    assert ops.sent(signal.SIGUSR1) == [a]
