#!/usr/bin/env python3
"""Soak: the supervisor SIGKILLed mid-run at a random instant and a new one started at once (issue 17
item 14: "once in seven tries, a job ran twice").

Each round queues ``--jobs`` short command-handler jobs on a private redis-server, starts
``tender-pool run`` (4 slots), SIGKILLs the supervisor alone (its slots get their PDEATHSIG) at a
random instant while the jobs run, starts a new daemon with the same host id at once, waits until
every job has ended, and stops it. Optionally ``--load N`` busy processes compete for the CPU.

What happened is recorded from the handler's own side: every attempt appends ``start``/``end``
lines (job, attempt token, pid, time) to one file opened ``O_APPEND``, and holds an ``flock`` on a
per-job file while it lives (the kernel drops it when the process dies, SIGKILL included), so an
attempt that starts while another attempt of its job is alive writes ``overlap``. Checked per job:

- overlap: two attempts of one job alive at once (must be 0);
- completed twice, settle lost: two ``end`` lines, the first attempt's handler not found alive by
  its slot when the slot acted on its PDEATHSIG (it had exited: the slot must settle it; before
  the fix it went without, and the next supervisor ran the job again) (must be 0);
- completed twice, killed alive: the first attempt's slot found its handler still alive and killed
  it (its ``supervisor_died_killing_attempt`` log line) after the handler had written ``end`` but
  before it exited — a handler preempted between its last write and its exit: an interruption, as
  for any supervisor death (at least once; ``Client.owns`` is the handler's check). Counted apart;
- not ended: a job not completed when the round gave up (must be 0).

    .venv/bin/python bench/soak_supervisor_kill.py [--rounds 300] [--jobs 40] [--load 2] [--seed S]

Prints one line a round with a problem, and a table at the end; exit 1 on an overlap, a lost
settle or a job not completed.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import redis

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).with_name("tender-pool")
PR_SET_PDEATHSIG = 1


def _die_with_us() -> None:  # in each child before exec: if the soak is killed, nothing is left behind
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


KINDS = ("overlap", "twice_settle_lost", "not_completed")

HANDLER = r'''
import fcntl, os, sys, time
d, sleep_s = sys.argv[1], float(sys.argv[2])
job, tok = os.environ["TENDER_POOL_JOB_ID"], os.environ["TENDER_POOL_ATTEMPT"]
sys.stdin.read()
log = os.open(os.path.join(d, "attempts.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
lock = os.open(os.path.join(d, "locks", job.replace("/", "_")), os.O_RDWR | os.O_CREAT, 0o644)

def line(what):
    os.write(log, f"{what} {job} {tok} {os.getpid()} {time.time():.6f}\n".encode())

try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    line("overlap")
line("start")
time.sleep(sleep_s)
os.write(1, b"{}\n")
line("end")
os._exit(0)
'''

CONFIG = """
[redis]
url = "unix://{sock}"
prefix = "{prefix}"
socket_timeout = 3
[pool]
worker_count = 4
host_id = "{host}"
heartbeat = 1
kill_grace = 0.5
drain_timeout = 5
retry_backoff = 0.05
claim_timeout = 0.5
state_dir = "{state}"
[status]
socket = "{state}/status.sock"
[metrics]
listen = ""
[extract]
check_archive = false
[handlers.soak]
command = ["{python}", "{handler}", "{dir}", "{sleep}"]
timeout = 30
per_user = 0
"""


def start_redis(tmp: Path) -> tuple[subprocess.Popen, str]:
    sock = str(tmp / "redis.sock")
    p = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock, "--dir", str(tmp), "--save", "",
                          "--appendonly", "no", "--loglevel", "warning"], stdout=subprocess.DEVNULL,
                         preexec_fn=_die_with_us)
    for _ in range(300):
        try:
            if redis.Redis(unix_socket_path=sock).ping():
                return p, sock
        except redis.RedisError:
            time.sleep(0.02)
    raise RuntimeError("redis-server did not start")


class Round:
    """One round's world: its own key prefix, host id, handler directory and daemon log."""

    def __init__(self, tmp: Path, sock: str, n: int, jobs: int, sleep_s: float):
        self.dir = tmp / f"r{n}"
        (self.dir / "locks").mkdir(parents=True)
        (self.dir / "state").mkdir()
        self.prefix, self.host = f"s{n}", f"soak-{n}"
        (self.dir / "handler.py").write_text(HANDLER)
        self.cfg = self.dir / "pool.toml"
        self.cfg.write_text(CONFIG.format(sock=sock, prefix=self.prefix, host=self.host, state=self.dir / "state",
                                          python=sys.executable, handler=self.dir / "handler.py", dir=self.dir,
                                          sleep=sleep_s))
        self.log_path = self.dir / "daemon.log"
        self.jobs = jobs
        self.daemons: list[subprocess.Popen] = []

    def start(self) -> subprocess.Popen:
        log = open(self.log_path, "ab")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TENDER_POOL", "TENDER_PARSE"))}
        d = subprocess.Popen([str(BIN), "run", "-c", str(self.cfg)], stdout=log, stderr=log, env=env,
                             start_new_session=True, preexec_fn=_die_with_us)
        self.daemons.append(d)
        return d

    def cleanup(self) -> None:
        for d in self.daemons:
            try:
                os.killpg(d.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            d.wait()


def one_round(tmp: Path, sock: str, n: int, rng: random.Random, jobs: int, sleep_s: float,
              done_timeout: float) -> dict:
    from tender_pool.client import Client

    rd = Round(tmp, sock, n, jobs, sleep_s)
    c = Client(f"unix://{sock}", prefix=rd.prefix, socket_timeout=5)
    try:
        run = c.submit_run("soak", "soak", [{"key": str(i), "payload": {}} for i in range(jobs)])
        d = rd.start()
        # kill while jobs run: from the first attempt's start, anywhere in the time 4 slots need for
        # the jobs (each ~sleep_s plus a Python start)
        attempts = rd.dir / "attempts.log"
        end = time.monotonic() + 30
        while not attempts.exists() and time.monotonic() < end:
            time.sleep(0.005)
        wait = rng.uniform(0, jobs / 4 * (sleep_s + 0.04))
        time.sleep(wait)
        d.send_signal(signal.SIGKILL)
        d.wait()
        rd.start()
        end = time.monotonic() + done_timeout
        while time.monotonic() < end:
            r = c.run(run.id)
            if r.counts.completed + r.counts.failed + r.counts.cancelled + r.counts.skipped == r.counts.total:
                break
            time.sleep(0.1)
        r = c.run(run.id)
        return analyse(rd, r, wait)
    finally:
        rd.cleanup()
        c.close()


def analyse(rd: Round, run, kill_at: float) -> dict:
    lines = defaultdict(list)
    for raw in (rd.dir / "attempts.log").read_text().splitlines() if (rd.dir / "attempts.log").exists() else []:
        what, job, tok, pid, at = raw.split()
        lines[job].append((what, tok, int(pid), float(at)))
    killed_alive = set()
    for raw in rd.log_path.read_bytes().splitlines():
        if b"supervisor_died_killing_attempt" in raw:
            try:
                killed_alive.add(json.loads(raw)["job_pid"])
            except (ValueError, KeyError):
                pass
    out = {"kill_at": round(kill_at, 2), "overlap": [], "twice_settle_lost": [], "twice_killed_alive": [],
           "not_completed": [j.id for j in run.jobs if j.state != "completed"], "attempts": 0, "reruns": 0}
    for job, evs in lines.items():
        starts = [e for e in evs if e[0] == "start"]
        ends = [e for e in evs if e[0] == "end"]
        out["attempts"] += len(starts)
        out["reruns"] += max(0, len(starts) - 1)
        if any(e[0] == "overlap" for e in evs):
            out["overlap"].append(job)
        if len(ends) > 1:
            if ends[0][2] in killed_alive:
                out["twice_killed_alive"].append(job)
            else:
                out["twice_settle_lost"].append(job)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--sleep", type=float, default=0.05, help="each job's sleep, seconds")
    ap.add_argument("--load", type=int, default=0, help="busy processes competing for the CPU")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--done-timeout", type=float, default=60.0)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args(argv)
    seed = a.seed if a.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    print(f"seed {seed}: {a.rounds} rounds of {a.jobs} jobs ({a.sleep * 1000:.0f} ms), load {a.load}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="soak-kill-"))
    srv, sock = start_redis(tmp)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=_die_with_us)
            for _ in range(a.load)]
    totals = defaultdict(int)
    bad_rounds = 0
    t0 = time.monotonic()
    try:
        for n in range(a.rounds):
            res = one_round(tmp, sock, n, rng, a.jobs, a.sleep, a.done_timeout)
            for k in KINDS:
                totals[k] += len(res[k])
            totals["attempts"] += res["attempts"]
            totals["reruns"] += res["reruns"]
            totals["twice_killed_alive"] += len(res["twice_killed_alive"])
            bad = any(res[k] for k in KINDS)
            bad_rounds += bool(bad)
            if bad or res["twice_killed_alive"]:
                print(f"round {n} (kill {res['kill_at']} s after the first start): " + ", ".join(
                    f"{k} {res[k]}" for k in (*KINDS, "twice_killed_alive") if res[k]) + f"  [{tmp / f'r{n}'}]", flush=True)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        srv.kill()
        srv.wait()
    print()
    print("| rounds | jobs | load | attempts | re-runs | overlaps | completed twice: settle lost / handler killed "
          "alive after its end line | not completed | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| {a.rounds} | {a.rounds * a.jobs} | {a.load} | {totals['attempts']} | {totals['reruns']} | "
          f"{totals['overlap']} | {totals['twice_settle_lost']} / {totals['twice_killed_alive']} | "
          f"{totals['not_completed']} | {time.monotonic() - t0:.0f} |")
    if not a.keep and not bad_rounds:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if bad_rounds else 0


if __name__ == "__main__":
    sys.exit(main())
