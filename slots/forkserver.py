"""A slot's fork server: the small process that imports the slot's function handlers and forks one
child per attempt (``functions.FunctionKind``).

Why a process of its own: a fork costs in proportion to the forking process's resident memory
(page tables copied in the parent, copy-on-write faults and the teardown in the child). A slot is a
fork of the supervisor — redis-py, structlog, psutil, the config, the queue — about 40 MB, and
forking it cost ~5 ms of CPU per no-op job. The fork server is a fresh interpreter (``posix_spawn``
of ``sys.executable``) that imports only what this module needs at run time (builtin modules,
``_json``, ctypes, ``tender_pool.store.context`` without the client package: no msgspec, typing,
socket.py or signal.py, whose heap every fork would copy the page tables of) and the platform's
module: for a no-op function ~5.5 MiB PSS. A platform module that imports much pays for what it
imports, no more.

The protocol, on a stream socketpair (the server's end is its fd 3), each message a 4-byte
big-endian length and a ``marshal``-encoded tuple ("messages" below):
- slot → server: ``init`` (once: the slot's ``sys.path`` and config), ``load`` (a handler: its
  import, answered by ``loaded`` — the preload error or None), ``start`` (an attempt: the job and
  the environment it adds; the write ends of the child's result and progress pipes travel with it
  as SCM_RIGHTS), answered by ``started`` (the child's pid).

No message says that a child exited: the slot watches it with a pidfd and reads its exit status
from the zombie's ``/proc/<pid>/stat``; the server reaps it only at the next ``start``
(``ServedChild._status``, ``_reap``). That is one wake-up of the server per attempt, not two.

The child is what ``runner.fork_call``'s child was: a session leader (its own process group),
PDEATHSIG (the server's death; the server dies with the slot the same way, and on EOF), default
signal dispositions, the job's environment, ``function_child``. The slot times, cancels, fences and
sweeps it by pid and group exactly as before (``ServedChild`` is a ``runner.Child`` whose exit
status is read from /proc). The slot stays a child subreaper, and the server is not one, so an
attempt's orphans (a double fork) re-parent to the slot, which kills them after the attempt
(``FunctionKind.keep`` names the server, the only child of the slot that is not leftover).

In the child (fork safety, as gunicorn's ``post_fork`` and Celery's ``worker_process_init``):
- ``JobContext`` makes its own Redis connection on ``owns()``; progress goes to the attempt's pipe;
- file descriptors 1 and 2 are the slot's log stream (the server's own 1 and 2, as is its stdin,
  /dev/null), so whatever the function or its subprocesses print lands in the slot's log, never in
  the result; the result travels on its own pipe, close-on-exec;
- ``after_fork`` runs first (dispose of an inherited database pool, reseed, reconnect);
- module state is the server's as it was after the import: a copy per attempt, thrown away with it.

The child speaks the handler protocol on its result pipe (``functions.conclude`` reads it): exit 0
+ ``{"value": …}``, exit 3 + ``{"error": {kind, message}}`` (``Final``), ``EXIT_RAISED`` (any other
exception, with the traceback for the slot's log) and ``EXIT_BAD_OUTPUT`` (a value that does not
encode).

Imports here stay light (builtin modules, ``tender_pool.store.context``, ``function_import``; the
slot's side imports socket and fcntl in its methods): this module is what the server imports
before the platform's module. A child encodes its result with json's C encoder
(``context.encode_json``), msgspec only for a value json cannot encode (imported then, in that
child). Its cost per attempt, against the bare fork of a process that size: bench/bench_forkserver.py.
"""

from __future__ import annotations

import _signal
import _socket
import gc
import marshal
import os
import select
import sys
import time
import types
from collections.abc import Awaitable

from tender_pool.store.context import Final, JobContext, encode_json

from tender_pool.slots.function_import import ImportProblem, prepend_path, resolve

TYPE_CHECKING = False
if TYPE_CHECKING:  # the server imports none of typing, socket.py, msgspec, signal.py, fcntl
    import socket
    from typing import Any, Callable

    from tender_pool.store.records import JobRecord

EXIT_RAISED = 4  # the function raised something other than Final
EXIT_BAD_OUTPUT = 5  # its return value does not encode as JSON
HANDLER_FAILED, BAD_OUTPUT = "handler_failed", "bad_output"  # ErrorKind's values (functions.py checks)
MESSAGE_CAP = 2000  # characters of error.message for an exception: type, message, the last frames
FRAMES = 3
SERVER_FD = 3  # the server's end of the socketpair
PROGRESS_PIPE_SIZE = 1 << 20  # as runner's: a burst of progress lines never blocks the function
_PR_SET_PDEATHSIG = 1
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux)
_prctl: Any = None  # libc's prctl, in the server (serve)
# Blocked in the server (the slot decides; the server dies with it), unblocked in each child: one
# sigprocmask there instead of a signal() per signal. Their dispositions stay the default.
_HELD = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGUSR1, _signal.SIGUSR2)
_mask: tuple[int, ...] = ()  # the mask the server started with, plain ints: each child's
_SIGKILL = _signal.SIGKILL
_CO_COROUTINE = 0x80  # inspect.CO_COROUTINE: an async def
_CO_ITERABLE_COROUTINE = 0x100  # inspect.CO_ITERABLE_COROUTINE: @types.coroutine
_PLAIN = frozenset({dict, list, str, int, float, bool, type(None)})  # values that are never awaitable
_FD_ROOM = _socket.CMSG_SPACE(8 * 4)  # up to 8 fds with a message


# --- messages -----------------------------------------------------------------------------------
#
# Each a tuple, ``marshal``-encoded (marshal is built in: the server imports no serializer; a
# job's payload is what msgspec decoded, dicts, lists, strings, numbers, booleans, None, which
# marshal carries as they are), behind a 4-byte big-endian length:
# slot → server  ("init", sys_path, argv, config)   the slot's sys.path and argv (a module that
#                                                   looks at sys.argv at import sees what it saw in
#                                                   the slot) and its config.Config as JSON (decoded
#                                                   in a child only if it calls owns())
#                ("load", name, function, after_fork, path)
#                ("start", name, job, env)          job: JOB_FIELDS, what a child's JobContext is
#                                                   made of (the rest of the JobRecord is the slot's
#                                                   business); two fds with it (SCM_RIGHTS)
# server → slot  ("loaded", problem)                None, or the preload error
#                ("started", pid, error)            pid 0: could not fork (error says why)

JOB_FIELDS = ("id", "kind", "user", "payload", "run", "key")


class Loaded:
    """A function handler's callables, imported in the server. A plain class: ``dataclasses``
    imports ``inspect`` and more, ~0.6 MB of the server's heap that every fork would copy the
    page tables of."""

    __slots__ = ("fn", "after")

    def __init__(self, fn: Callable[..., Any], after: Callable[[], Any] | None = None):
        self.fn, self.after = fn, after


class ServerGone(Exception):
    """The fork server exited (or never started): the socket is closed."""


def _frame(msg: tuple) -> bytes:
    body = marshal.dumps(msg)
    return len(body).to_bytes(4, "big") + body


def _send(sock: socket.socket, body: bytes, fds: list[int] | None = None) -> None:
    """Send one framed message (``_frame``) from the slot, with ``fds`` if any."""
    import socket

    data = body
    if fds:
        sent = socket.send_fds(sock, [data], fds)
        data = data[sent:]
    if data:
        sock.sendall(data)


class _Reader:
    """Length-prefixed frames off a stream socket (a ``socket.socket`` or, in the server, a bare
    ``_socket.socket``), with the fds that came with them."""

    def __init__(self, sock: Any):
        self.sock = sock
        self.buf = bytearray()
        self.fds: list[int] = []

    def frame(self) -> tuple | None:
        if len(self.buf) >= 4:
            n = int.from_bytes(self.buf[:4], "big")
            if len(self.buf) >= 4 + n:
                msg = marshal.loads(memoryview(self.buf)[4:4 + n])
                del self.buf[:4 + n]
                return msg
        return None

    def fill(self, timeout: float | None) -> None:
        """Read what is there (waiting at most ``timeout``; None: until something comes).
        Raises ``ServerGone`` on EOF."""
        if timeout is not None and not select.select([self.sock], [], [], max(0.0, timeout))[0]:
            return
        data, anc, _, _ = self.sock.recvmsg(1 << 16, _FD_ROOM)
        fds: list[int] = []
        for level, kind, cdata in anc:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                fds += memoryview(cdata)[: len(cdata) - len(cdata) % 4].cast("i")
        if not data:
            for fd in fds:
                os.close(fd)
            raise ServerGone("the fork server closed its socket")
        self.buf += data
        self.fds += fds


# --- the slot's side --------------------------------------------------------------------------


class ForkServer:
    """The slot's handle on its fork server: started on first use, restarted (and every handler
    loaded again) if it died between attempts."""

    def __init__(self, config_json: bytes, log_fd: int):
        self.config_json = config_json
        self.log_fd = log_fd
        self.pid = 0
        self.sock: socket.socket | None = None
        self.reader: _Reader | None = None
        self.loads: dict[str, tuple] = {}  # handler name → its "load" message

    # lifecycle

    def _start(self) -> None:
        import socket

        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
        if self.log_fd >= 0:  # before the socket: a log fd numbered 3 is overwritten by it
            actions += [(os.POSIX_SPAWN_DUP2, self.log_fd, 1), (os.POSIX_SPAWN_DUP2, self.log_fd, 2)]
        actions.append((os.POSIX_SPAWN_DUP2, theirs.fileno(), SERVER_FD))
        argv = [sys.executable, "-c", "import sys; from tender_pool.slots.forkserver import serve; "
                "serve(int(sys.argv[1]))", str(os.getpid())]
        try:
            self.pid = os.posix_spawn(sys.executable, argv, dict(os.environ), file_actions=actions)
        finally:
            theirs.close()
        self.sock, self.reader = mine, _Reader(mine)
        _send(mine, _frame(("init", list(sys.path), list(sys.argv), bytes(self.config_json))))

    def alive(self) -> bool:
        if not self.pid:
            return False
        try:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid = self.pid
        if pid:
            self._forget()
            return False
        return True

    def _forget(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock = self.reader = None
        if self.pid:
            try:  # reaped now if it is gone; if it is still exiting, reap_orphans finds it later
                os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                pass
        self.pid = 0

    def _ensure(self) -> None:
        if self.alive():
            return
        self._start()
        for load in self.loads.values():
            problem = self._ask(load, "loaded")[1]
            if problem:
                raise ServerGone(f"the restarted fork server cannot import {load[2]}: {problem}")

    def stop(self) -> None:
        """Close the socket (the server exits on EOF) and reap it."""
        if not self.pid:
            return
        pid = self.pid
        self._forget()
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    return
            except ChildProcessError:
                return
            time.sleep(0.01)
        try:
            os.kill(pid, _SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass

    # requests

    def _ask(self, msg: tuple, reply: str) -> tuple:
        assert self.sock is not None
        try:
            _send(self.sock, _frame(msg))
        except OSError as e:
            raise ServerGone(str(e)) from e
        return self._await(reply)

    def _await(self, reply: str) -> tuple:
        while (got := self._next(None)) is None or got[0] != reply:
            pass
        return got

    def _next(self, timeout: float | None) -> tuple | None:
        """The next message from the server, or None once ``timeout`` passed."""
        assert self.reader is not None
        end = None if timeout is None else time.monotonic() + timeout
        while (msg := self.reader.frame()) is None:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return None
            try:
                self.reader.fill(left)
            except ServerGone:
                self._forget()
                raise
            except OSError as e:
                self._forget()
                raise ServerGone(str(e)) from e
        return msg

    def load(self, name: str, function: str, after_fork: str | None, path: list[str],
             tick: Callable[[], None] | None = None, limit: float | None = None) -> str | None:
        """Import one handler in the server: None, or the problem (``function_import.ImportProblem``'s
        text, prefixed as the config check words it). ``tick`` is called every ~0.1 s while the
        import runs (the slot beats: a platform's import may take longer than 3 heartbeats, after
        which a silent slot is killed); past ``limit`` seconds the server is killed and the import
        is the problem."""
        load = ("load", name, function, after_fork, list(path))
        if not self.alive():
            self._start()
        assert self.sock is not None
        try:
            _send(self.sock, _frame(load))
        except OSError as e:
            raise ServerGone(str(e)) from e
        end = None if limit is None else time.monotonic() + limit
        while True:
            got = self._next(0.1 if tick is not None or end is not None else None)
            if got is not None and got[0] == "loaded":
                break
            if end is not None and time.monotonic() > end:
                self.stop()
                return f"importing it took more than {limit:g} s"
            if got is None and tick is not None:
                tick()
        problem = got[1]
        if problem is None:
            self.loads[name] = load
        return problem

    def launch(self, name: str, job: JobRecord, env: dict[str, str]) -> "ServedChild":
        """Start an attempt: the server forks. Two pipes go with it (SCM_RIGHTS), the result's and
        the progress pipe's write ends; the child's stdin is the server's /dev/null and its stdout
        and stderr are already the slot's log stream (the server's own 1 and 2), so a function has
        no stdin or stderr pipe to make, send, dup and close (``ServedChild`` says what the runner
        gets in their place)."""
        import fcntl

        self._ensure()
        or_, ow = os.pipe()
        pr, pw = os.pipe()
        try:
            fcntl.fcntl(pw, _F_SETPIPE_SZ, PROGRESS_PIPE_SIZE)  # a burst of progress never blocks
        except OSError:  # above /proc/sys/fs/pipe-max-size for an unprivileged user: the default
            pass
        body = _frame(("start", name, (job.id, job.kind, job.user, job.payload, job.run, job.key), env))
        try:
            try:
                assert self.sock is not None
                _send(self.sock, body, [ow, pw])
                started = self._await("started")
            except (OSError, ServerGone):
                # It died since the last attempt ended, and the slot has not read from it since:
                # an attempt's end is seen on its pidfd, not on this socket. (Killed with its last
                # child, it may still have been exiting when _ensure looked.) Once more, on a new
                # one; anything the dead one forked died with it (PDEATHSIG).
                self._forget()
                self._ensure()
                assert self.sock is not None
                _send(self.sock, body, [ow, pw])
                started = self._await("started")
        except BaseException:
            for fd in (or_, pr):
                os.close(fd)
            raise
        finally:
            os.close(ow)
            os.close(pw)
        _, pid, error = started
        if not pid:
            for fd in (or_, pr):
                os.close(fd)
            raise OSError(f"the fork server could not fork: {error}")
        return ServedChild(pid, or_, pr, server=self)

class ServedChild:
    """An attempt the fork server forked: what ``runner.run`` needs of a ``runner.Child`` (pid,
    raw pipe fds, ``poll``, ``wait``, ``close_pipes``), its exit status read from /proc, since
    the slot is not its parent. ``runner`` (psutil, structlog) is never imported here: the
    server imports this module.

    A function has no stdin and no stderr pipe (``ForkServer.launch``), but the runner writes the
    attempt's stdin (empty for a function) to an fd it then closes, and reads a stderr: ``stdin``
    is a copy of the result pipe's read end, only ever closed (the slot alone holds that pipe end,
    so the runner's O_NONBLOCK on it reaches no one else), and ``stderr`` is ``stdout`` itself (one
    fd, read once as the result: the runner keeps its streams in a set)."""

    def __init__(self, pid: int, stdout_fd: int, progress_fd: int, *, server: ForkServer):
        self.pid = pid
        self.stdin, self.stdout, self.stderr, self.progress = os.dup(stdout_fd), stdout_fd, stdout_fd, progress_fd
        self.returncode: int | None = None
        self.server = server
        try:
            self.pidfd = os.pidfd_open(pid)
        except OSError:  # already reaped (its server died and the slot reaped it): _status says so
            self.pidfd = -1

    def _exited(self) -> bool:
        return self.pidfd < 0 or bool(select.select([self.pidfd], [], [], 0)[0])

    def poll(self) -> int | None:
        if self.returncode is None and self._exited():
            self.returncode = self._status()
            self._close_pidfd()
        return self.returncode

    def _status(self) -> int:
        """The exit status of the exited child, as ``Popen.returncode``: the kernel keeps it in
        the zombie's ``/proc/<pid>/stat`` (field 52, a wait status), and the zombie stays until
        the server reaps it at the next ``Start``, which this slot sends only after this attempt
        is over; so the pid cannot have been reused. A server that died first took the child with
        it (PDEATHSIG): the zombie is then this slot's (the subreaper's), its status there all the
        same, or already reaped by the slot: -SIGKILL."""
        try:
            fd = os.open(f"/proc/{self.pid}/stat", os.O_RDONLY)
        except OSError:
            return -_SIGKILL
        try:
            fields = os.read(fd, 4096).rpartition(b")")[2].split()
        except OSError:
            fields = []
        finally:
            os.close(fd)
        if len(fields) > 49 and fields[0] == b"Z":
            return os.waitstatus_to_exitcode(int(fields[49]))
        return -_SIGKILL  # pragma: no cover - exited (the pidfd says so) but not a zombie: reaped

    def wait(self, timeout: float | None = None) -> int:
        import subprocess

        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            if self.pidfd >= 0:
                select.select([self.pidfd], [], [], left)
        return self.returncode

    def _close_pidfd(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1

    def close_pipes(self) -> None:
        if self.stderr == self.stdout:
            self.stderr = -1  # the same fd: closed once, as stdout
        for name in ("stdin", "stdout", "stderr", "progress"):
            fd = getattr(self, name)
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
                setattr(self, name, -1)
        self._close_pidfd()


# --- the server -------------------------------------------------------------------------------


def serve(slot_pid: int) -> None:
    """The fork server's main loop (``python -c … serve(slot_pid)``), its socket on fd 3."""
    import ctypes

    global _prctl, _mask
    _prctl = ctypes.CDLL(None).prctl  # looked up once: a CDLL made in each child cost it ~0.5 ms
    _prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    if os.getppid() != slot_pid:  # the slot died before the prctl
        os._exit(0)
    # the C functions, not signal's wrappers (the signal module builds its enums: heap every fork copies)
    _mask = tuple(_signal.pthread_sigmask(_signal.SIG_BLOCK, _HELD))  # the slot decides; the server dies with it
    for sig in (*_HELD, _signal.SIGCHLD):
        _signal.signal(sig, _signal.SIG_DFL)  # what a child has once it unblocks them
    sock = _socket.socket(fileno=SERVER_FD)  # not socket.py: its enums too
    os.set_inheritable(SERVER_FD, False)
    reader = _Reader(sock)
    loaded: dict[str, Loaded] = {}
    children: list[int] = []  # forked, not yet reaped
    config = b""
    env = _Env(ctypes.CDLL(None).putenv)
    while True:
        try:
            reader.fill(None)
        except (ServerGone, OSError):
            _reap(children)  # the last attempt's zombie: never left to the slot's leftover sweep
            os._exit(0)  # the slot is gone: so are we (our children by PDEATHSIG)
        while (msg := reader.frame()) is not None:
            what = msg[0]
            if what == "start":
                _reap(children)  # the last attempt's zombie: the slot has read its status (ServedChild)
                fds, reader.fds = reader.fds[:2], reader.fds[2:]
                fn = loaded.get(msg[1])
                pid = _fork(fn, config, msg[2], msg[3], fds, env) if fn is not None and len(fds) == 2 else 0
                for f in fds:
                    os.close(f)
                if pid:
                    children.append(pid)
                sock.sendall(_frame(("started", pid, "" if pid else "fork failed, or not loaded")))
            elif what == "load":
                problem = _load(msg[1], msg[2], msg[3], msg[4], loaded)
                sock.sendall(_frame(("loaded", problem)))
                _warm()
                gc.freeze()  # what the import made is never garbage to a child: its GCs skip it
            elif what == "init":
                sys.path[:] = msg[1]
                sys.argv[:] = msg[2]
                config = msg[3]


def _warm() -> None:
    """Run the child's own code path here, on a function that returns ``{}`` into /dev/null, until
    the interpreter has specialised its bytecode: a child then finds it warm, instead of writing the
    adaptive counters of each code object it runs (a page copy each)."""
    dummy = Loaded(lambda ctx: {})
    ctx = JobContext("", "", "", {}, "", progress_fd=-1)
    fd = os.open(os.devnull, os.O_WRONLY)
    try:
        for _ in range(WARM_RUNS):
            function_child(dummy, ctx, fd)
    finally:
        os.close(fd)


WARM_RUNS = 100


def _reap(children: list[int]) -> None:
    """Reap the attempts' children that exited (all of them, at a ``Start``: the slot sends one only
    once the last attempt is over). Not when one exits: its zombie holds its pid and its exit status
    (``/proc/<pid>/stat``) for the slot, which reads it there (``ServedChild``) without waiting
    for a message from us, and before the next ``Start`` from that slot. By pid, not
    ``waitpid(-1)`` until ``ChildProcessError``: one system call an attempt, and no exception."""
    for pid in list(children):
        try:
            if not os.waitpid(pid, os.WNOHANG)[0]:
                continue  # still running
        except ChildProcessError:
            pass
        children.remove(pid)


class _Env:
    """The attempt's environment, written in the server before the fork, so that a child inherits
    it instead of writing it (each page a child writes is a copy-on-write fault).

    Not through ``os.environ``: it calls ``setenv``, and glibc never frees a value it was given (it
    keeps every distinct one), so a server given each attempt's job id and token through it grew
    by ~40 bytes an attempt (4,000 attempts: +156 kB of heap; with these buffers, none). Each key gets one buffer of ours instead, ``NAME=value``, handed to
    libc's ``putenv`` (which keeps the pointer, not a copy) and rewritten in place for the next
    attempt; a longer value gets a new buffer. ``os.environ``'s own mapping (``_data``, what
    ``os.environ`` reads; encoded as it encodes) is kept equal, so the function, and the
    subprocesses it starts (the C environment), see the same values. Single-threaded: the server
    starts no thread, and rewrites a value only while no child of it runs yet."""

    ROOM = 128  # bytes of a value before its buffer must grow: a job id and a token fit many times

    def __init__(self, putenv: Any):
        import ctypes

        self.putenv, self.memmove, self.buffer = putenv, ctypes.memmove, ctypes.create_string_buffer
        self.bufs: dict[str, tuple[bytes, Any]] = {}  # name → (its bytes, its buffer)

    def set(self, env: dict[str, str]) -> None:
        # os.fsencode's encoding, spelled out: the same bytes, without its Python frames in a loop
        # that runs before every fork (each page it writes is faulted again after the fork)
        data, bufs, fs, errors = os.environ._data, self.bufs, _FS_ENCODING, _FS_ERRORS  # type: ignore[attr-defined]
        for name in [n for n in bufs if n not in env]:
            key = bufs.pop(name)[0]
            os.unsetenv(key)
            data.pop(key, None)
        for name, value in env.items():
            val = value.encode(fs, errors)
            got = bufs.get(name)
            if got is not None and data.get(got[0]) == val:
                continue  # as it is
            key = got[0] if got is not None else name.encode(fs, errors)
            line = key + b"=" + val + b"\0"
            if got is not None and len(line) <= len(got[1]):
                self.memmove(got[1], line, len(line))
            else:
                buf = self.buffer(line, len(line) + self.ROOM)
                self.putenv(buf)  # environ now points at it; the old buffer is no longer used
                bufs[name] = (key, buf)
            data[key] = val


_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()


def _load(name: str, function: str, after_fork: str | None, path: list[str], loaded: dict[str, Loaded]) -> str | None:
    prepend_path(list(path))
    try:
        fn = resolve(function)
        loaded[name] = Loaded(fn, resolve(after_fork) if after_fork else None)
    except ImportProblem as e:
        return str(e)
    if getattr(getattr(fn, "__code__", None), "co_flags", 0) & _CO_COROUTINE:
        import asyncio  # noqa: F401 - an async def: imported once here, not by every child that runs it
    return None


def _fork(loaded: Loaded, config: bytes, job: tuple, job_env: dict[str, str], fds: list[int], env: _Env) -> int:
    """Fork the attempt's child. What can be done before the fork is, here in the server: the
    result pipe made close-on-exec, the ``JobContext`` built, the young objects frozen (a child's
    collections skip them, and it writes no GC header to freeze them). The child then only becomes
    a session leader, sets PDEATHSIG, closes the server's socket, unblocks the signals, adds the
    attempt's environment and calls the function: each page it writes is a copy.

    The attempt's environment is set here too (``_Env``): in the child, ``os.environ.update``
    cost ~80 page copies, a third of what is left of its cost."""
    result_fd, progress_fd = fds
    os.set_inheritable(result_fd, False)  # the function's subprocesses never hold the result pipe
    env.set(dict(job_env, TENDER_POOL_PROGRESS_FD=str(progress_fd)))
    id_, kind, user, payload, run, key = job  # JOB_FIELDS
    ctx = JobContext(id_, kind, user, payload, job_env.get("TENDER_POOL_ATTEMPT", ""),
                     run, key, progress_fd=progress_fd, client=lambda: _OwnerCheck(config))
    gc.freeze()
    try:
        pid = os.fork()
    except OSError:
        return 0
    if pid:
        return pid
    code = 1
    try:  # --- the attempt's child: never returns ---
        os.setsid()
        _prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
        os.close(SERVER_FD)
        # the C function, not signal's wrapper: that one turns the old mask into Signals members,
        # Python code in the enum machinery that cost ~45 page copies here
        _signal.pthread_sigmask(_signal.SIG_SETMASK, _mask)
        code = function_child(loaded, ctx, result_fd)
    except BaseException:  # noqa: BLE001 - report and exit, never return into the server's loop
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


# --- the attempt, in the child ------------------------------------------------------------------


def function_child(loaded: Loaded, ctx: JobContext, result_fd: int) -> int:
    """The attempt, in the forked child (a session leader with the default signal dispositions
    and the job's environment; its stdin /dev/null, its stdout and stderr the slot's log stream):
    call the function, write what came of it on the result pipe. Returns the exit status."""
    code, body = _call(loaded, ctx)
    data = memoryview(body)
    while data:
        data = data[os.write(result_fd, data):]
    return code


def _call(loaded: Loaded, ctx: JobContext) -> tuple[int, bytes]:
    try:
        if loaded.after is not None:
            loaded.after()
        value = loaded.fn(ctx)
        if type(value) not in _PLAIN and _awaitable(value):
            import asyncio

            value = asyncio.run(_wait(value))  # a new event loop, this child's own
    except Final as e:
        return 3, encode_json({"error": {"kind": str(e.kind), "message": str(e.message)}})
    except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt too: the job failed
        import traceback

        return EXIT_RAISED, encode_json({"error": {"kind": HANDLER_FAILED, "message": describe(e)},
                                         "traceback": "".join(traceback.format_exception(e))})
    try:
        return 0, encode_json({"value": value})
    except (TypeError, ValueError, OverflowError, RecursionError) as e:
        msg = f"the return value does not encode as JSON: {type(e).__name__}: {e}"[:MESSAGE_CAP]
        return EXIT_BAD_OUTPUT, encode_json({"error": {"kind": BAD_OUTPUT, "message": msg}})


class _OwnerCheck:
    """What ``JobContext.owns()`` asks, on a Redis connection of the child's own (made on first use):
    is the job record's ``token`` still this attempt's? The same read as ``Client.owns``."""

    def __init__(self, config: bytes):
        import msgspec

        from tender_pool.store.config import Config
        from tender_pool.store.connection import connect
        from tender_pool.store.keys import Keys

        cfg = msgspec.json.decode(config, type=Config)
        self._r = connect(cfg.redis.url, cfg.redis.socket_timeout)
        self._k = Keys(cfg.redis.prefix, cfg.pool.queue)

    def owns(self, job_id: str, token: str) -> bool:
        current = self._r.hget(self._k.job(job_id), "token")
        return bool(token) and current is not None and current.decode() == token


def _awaitable(value: Any) -> bool:
    """``inspect.isawaitable`` without importing ``inspect`` (in the server, for every fork, or in
    the child, for every async attempt): a coroutine, a generator-based one, or any awaitable."""
    return (isinstance(value, (types.CoroutineType, Awaitable))
            or isinstance(value, types.GeneratorType) and bool(value.gi_code.co_flags & _CO_ITERABLE_COROUTINE))


async def _wait(awaitable: Any) -> Any:
    return await awaitable


def describe(e: BaseException) -> str:
    """``error.message`` for an exception: its type, its message and where it was raised (the
    last ``FRAMES`` frames, innermost last), at most ``MESSAGE_CAP`` characters."""
    import traceback

    frames = traceback.extract_tb(e.__traceback__)[-FRAMES:]
    where = " < ".join(f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}" for f in reversed(frames))
    where = f" (at {where[: MESSAGE_CAP // 2]})" if where else ""
    head = f"{type(e).__qualname__}: {e}" if str(e) else type(e).__qualname__
    room = MESSAGE_CAP - len(where)
    if len(head) > room:  # a huge message is cut, never the frames that say where it came from
        head = head[: room - 1] + "…"
    return head + where
