"""A handler's progress lines (file descriptor 3) → coalesced ``job_progress`` events.

A handler may write JSON lines to fd 3 (``TENDER_POOL_PROGRESS_FD`` names it; 3 for a command
handler): ``{"progress": 0.4, "message": "…"}`` or ``{"chunk": "…"}`` (streamed text, e.g. an LLM's
output). The runner reads the pipe with the job's other pipes, never blocking the handler (the pipe
is enlarged, and read whenever it has data); this module turns what arrives into at most
``RATE_HZ`` events per second per job (progress and message: the latest wins; chunks: concatenated
in order) and drops, counting them, chunks past ``CHUNK_CAP`` bytes per attempt, lines longer than
``LINE_CAP`` and lines that are not a JSON object. Sending is the caller's (``send``: the slot's
fenced progress.lua on its FastLane); a failed send is counted as dropped, never raised into the
job's loop.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import msgspec

RATE_HZ = 10
CHUNK_CAP = 1 << 20  # bytes of chunk text forwarded per attempt
LINE_CAP = 256 * 1024  # a longer line is dropped whole

_dec = msgspec.json.Decoder()


class ProgressFeed:
    """Parse, coalesce, rate-limit. ``feed`` takes raw bytes as they come; ``due`` says whether a
    ``flush`` may send now; ``flush`` sends at most one event with everything pending."""

    def __init__(self, send: Callable[[dict[str, Any]], bool], clock: Callable[[], float] = time.monotonic):
        self.send = send
        self.clock = clock
        self.buf = bytearray()
        self.skipping = False  # inside a line longer than LINE_CAP: drop until its newline
        self.progress: Any = None
        self.message: Any = None
        self.chunks: list[str] = []
        self.chunk_bytes = 0  # accepted so far this attempt (sent or pending)
        self.dirty = False
        self.last_sent = -1.0
        self.events = 0
        self.dropped = 0

    def feed(self, data: bytes) -> None:
        self.buf += data
        while True:
            nl = self.buf.find(b"\n")
            if nl < 0:
                if len(self.buf) > LINE_CAP:
                    self.buf.clear()
                    if not self.skipping:
                        self.dropped += 1
                    self.skipping = True
                return
            line = bytes(self.buf[:nl])
            del self.buf[: nl + 1]
            if self.skipping:
                self.skipping = False
                continue
            self._line(line)

    def _line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            obj = _dec.decode(line)
        except msgspec.DecodeError:
            self.dropped += 1
            return
        if not isinstance(obj, dict):
            self.dropped += 1
            return
        took = False
        if "progress" in obj and isinstance(obj["progress"], (int, float)) and not isinstance(obj["progress"], bool):
            self.progress, took = obj["progress"], True
        if "message" in obj and (obj["message"] is None or isinstance(obj["message"], str)):
            self.message, took = obj["message"], True
        chunk = obj.get("chunk")
        if isinstance(chunk, str) and chunk:
            size = len(chunk.encode("utf-8", "surrogatepass"))
            if self.chunk_bytes + size > CHUNK_CAP:
                self.dropped += 1
            else:
                self.chunk_bytes += size
                self.chunks.append(chunk)
                took = True
        if took:
            self.dirty = True
        elif not chunk:
            self.dropped += 1

    def due(self) -> bool:
        return self.dirty and self.clock() - self.last_sent >= 1.0 / RATE_HZ

    def next_due(self) -> float | None:
        """Monotonic time of the next possible flush, or None when nothing is pending."""
        return self.last_sent + 1.0 / RATE_HZ if self.dirty else None

    def flush(self, force: bool = False) -> None:
        if not self.dirty or (not force and not self.due()):
            return
        event = {"progress": self.progress, "message": self.message,
                 "chunk": "".join(self.chunks) if self.chunks else None}
        self.chunks = []
        self.dirty = False
        self.last_sent = self.clock()
        if self.send(event):
            self.events += 1
        else:
            self.dropped += 1
