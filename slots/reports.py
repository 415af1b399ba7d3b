"""The slot → supervisor channel: length-prefixed msgpack reports over a pipe, the reports
themselves (``SlotReport``), and the slot process's exit status (``SlotExit``).

Liveness has one owner, the supervisor. A slot proves its loop is alive by writing a report (``Beat``
at least every heartbeat/3 s, idle or busy: the job runs in a child, so a parser that hogs the CPU or
the GIL cannot starve it — Dramatiq#692). The supervisor alone writes the host's Redis heartbeat
(``keys.host``) for all its slots, and kills a slot whose reports stop for 3 heartbeats. So Redis
says "this host's supervisor is alive", and the supervisor vouches for its slots.
"""

from __future__ import annotations

import enum
import os
import struct

import msgspec



class AttemptEnd(str, enum.Enum):
    """How one claimed entry ended, as a slot reports it (``Finished.outcome``). The first four are
    the job's final states; the rest leave it unfinished."""

    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEAD = "dead"  # undecodable entry, dead-lettered
    RETRIED = "retried"  # a business failure put back for another try, after a backoff
    INTERRUPTED = "interrupted"  # stopped by the pool (drain, abort, fence): neither try nor crash
    FENCED = "fenced"  # settle refused: a newer attempt owns the job
    PARKED = "parked"  # waits for its user's lock or a dependency

    @property
    def terminal(self) -> bool:
        return self in (AttemptEnd.COMPLETED, AttemptEnd.FAILED, AttemptEnd.CANCELLED, AttemptEnd.DEAD)


class SlotExit(enum.IntEnum):
    """A slot process's exit status, read by the supervisor (gunicorn's WORKER_BOOT_ERROR idea)."""

    OK = 0  # asked to stop (drain, scale, reload, abort) and stopped
    ERROR = 1  # an unexpected exception escaped the slot: respawned with backoff
    BOOT_ERROR = 3  # could not get ready to claim (its config, imports, environment): not respawned


class Beat(msgspec.Struct, tag="beat"):
    """Sent at least every heartbeat/3 seconds, idle or busy: the slot's loop is alive.
    ``redis_errors`` is cumulative for this slot process; the supervisor adds the deltas to its
    metrics, so a SIGKILLed slot loses at most one beat's worth. ``unreplicated``: the slot is
    retrying a start or settle that Redis ran but no replica acknowledged yet (``NotReplicated``;
    a failover waiting for a replica), for ``status``'s warning."""

    redis_errors: int = 0
    unreplicated: bool = False


class Busy(msgspec.Struct, tag="busy"):
    """The slot holds the user's lock and is about to run this attempt. ``child_pid`` follows in
    a second report once the child exists, so the supervisor can kill its tree if the slot dies."""

    job_id: str
    kind: str
    user: str
    file: str | None
    token: str
    attempt: int
    started_ms: int
    child_pid: int | None = None


class Idle(msgspec.Struct, tag="idle"):
    pass


class Finished(msgspec.Struct, tag="finished"):
    """One attempt's end, for the supervisor's counters (``counters.tally``) and metrics. For ``PARKED``,
    ``park_reason`` says behind what ("user" or "dependency"); ``error_kind`` is the job's error."""

    kind: str
    outcome: AttemptEnd
    error_kind: str | None = None
    park_reason: str | None = None
    duration_s: float = 0.0
    killed: list[str] = []
    queue_wait_s: float | None = None  # created → first start (attempt 1 only; retries wait on purpose)
    pages: int = 0  # parse_markdown: pages extracted
    input_bytes: int = 0  # parse_markdown: size of the input file
    format: str | None = None  # parse_markdown: detected format
    progress_events: int = 0  # job_progress events written for this attempt (fd 3)
    progress_dropped: int = 0  # fd-3 lines dropped: coalesced away, past the byte cap, or undecodable


class Preloaded(msgspec.Struct, tag="preloaded"):
    """Sent once by a slot before its first claim when it has function handlers: per handler name,
    "" when its function imported, else why not (the slot then exits ``BOOT_ERROR``)."""

    imports: dict[str, str] = {}


SlotReport = Beat | Busy | Idle | Finished | Preloaded


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
