"""Issue 22, "Beyond one Redis: Redis Cluster": a ``redis+cluster://`` URL runs the pool on a real
local cluster (3 masters, 3 replicas, tests/support/cluster.py), one daemon per queue, every key of a
queue in its hash slot.

- the core flow through a daemon and the client: submit, run, settle, history, a run watched
  through ``events`` and ``aevents``, status from Redis;
- a slot SIGKILLed mid-job: the job completes once, on its second attempt;
- the master owning the queue's slot failed over (``CLUSTER FAILOVER`` on its replica) while jobs
  run: every acknowledged job completes, none starts again after it completed;
- two queues whose slots two different masters own: two daemons, both work, each queue's keys on
  its own master only.

One cluster serves the whole module (it takes seconds to form); each test has its own key prefix
and, where it fails a master over, finds the owner afresh.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
import uuid

import pytest
import redis
from conftest import Harness, wait_until
from support.cluster import Cluster, keyslot, started

from tender_pool.client import Client
from tender_pool.slots.connection import connect
from tender_pool.slots.queue import Queue
from tender_pool.supervisor.config import load
from tender_pool.supervisor.types import SubmitRequest


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = started(tmp_path_factory.mktemp("cluster"))
    yield c
    c.stop()


class _ClusterServer:
    """What Harness needs of a server: the URL daemons get, and a client for the test's own reads."""

    def __init__(self, cluster: Cluster):
        self.url = cluster.url

    def client(self):
        return connect(self.url, 3)


@pytest.fixture
def ch(tmp_path, cluster):
    """The ``h`` harness of tests/conftest.py with every daemon and the test on the cluster URL."""
    harness = Harness(tmp_path, _ClusterServer(cluster))  # type: ignore[arg-type]
    yield harness
    harness.close()


def _queue_cfg(name: str) -> str:
    return f'queue = "{name}"'


def _attempts(record, jid) -> list[tuple[int, float, float | None]]:
    """(attempt, start, end or None) per handler start of ``jid`` (behave.py's records)."""
    out = []
    for f in record.glob(f"{jid}.*.start"):
        n = int(f.name.split(".")[-2])
        end = record / f"{jid}.{n}.end"
        out.append((n, json.loads(f.read_text())["t"], json.loads(end.read_text())["t"] if end.exists() else None))
    return sorted(out)


@pytest.mark.timeout(60)
def test_core_flow_through_a_daemon_and_the_client(ch, cluster):
    # Given a daemon whose only Redis address is the cluster URL
    d = ch.daemon(workers=2)
    d.wait_slots(2)
    client = Client(cluster.url, prefix=ch.prefix, socket_timeout=3)
    try:
        # When jobs are submitted through the client and the harness's Queue
        jobs = [client.submit(f"u{i}", "behave", {"record": str(ch.records)}) for i in range(3)]
        jids = [j.id for j in jobs] + [ch.submit("noop", user="u9")]
        # Then they run and settle, and their records are on the master owning the queue's slot only
        for jid in jids:
            assert client.wait(jid, timeout=20).state == "completed"
        owner = cluster.owner("tender_parse")
        for port in cluster.masters():
            with cluster.node(port).client() as c:
                ours = {k.decode() for k in c.scan_iter(match=f"{ch.prefix}:*", count=1000)}
            if port == owner:
                assert {f"{ch.prefix}:{{tender_parse}}:job:{jid}" for jid in jids} <= ours
            else:
                assert not ours, (port, sorted(ours)[:5])
        # history pages them
        page = client.history(page_size=10)
        assert {i.id for i in page.items} >= set(jids) and page.total >= len(jids)
        # a run, watched while it runs through events (sync) and aevents (asyncio cluster client)
        run = client.submit_run("ru", "behave", [{"key": f"k{i}", "payload": {"sleep": 0.05}} for i in range(3)])
        seen = [e.type for e in client.events(run.id, block_ms=200)]
        assert seen[0] == "snapshot" and seen.count("job_completed") == 3 and seen[-1] == "run_finished"

        async def watch():
            return [e.type async for e in client.aevents(run.id, since="0", block_ms=200)]
        assert asyncio.run(watch())[-1] == "run_finished"
        assert client.run(run.id).state == "completed"
        # status from Redis alone (no local socket): the daemon's two slots
        st = Client(cluster.url, prefix=ch.prefix, socket_timeout=3).status()
        assert st.redis_ok and st.online == 2
    finally:
        client.close()
