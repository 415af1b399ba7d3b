"""The systems bench/compare runs, each behind one small interface (harness side, our venv):

    start(recovery)   launch its 4 workers (own sessions), ``recovery`` "default" or "best"
    roots()           the pids launched (the process trees measured)
    enqueue(kind, n)  queue n jobs as fast as its client goes;  paced(kind, n, rate): at rate/s
    done() / records()  finished jobs / (enqueue s, start s, end s, pid) per finished job
    victim()          (pid running the long job, pids to SIGKILL) once it runs;  reran(): its 2nd start
    stop()

Peers' jobs record themselves with one marker write (``mark.py``); ours are read from the job hashes
(Redis TIME, ms). Peers' producers run in the peers' venv (``peerctl.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import redis

from measure import kill_group

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PEERS_PY = REPO / "bench" / ".venv-peers" / "bin" / "python"
ARQ_PY = REPO / "bench" / ".venv-peers" / "arq" / "bin" / "python"  # ARQ wants redis-py < 6, Celery >= 6.4
LAUNCHED: list[subprocess.Popen] = []  # every worker process started, for the harness's last cleanup


class Peer:
    py = PEERS_PY
    share = 1  # runs 1/share of the jobs: RQ forks per job, ARQ polls every 0.5 s

    def __init__(self, name: str, sock: str, tmp: Path):
        self.name, self.sock, self.tmp = name, sock, tmp
        self.r = redis.Redis(unix_socket_path=sock)
        self.procs: list[tuple[list[str], dict, subprocess.Popen]] = []
        self.recovery = "default"
        self.restarted = 0

    # --- processes --------------------------------------------------------------------------------
    def env(self, extra: dict | None = None) -> dict:
        e = dict(os.environ, BENCH_REDIS_SOCK=self.sock, PYTHONPATH=str(HERE), BENCH_RECOVERY=self.recovery,
                 BENCH_TAG=self.name, BENCH_ARQ_QUEUE=f"arq:queue:{self.name}")
        e.pop("VIRTUAL_ENV", None)
        e.update(extra or {})
        return e

    def commands(self) -> list[tuple[list[str], dict]]:
        raise NotImplementedError

    def launch(self, argv: list[str], extra: dict) -> subprocess.Popen:
        log = open(self.tmp / f"{self.name}.log", "ab")
        p = subprocess.Popen(argv, env=self.env(extra), cwd=HERE, stdout=log, stderr=log, start_new_session=True)
        LAUNCHED.append(p)
        return p

    def start(self, recovery: str = "default") -> None:
        self.recovery = recovery
        self.procs = [(argv, extra, self.launch(argv, extra)) for argv, extra in self.commands()]

    def supervise(self) -> None:
        """Restart a launched process that exited, as systemd's Restart=always would (Dramatiq's main
        process exits when one of its workers dies; an ARQ process is one worker)."""
        for i, (argv, extra, p) in enumerate(self.procs):
            if p.poll() is not None:
                self.procs[i] = (argv, extra, self.launch(argv, extra))
                self.restarted += 1

    def roots(self) -> list[int]:
        return [p.pid for _, _, p in self.procs]

    def stop(self) -> None:
        for _, _, p in self.procs:
            kill_group(p.pid, signal.SIGKILL)  # measured already; a graceful stop is not under test
        for _, _, p in self.procs:
            p.wait(30)
        self.procs = []

    # --- jobs -------------------------------------------------------------------------------------
    def ctl(self, *args: str) -> None:
        subprocess.run([str(self.py), str(HERE / "peerctl.py"), *args], env=self.env(), cwd=HERE, check=True,
                       stdout=subprocess.DEVNULL)

    def enqueue(self, kind: str, n: int) -> None:
        self.ctl("enqueue", self.system, kind, str(n))

    def paced(self, kind: str, n: int, rate: float) -> None:
        self.ctl("paced", self.system, kind, str(n), str(rate))

    def done(self) -> int:
        return self.r.llen(f"bench:marks:{self.name}")

    def records(self) -> list[tuple[float, float, float, int]]:
        out = []
        for line in self.r.lrange(f"bench:marks:{self.name}", 0, -1):
            a, b, c, pid = line.split()
            out.append((float(a), float(b), float(c), int(pid)))
        return out

    def starts(self) -> list[tuple[float, int]]:
        return [(float(x.split()[1]), int(x.split()[2])) for x in self.r.lrange(f"bench:starts:{self.name}", 0, -1)]

    def enqueue_long(self) -> None:
        self.enqueue("long", 1)

    def victim(self) -> tuple[int, list[int]] | None:
        s = self.starts()
        return (s[0][1], [s[0][1]]) if s else None

    def reran(self) -> float | None:
        s = self.starts()
        return s[1][0] if len(s) > 1 else None

    def reset(self) -> None:
        self.r.flushall()


class Dramatiq(Peer):
    system = "dramatiq"
    label = "Dramatiq 4 proc × 1 thread"
    settings = {"default": "heartbeat_timeout 60 s, maintenance_chance 1/1000",
                "best": "heartbeat_timeout=5000 ms, maintenance_chance=1000000"}

    def commands(self):
        return [([str(PEERS_PY), "-m", "dramatiq", "jobs_dramatiq", "-p", "4", "-t", "1"], {})]


class Celery(Peer):
    system = "celery"
    label = "Celery prefork -c 4"
    settings = {"default": "acks before run", "best": "task_acks_late + task_reject_on_worker_lost"}

    def commands(self):
        return [([str(PEERS_PY), "-m", "celery", "-A", "jobs_celery", "worker", "-c", "4", "-P", "prefork", "-l",
                  "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"], {})]


class Rq(Peer):
    system = "rq"
    share = 4
    label = "RQ worker-pool -n 4"
    settings = {"default": "maintenance_interval 600 s, no Retry",
                "best": "Retry(max=3), maintenance_interval=1, job_monitoring_interval=1"}

    def commands(self):
        argv = [str(PEERS_PY), "-m", "rq.cli", "worker-pool", "-n", "4", "-u", f"unix://{self.sock}", "-l", "WARNING"]
        if self.recovery == "best":
            argv += ["-w", "jobs_rq.QuickRecoveryWorker"]
        return [(argv + ["default"], {})]

    def victim(self):
        """The job runs in a work horse forked per job: SIGKILL it and the worker that forked it."""
        v = super().victim()
        if v is None:
            return None
        try:
            parent = psutil.Process(v[0]).ppid()
        except psutil.NoSuchProcess:
            return v
        return v[0], [v[0], parent]


class Arq(Peer):
    system = "arq"
    py = ARQ_PY
    share = 20
    settings = {"default": "job_timeout 300 s (in-progress key 310 s)", "best": "job_timeout=5 (in-progress key 15 s)"}

    def __init__(self, name, sock, tmp, procs: int, max_jobs: int):
        super().__init__(name, sock, tmp)
        self.n_procs, self.max_jobs = procs, max_jobs
        self.label = f"ARQ {procs} proc × max_jobs={max_jobs}"

    def commands(self):
        arq = str(ARQ_PY.with_name("arq"))
        return [([arq, "jobs_arq.WorkerSettings"], {"BENCH_ARQ_MAX_JOBS": str(self.max_jobs)})
                for _ in range(self.n_procs)]


class Ours:
    """tender-pool: the real daemon (``tender-pool run``), 4 slots, command handlers in a process
    group per job, the per-user lock in force (50 users in turn)."""

    name = system = "tender-pool"
    share = 1
    label = "tender-pool 4 slots (sh -c per job)"
    settings = {"default": "defaults (heartbeat 10 s)", "best": "same"}
    restarted = 0

    def __init__(self, name: str, sock: str, tmp: Path):
        sys.path.insert(0, str(REPO))
        from tender_pool.client import Client

        self.tmp, self.sock = tmp, sock
        self.cfg = self.write_config()
        self.q = Client(f"unix://{sock}", "bench")
        self.r = self.q.r
        self.d: subprocess.Popen | None = None
        self.seq = 0
        self.bin = Path(sys.executable).with_name("tender-pool")

    def write_config(self) -> Path:
        sys.path.insert(0, str(REPO / "bench"))
        import pool_toml

        return pool_toml.write(self.tmp / "ours.toml", self.sock, "bench", "bench-ours", self.tmp)

    def start(self, recovery: str = "default") -> None:
        log = open(self.tmp / "ours.log", "ab")
        self.d = subprocess.Popen([str(self.bin), "run", "-c", str(self.cfg)], stdout=log, stderr=log,
                                  start_new_session=True)
        LAUNCHED.append(self.d)

    def wait_slots(self) -> None:
        while len(self.slots()) < 4:
            time.sleep(0.01)

    def slots(self) -> list[psutil.Process]:
        try:
            return [p for p in psutil.Process(self.d.pid).children() if "slot" in " ".join(p.cmdline())]
        except psutil.NoSuchProcess:
            return []

    def supervise(self) -> None:
        pass

    def roots(self) -> list[int]:
        return [self.d.pid] if self.d else []

    def stop(self) -> None:
        if self.d is None:
            return
        self.d.send_signal(signal.SIGTERM)
        try:
            self.d.wait(30)
        except subprocess.TimeoutExpired:
            kill_group(self.d.pid)
            self.d.wait(10)
        kill_group(self.d.pid)
        self.d = None

    def reset(self) -> None:
        self.r.flushall()

    def _requests(self, kind: str, n: int):
        """(user, kind, payload): ``Client.submit``'s arguments."""
        for _ in range(n):
            self.seq += 1
            yield f"u{self.seq % 50}", kind, {}

    def enqueue(self, kind: str, n: int) -> None:
        enqueue_many(self.q, list(self._requests(kind, n)))

    def paced(self, kind: str, n: int, rate: float) -> None:
        t0 = time.monotonic()
        for i, req in enumerate(self._requests(kind, n)):
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.q.submit(*req)

    def done(self) -> int:
        return self.r.zcard(self.q.k.finished)

    def records(self) -> list[tuple[float, float, float, int]]:
        ids = self.r.zrange(self.q.k.finished, 0, -1)
        p = self.r.pipeline(transaction=False)
        for j in ids:
            p.hmget(self.q.k.job(j.decode()), "created_at", "started_at", "finished_at", "state")
        out = []
        for c, s, f, st in p.execute():
            if st == b"completed":
                out.append((int(c) / 1000, int(s) / 1000, int(f) / 1000, 0))
        return out

    def enqueue_long(self) -> None:
        self.long_id = self.q.submit("crash", "long", {}).id

    def victim(self):
        h = self.r.hmget(self.q.k.job(self.long_id), "state", "worker")
        if h[0] != b"running":
            return None
        slot_no = h[1].decode().rsplit("slot", 1)[1]
        slot = next(p for p in self.slots() if f"slot {slot_no} " in " ".join(p.cmdline()))
        return slot.pid, [slot.pid]

    def reran(self) -> float | None:
        a, s = self.r.hmget(self.q.k.job(self.long_id), "attempts", "started_at")
        return int(s) / 1000 if a and int(a) >= 2 and s else None


class _Batch:
    """Stands in for the Redis client inside ``Client.submit``: its per-call pipeline is one shared
    outer pipeline, so the real submit (the enqueue script and the job's read-back, whatever KEYS and
    ARGV it passes today) is queued, not sent. Its own answer is the first job's record, read back for
    real, so the client can build the ``Job`` it returns."""

    def __init__(self, pipe, record: dict):
        self.pipe, self.record = pipe, record

    def pipeline(self, transaction: bool = False):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False

    def execute(self):
        return [[1, b"queued"], self.record]

    def __getattr__(self, name):
        return getattr(self.pipe, name)


def enqueue_many(q, reqs: list, chunk: int = 1000) -> None:
    """Queue jobs through ``Client.submit`` in pipelines of ``chunk`` (one round trip each). The
    first goes alone, which also loads enqueue.lua into Redis's script cache."""
    if not reqs:
        return
    first = q.submit(*reqs[0])
    real = q.r
    record = real.hgetall(q.k.job(first.id))
    try:
        for i in range(1, len(reqs), chunk):
            pipe = real.pipeline(transaction=False)
            q.r = _Batch(pipe, record)
            for req in reqs[i:i + chunk]:
                q.submit(*req)
            q.r = real
            for res in pipe.execute()[::2]:  # the script's answers (the read-backs between them)
                if not res or int(res[0]) != 1:
                    raise SystemExit(f"enqueue answered {res!r}")
    finally:
        q.r = real


class OursFn(Ours):
    """tender-pool with function handlers (``jobs_fn.py``): the peers' job bodies as Python
    functions, each job a forked child of its slot's fork server, in a process group of its own."""

    name = system = "tender-pool-fn"
    label = "tender-pool 4 slots (function handler, a fork per job)"

    def write_config(self) -> Path:
        sys.path.insert(0, str(REPO / "bench"))
        import pool_toml

        path = pool_toml.write(self.tmp / "ours-fn.toml", self.sock, "bench", "bench-ours", self.tmp)
        here = Path(__file__).resolve().parent
        fns = "".join(f'[handlers.{k}]\nfunction = "jobs_fn:{k}"\npath = ["{here}"]\ntimeout = 30\n'
                      for k in ("noop", "sleep10", "long"))
        path.write_text(path.read_text().replace(pool_toml.HANDLERS, "\n" + fns))
        return path


def all_systems(sock: str, tmp: Path) -> list:
    return [
        Ours("tender-pool", sock, tmp),
        OursFn("tender-pool-fn", sock, tmp),
        Dramatiq("dramatiq", sock, tmp),
        Celery("celery", sock, tmp),
        Rq("rq", sock, tmp),
        Arq("arq-4x1", sock, tmp, 4, 1),
        Arq("arq-1x4", sock, tmp, 1, 4),
    ]
