"""What a function handler is given and may raise: ``JobContext`` and ``Final``.

A function handler (``[handlers.NAME] function = "module:qualname"``, the contract's "Function
handlers") is the platform's own Python code, called in a forked child of a slot with one
``JobContext``. It lives in the store, and ``tender_pool.client`` re-exports it, so that the
platform's code imports nothing of the daemon: redis and msgspec are all this module (lazily) needs.
It is imported by the slot's fork server before the platform's module, so it imports only what an
interpreter has already loaded, and ``json``'s C encoder (not msgspec, nor ``typing``: every forked attempt
copies the page tables of what the server imported).

Fork safety: a context is built in the attempt's child and talks to nothing it inherited. Its
progress lines go to the attempt's own progress pipe (``TENDER_POOL_PROGRESS_FD``, the fd 3
protocol of command handlers: the slot coalesces them into at most 10 ``job_progress`` events a
second, in order, with the same caps); ``owns()`` opens a Redis connection of its own in the child
on first use, never the slot's.
"""

from __future__ import annotations

import os
from _json import encode_basestring, make_encoder  # json's C encoder, without the json package

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

# json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"), check_circular=False),
# made once: JSONEncoder.encode builds one per call, Python-level work in every forked child
_plain_json = make_encoder(None, None, encode_basestring, None, ":", ",", False, False, False)


def encode_json(obj: Any) -> bytes:
    """``msgspec.json.encode(obj)``, without importing msgspec when ``json``'s C encoder can do it:
    plain JSON (dicts, lists, strings, finite numbers, booleans, None) there; anything else (NaN,
    a datetime, a UUID, a Struct, a cycle, a lone surrogate, …) by msgspec as before, imported
    then, raising what it raises for a value it cannot encode."""
    try:
        return "".join(_plain_json(obj, 0)).encode()
    except Exception:  # noqa: BLE001 - whatever json refuses, msgspec decides
        import msgspec

        return msgspec.json.encode(obj)


class Final(Exception):
    """Raise it to fail the job for good (no retry) with an error of your kind, as a command
    handler's exit 3 does: ``raise Final("corrupt", "section 4.2: the template is empty")``. A kind
    only the pool sets (``cancelled``, ``crash_cap``, …) or an unknown one is refused: the job fails
    as ``handler_failed``, naming it."""

    def __init__(self, kind: str, message: str = ""):
        self.kind, self.message = kind, message
        super().__init__(kind, message)

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}" if self.message else self.kind


class JobContext:
    """One attempt of one job, as its function sees it.

    ``id``, ``kind``, ``user``, ``payload`` (the decoded object), ``attempt`` (the attempt's opaque
    token, as ``TENDER_POOL_ATTEMPT`` is for a command), ``run_id`` and ``key`` (None outside a
    run). ``progress(fraction, message=None)`` and ``chunk(text)`` stream to the job's events;
    ``owns()`` says whether this attempt still owns its job (check it before a side effect outside
    the pool: a reclaimed job may already run elsewhere)."""

    __slots__ = ("id", "kind", "user", "payload", "attempt", "run_id", "key", "_fd", "_owns", "_client")

    def __init__(self, id: str, kind: str, user: str, payload: dict[str, Any], attempt: str,
                 run_id: str | None = None, key: str | None = None, *, progress_fd: int | None = None,
                 client: Callable[[], Any] | None = None):
        self.id, self.kind, self.user, self.payload, self.attempt = id, kind, user, payload, attempt
        self.run_id, self.key = run_id, key
        if progress_fd is None:
            named = os.environ.get("TENDER_POOL_PROGRESS_FD")
            progress_fd = int(named) if named and named.isdigit() else -1
        self._fd = progress_fd
        self._owns = client  # makes a tender_pool.client.Client, in this process, on first owns()
        self._client: Any = None

    def __repr__(self) -> str:
        return f"JobContext(id={self.id!r}, kind={self.kind!r}, user={self.user!r}, attempt={self.attempt!r})"

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Report how far the job is (0..1) and, optionally, what it is doing."""
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
            raise TypeError(f"progress fraction must be a number, not {type(fraction).__name__}")
        if message is not None and not isinstance(message, str):
            raise TypeError(f"progress message must be a string or None, not {type(message).__name__}")
        self._line({"progress": fraction, "message": message})

    def chunk(self, text: str) -> None:
        """Stream a piece of output (a model's text as it arrives); pieces are delivered in order,
        concatenated when they come faster than the events go out."""
        if not isinstance(text, str):
            raise TypeError(f"chunk must be a string, not {type(text).__name__}")
        if text:
            self._line({"chunk": text})

    def owns(self) -> bool:
        """Does this attempt still own its job? (``Client.owns``: one Redis read; the connection is
        this process's own, made on the first call.)"""
        if self._client is None:
            if self._owns is None:
                raise RuntimeError("this JobContext has no Redis client to ask")
            self._client = self._owns()
        return bool(self._client.owns(self.id, self.attempt))

    def _line(self, obj: dict) -> None:
        if self._fd < 0:
            return  # no progress pipe (a context made by hand, e.g. in a unit test): nothing to report to
        data = encode_json(obj) + b"\n"
        while data:  # one write for a line under the pipe's atomic size; the slot reads as it comes
            n = os.write(self._fd, data)
            data = data[n:]
