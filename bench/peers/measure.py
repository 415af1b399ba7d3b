"""What bench/compare reads off the machine: a private redis-server, Redis INFO counters, process
trees with their PSS and /proc CPU times, percentiles. No knowledge of any queue here."""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import time
from pathlib import Path

import psutil
import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(tmp: Path) -> tuple[subprocess.Popen, str]:
    """A private redis-server on a Unix socket (and no TCP port): never the shared 6379. AOF on with
    fsync every second, as a production pool would run it; no RDB snapshots."""
    sock = str(tmp / "redis.sock")
    p = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", sock, "--dir", str(tmp), "--save", "", "--appendonly", "yes",
         "--appendfsync", "everysec", "--loglevel", "warning"],
        stdout=subprocess.DEVNULL, start_new_session=True,
    )
    for _ in range(250):
        try:
            if redis.Redis(unix_socket_path=sock).ping():
                return p, sock
        except redis.RedisError:
            time.sleep(0.02)
    raise SystemExit("redis-server did not start")


class RedisCounters:
    """INFO deltas: commands (Lua-internal calls included), read events (≈ round trips: a pipeline
    arrives in one read), XADDs, Redis's own CPU."""

    def __init__(self, r: redis.Redis, pid: int):
        self.r, self.pid = r, pid

    def snap(self) -> dict:
        st = self.r.info("stats")
        cs = self.r.info("commandstats")
        cpu = psutil.Process(self.pid).cpu_times()
        return {
            "cmds": int(st["total_commands_processed"]),
            "reads": int(st.get("total_reads_processed", 0)),
            "xadd": int(cs.get("cmdstat_xadd", {}).get("calls", 0)),
            "cpu": cpu.user + cpu.system,
        }

    @staticmethod
    def delta(a: dict, b: dict) -> dict:
        return {k: b[k] - a[k] for k in a}


def tree(roots: list[int], exclude: tuple[str, ...] = ("java",)) -> list[psutil.Process]:
    """Every live process under ``roots`` (recursive), the roots included, minus ``exclude`` names."""
    out: list[psutil.Process] = []
    for pid in roots:
        try:
            p = psutil.Process(pid)
            for q in [p, *p.children(recursive=True)]:
                if q.name() not in exclude and q.pid not in {x.pid for x in out}:
                    out.append(q)
        except psutil.NoSuchProcess:
            continue
    return out


def pss_mib(procs: list[psutil.Process]) -> float:
    total = 0
    for p in procs:
        try:
            total += p.memory_full_info().pss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


IDLE_SETTLE_S = 2.0  # after the last job finished, before the idle PSS is read


def idle_pss(roots: list[int], settle_s: float = IDLE_SETTLE_S) -> tuple[float, list[psutil.Process], str]:
    """The idle PSS as both benches report it (bench/compare, bench/bench_pool.py): read once the
    system has run its work and then been idle ``settle_s`` — the figure a daemon that runs for
    weeks shows between bursts, not the one right after its start (ours grows ~5 MiB over its first
    jobs: each slot copies the inherited pages its loop touches). Every process under ``roots``
    minus the warm JVMs (``tree``). Returns (MiB, the processes, a per-process breakdown)."""
    time.sleep(settle_s)
    procs = tree(roots)
    return pss_mib(procs), procs, breakdown(procs)


def breakdown(procs: list[psutil.Process]) -> str:
    """One entry per kind of process, MiB: PSS, USS (pages only it maps) and RSS shared (pages it
    shares, counted whole), e.g. ``supervisor pss 14.1 uss 8.2 shared 11.9; 4 × slot pss 11.8 uss
    6.9 shared 6.0 (each)``. Ours are grouped by title (``tender-pool: slot 2 idle`` → slot), others
    by process name."""
    groups: dict[str, list] = {}
    for p in procs:
        try:
            m = p.memory_full_info()
            title = " ".join(p.cmdline())
            key = title.split()[1] if title.startswith("tender-pool: ") else p.name()
        except (psutil.NoSuchProcess, IndexError):
            continue
        groups.setdefault(key, []).append(m)
    out = []
    for key, ms in groups.items():
        n = len(ms)
        pss, uss, shared = (sum(getattr(m, f) for m in ms) / n / 2**20 for f in ("pss", "uss", "shared"))
        head = f"{n} × {key}" if n > 1 else key
        out.append(f"{head} pss {pss:.1f} uss {uss:.1f} shared {shared:.1f}" + (" (each)" if n > 1 else ""))
    return "; ".join(out)


def cpu_of(procs: list[psutil.Process]) -> dict[int, tuple[float, float]]:
    """pid → (own CPU s, CPU s of its reaped children) from /proc/<pid>/stat (via psutil)."""
    out = {}
    for p in procs:
        try:
            c = p.cpu_times()
            out[p.pid] = (c.user + c.system, c.children_user + c.children_system)
        except psutil.NoSuchProcess:
            pass
    return out


def cpu_delta(a: dict[int, tuple[float, float]], b: dict[int, tuple[float, float]]) -> tuple[float, float]:
    own = reaped = 0.0
    for pid, (o, r) in b.items():
        o0, r0 = a.get(pid, (0.0, 0.0))
        own += o - o0
        reaped += r - r0
    return own, reaped


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, int(round(q * len(xs) + 0.5)) - 1))
    return xs[i]


def med_range(xs: list[float]) -> tuple[float, float, float]:
    xs = [x for x in xs if x == x]
    if not xs:
        return (float("nan"),) * 3
    return statistics.median(xs), min(xs), max(xs)


def machine() -> str:
    la = os.getloadavg()
    return f"{os.cpu_count()} cores, load average {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}"


def kill_group(pid: int, sig: int = 9) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
