"""Job kinds: what runs for a kind, and how its output becomes an outcome.

Only kinds in the config run; a payload never names a program. Command handlers speak the protocol
of CONTRACT.md ("Command handlers"): the job as JSON on stdin; exit 0 with a JSON object on stdout
is success; exit 3 with ``{"error": {"kind", "message"}}`` is a final failure; anything else is
``handler_failed`` and retried. ``parse_markdown`` is the built-in extraction kind.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from tender_pool.supervisor.config import Config
from tender_pool.supervisor.types import ErrorKind, HandlerFailure, HandlerInput, JobError, JobRecord, Outcome

from .runner import RunResult

_enc = msgspec.json.Encoder()
_KINDS = {k.value for k in ErrorKind}


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
    resolved = Path(os.path.realpath(raw))
    roots = [Path(os.path.realpath(r)) for r in cfg.pool.input_roots]
    if not any(resolved == r or r in resolved.parents for r in roots):
        raise InputRejected(ErrorKind.OUTSIDE_ROOTS, f"{raw}: resolves to {resolved}, outside pool.input_roots")
    if not resolved.is_file():
        raise InputRejected(ErrorKind.FILE_NOT_FOUND, f"{raw}: no such file")
    return str(resolved)


def command_for(kind: str, cfg: Config) -> list[str] | None:
    h = cfg.handlers.get(kind)
    return list(h.command) if h else None


def handler_stdin(job: JobRecord, attempt: int) -> bytes:
    return _enc.encode(HandlerInput(job.id, job.kind, job.user, job.payload, attempt))


OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def is_ole(path: str) -> bool:
    """Legacy .doc/.xls (and anything else in an OLE2 container) needs the JVM."""
    try:
        with open(path, "rb") as f:
            return f.read(8) == OLE_MAGIC
    except OSError:
        return False


def extraction_child(path: str, out_dir: str, stem: str, timeout: float, heap: str, jvm) -> int:
    """Runs in the job's forked child: extract, write the files, speak the handler protocol on stdout
    (exit 0 + the result object, or exit 3 + {"error": …}), so one code path reads both kinds."""
    import sys

    from tender_pool.extract.errors import ExtractError
    from tender_pool.extract.runner import run_job

    try:
        out = run_job(path, out_dir, stem, timeout=timeout, jvm_heap=heap, jvm=jvm)
    except ExtractError as e:
        sys.stdout.buffer.write(_enc.encode(e.to_dict()))
        return 3
    sys.stdout.buffer.write(_enc.encode(out))
    return 0


def outcome_of(res: RunResult, timeout: float) -> Outcome:
    """Turn what the runner saw into an outcome (the slot decides retry vs final from the kind)."""
    if res.stopped == "timeout":
        return Outcome("failed", error=JobError("timeout", f"killed after {timeout:g} s"), signals=res.signals)
    if res.stopped == "cancel":
        return Outcome("failed", error=JobError("cancelled", "cancelled while running"), signals=res.signals, ran=False)
    if res.stopped:  # abort (drain, supervisor's order) or fenced (reclaimed elsewhere): not the job's fault
        return Outcome("interrupted", signals=res.signals)
    tail = res.stderr_tail.decode("utf-8", "replace").strip()[-500:]
    if res.returncode == 0:
        if res.overflow:
            return Outcome("failed", error=JobError("bad_output", "stdout larger than 16 MiB"))
        try:
            value = msgspec.json.decode(res.stdout)
        except msgspec.DecodeError as e:
            return Outcome("failed", error=JobError("bad_output", f"stdout is not JSON: {e}"))
        if not isinstance(value, dict):
            return Outcome("failed", error=JobError("bad_output", "stdout is JSON but not an object"))
        return Outcome("completed", result={"value": value})
    if res.returncode == 3:
        try:
            fail = msgspec.json.decode(res.stdout, type=HandlerFailure)
            kind = fail.error.kind if fail.error.kind in _KINDS else "handler_failed"
            return Outcome("failed", error=JobError(kind, fail.error.message), final=True)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return Outcome("failed", error=JobError("bad_output", "exit 3 without {\"error\": {kind, message}}"))
    how = f"exit status {res.returncode}" if (res.returncode or 0) >= 0 else f"killed by signal {-res.returncode}"
    return Outcome("failed", error=JobError("handler_failed", f"{how}: {tail}" if tail else how))
