"""The CLI's hard timeout: ``tender-pool extract FILE --timeout S`` extracts in a forked child that the
parent kills at the deadline.

Why a child: the SIGALRM deadline (``deadline.Deadline``) only runs between bytecodes, so zlib
inflating a bomb or lxml parsing a huge part ran on past it (``--timeout 2`` took 9.4 s). The parent
waits for the child's answer on a pipe up to the deadline, then SIGTERMs the child's process group
(its own: antiword goes with it) and SIGKILLs it ``GRACE_S`` later, and reports ``timeout``. In the
child, SIGTERM raises ``timeout`` at the next bytecode, once, so a reader that is only waiting (on a
cold JVM, which runs in a session of its own) unwinds through the code that kills and reaps what it
started. The parent is the only clock: the child runs ``extract`` without a SIGALRM deadline, since
an alarm raised just before the SIGTERM would have the SIGTERM interrupt that clean-up (a killed JVM
not yet reaped outlived the command by a moment).

The daemon does not come here: a job's child is already a forked process group that the slot's
runner kills at the job's timeout (``runner.run_job`` calls ``api.extract`` in-process).

Hazards: fork. The CLI runs no threads. The child never returns into its caller's frames (click, or
pytest in tests): it writes one ``Done``/``Failed`` frame to the pipe and leaves with ``os._exit``,
so no atexit handler runs and none of the parent's buffers is flushed twice (they are flushed before
the fork). The child's exit is observed with ``WNOWAIT`` and its group SIGKILLed before it is reaped,
so a straggler of the group dies with it and the group id cannot be reused meanwhile.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
import traceback

import msgspec

from tender_pool.extract.api import Extraction, extract
from tender_pool.extract.errors import ExtractError

GRACE_S = 1.0  # between SIGTERM and SIGKILL of the child's group
_READ = 1 << 20


class Done(msgspec.Struct, tag="done"):
    extraction: Extraction


class Failed(msgspec.Struct, tag="failed"):
    kind: str
    message: str


_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(Done | Failed)


def extract_isolated(path: str, *, timeout: float, jvm_heap: str = "512m") -> Extraction:
    """``api.extract`` in a forked child, killed ``timeout`` seconds from now: raises ExtractError
    (``timeout`` past the deadline, whatever the child was doing)."""
    end = time.monotonic() + timeout
    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(r, w, path, jvm_heap)  # never returns
    os.close(w)
    ended = False
    try:
        try:
            os.setpgid(pid, pid)  # the child does it too: whichever runs first
        except (PermissionError, ProcessLookupError):
            pass
        frame = _read_until(r, end)
        if frame is None:  # the deadline came first
            _stop(pid)
            ended = True
            raise ExtractError("timeout", f"extraction took longer than {timeout:g} s (its process was killed)")
        status = _end(pid, max(end, time.monotonic()) + GRACE_S)
        ended = True
    finally:
        os.close(r)
        if not ended:  # interrupted (Ctrl-C, a signal): the child must not outlive us
            _stop(pid, grace=0)
    return _answer(frame, status)


def _read_until(fd: int, end: float) -> bytes | None:
    """Everything the child writes up to its end of the pipe closing; None if ``end`` comes first."""
    chunks: list[bytes] = []
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return None
        data = os.read(fd, _READ)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def _answer(frame: bytes, status: int) -> Extraction:
    if frame:
        try:
            answer = _dec.decode(frame)
        except msgspec.DecodeError:
            answer = None
        if isinstance(answer, Done):
            return answer.extraction
        if isinstance(answer, Failed):
            raise ExtractError(answer.kind, answer.message)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        # Not ours (we kill only past the deadline): the kernel's OOM killer, in all likelihood.
        raise ExtractError("too-large", "the extraction was killed (SIGKILL), most likely out of memory")
    if os.WIFSIGNALED(status):
        raise ExtractError("corrupt", f"the extraction died of {signal.Signals(os.WTERMSIG(status)).name}")
    raise ExtractError("corrupt", f"the extraction ended without an answer (exit {os.waitstatus_to_exitcode(status)})")


def _exited(pid: int) -> bool:
    """The child has ended (left a zombie, not reaped: its group id stays ours)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _reap(pid: int) -> int:
    """SIGKILL whatever is left of the group, then reap the child; its wait status."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return 0


def _end(pid: int, end: float) -> int:
    """The child has closed its pipe: wait for its exit (until ``end``, then stop it); its wait status."""
    while not _exited(pid):
        if time.monotonic() >= end:
            return _stop(pid)
        time.sleep(0.005)
    return _reap(pid)


def _stop(pid: int, grace: float = GRACE_S) -> int:
    """SIGTERM the child's group, SIGKILL it ``grace`` seconds later (or at once when the child has
    gone), reap the child; its wait status."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    end = time.monotonic() + grace
    while not _exited(pid) and time.monotonic() < end:
        time.sleep(0.01)
    return _reap(pid)


def _on_term(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the clean-up it starts runs to its end
    raise ExtractError("timeout", "stopped at the deadline")


def _child(r: int, w: int, path: str, jvm_heap: str):
    """The forked child: extract, write one frame, ``os._exit``. Never returns, never raises."""
    code = 0
    try:
        os.close(r)
        os.setpgid(0, 0)
        signal.signal(signal.SIGTERM, _on_term)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        try:
            answer: Done | Failed = Done(extract(path, jvm_heap=jvm_heap))
        except ExtractError as exc:
            answer = Failed(exc.kind, exc.message)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the answer is made: a late SIGTERM just ends us
        view = memoryview(_enc.encode(answer))
        while view:
            view = view[os.write(w, view):]
    except ExtractError:  # the deadline's SIGTERM between the answer and the line above: no answer
        code = 1
    except BaseException:  # noqa: BLE001 - a bug here ends as "corrupt: … without an answer" in the parent
        code = 1
        try:
            traceback.print_exc(limit=-5)
        except BaseException:  # noqa: BLE001
            pass
    finally:
        try:
            sys.stderr.flush()
        finally:
            os._exit(code)
