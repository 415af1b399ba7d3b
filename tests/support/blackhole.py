"""A TCP proxy in front of a test's Redis (its Unix socket) that can silently drop traffic: what a
network partition looks like to a client (no RST, no FIN; its calls time out).

``drop("both")`` discards everything in both directions (a command sent then never runs);
``drop("replies")`` forwards commands but discards replies (a command runs, its reply is lost);
``heal()`` forwards again. Threads, one pair per connection; stopped with ``close()``.
"""

from __future__ import annotations

import socket
import threading


class Blackhole:
    def __init__(self, unix_path: str):
        self.unix_path = unix_path
        self.mode = "none"  # none | both | replies
        self.srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(64)
        self.port = self.srv.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.socks: list[socket.socket] = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def drop(self, what: str = "both") -> None:
        assert what in ("both", "replies")
        self.mode = what

    def heal(self) -> None:
        self.mode = "none"

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.srv.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.unix_path)
            except OSError:
                client.close()
                continue
            self.socks += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, is_reply: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if self.mode == "both" or (self.mode == "replies" and is_reply):
                    continue  # into the hole
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.closed = True
        self.srv.close()
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass
