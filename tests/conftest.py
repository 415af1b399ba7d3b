"""Fixtures for every test: real redis-server processes and real daemons, each fully isolated.

- ``redis_server``: a private redis-server on a Unix socket in the test's temp dir (AOF on, fsync
  always so a SIGKILLed server keeps every acknowledged write); ``restart()``/``stop()``/``start()``
  for outage tests. Never the shared server on 6379.
- ``daemon``: starts ``tender-pool run`` as a subprocess with its own config: key prefix, host_id,
  status socket, no metrics port, test-sized heartbeats and timeouts.
- Every process a test starts carries ``TENDER_POOL_TEST_SESSION``; a session-end sweep kills any
  left running. With ``CI`` set, a skipped test fails the run: CI has everything.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis

from support.keyspace import keys

REPO = Path(__file__).resolve().parents[1]
JOBS = REPO / "tests" / "jobs"
SESSION = uuid.uuid4().hex
os.environ["TENDER_POOL_TEST_SESSION"] = SESSION
PYTHON = sys.executable
TENDER_POOL = str(Path(sys.executable).with_name("tender-pool"))


def wait_until(pred, timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class RedisServer:
    def __init__(self, root: Path):
        self.dir = root / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sock = str(self.dir / "redis.sock")
        self.url = f"unix://{self.sock}"
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        redis_bin = shutil.which("redis-server")
        if not redis_bin:
            pytest.fail("redis-server is not installed (apt-get install redis-server)")
        self.proc = subprocess.Popen(
            [redis_bin, "--port", "0", "--unixsocket", self.sock, "--unixsocketperm", "700",
             "--dir", str(self.dir), "--appendonly", "yes", "--appendfsync", "always", "--save", "",
             "--maxmemory-policy", "noeviction", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: self._ping(), 10, what="redis-server to answer")

    def _ping(self) -> bool:
        try:
            return redis.Redis(unix_socket_path=self.sock).ping()
        except redis.RedisError:
            return False

    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=self.sock)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)

    def restart(self, down_for: float = 0.0, sig: int = signal.SIGTERM) -> None:
        self.stop(sig)
        time.sleep(down_for)
        self.start()


@pytest.fixture
def redis_server(tmp_path):
    srv = RedisServer(tmp_path)
    yield srv
    srv.stop(signal.SIGKILL)


def write_config(path: Path, *, redis_url: str, prefix: str, host_id: str, workers: int = 2,
                 heartbeat: float = 0.5, extra: str = "", handlers: str | None = None,
                 input_roots: list[str] | None = None, state_dir: Path, tail: str = "",
                 extract: str = "", check_archive: bool = False, fence: float | str | None = None) -> Path:
    # The fence at the default test heartbeat (0.5 s) is 0.83 s: on a loaded 2-core machine the
    # housekeeper thread can be starved that long and stop healthy jobs. So tests at sub-second
    # heartbeats run without it unless they ask (fence="default": the config's own rule, or seconds);
    # the fence's own tests use heartbeat 1 s or more.
    if fence is None and heartbeat < 1:
        fence = 0
    if fence == "default":
        fence = None
    beh = f'["{PYTHON}", "{JOBS / "behave.py"}"]'
    if handlers is None:
        handlers = f"""
[handlers.behave]
command = {beh}
timeout = 10

[handlers.slow]
command = {beh}
timeout = 1.5

[handlers.long]
command = {beh}
timeout = 60

[handlers.noop]
command = ["/bin/sh", "-c", "cat >/dev/null; echo '{{}}'"]
timeout = 10
"""
    roots = ", ".join(f'"{r}"' for r in (input_roots or []))
    path.write_text(f"""
[redis]
url = "{redis_url}"
prefix = "{prefix}"
socket_timeout = 3

[pool]
worker_count = {workers}
host_id = "{host_id}"
heartbeat = {heartbeat}
kill_grace = 0.5
{f"fence = {fence}" if fence is not None else ""}
drain_timeout = 5
max_tries = 3
retry_backoff = 0.05
claim_timeout = 0.5
input_roots = [{roots}]
state_dir = "{state_dir}"
{extra}

[status]
socket = "{state_dir}/status.sock"

[metrics]
listen = ""

[extract]
check_archive = {"true" if check_archive else "false"}
{extract}
{handlers}
{tail}
""")
    return path


class Daemon:
    def __init__(self, cfg_path: Path, env: dict, log_path: Path):
        self.cfg_path = cfg_path
        self.env = env
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Daemon":
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([TENDER_POOL, "run", "-c", str(self.cfg_path)], env=self.env,
                                     stdout=self.log, stderr=self.log, start_new_session=True)
        return self

    @property
    def pid(self) -> int:
        assert self.proc
        return self.proc.pid

    def slot_pids(self) -> list[int]:
        import psutil
        try:
            return [c.pid for c in psutil.Process(self.pid).children() if "slot" in " ".join(c.cmdline())]
        except psutil.Error:
            return []

    def wait_slots(self, n: int, timeout: float = 15) -> list[int]:
        return wait_until(lambda: (lambda p: p if len(p) == n else None)(self.slot_pids()), timeout,
                          what=f"{n} slots")

    def stop(self, timeout: float = 20) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                raise
        return self.proc.returncode if self.proc else 0

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_events(self, event: str | None = None, **fields: object) -> list[dict]:
        """The daemon's JSON log lines (parsed) with this ``event`` and these field values, or with
        fields that start with a ``str`` value's text when it ends in ``*``."""
        out = []
        for line in self.logs().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict) or (event is not None and rec.get("event") != event):
                continue
            if all(str(rec.get(k, "")).startswith(v[:-1]) if isinstance(v, str) and v.endswith("*")
                   else rec.get(k, object()) == v for k, v in fields.items()):
                out.append(rec)
        return out


class Harness:
    """One test's world: a Redis, a prefix, and helpers to start daemons and submit jobs."""

    def __init__(self, tmp_path: Path, redis_server: RedisServer):
        self.tmp = tmp_path
        self.redis = redis_server
        self.prefix = "t" + uuid.uuid4().hex[:8]
        self.r = redis_server.client()
        self.daemons: list[Daemon] = []
        self.records = tmp_path / "records"
        self.records.mkdir()
        self.faults = tmp_path / "faults"
        self.faults.mkdir()
        self.k = keys(self.prefix)
        self._queues: dict = {}
        self._clients: dict = {}

    def config(self, name: str = "a", **kw) -> Path:
        state = self.tmp / f"state-{name}"
        state.mkdir(exist_ok=True)
        return write_config(self.tmp / f"{name}.toml", redis_url=self.redis.url, prefix=self.prefix,
                            host_id=kw.pop("host_id", f"h{name}-{self.prefix}"), state_dir=state, **kw)

    def env(self, faults: str = "") -> dict:
        env = dict(os.environ)
        env.pop("TENDER_PARSE_WORKER_COUNT", None)
        env.pop("TENDER_POOL_REDIS_URL", None)
        if faults:
            env["TENDER_POOL_FAULTS"] = faults
            env["TENDER_POOL_FAULT_DIR"] = str(self.faults)
        return env

    def daemon(self, name: str = "a", faults: str = "", start: bool = True, **kw) -> Daemon:
        cfg = self.tmp / f"{name}.toml"
        if kw or not cfg.exists():
            cfg = self.config(name, **kw)
        d = Daemon(cfg, self.env(faults), self.tmp / f"daemon-{name}.log")
        self.daemons.append(d)
        return d.start() if start else d

    def client(self, name: str = "a"):
        """The producer's view of daemon ``name``'s pool: a ``Client`` for its config, the one path
        that submits, cancels and retries jobs (built on first use, from the file as it is then).
        As the platform builds one (``Client(url, prefix, queue, …)``), it does not know the configured
        kinds: tests that drive the scripts by hand submit kinds no handler is configured for."""
        if name not in self._clients:
            from tender_pool.client import Client
            from tender_pool.store.config import load
            cfg = load(str(self.tmp / f"{name}.toml"), {})
            r = cfg.redis
            self._clients[name] = Client(
                r.url, r.prefix, cfg.pool.queue, replicas=r.wait_replicas or 0, wait_timeout=r.wait_timeout,
                retention_s=cfg.pool.result_retention, lock_ttl_ms=cfg.lock_ttl_ms,
                status_socket=cfg.status.socket or None, socket_timeout=r.socket_timeout, config=cfg)
        return self._clients[name]

    def queue(self, name: str = "a"):
        """The slot's side of the same pool (``slots.queue.Queue``: claim, take, settle, requeue), for
        tests that drive the scripts a slot or the housekeeper runs."""
        if name not in self._queues:
            from tender_pool.slots.queue import Queue
            from tender_pool.store.config import load
            from tender_pool.store.connection import connect
            cfg = load(str(self.tmp / f"{name}.toml"), {})
            self._queues[name] = Queue(connect(cfg.redis.url), keys(cfg.redis.prefix, cfg.pool.queue))
        return self._queues[name]

    def cli(self, *args: str, name: str = "a", timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run([TENDER_POOL, *args, "-c", str(self.tmp / f"{name}.toml")], env=self.env(),
                              capture_output=True, text=True, timeout=timeout)

    def submit(self, kind: str = "behave", user: str = "u1", payload: dict | None = None, name: str = "a", *,
               id: str | None = None, after: list[str] = (), priority: str = "bulk") -> str:
        """Submit through the client (``Client.submit``, as the CLI and the platform do); the job's id."""
        return self.client(name).submit(user, kind, payload or {}, job_id=id, after=after, priority=priority).id

    def job(self, jid: str, name: str = "a"):
        """The job's record (``JobRecord``: tokens, counters) or None."""
        return self.client(name).record(jid)

    def wait_state(self, jid: str, states=("completed",), timeout: float = 20, name: str = "a"):
        def done():
            j = self.job(jid, name)
            return j if j and j.state.value in states else None
        try:
            return wait_until(done, timeout, what=f"job {jid} in {states}")
        except AssertionError:
            j = self.job(jid, name)
            raise AssertionError(f"job {jid} is {j and j.state.value}: {j}\n--- logs ---\n" +
                                 "\n".join(d.logs()[-3000:] for d in self.daemons))

    def fault_pid(self, name: str, timeout: float = 15) -> int:
        f = self.faults / name
        wait_until(lambda: f.exists() and f.read_text(), timeout, what=f"fault {name}")
        pid = int(f.read_text())
        import psutil
        wait_until(lambda: psutil.Process(pid).status() == psutil.STATUS_STOPPED, 5, what="SIGSTOP")
        return pid

    def close(self) -> None:
        for c in self._clients.values():
            c.close()
        for d in self.daemons:
            if d.proc and d.proc.poll() is None:
                try:
                    os.killpg(d.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                d.proc.wait(10)


@pytest.fixture
def h(tmp_path, redis_server):
    harness = Harness(tmp_path, redis_server)
    yield harness
    harness.close()


# --- the extraction corpus and the Java CLI (shared by tests/extract and tests/system/integration) ---

import json  # noqa: E402


def _fail_or_skip(msg: str):
    # On CI a missing corpus or jar is a broken setup, not a reason to go green.
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    d = Path(os.environ.get("TENDER_POOL_CORPUS") or REPO.parent / "shared" / "corpus")
    if not (d / "manifest.json").is_file():  # never a silent skip: the corpus tests would shrink to nothing
        pytest.fail(f"test corpus not found at {d} (set TENDER_POOL_CORPUS)")
    return d


@pytest.fixture(scope="session")
def manifest(corpus_dir: Path) -> dict[str, dict]:
    data = json.loads((corpus_dir / "manifest.json").read_text(encoding="utf-8"))
    return {Path(e["file"]).name: e for e in data["files"]}


@pytest.fixture(scope="session")
def jvm_build() -> Path:
    """Runs jvm/build.sh once per session (idempotent, ~0.2 s when up to date) and returns the jar dir."""
    script = REPO / "jvm" / "build.sh"
    try:
        r = subprocess.run([str(script)], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        _fail_or_skip(f"jvm/build.sh could not run: {e}")
    if r.returncode != 0:
        _fail_or_skip(f"jvm/build.sh failed (is openjdk-17-jdk / libapache-poi-java installed?):\n{r.stderr[-2000:]}")
    jar = next((line.split(": ", 1)[1] for line in r.stdout.splitlines() if line.startswith("jar: ")), None)
    if not jar or not Path(jar).is_file():
        _fail_or_skip(f"jvm/build.sh printed no jar:\n{r.stdout}")
    return Path(jar).parent


_skipped: list[str] = []


def pytest_runtest_logreport(report):
    # A strict xfail is a known, stated defect that fails when fixed, not a skip: it stays allowed.
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    # Session-end sweep: kill whatever a test left running (daemons, slots, jobs, redis-servers).
    me = os.getpid()
    needle = f"TENDER_POOL_TEST_SESSION={SESSION}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0"):
                os.kill(int(d.name), signal.SIGKILL)
        except OSError:
            pass
    if os.environ.get("CI") and _skipped:
        print(f"\nCI is set and {len(_skipped)} test(s) were skipped: {_skipped}", file=sys.stderr)
        session.exitstatus = 1


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size, name)`` → a tmpfs of our own mounted under the test's directory (a real file
    system to fill up or remount read-only); unmounted at teardown. Needs root and mount(2)."""
    mounted: list[Path] = []

    def make(size: str = "1m", name: str = "fs") -> Path:
        mnt = tmp_path / name
        mnt.mkdir()
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            pytest.fail(f"this test needs root and mount(2): {res.stderr}")
        mounted.append(mnt)
        return mnt

    yield make
    for mnt in mounted:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
