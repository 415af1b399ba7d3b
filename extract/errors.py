"""The one exception every reader raises, carrying a contract error kind.

Why a single type: the CLI, the runner and the daemon map failures to ``{"error": {"kind", "message"}}``
without knowing which library failed. Readers translate library exceptions at their edge so that a
user never sees a traceback as the message.
"""

from __future__ import annotations

from typing import Literal

Kind = Literal["encrypted", "corrupt", "empty", "old-format", "unsupported", "too-large", "timeout",
               "file_not_found"]


class ExtractError(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message

    def to_dict(self) -> dict:
        return {"error": {"kind": self.kind, "message": self.message}}


def short(exc: BaseException, limit: int = 200) -> str:
    """A one-line, bounded description of a library exception (never a traceback)."""
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
