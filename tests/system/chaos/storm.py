"""The chaos soak's world (see test_chaos.py): hosts A and B, the proxy in front of B, the seeded job
plan and storm schedule, the submitter and driver threads, and what they saw (kills, kill times).

Sizes and timings are read from the environment at import (tests/system/chaos/conftest.py turns ``--long``
into TENDER_POOL_CHAOS_LONG before this module is imported)."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import psutil
import redis

from conftest import JOBS, PYTHON, Daemon
from support.proxy import Proxy

LONG = os.environ.get("TENDER_POOL_CHAOS_LONG") == "1"
JOBS_N = int(os.environ.get("TENDER_POOL_CHAOS_JOBS") or (20000 if LONG else 1200))
USERS = max(6, JOBS_N // 10)
# seconds of chaos (submissions take its first half); TENDER_POOL_CHAOS_WINDOW for quick trials
WINDOW = float(os.environ.get("TENDER_POOL_CHAOS_WINDOW") or max(60.0, JOBS_N * 0.05))
SETTLE_S = 120 + JOBS_N * 0.1  # after the window: every job terminal within this
TIMEOUT = int(WINDOW + SETTLE_S + 180)
HB = 1.0
KILL_GRACE = 1.5
FENCE = 3 * HB - KILL_GRACE - HB / 3
STALL_S = 1.9  # > FENCE + 0 and < 3 × HB − HB / 3 (the key's life after the last write, at the least)
EVERY = 0.02  # tick interval of tickjob.py: a killed attempt's end is known to within this
TERMINAL_EVENTS = {"job_completed", "job_failed", "job_cancelled", "job_skipped"}


def handlers() -> str:
    return f"""
[handlers.tick]
command = ["{PYTHON}", "{JOBS / "tickjob.py"}"]
timeout = 30
"""


def marked(env_marker: str) -> list[int]:
    """Pids of live processes (zombies aside) whose environment carries ``env_marker``."""
    needle = env_marker.encode()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0"):
                if psutil.Process(int(d.name)).status() != psutil.STATUS_ZOMBIE:
                    out.append(int(d.name))
        except (OSError, psutil.Error):
            pass
    return out


class Storm:
    """The soak's world: hosts A and B, the proxy, the submitter and the driver, and what they saw."""

    def __init__(self, h, seed: int):
        self.h = h
        self.rnd = random.Random(seed)
        self.seed = seed
        self.record = h.tmp / "trail"
        self.record.mkdir()
        self.marker = f"TENDER_POOL_CHAOS_RUN={uuid.uuid4().hex}"
        self.proxy = Proxy(h.redis.sock)
        self.a = self._daemon("a", workers=4)
        self.b = self._daemon("b", workers=2, url=self.proxy.url)
        from tender_pool.client import Client

        self.client = Client.from_config(str(h.tmp / "a.toml"), {})
        self.submit_lock = threading.Lock()  # a Redis restart waits for the submission in flight
        self.jobs: dict[str, str] = {}  # job id → user
        self.runs: dict[str, list[str]] = {}
        self.killed: dict[tuple[str, str], float] = {}  # (job, token) → when its group was SIGKILLed
        self.kills: Counter = Counter()
        self.skipped: Counter = Counter()
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.t0 = 0.0

    def _daemon(self, name: str, workers: int, url: str | None = None) -> Daemon:
        h = self.h
        cfg = h.config(name, workers=workers, heartbeat=HB, handlers=handlers(), extra="crash_cap = 50")
        text = cfg.read_text().replace("max_tries = 3", "max_tries = 50").replace(
            "kill_grace = 0.5", f"kill_grace = {KILL_GRACE}")
        if url:
            text = text.replace(f'url = "{h.redis.url}"', f'url = "{url}"')
        cfg.write_text(text)
        env = h.env()
        key, _, value = self.marker.partition("=")
        env[key] = value
        d = Daemon(cfg, env, h.tmp / f"daemon-{name}.log")
        h.daemons.append(d)
        return d

    def alive(self, d: Daemon) -> bool:
        return d.proc is not None and d.proc.poll() is None

    # --- the submitter ----------------------------------------------------------------------------

    def plan(self) -> list[tuple[float, str, str, list[dict], str]]:
        """(when, "job"|"run", user, items, priority): about 85 % of the jobs one by one, the rest
        in runs of 2–5; every payload unique (a run item equal to a completed job would be skipped)."""
        rnd, out, n = self.rnd, [], 0
        while n < JOBS_N:
            user = f"user{rnd.randrange(USERS)}"
            size = rnd.randint(2, 5) if rnd.random() < 0.05 else 1
            size = min(size, JOBS_N - n)
            items = []
            for _ in range(size):
                sleep = 0 if rnd.random() < 0.5 else round(rnd.uniform(0.1, 0.6), 2)
                payload = {"record": str(self.record), "sleep": sleep, "every": EVERY, "n": n}
                items.append({"key": f"k{n}", "payload": payload})
                n += 1
            prio = "interactive" if rnd.random() < 0.15 else "bulk"
            out.append((rnd.uniform(0, WINDOW / 2), "run" if size > 1 else "job", user, items, prio))
        return sorted(out, key=lambda x: x[0])

    def submitter(self, plan) -> None:
        from tender_pool.client.errors import Unavailable

        for i, (at, what, user, items, prio) in enumerate(plan):
            if self.stop.wait(max(0.0, self.t0 + at - time.monotonic())):
                return
            run_id = f"run{i}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    with self.submit_lock:
                        if what == "job":
                            jid = f"j{items[0]['payload']['n']}"
                            self.client.submit(user, "tick", items[0]["payload"], job_id=jid, priority=prio)
                            self.jobs[jid] = user
                        else:  # run_id given: a retry after a lost reply creates one run, not two
                            run = self.client.submit_run(user, "tick", items, priority=prio, run_id=run_id)
                            self.runs[run.id] = [j.id for j in run.jobs]
                            for j in run.jobs:
                                self.jobs[j.id] = user
                    break
                except (Unavailable, redis.RedisError) as e:
                    if time.monotonic() > deadline:
                        self.errors.append(f"submit {what} {i}: {e!r}")
                        break
                    time.sleep(0.2)

    # --- the driver's actions -----------------------------------------------------------------------

    def schedule(self) -> list[tuple[float, str]]:
        rnd, W = self.rnd, WINDOW
        acts = [(0.1 * W, "start_b"), (0.8 * W, "stop_b"),
                (rnd.uniform(0.35, 0.55) * W, "restart_redis"),
                (rnd.uniform(0.15, 0.75) * W, "stall_a"),
                (rnd.uniform(0.15, 0.75) * W, "blackhole_b")]
        acts += [(rnd.uniform(0.02, 0.9) * W, "kill_slot") for _ in range(max(6, JOBS_N // 50))]
        acts += [(rnd.uniform(0.02, 0.9) * W, "kill_job") for _ in range(max(6, JOBS_N // 50))]
        acts += [(rnd.uniform(0.05, 0.85) * W, "kill_supervisor") for _ in range(max(2, JOBS_N // 1000))]
        return sorted(acts)

    def driver(self, acts) -> None:
        for at, name in acts:
            if self.stop.wait(max(0.0, self.t0 + at - time.monotonic())):
                return
            try:
                getattr(self, name)()
            except Exception as e:  # noqa: BLE001 - reported with the figures, and fails the test
                self.errors.append(f"{name} at {time.monotonic() - self.t0:.1f} s: {e!r}")

    def hosts(self) -> list[Daemon]:
        out = [self.a] if self.alive(self.a) else []
        if self.alive(self.b) and not self.proxy.paused:
            out.append(self.b)
        return out

    def kill_slot(self) -> None:
        pids = [p for d in self.hosts() for p in d.slot_pids()]
        if not pids:
            self.skipped["slot"] += 1
            return
        os.kill(self.rnd.choice(sorted(pids)), signal.SIGKILL)
        self.kills["slot"] += 1

    def running_jobs(self) -> list[tuple[int, str, str]]:
        out = []
        for d in self.hosts():
            for slot in d.slot_pids():
                try:
                    kids = psutil.Process(slot).children()
                except psutil.Error:
                    continue
                for c in kids:
                    try:
                        env = c.environ()
                    except psutil.Error:
                        continue
                    if env.get("TENDER_POOL_JOB_ID") and env.get("TENDER_POOL_ATTEMPT"):
                        out.append((c.pid, env["TENDER_POOL_JOB_ID"], env["TENDER_POOL_ATTEMPT"]))
        return sorted(out)

    def kill_job(self) -> None:
        procs = self.running_jobs()
        if not procs:
            self.skipped["job"] += 1
            return
        pid, jid, token = self.rnd.choice(procs)
        try:
            if os.getpgid(pid) != pid:  # never the slot's group
                self.skipped["job"] += 1
                return
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            self.skipped["job"] += 1
            return
        self.killed[(jid, token)] = time.time() + 0.001
        self.kills["job"] += 1

    def kill_supervisor(self) -> None:
        if not self.alive(self.a):
            self.skipped["supervisor"] += 1
            return
        self.a.kill()
        self.kills["supervisor"] += 1
        time.sleep(self.rnd.uniform(0.3, 2.0))
        self.a.start()

    def restart_redis(self) -> None:
        with self.submit_lock:
            self.h.redis.restart(down_for=self.rnd.uniform(0.3, 1.5))
        self.kills["redis_restart"] += 1

    def start_b(self) -> None:
        self.b.start()

    def stop_b(self) -> None:
        if self.alive(self.b):
            self.proxy.resume()
            code = self.b.stop(timeout=30)
            if code != 0:
                self.errors.append(f"host B exited {code} on SIGTERM")

    def stall_a(self) -> None:
        if not self.alive(self.a):
            self.skipped["stall"] += 1
            return
        os.kill(self.a.pid, signal.SIGSTOP)
        time.sleep(STALL_S)
        os.kill(self.a.pid, signal.SIGCONT)
        self.kills["stall"] += 1

    def blackhole_b(self) -> None:
        if not self.alive(self.b):
            self.skipped["blackhole"] += 1
            return
        with self.proxy.partitioned(3 * HB + self.rnd.uniform(1.0, 3.0)):
            pass
        self.kills["blackhole"] += 1

    # --- the end ----------------------------------------------------------------------------------

    def states(self) -> dict[str, str]:
        k = self.h.k
        ids = list(self.jobs)
        out = {}
        for i in range(0, len(ids), 500):
            p = self.h.r.pipeline(transaction=False)
            for j in ids[i:i + 500]:
                p.hget(k.job(j), "state")
            out.update({j: (s or b"").decode() for j, s in zip(ids[i:i + 500], p.execute())})
        return out

    def terminal_events(self) -> tuple[Counter, set[str], bool]:
        """(terminal events per job, jobs with a job_queued event, whether the stream was trimmed)."""
        k = self.h.k
        ends, queued, last = Counter(), set(), "-"
        while True:
            batch = self.h.r.xrange(k.events, min=last, count=5000)
            if last != "-":
                batch = batch[1:]
            if not batch:
                break
            for sid, fields in batch:
                ev = json.loads(fields[b"e"])
                if ev.get("type") in TERMINAL_EVENTS:
                    ends[ev.get("job_id")] += 1
                elif ev.get("type") == "job_queued":
                    queued.add(ev.get("job_id"))
            last = batch[-1][0].decode()
        return ends, queued, self.h.r.xlen(k.events) >= 99_000

    def log_count(self, event: str) -> int:
        return sum(len(d.log_events(event)) for d in (self.a, self.b) if d.log_path.exists())
