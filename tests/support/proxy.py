"""A TCP proxy a test can partition: ``pause()`` black-holes traffic (connections stay open, bytes
are neither forwarded nor answered: what a dropped route looks like to both ends), ``resume()``
lets what queued meanwhile flow on (TCP retransmits after a healed partition), ``cut()`` closes
every connection at once (RST), like a restarted middlebox.

One thread with a selector; ``stop()`` (the fixture's teardown) closes everything and joins it.
The target is ``(host, port)`` or a Unix socket path, so a daemon can reach the tests' Unix-socket
Redis through ``redis://127.0.0.1:<proxy.port>``.
"""

from __future__ import annotations

import selectors
import socket
import struct
import threading
import time
from contextlib import contextmanager
from typing import Iterator

CHUNK = 65536


class _Pipe:
    """One accepted connection and its upstream: a buffer of bytes owed to each side."""

    def __init__(self, down: socket.socket, up: socket.socket):
        self.down, self.up = down, up
        self.owed = {down: bytearray(), up: bytearray()}  # bytes to write to that socket

    def peer(self, s: socket.socket) -> socket.socket:
        return self.up if s is self.down else self.down


class Proxy:
    def __init__(self, target: tuple[str, int] | str, listen_port: int = 0):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", listen_port))
        self.listener.setblocking(False)
        self.port: int = self.listener.getsockname()[1]
        self.paused = False
        self.forwarded = 0  # bytes, both directions
        self.accepted = 0
        self._pipes: dict[socket.socket, _Pipe] = {}
        self._sel = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._stop = False
        self._pending_cut = False
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"proxy-{self.port}")
        self._sel.register(self.listener, selectors.EVENT_READ)
        self._sel.register(self._wake_r, selectors.EVENT_READ)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def connections(self) -> int:
        with self._lock:
            return len({id(p) for p in self._pipes.values()})

    # --- control (any thread) --------------------------------------------------------------------

    def pause(self) -> None:
        """Black-hole: stop reading and writing on every connection, old and new, without closing."""
        with self._lock:
            self.paused = True
        self._wake()

    def resume(self) -> None:
        with self._lock:
            self.paused = False
        self._wake()

    def cut(self) -> None:
        """Close every current connection with a reset; new ones are accepted as before."""
        with self._lock:
            self._pending_cut = True
        self._wake()
        deadline = time.monotonic() + 5
        while self._pending_cut and time.monotonic() < deadline:
            time.sleep(0.005)

    @contextmanager
    def partitioned(self, seconds: float) -> Iterator[None]:
        """``with proxy.partitioned(20):`` black-holes for the block, and at least ``seconds``."""
        end = time.monotonic() + seconds
        self.pause()
        try:
            yield
            time.sleep(max(0.0, end - time.monotonic()))
        finally:
            self.resume()

    def stop(self) -> None:
        self._stop = True
        self._wake()
        self._thread.join(5)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    # --- the loop (proxy thread) -------------------------------------------------------------------

    def _interest(self, s: socket.socket, pipe: _Pipe) -> int:
        if self.paused:
            return 0
        ev = selectors.EVENT_READ if len(pipe.owed[pipe.peer(s)]) < 4 * CHUNK else 0
        if pipe.owed[s]:
            ev |= selectors.EVENT_WRITE
        return ev

    def _update(self, s: socket.socket) -> None:
        pipe = self._pipes.get(s)
        if pipe is None:
            return
        ev = self._interest(s, pipe)
        try:
            key = self._sel.get_key(s)
        except KeyError:
            key = None
        if ev and key is None:
            self._sel.register(s, ev)
        elif ev and key.events != ev:
            self._sel.modify(s, ev)
        elif not ev and key is not None:
            self._sel.unregister(s)

    def _accept(self) -> None:
        try:
            down, _ = self.listener.accept()
        except BlockingIOError:
            return
        try:
            if isinstance(self.target, str):
                up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                up.connect(self.target)
            else:
                up = socket.create_connection(self.target, timeout=2)
        except OSError:
            down.close()  # nothing behind us: the client sees a closed connection
            return
        for s in (down, up):
            s.setblocking(False)
        pipe = _Pipe(down, up)
        with self._lock:
            self._pipes[down] = self._pipes[up] = pipe
            self.accepted += 1
        self._update(down)
        self._update(up)

    def _close(self, pipe: _Pipe, reset: bool = False) -> None:
        with self._lock:
            for s in (pipe.down, pipe.up):
                self._pipes.pop(s, None)
        for s in (pipe.down, pipe.up):
            try:
                self._sel.unregister(s)
            except (KeyError, ValueError):
                pass
            try:
                if reset:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
            except OSError:
                pass

    def _flush(self, s: socket.socket, pipe: _Pipe) -> None:
        try:
            s.settimeout(1.0)
            s.sendall(pipe.owed[s])
        except OSError:
            pass
        pipe.owed[s].clear()

    def _io(self, s: socket.socket, events: int) -> None:
        pipe = self._pipes.get(s)
        if pipe is None:
            return
        try:
            if events & selectors.EVENT_READ:
                data = s.recv(CHUNK)
                if not data:  # EOF: what that side sent before closing still goes through
                    self._flush(pipe.peer(s), pipe)
                    self._close(pipe)
                    return
                pipe.owed[pipe.peer(s)] += data
                self.forwarded += len(data)
                self._update(pipe.peer(s))
            if events & selectors.EVENT_WRITE and pipe.owed[s]:
                n = s.send(pipe.owed[s])
                del pipe.owed[s][:n]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._close(pipe)
            return
        self._update(s)
        self._update(pipe.peer(s))

    def _run(self) -> None:
        was_paused = False
        while not self._stop:
            if self._pending_cut:
                for pipe in {id(p): p for p in list(self._pipes.values())}.values():
                    self._close(pipe, reset=True)
                self._pending_cut = False
            if self.paused != was_paused:
                was_paused = self.paused
                for s in list(self._pipes):
                    self._update(s)
            for key, events in self._sel.select(timeout=0.2):
                s = key.fileobj
                if s is self._wake_r:
                    self._wake_r.recv(4096)
                elif s is self.listener:
                    self._accept()
                else:
                    self._io(s, events)  # type: ignore[arg-type]
        for pipe in {id(p): p for p in list(self._pipes.values())}.values():
            self._close(pipe)
        for s in (self.listener, self._wake_r, self._wake_w):
            s.close()
        self._sel.close()
