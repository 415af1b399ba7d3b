"""Launch an attempt and run it to its end: the only code that starts a job's processes.

Every attempt runs in a child started in a new session (its own process group) that dies with its
slot (see ``spawn``), with ``TENDER_POOL_ATTEMPT=<token>`` and
``TENDER_POOL_OWNER=<host>:<incarnation>:<slot>`` in its environment so that anything it leaves behind
can be found again. ``run`` feeds its stdin, reads its output and progress, and enforces its
deadline and the slot's stop reasons; stopping it is ``groups.kill_attempt``'s (the group, the
tree, the marker sweep), and so is everything else that signals or sweeps processes.

An attempt is over when its process has exited, not when its pipes close: a handler may close
stdout and stderr and keep running, and is still timed, cancelled and fenced until it exits. The
one exception is a forked child (``fork_call``, ``fork_spare``): it is our own code to its last
instruction, so it says when it is done. Once its body has returned, it closes its stdout, stderr
and progress pipe and writes its exit code, one byte, on a report pipe of its own, then exits.
When ``run`` has that byte and every stream's end, the outcome is whole (the child wrote its
files before; what it runs after the byte is ``os._exit``): ``run`` returns without waiting for the
exit (``RunResult.lingering``),
and the kernel's teardown of the child's copy of the slot (3-7 ms a document) runs beside the
settle. After the settle, before it runs anything else, the slot ends it (``end_reported``: its
group SIGKILLed, whatever it is doing, its exit waited for, bounded, and reaped) and sweeps its
orphans (``attempt.Attempt.sweep``).
"""

from __future__ import annotations

import fcntl
import gc
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from tender_pool.store.outcomes import Stop

from tender_pool.slots import faults, groups

MAX_OUTPUT = 16 * 1024 * 1024  # a handler's stdout beyond this is bad_output
STDERR_TAIL = 4096
PROGRESS_FD = 3  # a command handler's progress pipe (slots/progress.py); TENDER_POOL_PROGRESS_FD names it
PROGRESS_PIPE_SIZE = 1 << 20  # so a burst of progress lines never blocks the handler


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
    stopped: str | None = None  # None, or why we killed it (``Stop``)
    signals: list[str] = field(default_factory=list)
    overflow: bool = False
    kill: list[dict] | None = None  # kill_attempt's stages (pids, signal, seconds), for the job_ran log
    exited_at: float | None = None  # monotonic: when ``run`` first saw the process gone (None: stopped first),
    # or its report (``lingering``)
    lingering: "Child | None" = None  # reported its outcome, not reaped yet: the caller ends it (``end_reported``)


class Child:
    """A started job process: the small part of Popen's interface ``run`` needs, for both a
    posix_spawn'ed command and a forked Python child. Its pipes are raw fds (-1 once closed): no
    file objects, since ``run`` only ever reads and writes them with ``os.read`` / ``os.write``."""

    def __init__(self, pid: int, stdin_fd: int, stdout_fd: int, stderr_fd: int, progress_fd: int | None = None,
                 report_fd: int = -1):
        self.pid = pid
        self.stdin = stdin_fd
        self.stdout = stdout_fd
        self.stderr = stderr_fd
        self.progress = progress_fd if progress_fd is not None else -1
        self.report = report_fd  # a forked child's exit code, written before it exits (-1: none)
        self.returncode: int | None = None

    def order(self, data: bytes) -> None:
        """Hand a ``fork_spare`` child its order: written whole (an order is far below a pipe's 64 KiB,
        so this never waits), then stdin is closed. Raises OSError (EPIPE) if the child is gone."""
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.stdin, view):]
        finally:
            os.close(self.stdin)
            self.stdin = -1

    def close_pipes(self) -> None:
        for name in ("stdin", "stdout", "stderr", "progress", "report"):
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
    def body() -> int:
        os.environ.update({k: v for k, v in env.items() if k != "TENDER_POOL_PROGRESS_FD"})  # the pipe's, set
        return fn()

    return _fork(body)


def fork_spare(serve: Callable[[bytes], int]) -> Child:
    """A child forked now, set up as ``fork_call``'s, that waits for its order before it runs
    anything: the slot writes the order on its stdin and closes it (``Child.order``); the child reads
    it to its end and returns ``serve(order)`` as its exit code (an empty order: it exits 0, unused).
    Forked ahead of the job it will run, while the slot is idle, it takes the fork — the copy of the
    slot's page tables, the child's first writes to its pages, 4-7 ms of a 40 MB slot — off the way
    from a job's start to its settle (``kinds.ExtractionKind``). Fork it only when no attempt's pipes
    are open in the slot: it would hold their ends (a stdin's write end: that child never reads to
    its end)."""

    def wait_for_order() -> int:
        chunks = []
        while chunk := os.read(0, 65536):
            chunks.append(chunk)
        order = b"".join(chunks)
        return serve(order) if order else 0

    return _fork(wait_for_order)


def _fork(body: Callable[[], int]) -> Child:
    (ir, iw), (or_, ow), (er, ew) = _pipes()
    pr, pw = _progress_pipe()
    rr, rw = os.pipe()  # the report pipe: close-on-exec, so nothing the child starts holds it
    pid = os.fork()
    if pid == 0:
        code = 1
        # The slot's whole inherited heap is never garbage to the child: without this its collections
        # walk all of it (10-40 ms of CPU on a large workbook). Frozen here, not in the slot, so the
        # slot's own cyclic garbage stays collectable.
        gc.freeze()
        try:
            os.setsid()
            groups.set_pdeathsig(signal.SIGKILL)
            os.dup2(ir, 0)
            os.dup2(ow, 1)
            os.dup2(ew, 2)
            for fd in (ir, iw, or_, ow, er, ew, pr, rr):
                os.close(fd)
            os.set_inheritable(pw, True)
            os.environ["TENDER_POOL_PROGRESS_FD"] = str(pw)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            code = body()
        except BaseException:  # noqa: BLE001 - report and exit, never return into the slot's loop
            import traceback

            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
                _report(code, rw, pw)
            finally:
                os._exit(code)
    for fd in (ir, ow, ew, pw, rw):
        os.close(fd)
    return Child(pid, iw, or_, er, pr, rr)


def _report(code: int, report_fd: int, progress_fd: int) -> None:
    """In a forked child whose body has returned: its output is complete, so its streams are closed
    (the slot sees their ends) and its exit code goes on the report pipe; the exit comes next. A
    dropped spare's report finds no reader (EPIPE: ignored, as SIGPIPE is)."""
    for fd in (1, 2, progress_fd):
        try:
            os.close(fd)
        except OSError:
            pass
    try:
        os.write(report_fd, bytes([code & 0xFF]))
    except OSError:
        pass
    faults.checkpoint("child_reported")  # a test's child that reported and then hangs before its exit


def _read_report(fd: int) -> int | None:
    """A forked child's reported exit code, if it is there to read (non-blocking)."""
    try:
        code = os.read(fd, 1)
    except OSError:  # BlockingIOError: not written (yet)
        return None
    return code[0] if code else None


def run(
    proc: Child,
    stdin: bytes,
    *,
    deadline: float,
    kill_grace: float,
    marker: tuple[str, str],
    tick: Callable[[], Stop | None],
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
    elif proc.stdin >= 0:  # a spare's stdin carried its order and is closed already
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
    report = getattr(proc, "report", -1)  # a forked child's (``_report``); a ServedChild has none
    if report >= 0:
        os.set_blocking(report, False)
        poller.register(report, IN)
    reported: int | None = None
    stopped: Stop | None = None
    overflow = False
    next_tick = time.monotonic() + tick_every
    exited_at: float | None = None
    while True:
        now = time.monotonic()
        if reported is not None and not streams:  # its outcome is whole: its exit is not waited for here
            break
        if proc.poll() is not None:
            if reported is None and report >= 0:  # exited before we read its report: read it now
                reported = _read_report(report)
                if reported is not None:
                    poller.unregister(report)
            # Pipes can stay open in an escaped descendant: give them a moment, then stop reading.
            exited_at = exited_at or now
            if not streams or now - exited_at > 0.2:
                break
        if now >= deadline:
            stopped = Stop.TIMEOUT
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
            if fd == report:
                code = _read_report(fd)
                if code is not None:
                    reported, exited_at = code, time.monotonic()
                poller.unregister(fd)  # a byte, or its end: a child that died without reporting
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
    kill: groups.KillReport | None = None
    if reported is not None and not stopped:
        proc.close_pipes()
        return RunResult(reported, bytes(out), bytes(err[-STDERR_TAIL:]), exited_at=exited_at, lingering=proc)
    if stopped:
        kill = groups.kill_attempt(proc.pid, marker, kill_grace, lambda: proc.poll() is not None, beat=beat)
        signals = kill.signals
    proc.close_pipes()
    try:
        rc = proc.wait(timeout=kill_grace + 5)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILLed above; kernel will reap
        rc = None
    return RunResult(rc, bytes(out), bytes(err[-STDERR_TAIL:]), stopped, signals, overflow, kill.stages if kill else None,
                     exited_at)


def end_reported(proc: Child, wait: float) -> bool:
    """End a child that reported its outcome (``RunResult.lingering``): SIGKILL its group (it has
    nothing left to do but exit; a child that hangs instead is not waited for), then wait up to
    ``wait`` s for its exit and reap it. False if it is not gone by then (left to ``reap_orphans``)."""
    if proc.poll() is None:  # (once reaped, its pid is no group of ours to signal)
        groups.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        return False
    return True
