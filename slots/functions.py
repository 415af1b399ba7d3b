"""Function handlers: the platform's own Python function as a job kind (CONTRACT.md "Function
handlers"), imported once per slot, called in a forked child of the slot per attempt.

``kinds.FunctionKind`` is the kind (beside ``CommandKind`` and ``ExtractionKind``); this module is
what it runs. The slot imports the function before its first claim (``load``, from the kind's
``preload``: a failure is the slot's boot error), and each attempt is ``runner.fork_call`` of
``function_child`` — its own session and process group,
PDEATHSIG, the hard timeout, TERM → grace → KILL of the group, cancel, the fence, drain and the
escaped-descendant sweep exactly as for ``parse_markdown``. A forked copy pays no interpreter
start-up and no import: that is the point of the kind.

In the child (fork safety, as gunicorn's ``post_fork`` and Celery's ``worker_process_init``):
- the slot's Redis connection, structlog set-up and reporter pipe are never used: ``JobContext``
  makes its own Redis connection on ``owns()``; progress goes to the attempt's own pipe;
- file descriptors 1 and 2 are the slot's log stream (a copy of its stderr taken at start-up), so
  whatever the function or its subprocesses print lands in the slot's log, never in the result;
  the result travels on a private, close-on-exec copy of the stdout pipe;
- ``after_fork`` runs first (dispose of an inherited database pool, reseed, reconnect);
- module state is the slot's as it was after the import: a copy per attempt, thrown away with it.

The child speaks the handler protocol on its result pipe, so ``handlers.outcome_of`` reads most of
it: exit 0 + ``{"value": …}`` (stored as the result), exit 3 + ``{"error": {kind, message}}``
(``Final``; a pool-owned kind is refused there), plus two exits of its own, read here:
``EXIT_RAISED`` (any other exception: ``handler_failed``, retried; the traceback goes to the slot's
log) and ``EXIT_BAD_OUTPUT`` (a return value that does not encode: ``bad_output``).
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import msgspec

from tender_pool.supervisor.config import Config, HandlerConfig
from tender_pool.supervisor.types import ErrorKind, JobError, JobRecord, Outcome

from . import handlers
from .function_import import prepend_path, resolve
from .runner import RunResult

EXIT_RAISED = 4  # the function raised something other than Final
EXIT_BAD_OUTPUT = 5  # its return value does not encode as JSON
MESSAGE_CAP = 2000  # characters of error.message for an exception: type, message, the last frames
FRAMES = 3
TRACEBACK_CAP = 64 * 1024  # characters of a traceback in the slot's log line

_enc = msgspec.json.Encoder()


class FunctionFailure(msgspec.Struct):
    """What the child writes before ``EXIT_RAISED`` / ``EXIT_BAD_OUTPUT``."""

    error: JobError
    traceback: str = ""


def _stored(value: dict) -> dict:
    return value  # the child already wrote {"value": …}: stored as it is


@dataclass
class Loaded:
    """A function handler's callables, imported in the slot (``load``)."""

    fn: Callable[..., Any]
    after: Callable[[], Any] | None = None


def load(h: HandlerConfig) -> Loaded:
    """Import one handler's function (and ``after_fork``) in the slot, its ``path`` first.
    Raises ``function_import.ImportProblem``."""
    assert h.function is not None
    prepend_path(list(h.path))
    return Loaded(resolve(h.function), resolve(h.after_fork) if h.after_fork else None)


def conclude(res: RunResult, timeout: float, log: Any, job: JobRecord, attempt: int) -> Outcome:
    """An attempt's outcome from what the runner saw (the child's exits above; the rest as for a
    command: timeout, cancel, a crash, ``os._exit``)."""
    if res.stopped is None and res.returncode in (EXIT_RAISED, EXIT_BAD_OUTPUT):
        try:
            fail = msgspec.json.decode(res.stdout, type=FunctionFailure)
        except (msgspec.DecodeError, msgspec.ValidationError):
            fail = None  # the function itself exited with that status: a plain exit
        if fail is not None:
            if fail.traceback and log is not None:
                log.error("function_raised", job_id=job.id, kind=job.kind, user=job.user, attempt=attempt,
                          error=fail.error.message, traceback=fail.traceback[-TRACEBACK_CAP:])
            return Outcome("failed", error=fail.error)
    return handlers.outcome_of(res, timeout, success=_stored)


def function_child(loaded: Loaded, cfg: Config, job: JobRecord, log_fd: int) -> int:
    """The attempt, in the forked child (``runner.fork_call`` made it a session leader with the
    default signal dispositions and the job's environment). Returns the exit status."""
    signal.signal(signal.SIGUSR2, signal.SIG_DFL)  # the slot's parent-death handler is not ours
    result_fd = os.dup(1)  # close-on-exec: the function's subprocesses never hold the result pipe
    if log_fd >= 0:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
    try:
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    except (AttributeError, ValueError):
        pass
    code, body = _call(loaded, cfg, job)
    data = memoryview(body)
    while data:
        data = data[os.write(result_fd, data):]
    return code


def _call(loaded: Loaded, cfg: Config, job: JobRecord) -> tuple[int, bytes]:
    from tender_pool.client.context import Final, JobContext

    ctx = JobContext(job.id, job.kind, job.user, job.payload, os.environ.get("TENDER_POOL_ATTEMPT", ""),
                     job.run, job.key, client=lambda: _client(cfg))
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


def _client(cfg: Config):
    from tender_pool.client import Client

    return Client.for_config(cfg)


def _awaitable(value: Any) -> bool:
    import inspect

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
