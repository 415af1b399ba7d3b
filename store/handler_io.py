"""What crosses a handler's boundary: the JSON a command handler reads on stdin (``HandlerInput``),
the failure it may write on stdout (``HandlerFailure``), and what the slot concludes from any
handler, command or function, once the attempt is over (``Outcome``: the one value a settle is
built from).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from tender_pool.store.records import JobError


class HandlerInput(msgspec.Struct):
    """One JSON object on a command handler's stdin (the contract, "Command handlers")."""

    id: str
    kind: str
    user: str
    payload: dict[str, Any]
    attempt: int


class HandlerFailure(msgspec.Struct):
    error: JobError


class Outcome(msgspec.Struct):
    """What the runner concluded about one attempt; the slot turns it into one settle call."""

    status: Literal["completed", "failed", "interrupted"]
    result: dict[str, Any] | None = None
    error: JobError | None = None
    final: bool = False  # the handler said so (exit 3): no retry whatever the kind
    ran: bool = True  # False for rejections before any process started: not a business try
    signals: list[str] = []  # signals the runner had to send (for logs and metrics)
    inline: str | None = None  # parse_markdown: the Markdown itself, kept in Redis beside the job
