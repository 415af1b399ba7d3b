"""The only code that starts and kills a job's processes.

Every attempt runs in a child started in a new session (its own process group) that dies with its
slot (see ``spawn``), with ``TENDER_POOL_ATTEMPT=<token>`` and
``TENDER_POOL_OWNER=<host>:<incarnation>:<slot>`` in its environment so that anything it leaves behind
can be found again.

Killing (timeout, cancel, drain, supervisor abort): snapshot the child's whole tree first (psutil),
SIGTERM the group and the tree, wait ``kill_grace``, SIGKILL the group and whatever of the tree is
left, then sweep /proc for the attempt's marker: descendants that called ``setsid`` or double-forked
are outside the group (supervisor#1101, celery#2353) but still carry the marker.

After every attempt, even a clean one, the slot — a child subreaper (``PR_SET_CHILD_SUBREAPER``), so
orphans of the job re-parent to it — kills and reaps any process of its own other than the ones it
knows. That check reads one small /proc file, so it costs microseconds per job, not a /proc walk.

This module is also the one place that signals or probes a process group (``killpg``,
``group_alive``, ``kill_group``): the supervisor, the slot and the warm JVM (through an injected
``kill_group``) all use it, so ``PermissionError`` has one meaning everywhere. EPERM from
``killpg`` means the group exists but is not ours to signal (a recycled pgid of another user, or a
setuid program in it): a probe treats it as alive, a kill reports it undelivered, and both log it.

An attempt is over when its process has exited, not when its pipes close: a handler may close
stdout and stderr and keep running, and is still timed, cancelled and fenced until it exits.
"""

from __future__ import annotations

import ctypes
import fcntl
import gc
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Protocol

import psutil
import structlog

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)

MAX_OUTPUT = 16 * 1024 * 1024  # a handler's stdout beyond this is bad_output
STDERR_TAIL = 4096
PROGRESS_FD = 3  # a command handler's progress pipe (slots/progress.py); TENDER_POOL_PROGRESS_FD names it
PROGRESS_PIPE_SIZE = 1 << 20  # so a burst of progress lines never blocks the handler


def set_pdeathsig(sig: int = signal.SIGKILL) -> None:
    _libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def set_subreaper() -> None:
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _child_setup() -> None:  # runs in the forked child before exec: async-signal-safe calls only
    _libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


class ProgressSink(Protocol):
    def feed(self, data: bytes) -> None: ...
    def due(self) -> bool: ...
    def next_due(self) -> float | None: ...
    def flush(self, force: bool = False) -> None: ...


@dataclass
class RunResult:
    returncode: int | None
    stdout: bytes
    stderr_tail: bytes
    stopped: str | None = None  # None, or why we killed it: timeout | cancel | abort
    signals: list[str] = field(default_factory=list)
    overflow: bool = False
    kill: list[dict] | None = None  # kill_attempt's stages (pids, signal, seconds), for the job_ran log


class Child:
    """A started job process: the small part of Popen's interface ``run`` needs, for both a
    posix_spawn'ed command and a forked Python child. Its pipes are raw fds (-1 once closed): no
    file objects, since ``run`` only ever reads and writes them with ``os.read`` / ``os.write``."""

    def __init__(self, pid: int, stdin_fd: int, stdout_fd: int, stderr_fd: int, progress_fd: int | None = None):
        self.pid = pid
        self.stdin = stdin_fd
        self.stdout = stdout_fd
        self.stderr = stderr_fd
        self.progress = progress_fd if progress_fd is not None else -1
        self.returncode: int | None = None

    def close_pipes(self) -> None:
        for name in ("stdin", "stdout", "stderr", "progress"):
            fd = getattr(self, name)
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
                setattr(self, name, -1)

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else: it is gone, status unknown
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Block until the child exits: a pidfd wakes us the instant it does (no sleep-polling)."""
        if self.poll() is not None:
            return self.returncode  # type: ignore[return-value]
        try:
            fd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            return self.poll() or 0
        try:
            if not select.select([fd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
        finally:
            os.close(fd)
        while self.poll() is None:  # pragma: no cover - exit is visible once the pidfd is readable
            time.sleep(0.001)
        return self.returncode  # type: ignore[return-value]


def _pipes() -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    return os.pipe(), os.pipe(), os.pipe()


def _progress_pipe() -> tuple[int, int]:
    """The progress pipe, both ends above fd 9 (so dup2 onto fd 3 in the child never closes its own
    source), enlarged so a burst never blocks the writer."""
    r, w = os.pipe()
    out = []
    for fd in (r, w):
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(fd)
        out.append(high)
    try:
        fcntl.fcntl(out[1], fcntl.F_SETPIPE_SZ, PROGRESS_PIPE_SIZE)
    except OSError:  # above /proc/sys/fs/pipe-max-size for an unprivileged user: keep the default
        pass
    return out[0], out[1]


def spawn(argv: list[str], env: dict[str, str], cwd: str | None = None) -> Child:
    """posix_spawn (vfork-fast: ~1 ms, where fork+exec of a 40 MB slot with setsid costs ~5-9 ms) in a
    new session. posix_spawn cannot set PDEATHSIG in the child; the slot covers that instead: its own
    PDEATHSIG handler kills the running job's group before the slot exits (slot.py), and a slot that
    is SIGKILLed has its job's tree killed by the supervisor (group, subreaper orphans, marker sweep)."""
    (ir, iw), (or_, ow), (er, ew) = _pipes()
    pr, pw = _progress_pipe()
    actions = [
        (os.POSIX_SPAWN_DUP2, ir, 0),
        (os.POSIX_SPAWN_DUP2, ow, 1),
        (os.POSIX_SPAWN_DUP2, ew, 2),
        (os.POSIX_SPAWN_DUP2, pw, PROGRESS_FD),
    ]
    for fd in (ir, iw, or_, ow, er, ew, pr, pw):
        actions.append((os.POSIX_SPAWN_CLOSE, fd))
    full = list(argv)
    env = dict(env, TENDER_POOL_PROGRESS_FD=str(PROGRESS_FD))
    if cwd:
        env["PWD"] = cwd
    try:
        pid = os.posix_spawnp(full[0], full, env, file_actions=actions, setsid=True)
    except BaseException:
        for fd in (iw, or_, er, pr):
            os.close(fd)
        raise
    finally:
        for fd in (ir, ow, ew, pw):
            os.close(fd)
    return Child(pid, iw, or_, er, pr)


def fork_call(fn: Callable[[], int], env: dict[str, str]) -> Child:
    """Run ``fn`` in a forked child (a warm copy of the slot: no interpreter start-up), in its own
    session, dying with the slot. Its stdout/stderr come back through pipes like a command's. Its
    progress pipe stays where it is (fd 3 may be one of the slot's own, e.g. the warm JVM's):
    ``TENDER_POOL_PROGRESS_FD`` names it."""
    (ir, iw), (or_, ow), (er, ew) = _pipes()
    pr, pw = _progress_pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        # The slot's whole inherited heap is never garbage to the child: without this its collections
        # walk all of it (10-40 ms of CPU on a large workbook). Frozen here, not in the slot, so the
        # slot's own cyclic garbage stays collectable.
        gc.freeze()
        try:
            os.setsid()
            _child_setup()
            os.dup2(ir, 0)
            os.dup2(ow, 1)
            os.dup2(ew, 2)
            for fd in (ir, iw, or_, ow, er, ew, pr):
                os.close(fd)
            os.set_inheritable(pw, True)
            env = dict(env, TENDER_POOL_PROGRESS_FD=str(pw))
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            os.environ.update(env)
            code = fn()
        except BaseException:  # noqa: BLE001 - report and exit, never return into the slot's loop
            import traceback

            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    for fd in (ir, ow, ew, pw):
        os.close(fd)
    return Child(pid, iw, or_, er, pr)


def run(
    proc: Child,
    stdin: bytes,
    *,
    deadline: float,
    kill_grace: float,
    marker: tuple[str, str],
    tick: Callable[[], str | None],
    tick_every: float = 1.0,
    beat: Callable[[], None] | None = None,
    progress: "ProgressSink | None" = None,
) -> RunResult:
    """Feed stdin, collect stdout and a stderr tail, and enforce the deadline (monotonic) until the
    process exits — not merely until its pipes close.

    ``tick`` is called at least every ``tick_every`` seconds; a non-None return ("cancel", "abort",
    "fenced") stops the attempt the same way a timeout does. ``beat`` is called while waiting out
    ``kill_grace`` after a stop, so the slot keeps reporting through a slow kill.
    ``progress`` (slots/progress.ProgressFeed) gets whatever the child writes on its progress pipe,
    read like its other pipes, and is flushed when due (at most ``RATE_HZ`` times a second) and once
    more at the end; without it the pipe is still drained, so a handler never blocks on it.
    """
    out = bytearray()
    err = bytearray()
    poller = select.poll()
    IN, OUT, GONE = select.POLLIN, select.POLLOUT, select.POLLHUP | select.POLLERR | select.POLLNVAL
    pending = memoryview(stdin)
    for fd in (proc.stdin, proc.stdout, proc.stderr, proc.progress):
        if fd >= 0:
            os.set_blocking(fd, False)
    if pending:  # most stdins fit the pipe at once: no poll turn for them
        try:
            pending = pending[os.write(proc.stdin, pending[:65536]):]
        except BlockingIOError:
            pass
        except OSError:  # gone already (EPIPE): its exit says the rest
            pending = pending[:0]
    if pending:
        poller.register(proc.stdin, OUT)
    else:
        os.close(proc.stdin)
        proc.stdin = -1
    streams = {proc.stdout, proc.stderr}
    if proc.progress >= 0:
        streams.add(proc.progress)
    for fd in streams:
        poller.register(fd, IN)
    try:  # readable the instant the process exits: no sleep-polling once its pipes are closed
        pidfd = os.pidfd_open(proc.pid)
        poller.register(pidfd, IN)
    except OSError:
        pidfd = -1
    stopped: str | None = None
    overflow = False
    next_tick = time.monotonic() + tick_every
    exited_at: float | None = None
    while True:
        now = time.monotonic()
        if proc.poll() is not None:
            # Pipes can stay open in an escaped descendant: give them a moment, then stop reading.
            exited_at = exited_at or now
            if not streams or now - exited_at > 0.2:
                break
        if now >= deadline:
            stopped = "timeout"
            break
        if now >= next_tick:
            next_tick = now + tick_every
            why = tick()
            if why:
                stopped = why
                break
        if progress is not None:
            if progress.due():
                progress.flush()
            nd = progress.next_due()
            wait = min(deadline, next_tick, nd if nd is not None else deadline) - now
        else:
            wait = min(deadline, next_tick) - now
        if exited_at:
            wait = min(wait, 0.05)
        elif pidfd < 0 and not streams:
            wait = min(wait, 0.01)
        for fd, ev in poller.poll(max(0.0, wait) * 1000):
            if fd == pidfd:
                poller.unregister(pidfd)  # level-triggered: poll() above sees the exit from now on
                continue
            if fd == proc.stdin:
                try:
                    n = os.write(fd, pending[:65536])
                    pending = pending[n:]
                except (BrokenPipeError, OSError):
                    pending = pending[:0]
                if not pending:
                    poller.unregister(fd)
                    os.close(fd)
                    proc.stdin = -1
                continue
            try:
                chunk = os.read(fd, 65536) if ev & (IN | GONE) else b""
            except BlockingIOError:
                continue
            if not chunk:
                poller.unregister(fd)
                streams.discard(fd)
                continue
            if fd == proc.progress:
                if progress is not None:
                    progress.feed(chunk)
            elif fd == proc.stdout:
                if len(out) + len(chunk) > MAX_OUTPUT:
                    overflow = True
                else:
                    out += chunk
            else:
                err += chunk
                if len(err) > 4 * STDERR_TAIL:
                    del err[: len(err) - STDERR_TAIL]
    if pidfd >= 0:
        os.close(pidfd)
    if progress is not None:
        progress.flush(force=True)  # before the settle: its events precede job_completed
    signals: list[str] = []
    kill: KillReport | None = None
    if stopped:
        kill = kill_attempt(proc.pid, marker, kill_grace, lambda: proc.poll() is not None, beat=beat)
        signals = kill.signals
    proc.close_pipes()
    try:
        rc = proc.wait(timeout=kill_grace + 5)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILLed above; kernel will reap
        rc = None
    return RunResult(rc, bytes(out), bytes(err[-STDERR_TAIL:]), stopped, signals, overflow, kill.stages if kill else None)


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
