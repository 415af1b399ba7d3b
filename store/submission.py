"""A submission: what a producer hands us (``SubmitRequest``) and every rule about it that can be
judged without Redis (``check_submit`` and its parts), with the one error they raise (``BadInput``).

In the store because two sides judge submissions: the client before it writes one, and the slot
when a producer that can only LPUSH pushed a raw JSON entry onto the ready list (refused entries are
dead-lettered with the same message the client would have raised).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import msgspec

from tender_pool.store.records import Priority


class SubmitRequest(msgspec.Struct, forbid_unknown_fields=True):
    """What a producer hands us: through `tender-pool submit`, the library, or a raw JSON entry
    pushed onto the ready list by a producer that can only LPUSH."""

    kind: str
    user: str
    payload: dict[str, Any] = {}
    id: str | None = None
    after: list[str] = []
    priority: Priority = "bulk"


class BadInput(ValueError):
    """A submission that can never run: the CLI exits 2 with this message, the client raises it,
    and a raw producer's entry is dead-lettered with it."""


JOB_ID = re.compile(r"[A-Za-z0-9._:-]{1,200}")
# A run's jobs are ``<run id>/<n>`` (n from 1): ``/`` is in no plain job id (JOB_ID), so a run can
# never take, overwrite or collide with a job it did not create (the contract, "Runs").
MAX_RUN_ID = 180  # room for "/<n>" within the 200 characters of a job id
RUN_JOB_ID = re.compile(r"[A-Za-z0-9._:-]{1,180}/[1-9][0-9]{0,18}")
MAX_PAYLOAD_DEPTH = 64
MAX_PAYLOAD_BYTES = 1 << 20


def check_job_id(job_id: str, what: str = "job id") -> None:
    """The contract's job id: 1–200 characters of letters, digits and ``._:-`` (so never the ``~wake``
    token, never a key separator that could break out of the hash tag)."""
    if not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id):
        if isinstance(job_id, str) and "/" in job_id:
            raise BadInput(f"{what} {_shown(job_id)}: no '/' (ids with '/' are a run's jobs, <run id>/<n>); "
                           "1-200 characters of letters, digits and ._:-")
        raise BadInput(f"{what} {_shown(job_id)}: 1-200 characters of letters, digits and ._:-")


def run_job_id(run_id: str, n: int) -> str:
    """The id of a run's ``n``-th job (1-based, item order)."""
    return f"{run_id}/{n}"


def check_job_ref(job_id: str, what: str = "job id") -> None:
    """An id naming an existing job: a plain job id (``check_job_id``) or a run job's ``<run id>/<n>``
    (``--after`` may name either)."""
    if isinstance(job_id, str) and RUN_JOB_ID.fullmatch(job_id):
        return
    if isinstance(job_id, str) and "/" in job_id:
        raise BadInput(f"{what} {_shown(job_id)}: a job id, or a run's job <run id>/<n>")
    check_job_id(job_id, what)


def check_name(value: str, what: str) -> None:
    """Users and run item keys: 1–200 characters of UTF-8 without control characters or braces."""
    if not isinstance(value, str) or not 1 <= len(value) <= 200:
        raise BadInput(f"{what} {_shown(value)}: 1-200 characters")
    for c in value:
        # Cc: C0, DEL and C1 controls; Cs: lone surrogates (undecodable bytes); Zl/Zp: line breaks
        if c in "{}" or unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp"):
            raise BadInput(f"{what} {_shown(value)}: no braces, control characters or invalid UTF-8")


def check_payload(payload: Any) -> None:
    """A JSON object, at most MAX_PAYLOAD_DEPTH deep (a deeper one overflows the encoders' stacks)
    and MAX_PAYLOAD_BYTES encoded."""
    if not isinstance(payload, dict):
        raise BadInput("payload must be a JSON object")
    stack: list[tuple[Any, int]] = [(payload, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_PAYLOAD_DEPTH:
            raise BadInput(f"payload is nested deeper than {MAX_PAYLOAD_DEPTH} levels")
        if isinstance(v, dict):
            for k, x in v.items():
                if isinstance(k, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in k):
                    raise BadInput("payload has a key that is not valid UTF-8")
                stack.append((x, depth + 1))
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v)
        elif isinstance(v, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in v):
            raise BadInput("payload has a string that is not valid UTF-8")
    if len(msgspec.json.encode(payload)) > MAX_PAYLOAD_BYTES:
        raise BadInput(f"payload is larger than {MAX_PAYLOAD_BYTES} bytes encoded")


def check_submit(req: SubmitRequest) -> None:
    """Everything about a submission that can be judged without Redis."""
    if req.id is not None:
        check_job_id(req.id)
    check_name(req.user, "user")
    check_payload(req.payload)
    for dep in req.after:
        check_job_ref(dep, "--after id")
        if dep == req.id:
            raise BadInput(f"--after {dep}: a job cannot wait for itself")


def _shown(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."
