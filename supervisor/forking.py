"""The supervisor's process effects: fork a slot, signal, reap, kill a dead slot's job tree.

They are gathered in ``ProcessOps`` so the daemon's loop calls one small seam, and its unit tests
replace it with a fake (no process is forked there).

Fork safety without a lock. The supervisor forks slots while three of its threads run (housekeeper,
status socket, metrics HTTP). A lock held by one of them at fork time stays held for ever in the
child, so the child must never take a lock those threads may hold. It does not:
- a slot builds its own Redis client, logger and metrics after the fork and never touches an
  inherited one (the housekeeper's and the status probe's clients, with their pool locks, are dead
  weight in the child);
- log lines are one ``write(2)`` each, with no lock (``logs.LineLogger``);
- ``sys.stdout``/``sys.stderr`` hold a buffer lock a thread may own mid-``print``: the child gets fresh
  stream objects over the same fds before it runs anything (``_child_streams``);
- CPython re-initialises its own import, threading and ``logging`` locks after ``fork()``; the
  modules a slot runs are imported before the first fork (``daemon._prepare_fork``), so a slot does
  not take a per-module import lock another thread could hold;
- the status and sd_notify sockets are closed in the child (``status_server.close_after_fork``).
So ``fork()`` needs no lock and never waits: there is no ``fork_lock`` any more. A fork server would
be the next step if a slot ever had to share state with those threads; it does not.

Memory (the target: idle PSS of the pool < 64 MiB, README "Measurements"). A slot shares the
supervisor's pages copy-on-write, so the pool's PSS is the pages resident at the fork, once, plus every
page any of the five processes writes afterwards. Before each fork the supervisor hands its malloc
heap's free pages back to the kernel (``_trim_heap``): free but resident pages are otherwise inherited
and counted, and a slot's first allocations there copy them. Measured, idle after work, 3 runs each:
bench_pool.py 65.6-65.9 MiB (66.8-67.0 without), bench/compare 64.8-65.4 (66.3-67.0). The daemon
freezes the GC before the first fork (``daemon._prepare_fork``) so that a slot's collections do not
write into inherited objects. What remains per slot (~7 MiB private after its first jobs) is mostly
CPython touching inherited objects: every call increfs its function and code object and 3.11
specialises bytecode in place, so each page holding an object the slot's loop uses is copied once.
"""

from __future__ import annotations

import ctypes
import io
import os
import signal
import sys
import threading
import time
from typing import Callable

import psutil

from tender_pool.slots import faults, groups

from tender_pool.store.config import Config
from tender_pool.supervisor.slot_table import SlotProc
from tender_pool.slots.reports import Busy, SlotExit


def kill(pid: int, sig: int) -> None:
    """``os.kill`` where "no such process" means "already gone" (its death is reaped separately)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def previous_slots(supervisor_pids: set[int]) -> list[int]:
    """The slots a dead supervisor of this machine left: live ``tender-pool`` processes in its
    process group (a slot is forked into its supervisor's group; jobs and JVMs have their own). A
    supervisor started as a group leader (systemd, a shell, ``start_new_session``) is one; one that
    was not leaves nothing to find here, and its slots are only those the marker sweep reaches."""
    found = []
    for p in psutil.process_iter(["cmdline", "name", "status"]):
        if p.pid == os.getpid() or p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if os.getpgid(p.pid) not in supervisor_pids:
                continue
        except OSError:
            continue
        if "tender-pool" in " ".join(p.info["cmdline"] or ()) or "tender-pool" in (p.info["name"] or ""):
            found.append(p.pid)
    return found


def await_exit(pids: list[int], timeout: float) -> list[int]:
    """Wait up to ``timeout`` for ``pids`` (not our children) to exit, then SIGKILL what is left and
    wait for that too; returns the pids that had to be killed. A zombie has exited: whoever
    inherited it reaps it (or not: an init that never reaps must not hold us up). psutil's
    ``Process`` checks its creation time, so a pid reused meanwhile is never waited for or killed."""
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.Error:
            pass
    end = time.monotonic() + timeout
    alive = [p for p in procs if _running(p)]
    while alive and time.monotonic() < end:
        time.sleep(0.01)
        alive = [p for p in alive if _running(p)]
    for p in alive:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    end = time.monotonic() + 5
    while any(_running(p) for p in alive) and time.monotonic() < end:
        time.sleep(0.01)
    return [p.pid for p in alive]


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def waitpid() -> tuple[int, int]:
    """One exited child, without blocking: (pid, status), or (0, 0) when none is waiting."""
    try:
        return os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return 0, 0


def _trim_heap() -> None:
    """glibc ``malloc_trim(0)``: return the heap's free pages to the kernel before a fork, so the slot
    does not inherit them (see the module docstring). Sub-millisecond; elsewhere than glibc, nothing."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def _libc_malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


_malloc_trim = _libc_malloc_trim()
# the supervisor's own signals (daemon.run installs its handlers for them), held across a slot's fork
_FORK_HELD = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD)
# Held by a supervisor thread while it creates a child with pipes (the JVM archive check, a reload's
# import check) and by every slot fork: a slot forked in between would inherit the write ends of
# that child's pipes and keep them open for its whole life, and the thread's read would never end.
SPAWN_LOCK = threading.Lock()


def _child_streams() -> None:
    """New stdout/stderr objects over fds 1 and 2: the inherited ones' buffer locks may be held by a
    thread that does not exist in this process."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        try:
            raw = io.FileIO(fd, "w", closefd=False)
            setattr(sys, name, io.TextIOWrapper(io.BufferedWriter(raw), line_buffering=True, errors="replace"))
        except OSError:
            pass


class ProcessOps:
    """The real effects. ``marker`` is the ``TENDER_POOL_OWNER`` prefix of this incarnation's jobs;
    ``list_owner`` the encoded ``keys.Owner`` a slot registers its processing list under."""

    def __init__(self, cfg: Config, marker: str, list_owner: str):
        self.cfg = cfg
        self.marker = marker
        self.list_owner = list_owner
        self.kill: Callable[[int, int], None] = kill
        self.waitpid: Callable[[], tuple[int, int]] = waitpid

    def fork(self, s: SlotProc, close: list[int]) -> tuple[int, int]:
        """Fork slot ``s``; returns (pid, read end of its report pipe, non-blocking). ``close``: fds
        the child must not keep (the other slots' pipes)."""
        _trim_heap()
        rfd, wfd = os.pipe()
        # Held across the fork: a stop signal sent to the new slot before it drops the supervisor's
        # handlers would run the inherited copy of them (which only queues it for a loop the slot
        # never runs) and be lost — a drain then waited its whole timeout for that slot. Held, it
        # stays pending until the slot's handlers are the defaults (it dies of it: it was asked
        # to stop before it began), and main() then installs its own.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _FORK_HELD)
        try:
            with SPAWN_LOCK:
                pid = os.fork()
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            raise
        if pid == 0:  # --- in the slot: never returns ---
            code = SlotExit.ERROR
            try:
                faults.checkpoint("slot_forked")
                signal.set_wakeup_fd(-1)
                for sig in _FORK_HELD:
                    signal.signal(sig, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
                _child_streams()
                os.close(rfd)
                for fd in close:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                from tender_pool.slots.slot import slot_main

                code = slot_main(self.cfg, s.index, s.worker_id, s.proc, f"{self.marker}:{s.index}", wfd,
                                 self.list_owner)
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                os._exit(int(code))
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        os.close(wfd)
        os.set_blocking(rfd, False)
        return pid, rfd

    def stop_attempt(self, busy: Busy, sig: int) -> list[int]:
        """The fence: signal a running attempt's group directly (its slot may be blocked on an
        unreachable Redis); with SIGKILL also every process carrying the attempt's marker."""
        if busy.child_pid:
            groups.killpg(busy.child_pid, sig)
        if sig == signal.SIGKILL and busy.token:
            return groups.sweep_marker("TENDER_POOL_ATTEMPT", busy.token)
        return []

    def kill_job_tree(self, s: SlotProc, busy: Busy | None, keep: set[int]) -> list[int]:
        """A slot died: kill what is left of its job (the group, then anything carrying its marker,
        then orphans re-parented to us), before its list may be requeued. Local, no network."""
        if busy and busy.child_pid:
            groups.killpg(busy.child_pid, signal.SIGKILL)
        swept = groups.sweep_marker("TENDER_POOL_OWNER", f"{self.marker}:{s.index}")
        orphans = groups.reap_orphans(keep=keep)
        return sorted(set(swept) | set(orphans))
