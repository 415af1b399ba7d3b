"""The handler protocol, shared by every kind (``kinds.py``): the input file check, the job on
stdin, and how a run's exit and stdout become an ``Outcome``.

Only kinds in the config run; a payload never names a program. Handlers speak the protocol of
CONTRACT.md ("Command handlers"): the job as JSON on stdin; exit 0 with a JSON object on stdout is
success; exit 3 with ``{"error": {"kind", "message"}}`` is a final failure, with a kind a handler
may choose (not one only the pool sets, ``ErrorKind.pool_owned``, and not an unknown one: those
fail the job as ``handler_failed``, naming the refused kind); anything else is ``handler_failed``
and retried. ``parse_markdown``'s forked child speaks the same protocol.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Callable

import msgspec

from tender_pool.store.config import Config
from tender_pool.store.outcomes import Status, Stop
from tender_pool.store.error_kinds import ErrorKind
from tender_pool.store.handler_io import HandlerFailure, HandlerInput, Outcome
from tender_pool.store.records import JobError, JobRecord

from tender_pool.slots.runner import RunResult

_enc = msgspec.json.Encoder()


class InputRejected(Exception):
    """A final, pre-run rejection (no retry): the payload's file is missing or outside the roots."""

    def __init__(self, kind: ErrorKind, message: str):
        self.error = JobError(kind.value, message)
        super().__init__(message)


def input_file(job: JobRecord, cfg: Config) -> str | None:
    """The payload's ``file``, resolved and checked against ``input_roots`` (no ``..``, no symlink
    escape: the check is on the fully resolved path). None when the job names no file."""
    raw = job.payload.get("file")
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw:
        raise InputRejected(ErrorKind.FILE_NOT_FOUND, f"payload.file must be a non-empty string, got {raw!r}")
    if not cfg.pool.input_roots:
        raise InputRejected(ErrorKind.OUTSIDE_ROOTS, f"{raw}: no file jobs accepted (pool.input_roots is empty)")
    # Strings and os calls, not pathlib: the same checks at a tenth of the cost, and far fewer of the
    # slot's pages touched on a job's way to its start (each a copy-on-write fault after the slot
    # forked its next child ahead: pathlib's were ~120, 0.6 ms a job; bench/bench_doc_overhead.py).
    try:
        resolved = os.path.realpath(raw)
        for root in cfg.pool.input_roots:
            r = os.path.realpath(root)
            if resolved == r or resolved.startswith(r.rstrip("/") + "/"):  # r itself or under it
                break
        else:
            raise InputRejected(ErrorKind.OUTSIDE_ROOTS, f"{raw!r}: resolves to {resolved}, outside pool.input_roots")
        if not _is_file(resolved):
            raise InputRejected(ErrorKind.FILE_NOT_FOUND, f"{raw!r}: no such file")
    except (ValueError, OSError) as e:  # an embedded NUL, a name too long, a loop of links: never a file
        raise InputRejected(ErrorKind.FILE_NOT_FOUND, f"{raw[:300]!r}: not a usable path ({e})") from None
    return resolved


_NOT_THERE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})


def _is_file(path: str) -> bool:
    """``pathlib.Path.is_file``: False for a path that is not there; any other OSError (EACCES)
    raised, as pathlib raises it."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError as e:
        if e.errno not in _NOT_THERE:
            raise
        return False


def handler_stdin(job: JobRecord, attempt: int) -> bytes:
    return _enc.encode(HandlerInput(job.id, job.kind, job.user, job.payload, attempt))


def _as_value(value: dict) -> dict:
    return {"value": value}


def outcome_of(res: RunResult, timeout: float, success: Callable[[dict], dict] = _as_value) -> Outcome:
    """Turn what the runner saw into an outcome (the slot decides retry vs final from the kind).
    ``success`` makes the stored result from the handler's JSON object: a command's is stored as
    ``{"value": …}``, parse_markdown's ``JobOutput`` as it is."""
    if res.stopped == Stop.TIMEOUT:
        return Outcome(Status.FAILED, error=JobError("timeout", f"killed after {timeout:g} s"), signals=res.signals)
    if res.stopped == Stop.CANCEL:
        return Outcome(Status.FAILED, error=JobError("cancelled", "cancelled while running"), signals=res.signals, ran=False)
    if res.stopped:  # abort (drain, supervisor's order) or fenced (reclaimed elsewhere): not the job's fault
        return Outcome(Status.INTERRUPTED, signals=res.signals)
    tail = res.stderr_tail.decode("utf-8", "replace").strip()[-500:]
    if res.returncode == 0:
        if res.overflow:
            return Outcome(Status.FAILED, error=JobError("bad_output", "stdout larger than 16 MiB"))
        try:
            value = msgspec.json.decode(res.stdout)
        except msgspec.DecodeError as e:
            return Outcome(Status.FAILED, error=JobError("bad_output", f"stdout is not JSON: {e}"))
        if not isinstance(value, dict):
            return Outcome(Status.FAILED, error=JobError("bad_output", "stdout is JSON but not an object"))
        return Outcome(Status.COMPLETED, result=success(value))
    if res.returncode == 3:
        try:
            fail = msgspec.json.decode(res.stdout, type=HandlerFailure)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return Outcome(Status.FAILED, error=JobError("bad_output", "exit 3 without {\"error\": {kind, message}}"))
        return Outcome(Status.FAILED, error=_handler_error(fail.error), final=True)
    how = f"exit status {res.returncode}" if (res.returncode or 0) >= 0 else f"killed by signal {-res.returncode}"
    return Outcome(Status.FAILED, error=JobError("handler_failed", f"{how}: {tail}" if tail else how))


def _handler_error(err: JobError) -> JobError:
    """The error a handler's exit 3 reports, if its kind is one a handler may set; else
    ``handler_failed`` naming the refused kind (final all the same: the handler gave up)."""
    try:
        kind = ErrorKind(err.kind)
    except ValueError:
        return JobError(ErrorKind.HANDLER_FAILED.value, f"handler reported unknown error kind {err.kind!r}: {err.message}")
    if kind.pool_owned:
        return JobError(
            ErrorKind.HANDLER_FAILED.value, f"handler reported error kind {err.kind!r}, which only the pool sets: {err.message}"
        )
    return err
