"""The kinds a job's error may have (``JobError.kind``), and the two rules that hang on a kind: which
are retried, and which only the pool may set.

The slot's kinds, runner and function handlers name them; both rules are the contract's ("Job states
and error kinds"), so they are written once, here.
"""

from __future__ import annotations

import enum


class ErrorKind(str, enum.Enum):
    TIMEOUT = "timeout"
    HANDLER_FAILED = "handler_failed"
    BAD_OUTPUT = "bad_output"
    OUTSIDE_ROOTS = "outside_roots"
    FILE_NOT_FOUND = "file_not_found"
    DEPENDENCY_FAILED = "dependency_failed"
    DEPENDENCY_CYCLE = "dependency_cycle"
    WAITED_TOO_LONG = "waited_too_long"  # reached pool.max_waits: nothing was killed, so not a timeout
    STORAGE = "storage"  # results or state directory full or unwritable: retried
    CRASH_CAP = "crash_cap"
    CANCELLED = "cancelled"
    UNDECODABLE = "undecodable"
    ENCRYPTED = "encrypted"
    CORRUPT = "corrupt"
    EMPTY = "empty"
    OLD_FORMAT = "old-format"
    UNSUPPORTED = "unsupported"
    TOO_LARGE = "too-large"

    @property
    def retried(self) -> bool:
        """Only these are retried up to max_tries; every other kind is final at once (the contract)."""
        return self in (ErrorKind.HANDLER_FAILED, ErrorKind.BAD_OUTPUT, ErrorKind.STORAGE)

    @property
    def pool_owned(self) -> bool:
        """Kinds only the pool may set: a handler's exit 3 naming one is refused (the contract)."""
        return self in POOL_OWNED_KINDS


POOL_OWNED_KINDS = frozenset(
    {
        ErrorKind.CANCELLED,
        ErrorKind.CRASH_CAP,
        ErrorKind.UNDECODABLE,
        ErrorKind.DEPENDENCY_FAILED,
        ErrorKind.DEPENDENCY_CYCLE,
        ErrorKind.WAITED_TOO_LONG,
    }
)
