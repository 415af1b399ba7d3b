"""A real local Redis Cluster for one test: three masters and three replicas
(``redis-server --cluster-enabled yes``), all on 127.0.0.1 with free ports picked here, each in its
own directory under the test's ``tmp_path``, joined by ``redis-cli --cluster create …
--cluster-replicas 1 --cluster-yes``.

Test-sized timings: ``cluster-node-timeout`` 1000 ms, so a SIGKILLed master is replaced within a
few seconds; a planned ``CLUSTER FAILOVER`` on a replica takes well under one.

Every process inherits ``TENDER_POOL_TEST_SESSION`` (the session-end sweep of tests/conftest.py
covers them) and ``stop()`` SIGKILLs them all; the fixture calls it at teardown.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import redis

from support.sentinel import Node, free_port, wait_until

NODE_TIMEOUT_MS = 1000


def _bin(name: str) -> str:
    b = shutil.which(name)
    if not b:
        raise RuntimeError(f"{name} is not installed (apt-get install redis-server redis-tools)")
    return b


def keyslot(key: str) -> int:
    """Redis Cluster's hash slot of ``key`` (the ``{tag}`` part when it has one)."""
    from redis.crc import key_slot

    return key_slot(key.encode())


class Cluster:
    def __init__(self, root: Path, masters: int = 3, replicas: int = 1):
        self.root = root / "cluster"
        self.root.mkdir(parents=True, exist_ok=True)
        self.nodes: dict[int, Node] = {}
        for _ in range(masters * (1 + replicas)):
            port, bus = free_port(), free_port()  # the bus port given: port + 10000 may be taken or > 65535
            d = self.root / f"redis-{port}"
            d.mkdir()
            argv = [_bin("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d),
                    "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-port", str(bus),
                    "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--cluster-replica-validity-factor", "0",
                    "--appendonly", "no", "--save", "", "--repl-diskless-sync-delay", "0",
                    "--maxmemory-policy", "noeviction", "--loglevel", "notice", "--logfile", "redis.log"]
            self.nodes[port] = Node(f"redis-{port}", port, d, argv)
        self.replicas = replicas  # per master, as created; wait_ready() expects them all linked

    # --- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> "Cluster":
        for n in self.nodes.values():
            n.start()
        for n in self.nodes.values():
            wait_until(lambda: n.ping() or not n.alive(), 10, what=f"{n.name} to answer")
            if not n.alive():
                raise RuntimeError(f"{n.name} exited: {(n.dir / 'redis.log').read_text()[-2000:]}")
        addrs = [f"127.0.0.1:{p}" for p in self.nodes]
        out = subprocess.run([_bin("redis-cli"), "--cluster", "create", *addrs, "--cluster-replicas",
                              str(self.replicas), "--cluster-yes"], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {out.stdout[-2000:]} {out.stderr[-2000:]}")
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 20) -> None:
        """Every live node says ``cluster_state:ok`` with every slot assigned and all agree on which
        node owns each slot range, and every master's replicas are linked: a failover can be asked for."""
        def ready() -> bool:
            views = set()
            for n in self.nodes.values():
                if not n.alive():
                    continue
                try:
                    with n.client() as c:
                        info = c.execute_command("CLUSTER", "INFO")
                        if isinstance(info, bytes):
                            info = info.decode()
                        if "cluster_state:ok" not in str(info) or "cluster_slots_ok:16384" not in str(info):
                            return False
                        slots = c.execute_command("CLUSTER", "SLOTS")
                        views.add(tuple(sorted((int(s[0]), int(s[1]), int(s[2][1])) for s in slots)))
                except redis.RedisError:
                    return False
            if len(views) != 1:
                return False
            for port in self.masters():
                if len([r for r in self.replicas_of(port) if self.nodes[r].alive()]) < self.replicas:
                    return False
                try:
                    with self.nodes[port].client() as c:
                        info = c.info("replication")
                except redis.RedisError:
                    return False
                online = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)
                          and v.get("state") == "online"]
                if len(online) < sum(1 for p in self.replicas_of(port) if self.nodes[p].alive()):
                    return False
            return True
        wait_until(ready, timeout, interval=0.05, what="the cluster to be ready")

    def stop(self) -> None:
        for n in self.nodes.values():
            try:
                n.kill(signal.SIGKILL)
            except (OSError, subprocess.TimeoutExpired):
                pass

    # --- the view a test needs ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Every node as a startup node, masters first (any one is enough to find the rest)."""
        ports = sorted(self.nodes, key=lambda p: p not in self.masters())
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)

    def _slots(self) -> list[tuple[int, int, int, list[int]]]:
        """(first slot, last slot, master port, replica ports) as the first live node answers."""
        for n in self.nodes.values():
            if not n.alive():
                continue
            try:
                with n.client() as c:
                    return [(int(s[0]), int(s[1]), int(s[2][1]), [int(r[1]) for r in s[3:]])
                            for s in c.execute_command("CLUSTER", "SLOTS")]
            except redis.RedisError:
                continue
        raise RuntimeError("no cluster node answers")

    def masters(self) -> list[int]:
        return sorted({m for _, _, m, _ in self._slots()})

    def replicas_of(self, master: int) -> list[int]:
        return next(r for _, _, m, r in self._slots() if m == master)

    def owner(self, key: str) -> int:
        """The port of the master owning ``key``'s slot now."""
        slot = keyslot(key)
        return next(m for lo, hi, m, _ in self._slots() if lo <= slot <= hi)

    def node(self, port: int) -> Node:
        return self.nodes[port]

    def failover(self, key: str, timeout: float = 15) -> tuple[int, int]:
        """A planned ``CLUSTER FAILOVER`` on a replica of the master owning ``key``'s slot; returns
        (old, new) master ports once every live node names the new one."""
        old = self.owner(key)
        new = self.replicas_of(old)[0]
        with self.nodes[new].client() as c:
            c.execute_command("CLUSTER", "FAILOVER")
        self.wait_owner(key, new, timeout)
        return old, new

    def wait_owner(self, key: str, port: int, timeout: float = 15) -> None:
        slot = keyslot(key)

        def agreed() -> bool:
            for n in self.nodes.values():
                if not n.alive():
                    continue
                try:
                    with n.client() as c:
                        slots = c.execute_command("CLUSTER", "SLOTS")
                except redis.RedisError:
                    return False
                if not any(int(s[0]) <= slot <= int(s[1]) and int(s[2][1]) == port for s in slots):
                    return False
            return True
        wait_until(agreed, timeout, interval=0.05, what=f"every node to name {port} as the owner of {key!r}")

    def tags_on_distinct_masters(self, prefix: str, n: int) -> list[str]:
        """``n`` queue names ``<prefix>0``, ``<prefix>1``, … chosen so their hash slots are owned by
        ``n`` different masters."""
        owners: dict[int, str] = {}
        i = 0
        while len(owners) < n:
            name = f"{prefix}{i}"
            owners.setdefault(self.owner(name), name)
            i += 1
        return list(owners.values())


def started(root: Path, timeout: float = 30) -> Cluster:
    c = Cluster(root)
    t = time.monotonic()
    try:
        c.start()
    except BaseException:
        c.stop()
        raise
    if time.monotonic() - t > timeout:
        c.stop()
        raise RuntimeError("the cluster took too long to start")
    return c
