"""A Client on a private redis-server, and runs moved by ``fakeslot.FakeSlot``."""

from __future__ import annotations

import uuid

import pytest

from tender_pool.client import Client

from .fakeslot import FakeSlot


@pytest.fixture
def client(redis_server):
    c = Client(redis_server.url, prefix="c" + uuid.uuid4().hex[:8], socket_timeout=3)
    yield c
    c.close()


@pytest.fixture
def make_run(client):
    def make(n: int = 3, user: str = "u1", kind: str = "k", **kw):
        run = client.submit_run(user, kind, [{"key": f"s{i + 1}", "payload": {"i": i}} for i in range(n)], **kw)
        return run, FakeSlot(client, run.id)
    return make
