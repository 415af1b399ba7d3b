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

from tender_pool.supervisor.types import SlotReport

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(SlotReport)
_HDR = struct.Struct("!I")


class Reporter:
    """Slot side. Blocking writes: reports are tiny and the supervisor drains the pipe every loop."""

    def __init__(self, fd: int):
        self.fd = fd

    def send(self, report: SlotReport) -> None:
        body = _enc.encode(report)
        data = _HDR.pack(len(body)) + body
        try:
            while data:
                n = os.write(self.fd, data)
                data = data[n:]
        except BrokenPipeError:
            pass  # the supervisor is gone; PDEATHSIG and the getppid() check end this slot


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
