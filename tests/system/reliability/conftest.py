"""Fixtures for the reliability tests: a real Sentinel set, a harness whose daemons use it, and a
TCP proxy that can black-hole traffic. The processes are in tests/support/; each test gets its own
ports and directories and everything is killed at teardown."""

from __future__ import annotations

import pytest
from conftest import Harness  # tests/conftest.py (this directory is a package, so no shadowing)
from support.proxy import Proxy
from support.sentinel import SentinelSet


@pytest.fixture
def make_sentinels(tmp_path):
    """``make_sentinels(replicas=1)`` → a started SentinelSet (a primary, replicas, 3 Sentinels)."""
    made: list[SentinelSet] = []

    def make(replicas: int = 1) -> SentinelSet:
        s = SentinelSet(tmp_path / f"set{len(made)}", replicas=replicas)
        made.append(s)
        return s.start()

    yield make
    for s in made:
        s.stop()


@pytest.fixture
def sentinels(make_sentinels) -> SentinelSet:
    return make_sentinels()


class _SentinelServer:
    """What Harness needs of a server: the URL daemons get, and a client for the test's own reads."""

    def __init__(self, sentinels: SentinelSet):
        self.sentinels = sentinels
        self.url = sentinels.url

    def client(self):
        from tender_pool.store.connection import connect

        return connect(self.url, 3)


@pytest.fixture
def sh(tmp_path, sentinels):
    """The ``h`` harness of tests/conftest.py, with every daemon and the test on the Sentinel URL."""
    harness = Harness(tmp_path, _SentinelServer(sentinels))  # type: ignore[arg-type]
    yield harness
    harness.close()


@pytest.fixture
def make_proxy():
    """``make_proxy(target)`` → a started Proxy to ``(host, port)`` or a Unix socket path."""
    made: list[Proxy] = []

    def make(target) -> Proxy:
        p = Proxy(target)
        made.append(p)
        return p

    yield make
    for p in made:
        p.stop()
