"""A slot's fork server: the small process that imports the slot's function handlers and forks one
child per attempt (``functions.FunctionKind``).

Why a process of its own: a fork costs in proportion to the forking process's resident memory
(page tables copied in the parent, copy-on-write faults and the teardown in the child). A slot is a
fork of the supervisor — redis-py, structlog, psutil, the config, the queue — about 40 MB, and
forking it cost ~5 ms of CPU per no-op job. The fork server is a fresh interpreter (``posix_spawn``
of ``sys.executable``) that imports only msgspec, the shared types, ``tender_pool.store.context``
(without the client package) and the platform's module: for a no-op function ~15 MB, and a fork a
fraction of the cost. A platform module that imports much pays for what it imports, no more.

The protocol, on a stream socketpair (the server's end is its fd 3), each message a 4-byte
big-endian length and a msgspec JSON body (tagged Structs below):
- slot → server: ``Init`` (once: the slot's ``sys.path`` and config), ``Load`` (a handler: its
  import, answered by ``LoadReply`` — ``problem`` is the preload error), ``Start`` (an attempt: the
  job and the environment it adds; the child's stdin, stdout, stderr and progress pipe ends travel
  with it as SCM_RIGHTS), answered by ``Started`` (the child's pid);
- server → slot, whenever a child exits: ``Exited`` (pid, exit status as ``Popen.returncode``).

The child is what ``runner.fork_call``'s child was: a session leader (its own process group),
PDEATHSIG (the server's death; the server dies with the slot the same way, and on EOF), default
signal dispositions, the job's environment, ``function_child``. The slot times, cancels, fences and
sweeps it by pid and group exactly as before (``ServedChild`` is a ``runner.Child`` whose exit
status comes from the server). The slot stays a child subreaper, and the server is not one, so an
attempt's orphans (a double fork) re-parent to the slot, which kills them after the attempt
(``FunctionKind.keep`` names the server, the only child of the slot that is not leftover).

In the child (fork safety, as gunicorn's ``post_fork`` and Celery's ``worker_process_init``):
- ``JobContext`` makes its own Redis connection on ``owns()``; progress goes to the attempt's pipe;
- file descriptors 1 and 2 are the slot's log stream (the server's own 1 and 2), so whatever the
  function or its subprocesses print lands in the slot's log, never in the result; the result
  travels on a private, close-on-exec copy of the stdout pipe;
- ``after_fork`` runs first (dispose of an inherited database pool, reseed, reconnect);
- module state is the server's as it was after the import: a copy per attempt, thrown away with it.

The child speaks the handler protocol on its result pipe (``functions.conclude`` reads it): exit 0
+ ``{"value": …}``, exit 3 + ``{"error": {kind, message}}`` (``Final``), ``EXIT_RAISED`` (any other
exception, with the traceback for the slot's log) and ``EXIT_BAD_OUTPUT`` (a value that does not
encode).

Imports here stay light (stdlib, msgspec, the shared types, ``function_import``): this module is
what the server imports before the platform's module.
"""

from __future__ import annotations

import fcntl
import gc
import importlib
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import msgspec

from tender_pool.store.error_kinds import ErrorKind
from tender_pool.store.records import JobError, JobRecord

from tender_pool.slots.function_import import ImportProblem, prepend_path, resolve

EXIT_RAISED = 4  # the function raised something other than Final
EXIT_BAD_OUTPUT = 5  # its return value does not encode as JSON
MESSAGE_CAP = 2000  # characters of error.message for an exception: type, message, the last frames
FRAMES = 3
SERVER_FD = 3  # the server's end of the socketpair
PROGRESS_PIPE_SIZE = 1 << 20  # as runner's: a burst of progress lines never blocks the function
_HEAD = struct.Struct(">I")
_PR_SET_PDEATHSIG = 1
_prctl: Any = None  # libc's prctl, in the server (serve)

_enc = msgspec.json.Encoder()


# --- messages -----------------------------------------------------------------------------------


class Init(msgspec.Struct, tag=True):
    sys_path: list[str]
    argv: list[str]  # the slot's: a module that looks at sys.argv at import sees what it saw in the slot
    config: msgspec.Raw  # the slot's config.Config, decoded in a child only if it calls owns()


class Load(msgspec.Struct, tag=True):
    name: str
    function: str
    after_fork: str | None = None
    path: list[str] = []


class Start(msgspec.Struct, tag=True):
    name: str
    job: JobRecord
    env: dict[str, str]


class LoadReply(msgspec.Struct, tag=True):
    problem: str | None = None


class Started(msgspec.Struct, tag=True):
    pid: int = 0
    error: str = ""


class Exited(msgspec.Struct, tag=True):
    pid: int
    code: int


ToServer = Init | Load | Start
ToSlot = LoadReply | Started | Exited


class FunctionFailure(msgspec.Struct):
    """What the child writes before ``EXIT_RAISED`` / ``EXIT_BAD_OUTPUT``."""

    error: JobError
    traceback: str = ""


@dataclass
class Loaded:
    """A function handler's callables, imported in the server."""

    fn: Callable[..., Any]
    after: Callable[[], Any] | None = None


class ServerGone(Exception):
    """The fork server exited (or never started): the socket is closed."""


def _send(sock: socket.socket, body: bytes, fds: list[int] | None = None) -> None:
    data = _HEAD.pack(len(body)) + body
    if fds:
        sent = socket.send_fds(sock, [data], fds)
        data = data[sent:]
    if data:
        sock.sendall(data)


class _Reader:
    """Length-prefixed frames off a stream socket, with the fds that came with them."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = bytearray()
        self.fds: list[int] = []

    def frame(self) -> bytes | None:
        if len(self.buf) >= 4:
            (n,) = _HEAD.unpack_from(self.buf)
            if len(self.buf) >= 4 + n:
                body = bytes(self.buf[4:4 + n])
                del self.buf[:4 + n]
                return body
        return None

    def fill(self, timeout: float | None) -> None:
        """Read what is there (waiting at most ``timeout``; None: until something comes).
        Raises ``ServerGone`` on EOF."""
        if timeout is not None and not select.select([self.sock], [], [], max(0.0, timeout))[0]:
            return
        data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 8)
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
        self.loads: dict[str, Load] = {}
        self.exits: dict[int, int] = {}

    # lifecycle

    def _start(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        actions = [(os.POSIX_SPAWN_DUP2, theirs.fileno(), SERVER_FD),
                   (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
        if self.log_fd >= 0:
            actions += [(os.POSIX_SPAWN_DUP2, self.log_fd, 1), (os.POSIX_SPAWN_DUP2, self.log_fd, 2)]
        argv = [sys.executable, "-c", "import sys; from tender_pool.slots.forkserver import serve; "
                "serve(int(sys.argv[1]))", str(os.getpid())]
        try:
            self.pid = os.posix_spawn(sys.executable, argv, dict(os.environ), file_actions=actions)
        finally:
            theirs.close()
        self.sock, self.reader = mine, _Reader(mine)
        _send(mine, _enc.encode(Init(list(sys.path), list(sys.argv), msgspec.Raw(self.config_json))))

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
        self.pid = 0

    def _ensure(self) -> None:
        if self.alive():
            return
        self._start()
        for load in self.loads.values():
            problem = self._ask(load, LoadReply).problem
            if problem:
                raise ServerGone(f"the restarted fork server cannot import {load.function}: {problem}")

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
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass

    # requests

    def _ask(self, msg: Any, reply: type) -> Any:
        assert self.sock is not None
        try:
            _send(self.sock, _enc.encode(msg))
        except OSError as e:
            raise ServerGone(str(e)) from e
        return self._await(reply)

    def _await(self, reply: type, timeout: float | None = None) -> Any:
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            got = self._next(None if end is None else end - time.monotonic())
            if got is None:
                return None
            if isinstance(got, Exited):
                self.exits[got.pid] = got.code
                if reply is Exited:
                    return got
            elif isinstance(got, reply):
                return got

    def _next(self, timeout: float | None) -> Any:
        """The next message from the server, or None once ``timeout`` passed."""
        assert self.reader is not None
        end = None if timeout is None else time.monotonic() + timeout
        while (body := self.reader.frame()) is None:
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
        return msgspec.json.decode(body, type=ToSlot)

    def load(self, name: str, function: str, after_fork: str | None, path: list[str]) -> str | None:
        """Import one handler in the server: None, or the problem (``function_import.ImportProblem``'s
        text, prefixed as the config check words it)."""
        load = Load(name, function, after_fork, list(path))
        if not self.alive():
            self._start()
        problem = self._ask(load, LoadReply).problem
        if problem is None:
            self.loads[name] = load
        return problem

    def launch(self, name: str, job: JobRecord, env: dict[str, str]) -> "ServedChild":
        """Start an attempt: the server forks; the pipes are the slot's, as ``runner.fork_call``'s."""
        self._ensure()
        (ir, iw), (or_, ow), (er, ew) = os.pipe(), os.pipe(), os.pipe()
        pr, pw = _progress_pipe()
        try:
            try:
                assert self.sock is not None
                _send(self.sock, _enc.encode(Start(name, job, env)), [ir, ow, ew, pw])
            except OSError:  # died since _ensure: once more, on a new one
                self._forget()
                self._ensure()
                assert self.sock is not None
                _send(self.sock, _enc.encode(Start(name, job, env)), [ir, ow, ew, pw])
            started = self._await(Started)
        except BaseException:
            for fd in (iw, or_, er, pr):
                os.close(fd)
            raise
        finally:
            for fd in (ir, ow, ew, pw):
                os.close(fd)
        if not started.pid:
            for fd in (iw, or_, er, pr):
                os.close(fd)
            raise OSError(f"the fork server could not fork: {started.error}")
        return ServedChild(started.pid, iw, or_, er, pr, server=self)

    def exit_of(self, pid: int, timeout: float | None) -> int | None:
        """``pid``'s exit status once the server reported it (waiting at most ``timeout``); a
        server that is gone took its children with it (PDEATHSIG): -SIGKILL."""
        while pid not in self.exits:
            try:
                if self.reader is None or self._await(Exited, timeout) is None:
                    return None
            except ServerGone:
                return -signal.SIGKILL
        return self.exits.pop(pid)


def _progress_pipe() -> tuple[int, int]:
    """As ``runner``'s: the ends above fd 9, enlarged."""
    r, w = os.pipe()
    out = []
    for fd in (r, w):
        out.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10))
        os.close(fd)
    try:
        fcntl.fcntl(out[1], fcntl.F_SETPIPE_SZ, PROGRESS_PIPE_SIZE)
    except OSError:
        pass
    return out[0], out[1]


class ServedChild:
    """An attempt the fork server forked: what ``runner.run`` needs of a ``runner.Child`` (pid,
    raw pipe fds, ``poll``, ``wait``, ``close_pipes``), its exit status reported by the server,
    since the slot is not its parent. ``runner`` (psutil, structlog) is never imported here: the
    server imports this module."""

    def __init__(self, pid: int, stdin_fd: int, stdout_fd: int, stderr_fd: int, progress_fd: int, *,
                 server: ForkServer):
        self.pid = pid
        self.stdin, self.stdout, self.stderr, self.progress = stdin_fd, stdout_fd, stderr_fd, progress_fd
        self.returncode: int | None = None
        self.server = server
        try:
            self.pidfd = os.pidfd_open(pid)
        except OSError:  # already gone (and reaped by the server): its status is on the way
            self.pidfd = -1

    def _exited(self) -> bool:
        return self.pidfd < 0 or bool(select.select([self.pidfd], [], [], 0)[0])

    def poll(self) -> int | None:
        if self.returncode is None:
            code = self.server.exit_of(self.pid, 0)
            if code is None and self._exited():  # gone: the server's report is on its way
                code = self.server.exit_of(self.pid, 5.0)
                if code is None:  # pragma: no cover - a server that stopped answering
                    code = -signal.SIGKILL
            if code is not None:
                self.returncode = code
                self._close_pidfd()
        return self.returncode

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

    global _prctl
    _prctl = ctypes.CDLL(None).prctl  # looked up once: a CDLL made in each child cost it ~0.5 ms
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != slot_pid:  # the slot died before the prctl
        os._exit(0)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)  # the slot decides; the server dies with it
    _preimport_context()
    import inspect  # noqa: F401 - every attempt asks whether the value is awaitable

    sock = socket.socket(fileno=SERVER_FD)
    os.set_inheritable(SERVER_FD, False)
    reader = _Reader(sock)
    dec = msgspec.json.Decoder(ToServer)
    loaded: dict[str, Loaded] = {}
    config = b""
    children: dict[int, int] = {}  # pidfd → pid
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    while True:
        for fd, _ in poller.poll():
            if fd in children:
                pid = children.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                _send(sock, _enc.encode(Exited(pid, os.waitstatus_to_exitcode(status))))
                continue
            try:
                reader.fill(None)
            except (ServerGone, OSError):
                os._exit(0)  # the slot is gone: so are we (our children by PDEATHSIG)
            while (body := reader.frame()) is not None:
                msg = dec.decode(body)
                if isinstance(msg, Init):
                    sys.path[:] = msg.sys_path
                    sys.argv[:] = msg.argv
                    config = bytes(msg.config)
                elif isinstance(msg, Load):
                    problem = _load(msg, loaded)
                    _send(sock, _enc.encode(LoadReply(problem)))
                    gc.freeze()  # what the import made is never garbage to a child: its GCs skip it
                elif isinstance(msg, Start):
                    fds, reader.fds = reader.fds[:4], reader.fds[4:]
                    pid = _fork(loaded[msg.name], config, msg, fds, sock) if msg.name in loaded else 0
                    for f in fds:
                        os.close(f)
                    if pid:
                        pidfd = os.pidfd_open(pid)
                        children[pidfd] = pid
                        poller.register(pidfd, select.POLLIN)
                    _send(sock, _enc.encode(Started(pid) if pid else Started(error="fork failed, or not loaded")))


def _preimport_context() -> None:
    """``tender_pool.store.context`` without the client package's ``__init__`` (redis-py and the
    rest: ~20 MB, ~20 ms). A module that imports ``tender_pool.client`` later gets the package in
    full, this very module included (``sys.modules``), so ``Final`` is one class either way."""
    import importlib.util

    name = "tender_pool.store.context"
    client = importlib.util.find_spec("tender_pool.client")  # found, not executed
    spec = None
    for where in (client.submodule_search_locations or []) if client is not None else []:
        path = os.path.join(where, "context.py")
        if os.path.exists(path):
            spec = importlib.util.spec_from_file_location(name, path)
            break
    if spec is None or spec.loader is None:  # pragma: no cover - an unusual install: import it whole
        importlib.import_module(name)
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


def _load(msg: Load, loaded: dict[str, Loaded]) -> str | None:
    prepend_path(list(msg.path))
    try:
        loaded[msg.name] = Loaded(resolve(msg.function), resolve(msg.after_fork) if msg.after_fork else None)
    except ImportProblem as e:
        return str(e)
    return None


def _fork(loaded: Loaded, config: bytes, msg: Start, fds: list[int], sock: socket.socket) -> int:
    try:
        pid = os.fork()
    except OSError:
        return 0
    if pid:
        return pid
    code = 1
    try:  # --- the attempt's child: never returns ---
        gc.freeze()
        os.setsid()
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        sock.close()
        log_fd = os.dup(2)  # the slot's log stream
        ir, ow, ew, pw = fds
        os.dup2(ir, 0)
        os.dup2(ow, 1)
        os.dup2(ew, 2)
        for fd in (ir, ow, ew):
            os.close(fd)
        os.set_inheritable(pw, True)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        os.environ.update(msg.env, TENDER_POOL_PROGRESS_FD=str(pw))
        code = function_child(loaded, config, msg.job, log_fd)
    except BaseException:  # noqa: BLE001 - report and exit, never return into the server's loop
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


# --- the attempt, in the child ------------------------------------------------------------------


def function_child(loaded: Loaded, config: bytes, job: JobRecord, log_fd: int) -> int:
    """The attempt, in the forked child (a session leader with the default signal dispositions
    and the job's environment). Returns the exit status."""
    result_fd = os.dup(1)  # close-on-exec: the function's subprocesses never hold the result pipe
    if log_fd >= 0:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
    code, body = _call(loaded, config, job)
    data = memoryview(body)
    while data:
        data = data[os.write(result_fd, data):]
    return code


def _call(loaded: Loaded, config: bytes, job: JobRecord) -> tuple[int, bytes]:
    from tender_pool.store.context import Final, JobContext

    ctx = JobContext(job.id, job.kind, job.user, job.payload, os.environ.get("TENDER_POOL_ATTEMPT", ""),
                     job.run, job.key, client=lambda: _OwnerCheck(config))
    try:
        if loaded.after is not None:
            loaded.after()
        value = loaded.fn(ctx)
        if _awaitable(value):
            import asyncio

            value = asyncio.run(_wait(value))  # a new event loop, this child's own
    except Final as e:
        return 3, _enc.encode({"error": {"kind": str(e.kind), "message": str(e.message)}})
    except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt too: the job failed
        return EXIT_RAISED, _enc.encode(FunctionFailure(JobError(ErrorKind.HANDLER_FAILED.value, describe(e)),
                                                        "".join(traceback.format_exception(e))))
    try:
        return 0, _enc.encode({"value": value})
    except (TypeError, ValueError, OverflowError, RecursionError) as e:
        msg = f"the return value does not encode as JSON: {type(e).__name__}: {e}"[:MESSAGE_CAP]
        return EXIT_BAD_OUTPUT, _enc.encode(FunctionFailure(JobError(ErrorKind.BAD_OUTPUT.value, msg)))


class _OwnerCheck:
    """What ``JobContext.owns()`` asks, on a Redis connection of the child's own (made on first use):
    is the job record's ``token`` still this attempt's? The same read as ``Client.owns``."""

    def __init__(self, config: bytes):
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
    import inspect  # imported by the server (serve), as the child would on every attempt

    return inspect.isawaitable(value)


async def _wait(awaitable: Any) -> Any:
    return await awaitable


def describe(e: BaseException) -> str:
    """``error.message`` for an exception: its type, its message and where it was raised (the
    last ``FRAMES`` frames, innermost last), at most ``MESSAGE_CAP`` characters."""
    frames = traceback.extract_tb(e.__traceback__)[-FRAMES:]
    where = " < ".join(f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}" for f in reversed(frames))
    where = f" (at {where[: MESSAGE_CAP // 2]})" if where else ""
    head = f"{type(e).__qualname__}: {e}" if str(e) else type(e).__qualname__
    room = MESSAGE_CAP - len(where)
    if len(head) > room:  # a huge message is cut, never the frames that say where it came from
        head = head[: room - 1] + "…"
    return head + where
