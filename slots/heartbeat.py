"""The slot → supervisor channel: length-prefixed msgpack reports over a pipe.

Liveness has one owner, the supervisor. A slot proves its loop is alive by writing a report (``Beat``
at least every heartbeat/3 s, idle or busy: the job runs in a child, so a parser that hogs the CPU or
the GIL cannot starve it — Dramatiq#692). The supervisor alone writes the host's Redis heartbeat
(``keys.host``) for all its slots, and kills a slot whose reports stop for 3 heartbeats. So Redis
says "this host's supervisor is alive", and the supervisor vouches for its slots.
"""

from __future__ import annotations

import os
import struct

import msgspec

from tender_pool.store.types import Beat, SlotReport

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(SlotReport)
_HDR = struct.Struct("!I")


class Reporter:
    """Slot side. Never blocks: the pipe is non-blocking, and a slot whose supervisor stalls (SIGSTOP,
    swap) must go on enforcing its job's deadline, cancel and fence. When the pipe is full, a
    ``Beat`` is dropped (the next one carries the same cumulative figures: beats coalesce), while
    every other report (``Busy``, ``Idle``, ``Finished``) waits in a backlog that ``flush`` writes
    out, whole frames in order, each time the slot's loop beats. The backlog is bounded only by
    ``congested``: past ``BACKLOG_LIMIT`` bytes the slot stops claiming until it drains."""

    BACKLOG_LIMIT = 1 << 20

    def __init__(self, fd: int):
        self.fd = fd
        os.set_blocking(fd, False)
        self.backlog = bytearray()  # whole frames not yet written; the first may be partly written
        self.closed = False
        self.dropped_beats = 0
        self.held = False  # the backlog holds reports kept for the next write (send(hold=True))

    def send(self, report: SlotReport, hold: bool = False) -> None:
        """``hold``: keep it for the next write (the next report, a due beat, or ``flush``), so a
        job's reports cost the slot one write, not three or four."""
        body = _enc.encode(report)
        frame = _HDR.pack(len(body)) + body
        if hold:
            self.backlog += frame
            self.held = True
            return
        if isinstance(report, Beat):
            if self.flush():  # the backlog first: a beat never overtakes a Busy or a Finished
                self._write(frame)
            else:
                self.dropped_beats += 1
            return
        self.backlog += frame
        self.flush()

    def _write(self, frame: bytes) -> None:
        """Write one frame into an empty backlog; what the pipe does not take goes to the backlog."""
        self.backlog += frame
        self.flush()

    def flush(self) -> bool:
        """Write as much of the backlog as the pipe takes now. True when nothing is left."""
        self.held = False
        while self.backlog and not self.closed:
            try:
                n = os.write(self.fd, self.backlog)
            except BlockingIOError:
                return False
            except (BrokenPipeError, OSError):
                self.closed = True  # the supervisor is gone; PDEATHSIG and the getppid() check end us
                self.backlog.clear()
                break
            del self.backlog[:n]
        return not self.backlog

    @property
    def congested(self) -> bool:
        return len(self.backlog) > self.BACKLOG_LIMIT


class ReportReader:
    """Supervisor side: feed it whatever a non-blocking read returned, get whole reports back."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[SlotReport]:
        self.buf += data
        out: list[SlotReport] = []
        while len(self.buf) >= 4:
            (n,) = _HDR.unpack_from(self.buf)
            if len(self.buf) < 4 + n:
                break
            body = bytes(self.buf[4 : 4 + n])
            del self.buf[: 4 + n]
            try:
                out.append(_dec.decode(body))
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
        return out
