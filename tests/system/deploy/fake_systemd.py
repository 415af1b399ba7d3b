"""A stand-in for systemd's notify socket: a datagram socket the test binds, recording what the
daemon says, in order, with the time each datagram arrived."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path


class NotifySocket:
    def __init__(self, path: Path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.lock = threading.Lock()
        self.got: list[tuple[float, dict[str, str]]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            with self.lock:
                self.got.append((time.monotonic(), fields))

    def env(self, base: dict, watchdog_s: float | None = None) -> dict:
        env = dict(base, NOTIFY_SOCKET=self.path)
        if watchdog_s:
            env["WATCHDOG_USEC"] = str(int(watchdog_s * 1e6))
        return env

    def messages(self) -> list[dict[str, str]]:
        with self.lock:
            return [m for _, m in self.got]

    def timed(self) -> list[tuple[float, dict[str, str]]]:
        with self.lock:
            return list(self.got)

    def kinds(self) -> list[str]:
        """One word per datagram: READY, RELOADING, STOPPING, WATCHDOG or STATUS."""
        out = []
        for m in self.messages():
            out.append(next((k for k in ("READY", "RELOADING", "STOPPING", "WATCHDOG") if k in m), "STATUS"))
        return out

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
