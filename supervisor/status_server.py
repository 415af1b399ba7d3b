"""The thread that serves the status socket (``StatusServer``), the start-up check of the socket
path (``check_existing``), and closing our listeners in forked children (``close_after_fork``).

Thread, not the main selector: a reply reads Redis and /proc, and a slow Redis must never stall the
loop that reaps and respawns slots. The thread shares no lock with the main loop; it answers with
what ``handle`` returns (the status builder for reads; control requests are only queued for the
main loop, see ``control``).

One thread serves every connection at once with a selector: each connection is non-blocking and has
a total deadline (``REQUEST_DEADLINE_S`` to send its request, ``REPLY_DEADLINE_S`` to take the
reply), so a client that sends a byte every 0.8 s, or nothing at all, holds a file descriptor at
most until its deadline and never delays anyone else. Requests are answered one at a time as they
complete (each answer takes milliseconds); a new connection is read as soon as it is accepted, so a
client that sent its request before we got to it (the CLI writes right after connect) is answered
at once and never holds a place. The listen backlog is the kernel's maximum, so a burst of hundreds
of clients waits to be accepted instead of failing with EAGAIN.

At most ``MAX_CONNECTIONS`` are open at once (a bound on descriptors and buffers). At the cap, with
someone waiting in the backlog, room is made by closing the connection that has been silent longest
(no byte received), if that is at least ``SILENT_EVICT_S``: otherwise 256 clients that say nothing
would keep a real ``status`` in the backlog for their whole 2 s deadline. Not the oldest connection,
and not one just accepted: a burst's clients are young and each sends its request at once, and a
connection whose bytes arrived but were not read yet is read (and answered) instead of closed. A
closed client sees EOF, the same error as at its deadline; until ``SILENT_EVICT_S`` passes, the rest
wait in the backlog (accepting stops, so the loop never spins on a listener it cannot serve).

Fork safety: the listening socket would be inherited by every slot; ``close_after_fork`` closes it
in the child, so a dead supervisor's slots never keep its socket "alive".

Start-up: an existing socket at the path is ``connect()``ed first: a live daemon answering refuses
the start; a refused connection (a killed daemon's leftover file) is unlinked. Anything at the path
that is not a socket (a regular file, a directory, a symlink) refuses the start and is never
deleted: the path is probably a mistake in the config, and the file may matter to someone.
"""

from __future__ import annotations

import os
import select
import selectors
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Any, Callable

import msgspec

from tender_pool.supervisor.control import ControlReply, Request
from tender_pool.client.status_protocol import (
    REPLY_CAP,
    REQUEST_CAP,
    FrameBuffer,
    ProtocolError,
    StatusReply,
    StatusRequest,
    encode_frame,
    read_frame,
    write_frame,
)
from tender_pool.client.status_protocol import STATUS_PROTOCOL

REQUEST_DEADLINE_S = 2.0  # accept → whole request read
REPLY_DEADLINE_S = 2.0  # reply ready → reply taken by the client
MAX_CONNECTIONS = 256
SILENT_EVICT_S = 0.3  # at the cap, a connection silent this long gives its place to one in the backlog
ACCEPT_BATCH = 64  # accepts per wake-up: held connections and the tick get their turn during a flood
LISTEN_BACKLOG = 4096  # the kernel caps it at net.core.somaxconn
TICK_S = 1.0

_CLOSE_IN_CHILD: list[Any] = []


def _close_inherited() -> None:
    for s in _CLOSE_IN_CHILD:
        try:
            s.close()
        except OSError:
            pass
    _CLOSE_IN_CHILD.clear()


os.register_at_fork(after_in_child=_close_inherited)


def close_after_fork(sock: Any) -> None:
    """Close ``sock`` in every process forked from here on (slots must not hold our listeners)."""
    _CLOSE_IN_CHILD.append(sock)


class SocketInUse(Exception):
    """The status socket's path cannot be ours: a live daemon answers there, or it is not a socket."""


def check_existing(path: str) -> None:
    """Refuse if a live daemon answers on ``path`` or the path is not a socket; unlink a stale
    socket file (nothing listens on it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        what = ("a regular file" if stat.S_ISREG(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode)
                else "a symlink" if stat.S_ISLNK(st.st_mode) else "not a socket")
        raise SocketInUse(f"exists and is {what}, not a socket; refusing to replace it (fix status.socket)")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        try:
            s.connect(path)
        except ConnectionRefusedError:
            os.unlink(path)  # a killed daemon's leftover: nothing listens
            return
        except OSError as e:
            raise SocketInUse(f"cannot connect to the existing socket: {e.strerror or e}") from None
        try:
            write_frame(s, StatusRequest(version=STATUS_PROTOCOL, op="status"))
            body = read_frame(s, REPLY_CAP)
        except (OSError, ProtocolError) as e:
            raise SocketInUse(f"something listens on {path} but does not answer ({e or 'timed out'})") from None
    finally:
        s.close()
    try:
        reply = msgspec.json.decode(body, type=StatusReply)
        pid: Any = reply.status.pid if reply.status else "?"
    except (msgspec.DecodeError, msgspec.ValidationError):
        pid = "?"
    raise SocketInUse(f"in use by a live daemon (pid {pid})")


class _Conn:
    """One client connection: its request as it arrives, then its reply as it leaves."""

    def __init__(self, sock: socket.socket, now: float):
        self.sock = sock
        self.frame = FrameBuffer(REQUEST_CAP)
        self.out = b""
        self.deadline = now + REQUEST_DEADLINE_S
        self.heard = now  # accepted, or its last byte received: silence is measured from here


class StatusServer(threading.Thread):
    def __init__(self, path: str, handle: Callable[[Request], StatusReply | ControlReply], log: Any,
                 tick: Callable[[], None] | None = None, group: str = ""):
        super().__init__(name="status", daemon=True)
        self.path = path
        self.group = group  # status.group: who, besides the daemon's user, may read and control
        self.handle = handle
        self.log = log
        self.on_tick = tick
        self.sock: socket.socket | None = None
        self.inode: tuple[int, int] | None = None
        self.stop_event = threading.Event()
        self.conns: dict[int, _Conn] = {}
        self.sel: selectors.BaseSelector | None = None
        self.backlog: Any = None  # select.poll on the listener, set by run()

    class _ClientsInChild:
        """Closes, in a forked child, the client connections open at the fork: a slot must not keep
        a client waiting on a reply that only its dead parent could have sent."""

        def __init__(self, server: "StatusServer"):
            self.server = server

        def close(self) -> None:
            for c in list(self.server.conns.values()):
                c.sock.close()

    def open(self) -> None:
        """Bind (mode 0660, group ``status.group`` if set; directory created). Raises SocketInUse.
        The mode is the access check for control requests: connecting needs write permission."""
        Path(self.path).parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        check_existing(self.path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(self.path)
        os.chmod(self.path, 0o660)
        if self.group:
            import grp

            os.chown(self.path, -1, grp.getgrnam(self.group).gr_gid)
        st = os.lstat(self.path)
        self.inode = (st.st_dev, st.st_ino)
        s.listen(LISTEN_BACKLOG)
        s.setblocking(False)
        self.sock = s
        close_after_fork(s)
        close_after_fork(self._ClientsInChild(self))

    def run(self) -> None:
        assert self.sock is not None
        sel = self.sel = selectors.DefaultSelector()
        sel.register(self.sock, selectors.EVENT_READ, None)
        self.backlog = select.poll()  # "is anyone waiting to be accepted?" without accepting
        self.backlog.register(self.sock, select.POLLIN)
        listening = True
        next_tick = 0.0
        while not self.stop_event.is_set():
            now = time.monotonic()
            wake = [TICK_S, next_tick - now, *(c.deadline - now for c in self.conns.values())]
            if not listening:  # at the cap: listen again once a silent connection could make room
                wake += [c.heard + SILENT_EVICT_S - now for c in self.conns.values() if not c.out]
            try:
                events = sel.select(max(0.0, min(wake)))
            except (OSError, ValueError):
                return  # closed by close()
            for key, mask in events:
                if key.data is None:
                    self._accept()
                elif key.data.sock.fileno() >= 0:  # not closed earlier in this batch to make room
                    self._service(key.data, mask)
            now = time.monotonic()
            for c in [c for c in self.conns.values() if c.deadline <= now]:
                self.log.info("status_client_dropped", error="deadline passed",
                              stage="request" if not c.out else "reply")
                self._close(c)
            want = len(self.conns) < MAX_CONNECTIONS or self._silent(now) is not None
            if listening != want and self.sock.fileno() >= 0:  # past the cap, the backlog holds the rest
                if want:
                    sel.register(self.sock, selectors.EVENT_READ, None)
                else:
                    sel.unregister(self.sock)
                listening = want
            if self.on_tick and now >= next_tick:
                next_tick = now + TICK_S
                try:
                    self.on_tick()
                except Exception:
                    self.log.exception("status_tick_failed")

    def _silent(self, now: float) -> _Conn | None:
        """The connection silent longest while sending its request, if silent ``SILENT_EVICT_S``."""
        c = min((c for c in self.conns.values() if not c.out), key=lambda c: c.heard, default=None)
        return c if c is not None and now - c.heard >= SILENT_EVICT_S else None

    def _someone_waits(self) -> bool:
        """A connection waits in the backlog: room is made only for someone (no closing for nobody)."""
        return any(ev & select.POLLIN for _, ev in self.backlog.poll(0))

    def _make_room(self) -> bool:
        """At the cap: close the longest-silent connection (see the module's docstring). Its unread
        bytes, if any, are read first: then it was not silent, and a whole request is answered."""
        while len(self.conns) >= MAX_CONNECTIONS:
            c = self._silent(time.monotonic())
            if c is None:
                return False
            heard = c.heard
            self._service(c, selectors.EVENT_READ)
            if c.sock.fileno() >= 0 and c.heard == heard and not c.out:
                self.log.info("status_client_dropped", error="silent at the connection cap",
                              silent_s=round(time.monotonic() - heard, 3))
                self._close(c)
        return True

    def _accept(self) -> None:
        assert self.sock is not None and self.sel is not None
        for _ in range(ACCEPT_BATCH):
            if len(self.conns) >= MAX_CONNECTIONS and not (self._someone_waits() and self._make_room()):
                return
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self.log.warning("status_accept_failed", error=str(e))
                return
            conn.setblocking(False)
            c = _Conn(conn, time.monotonic())
            self.conns[conn.fileno()] = c
            self.sel.register(conn, selectors.EVENT_READ, c)
            self._service(c, selectors.EVENT_READ)  # a request sent before the accept is answered now

    def _service(self, c: _Conn, mask: int) -> None:
        if mask & selectors.EVENT_READ and not c.out:
            try:
                data = c.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self.log.info("status_client_dropped", error=str(e))
                self._close(c)
                return
            if not data:
                self._close(c)  # gone before sending a whole request
                return
            c.heard = time.monotonic()
            try:
                c.frame.feed(data)
            except ProtocolError as e:
                self.log.info("status_client_dropped", error=str(e))
                self._close(c)
                return
            if c.frame.body is None:
                return
            c.out = encode_frame(self._answer(c.frame.body))
            if len(c.out) > REPLY_CAP:  # never a frame the client must refuse (it would read "no daemon")
                self.log.error("status_reply_too_large", bytes=len(c.out))
                c.out = encode_frame(StatusReply(STATUS_PROTOCOL, False,
                                                 error=f"reply of {len(c.out)} bytes exceeds the {REPLY_CAP}-byte cap"))
            c.deadline = time.monotonic() + REPLY_DEADLINE_S
        if c.out:
            try:
                sent = c.sock.send(c.out)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as e:
                self.log.info("status_client_dropped", error=str(e))
                self._close(c)
                return
            c.out = c.out[sent:]
            if not c.out:
                self._close(c)
            elif self.sel is not None:
                self.sel.modify(c.sock, selectors.EVENT_WRITE, c)

    def _answer(self, body: bytes) -> Any:
        try:
            req = msgspec.json.decode(body, type=Request)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            return StatusReply(STATUS_PROTOCOL, False, error=f"bad request: {e}")
        try:
            return self.handle(req)
        except Exception as e:
            self.log.exception("status_request_failed")
            return StatusReply(STATUS_PROTOCOL, False, error=f"internal error: {type(e).__name__}: {e}")

    def _close(self, c: _Conn) -> None:
        self.conns.pop(c.sock.fileno(), None)
        try:
            if self.sel is not None:
                self.sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()

    def close(self) -> None:
        """Stop serving and remove the socket file, if it is still the one we bound."""
        self.stop_event.set()
        if self.sock is None:
            return
        try:
            self.sock.close()
        finally:
            try:
                st = os.lstat(self.path)
                if (st.st_dev, st.st_ino) == self.inode:
                    os.unlink(self.path)
            except OSError:
                pass
