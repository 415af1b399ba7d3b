"""A real Sentinel-managed Redis set for one test: a primary, ``replicas`` replicas and three
Sentinels (``redis-server --sentinel``), all on 127.0.0.1 with free ports picked here (Sentinel does
not monitor over Unix sockets), each in its own directory under the test's ``tmp_path``.

Test-sized timings: ``down-after-milliseconds`` 400, ``failover-timeout`` 2000. The Sentinels are
started already knowing each other and the replicas (``known-sentinel``/``known-replica`` with fixed
``myid``s), so the set is ready in well under a second instead of after the 2 s hello rounds.

Every process inherits ``TENDER_POOL_TEST_SESSION`` (the session-end sweep covers them) and
``stop()`` SIGKILLs them all; the fixture calls it at teardown.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import redis

SERVICE = "mymaster"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 2000


def wait_until(pred, timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    """The same contract as tests/conftest.py's ``wait_until`` (that module cannot be imported from
    here reliably: every conftest.py outside a package is the module ``conftest``)."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _redis_bin() -> str:
    b = shutil.which("redis-server")
    if not b:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
    return b


class Node:
    """One redis-server process (data node or Sentinel) on a fixed port."""

    def __init__(self, name: str, port: int, dir: Path, argv: list[str]):
        self.name, self.port, self.dir, self.argv = name, port, dir, argv
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.dir / "stderr.log", "ab")
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=log, cwd=self.dir)
        log.close()

    def client(self, **kw) -> redis.Redis:
        return redis.Redis("127.0.0.1", self.port, socket_timeout=2, socket_connect_timeout=2, **kw)

    def alive(self) -> bool:
        return bool(self.proc and self.proc.poll() is None)

    def ping(self) -> bool:
        try:
            with self.client() as c:
                return bool(c.ping())
        except redis.RedisError:
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive():
            self.proc.send_signal(sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                self.proc.wait(10)


class SentinelSet:
    def __init__(self, root: Path, replicas: int = 1):
        self.root = root / "sentinel-set"
        self.root.mkdir(parents=True, exist_ok=True)
        self.nodes: dict[int, Node] = {}  # data nodes by port
        self.sentinels: list[Node] = []
        self.switches: list[tuple[float, int]] = []  # (monotonic time, new primary port) per +switch-master
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        ports = [free_port() for _ in range(1 + replicas)]
        self.first_primary = ports[0]
        for i, port in enumerate(ports):
            d = self.root / f"redis-{port}"
            d.mkdir()
            argv = [_redis_bin(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d),
                    "--appendonly", "no", "--save", "", "--repl-diskless-sync-delay", "0",
                    "--maxmemory-policy", "noeviction", "--loglevel", "notice", "--logfile", "redis.log"]
            if i:
                argv += ["--replicaof", "127.0.0.1", str(ports[0])]
            self.nodes[port] = Node(f"redis-{port}", port, d, argv)
        ids = [f"{i + 1:040x}" for i in range(3)]
        sports = [free_port() for _ in range(3)]
        for i, (sid, sport) in enumerate(zip(ids, sports)):
            d = self.root / f"sentinel-{sport}"
            d.mkdir()
            lines = [f"port {sport}", "bind 127.0.0.1", f"dir {d}", "logfile sentinel.log",
                     f"sentinel myid {sid}",
                     f"sentinel monitor {SERVICE} 127.0.0.1 {ports[0]} 2",
                     f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
                     f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
                     f"sentinel parallel-syncs {SERVICE} 1"]
            lines += [f"sentinel known-replica {SERVICE} 127.0.0.1 {p}" for p in ports[1:]]
            lines += [f"sentinel known-sentinel {SERVICE} 127.0.0.1 {op} {oid}"
                      for oid, op in zip(ids, sports) if op != sport]
            conf = d / "sentinel.conf"
            conf.write_text("\n".join(lines) + "\n")
            self.sentinels.append(Node(f"sentinel-{sport}", sport, d, [_redis_bin(), str(conf), "--sentinel"]))

    # --- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> "SentinelSet":
        for n in self.nodes.values():
            n.start()
        for n in self.nodes.values():
            wait_until(lambda: n.ping() or not n.alive(), 10, what=f"{n.name} to answer")
            if not n.alive():
                raise RuntimeError(f"{n.name} exited: {(n.dir / 'redis.log').read_text()[-2000:]}")
        for s in self.sentinels:
            s.start()
        self.wait_ready()
        self._watcher = threading.Thread(target=self._watch_switches, daemon=True, name="switch-watch")
        self._watcher.start()
        return self

    def wait_ready(self, timeout: float = 15) -> None:
        """Every Sentinel names the same primary with all replicas up and both other Sentinels known,
        and every replica's link to it is up: a failover can be asked for."""
        def ready() -> bool:
            addrs = set()
            for s in self.sentinels:
                try:
                    with s.client() as c:
                        m = c.sentinel_master(SERVICE)
                except redis.RedisError:
                    return False
                if m["num-other-sentinels"] != 2 or m["num-slaves"] != len(self.nodes) - 1 or not m["is_master"]:
                    return False
                addrs.add(m["port"])
            if len(addrs) != 1:
                return False
            primary = addrs.pop()
            try:  # the primary's view: a replica counts for WAIT once it is "online" (acked once)
                with self.nodes[primary].client() as c:
                    info = c.info("replication")
            except redis.RedisError:
                return False
            online = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)
                      and v.get("state") == "online"]
            if len(online) != sum(1 for p, n in self.nodes.items() if p != primary and n.alive()):
                return False
            for port, n in self.nodes.items():
                if port == primary or not n.alive():
                    continue
                try:
                    with n.client() as c:
                        info = c.info("replication")
                except redis.RedisError:
                    return False
                if info.get("master_port") != primary or info.get("master_link_status") != "up":
                    return False
            return True
        wait_until(ready, timeout, interval=0.05, what="the Sentinel set to be ready")

    def stop(self) -> None:
        self._stop.set()
        for n in [*self.sentinels, *self.nodes.values()]:
            try:
                n.kill(signal.SIGKILL)
            except (OSError, subprocess.TimeoutExpired):
                pass

    def _watch_switches(self) -> None:
        """Record the moment of every ``+switch-master``, as the first Sentinel to announce it does
        (the leader; the others repeat it once its hello messages reach them)."""
        subs = []
        while not self._stop.is_set():
            try:
                if not subs:
                    for s in self.sentinels:
                        ps = s.client().pubsub()
                        ps.subscribe("+switch-master")
                        subs.append(ps)
                for ps in subs:
                    msg = ps.get_message(ignore_subscribe_messages=True, timeout=0.02)
                    if msg:  # "<name> <old ip> <old port> <new ip> <new port>"
                        t, port = time.monotonic(), int(msg["data"].split()[-1])
                        if not any(p == port and abs(t - t0) < 10 for t0, p in self.switches):
                            self.switches.append((t, port))
            except redis.RedisError:  # a Sentinel the test killed: go on with the others
                for ps in subs:
                    try:
                        ps.close()
                    except redis.RedisError:
                        pass
                subs = []
                time.sleep(0.1)
        for ps in subs:
            ps.close()

    # --- the view a test needs ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def primary_port(self) -> int:
        """The primary as the Sentinels' majority names it now."""
        seen = []
        for s in self.sentinels:
            try:
                with s.client() as c:
                    seen.append(int(c.sentinel_get_master_addr_by_name(SERVICE)[1]))
            except (redis.RedisError, TypeError):
                pass
        return max(set(seen), key=seen.count)

    def node(self, port: int) -> Node:
        return self.nodes[port]

    def client(self) -> redis.Redis:
        """A plain client to the current primary (not following a failover)."""
        return self.nodes[self.primary_port()].client()

    def failover(self, timeout: float = 15) -> tuple[int, int]:
        """A planned ``SENTINEL FAILOVER``; returns (old, new) primary ports once every Sentinel
        names the new one."""
        old = self.primary_port()
        with self.sentinels[0].client() as c:
            c.execute_command("SENTINEL", "FAILOVER", SERVICE)
        return old, self.wait_switch(old, timeout)

    def kill_primary(self, timeout: float = 20) -> tuple[int, int]:
        """SIGKILL the primary; returns (old, new) once every Sentinel names the promoted replica."""
        old = self.primary_port()
        self.nodes[old].kill(signal.SIGKILL)
        return old, self.wait_switch(old, timeout)

    def wait_switch(self, old: int, timeout: float = 15) -> int:
        def switched():
            ports = set()
            for s in self.sentinels:
                try:
                    with s.client() as c:
                        ports.add(int(c.sentinel_get_master_addr_by_name(SERVICE)[1]))
                except (redis.RedisError, TypeError):
                    return None
            return ports.pop() if len(ports) == 1 and old not in ports else None
        return wait_until(switched, timeout, interval=0.05, what=f"Sentinels to leave primary {old}")

    def switch_time(self, new: int, timeout: float = 5) -> float:
        """Monotonic time of the ``+switch-master`` that named ``new``."""
        return wait_until(lambda: next((t for t, p in self.switches if p == new), None), timeout,
                          what=f"+switch-master to {new}")
