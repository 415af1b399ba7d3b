"""Process groups and the processes an attempt leaves behind: signal, probe, kill, sweep, reap.

The one place that signals or probes a process group (``killpg``, ``group_alive``,
``kill_group``): the supervisor, the slot's runner and the warm JVM (through an injected
``kill_group``) all use it, so ``PermissionError`` has one meaning everywhere. EPERM from
``killpg`` means the group exists but is not ours to signal (a recycled pgid of another user, or a
setuid program in it): a probe treats it as alive, a kill reports it undelivered, and both log it.

Killing an attempt (timeout, cancel, drain, supervisor abort; ``kill_attempt``): snapshot the
child's whole tree first (psutil), SIGTERM the group and the tree, wait ``kill_grace``, SIGKILL the
group and whatever of the tree is left, then sweep /proc for the attempt's marker
(``TENDER_POOL_ATTEMPT=<token>``): descendants that called ``setsid`` or double-forked are outside
the group (supervisor#1101, celery#2353) but still carry the marker.

After every attempt, even a clean one, the slot — a child subreaper (``set_subreaper``), so
orphans of the job re-parent to it — kills and reaps any process of its own other than the ones it
knows (``reap_orphans``). That check reads one small /proc file, so it costs microseconds per job,
not a /proc walk. The supervisor uses the same sweeps after a slot dies.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import psutil
import structlog

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)


def set_pdeathsig(sig: int = signal.SIGKILL) -> None:
    """This process gets ``sig`` when its parent dies (also called in a forked attempt's child
    before it runs anything: one prctl, safe there)."""
    _libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def set_subreaper() -> None:
    """Orphaned descendants re-parent to this process, for ``reap_orphans`` to find."""
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _signal_all(procs: Iterable[psutil.Process], sig: int) -> None:
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.Error:
            pass


_eperm_logged: set[int] = set()


def _log_eperm(pgid: int, what: str) -> None:
    if pgid not in _eperm_logged:  # once per group: probes run every few milliseconds
        _eperm_logged.add(pgid)
        structlog.get_logger().warning("process_group_not_ours", pgid=pgid, op=what)


def killpg(pgid: int, sig: int) -> bool:
    """Signal a process group. True when delivered; False when it is gone (ESRCH) or not ours (EPERM,
    logged)."""
    if pgid <= 1:
        return False  # 0 would be our own group, 1 init's: never a job's
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:  # ESRCH: already gone
        return False
    except PermissionError:
        _log_eperm(pgid, f"kill {signal.Signals(sig).name}")
        return False


def group_alive(pgid: int) -> bool:
    """Does any process of group ``pgid`` still exist? EPERM counts as alive (it exists, logged)."""
    if pgid <= 1:
        return False
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        _log_eperm(pgid, "probe")
        return True


def kill_group(pgid: int, grace: float) -> None:
    """SIGTERM the group (and SIGCONT, so a stopped member can act on it), wait up to ``grace`` s for
    it to be gone, then SIGKILL. The signature ``extract.jvm.WarmJvm(kill_group=…)`` takes."""
    if killpg(pgid, signal.SIGTERM):
        killpg(pgid, signal.SIGCONT)
    end = time.monotonic() + grace
    while time.monotonic() < end and group_alive(pgid):
        time.sleep(0.02)
    killpg(pgid, signal.SIGKILL)


@dataclass
class KillReport:
    """What kill_attempt did: the signals sent (for metrics) and, per stage, the pids it targeted,
    the signal and how long the stage took (for the log line an operator reads after a timeout)."""

    signals: list[str]
    stages: list[dict]


def kill_attempt(
    pid: int, marker: tuple[str, str], grace: float, exited: Callable[[], bool],
    beat: Callable[[], None] | None = None,
) -> KillReport:
    """SIGTERM group + tree, ``grace`` seconds, SIGKILL group + tree + marker sweep. The child is
    its own session leader, so its pgid is its pid. ``beat`` runs every few milliseconds while the
    grace runs out: a slot must keep reporting, or its supervisor kills it as silent."""
    sent: list[str] = []
    stages: list[dict] = []
    tree = _tree(pid)
    t0 = time.monotonic()
    killpg(pid, signal.SIGTERM)
    _signal_all(tree, signal.SIGTERM)
    sent.append("SIGTERM")
    end = time.monotonic() + grace
    while time.monotonic() < end:
        alive = [p for p in tree if _alive(p)]
        if exited() and not alive and not group_alive(pid):
            break
        if beat is not None:
            beat()
        time.sleep(0.02)
    else:
        sent.append("SIGKILL")
    t1 = time.monotonic()
    stages.append({"stage": "term", "signal": "SIGTERM", "pgid": pid, "pids": [p.pid for p in tree],
                   "seconds": round(t1 - t0, 4)})
    left = [p for p in tree if _alive(p)]
    killpg(pid, signal.SIGKILL)
    _signal_all(left, signal.SIGKILL)
    t2 = time.monotonic()
    if "SIGKILL" in sent:
        stages.append({"stage": "kill", "signal": "SIGKILL", "pgid": pid, "pids": [p.pid for p in left],
                       "seconds": round(t2 - t1, 4)})
    swept = sweep_marker(marker[0], marker[1])
    stages.append({"stage": "sweep", "signal": "SIGKILL", "pids": swept, "seconds": round(time.monotonic() - t2, 4)})
    if swept and "SIGKILL" not in sent:
        sent.append("SIGKILL")
    return KillReport(sent, stages)


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def find_marked(name: str, value: str, prefix: bool = False) -> list[int]:
    """Pids whose initial environment has ``name=value`` (or starts with it, with ``prefix``)."""
    needle = f"{name}={value}".encode()
    me = os.getpid()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        try:
            env = (d / "environ").read_bytes()
        except OSError:
            continue
        for item in env.split(b"\0"):
            if item == needle or (prefix and item.startswith(needle)):
                found.append(int(d.name))
                break
    return found


def sweep_marker(name: str, value: str, prefix: bool = False, sig: int = signal.SIGKILL) -> list[int]:
    killed = []
    for pid in find_marked(name, value, prefix):
        try:
            os.kill(pid, sig)
            killed.append(pid)
        except ProcessLookupError:
            pass
    return killed


def own_children() -> list[int]:
    """Direct children of this (single-threaded) process, from /proc; cheap."""
    try:  # raw os calls: a pathlib read costs ~5x as much, and this runs after every job
        fd = os.open(f"/proc/self/task/{os.getpid()}/children", os.O_RDONLY)
    except OSError:
        return []
    try:
        return [int(x) for x in os.read(fd, 1 << 16).split()]
    except OSError:
        return []
    finally:
        os.close(fd)


def reap_orphans(keep: set[int] = frozenset()) -> list[int]:  # type: ignore[assignment]
    """Kill every child of ours not in ``keep`` (orphans re-parented to us as subreaper) and reap
    all exited ones. Returns the pids it had to kill."""
    killed = []
    for pid in own_children():
        if pid in keep:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 1.0
    while True:
        try:
            # with ``keep`` (the supervisor), never waitpid(-1): that would reap a sibling slot that
            # just exited and steal its exit from the main loop's reap_children
            pid, _ = os.waitpid(-1, os.WNOHANG) if not keep else _reap_one_except(keep)
        except ChildProcessError:
            break
        if pid:
            continue
        # zombies stay listed as our children until reaped; wait briefly for the SIGKILLed ones
        pending = set(killed) & set(own_children())
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.005)
    return killed


def _reap_one_except(keep: set[int]) -> tuple[int, int]:
    for pid in own_children():
        if pid in keep:
            continue
        try:
            res = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        if res[0]:
            return res
    return 0, 0
