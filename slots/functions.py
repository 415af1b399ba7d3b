"""Function handlers: the platform's own Python function as a job kind (CONTRACT.md "Function
handlers"), imported once per slot, called in a forked child per attempt.

``kinds.FunctionKind`` is the kind (beside ``CommandKind`` and ``ExtractionKind``); this module reads
what an attempt did. The import and the fork are the slot's fork server's (``forkserver.py``: a
small interpreter started by the slot, so a fork costs what the platform's module weighs, not what
the slot does); the child is a session leader with PDEATHSIG, and the slot applies the hard
timeout, TERM → grace → KILL of the group, cancel, the fence, drain and the escaped-descendant
sweep exactly as for ``parse_markdown``. A forked copy pays no interpreter start-up and no import:
that is the point of the kind.

The child speaks the handler protocol on its result pipe, so ``handlers.outcome_of`` reads most of
it: exit 0 + ``{"value": …}`` (stored as the result), exit 3 + ``{"error": {kind, message}}``
(``Final``; a pool-owned kind is refused there), plus two exits of its own, read here:
``EXIT_RAISED`` (any other exception: ``handler_failed``, retried; the traceback goes to the slot's
log) and ``EXIT_BAD_OUTPUT`` (a return value that does not encode: ``bad_output``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from tender_pool.store.error_kinds import ErrorKind
from tender_pool.store.handler_io import Outcome
from tender_pool.store.records import JobError, JobRecord

from tender_pool.slots import forkserver, handlers
from tender_pool.slots.forkserver import EXIT_BAD_OUTPUT, EXIT_RAISED, MESSAGE_CAP, describe
from tender_pool.slots.runner import RunResult

# the child writes the kinds as strings (the fork server imports none of the store's types)
assert (forkserver.HANDLER_FAILED, forkserver.BAD_OUTPUT) == (ErrorKind.HANDLER_FAILED.value, ErrorKind.BAD_OUTPUT.value)

__all__ = ["EXIT_BAD_OUTPUT", "EXIT_RAISED", "MESSAGE_CAP", "FunctionFailure", "conclude", "describe"]

TRACEBACK_CAP = 64 * 1024  # characters of a traceback in the slot's log line


class FunctionFailure(msgspec.Struct):
    """What the child writes before ``EXIT_RAISED`` / ``EXIT_BAD_OUTPUT``."""

    error: JobError
    traceback: str = ""


def _stored(value: dict) -> dict:
    return value  # the child already wrote {"value": …}: stored as it is


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
