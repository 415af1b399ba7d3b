"""Helpers for the admin web's tests (not a conftest: tests/conftest.py is the one): a pool (a real
daemon on the harness's Redis) with a Client on it, the app under a test client, and a real uvicorn
on loopback for the SSE and browser tests."""

from __future__ import annotations

import re
import socket
import threading
import time
from typing import Any

from tender_pool.client import Client


def client_for(h, name: str = "a") -> Client:
    from tender_pool.store.config import load

    return Client.for_config(load(str(h.tmp / f"{name}.toml"), {}))


def csrf_of(html: str) -> str:
    m = re.search(r'<meta name="csrf-token" content="([0-9a-f]*)">', html)
    assert m, "no csrf meta in the page"
    return m.group(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """uvicorn serving ``app`` on 127.0.0.1 in a thread of this process."""

    def __init__(self, app: Any):
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    proxy_headers=False, lifespan="off",
                                                    timeout_graceful_shutdown=1))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "Server":
        self.thread.start()
        end = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > end:
                raise AssertionError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(10)
