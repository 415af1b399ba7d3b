#!/usr/bin/env python3
"""The admin web's cost (issue 21), on a private redis-server, against a real daemon and a real
``tender-pool web`` process:

- the overview with 4 busy slots and 0, 1 and 10 viewers of its live stream (server-sent events):
  the web process's CPU seconds per second (psutil), and the Redis commands per second the pool
  runs (``INFO stats``) with the web's share beside it (the figure less the no-viewer baseline).
  Twice: with the daemon's status socket (``status`` comes from the daemon) and without it (another
  host: the web reads the Redis view). One reader per app, so ten viewers should cost what one does;
- the history page over N finished jobs (made by the real ``on_terminal``, 1000 users, 3 kinds, 5 %
  failed: ``bench_scale.seed_finished``), filtered by status, user or kind (index reads: the target
  is under 100 ms at the server), and by file substring and start time (these walk job hashes:
  reported as they are; the start-time filter alone walks every finished hash, so it runs only up to
  10⁵), as ``/api/history`` JSON and as the HTML page, best of 5 over loopback (walks: once).

    .venv/bin/python bench/bench_web.py [--finished 1000000] [--window 10]

Timings are wall times on a shared machine; its load average is printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).with_name("tender-pool")

spec = importlib.util.spec_from_file_location("bench_scale", REPO / "bench" / "bench_scale.py")
scale = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
spec.loader.exec_module(scale)  # type: ignore[union-attr]

from tender_pool.client import Client  # noqa: E402
from tender_pool.store.keys import Keys  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(tmp: Path, url: str, socket_path: str, name: str) -> Path:
    state = tmp / f"state-{name}"
    state.mkdir(exist_ok=True)
    p = tmp / f"{name}.toml"
    p.write_text(f"""
[redis]
url = "{url}"
prefix = "tp"
[pool]
queue = "q"
worker_count = 4
host_id = "bench-web"
heartbeat = 2
state_dir = "{state}"
[status]
socket = "{socket_path}"
[metrics]
listen = ""
[handlers.sleep]
command = ["/bin/sh", "-c", "cat >/dev/null; sleep 600; echo '{{}}'"]
timeout = 900
""")
    return p


def commands(r) -> int:
    return int(r.info("stats")["total_commands_processed"])


def start_web(cfg: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([str(BIN), "web", "-c", str(cfg), "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 20
    while True:
        try:
            if httpx.get(base + "/api/status", timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        if time.monotonic() > end:
            raise SystemExit("tender-pool web did not start")
        time.sleep(0.1)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def viewers(base: str, n: int, stop_ev: threading.Event, counts: list[float]) -> list[threading.Thread]:
    """n viewers of the live stream; each appends the status events it got per second."""
    def view() -> None:
        got, t0 = 0, time.monotonic()
        try:
            with httpx.Client(timeout=30) as c, c.stream("GET", base + "/live/status") as r:
                for line in r.iter_lines():
                    if line.startswith("event: status"):
                        got += 1
                    if stop_ev.is_set():
                        break
        except httpx.HTTPError:
            pass
        counts.append(got / (time.monotonic() - t0))
    ts = [threading.Thread(target=view, daemon=True) for _ in range(n)]
    for t in ts:
        t.start()
    return ts


def live_rows(r, web: subprocess.Popen, base: str, window: float) -> list[dict]:
    ps = psutil.Process(web.pid)
    rows = []
    for n in (0, 1, 10):
        stop_ev, counts = threading.Event(), []
        ts = viewers(base, n, stop_ev, counts)
        time.sleep(1.5)  # connected, the reader running
        c0, t0, cpu0 = commands(r), time.monotonic(), sum(ps.cpu_times()[:2])
        time.sleep(window)
        c1, t1, cpu1 = commands(r), time.monotonic(), sum(ps.cpu_times()[:2])
        stop_ev.set()
        for t in ts:
            t.join(35)
        dt = t1 - t0
        rows.append({"viewers": n, "cpu": (cpu1 - cpu0) / dt, "cmds": (c1 - c0) / dt,
                     "events": (sum(counts) / n) if n else 0.0})
        time.sleep(1.5)  # the reader stops with the last viewer
    base_cmds = rows[0]["cmds"]
    for row in rows:
        row["added"] = row["cmds"] - base_cmds
    return rows


def best_ms(url: str, n: int = 5) -> tuple[float, int]:
    best, size = float("inf"), 0
    with httpx.Client(timeout=600) as c:
        for _ in range(n):
            t = time.perf_counter()
            r = c.get(url)
            best = min(best, time.perf_counter() - t)
            r.raise_for_status()
            size = len(r.content)
    return best * 1000, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--finished", type=int, default=10**6, help="finished jobs for the history pages")
    ap.add_argument("--window", type=float, default=10.0, help="seconds measured per viewer count")
    a = ap.parse_args()
    print(f"bench_web: {os.cpu_count()} cores, load average {scale.load_avg()}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-web-"))
    srv = scale.Server(tmp)
    r = srv.r
    daemon = None
    procs: list[subprocess.Popen] = []
    try:
        sock = str(tmp / "status.sock")
        cfg = config(tmp, srv.url, sock, "local")
        env = dict(os.environ)
        env.pop("TENDER_PARSE_WORKER_COUNT", None)
        env.pop("TENDER_POOL_REDIS_URL", None)
        daemon = subprocess.Popen([str(BIN), "run", "-c", str(cfg)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True, env=env)
        procs.append(daemon)
        client = Client(srv.url, "tp", "q", status_socket=sock)
        end = time.monotonic() + 30
        while True:
            try:
                if client.status().online == 4:
                    break
            except Exception:  # noqa: BLE001 - not up yet
                pass
            if time.monotonic() > end:
                raise SystemExit("the daemon did not bring 4 slots online")
            time.sleep(0.2)
        for i in range(4):
            client.submit(f"busy{i}", "sleep", {})
        while client.status().busy != 4:
            time.sleep(0.2)
        print(f"\nthe overview's live stream, 4 busy slots, {a.window:g} s per row:", flush=True)
        print(f"{'status from':<22} {'viewers':>7} {'web CPU s/s':>12} {'Redis cmd/s':>12} {'of it the web':>14} "
              f"{'events/s/viewer':>16}")
        for label, c in (("the daemon's socket", cfg), ("Redis (no socket)", config(tmp, srv.url,
                                                                                   str(tmp / "none.sock"), "remote"))):
            web, base = start_web(c)
            procs.append(web)
            for row in live_rows(r, web, base, a.window):
                print(f"{label:<22} {row['viewers']:>7} {row['cpu']:>12.4f} {row['cmds']:>12.1f} {row['added']:>14.1f} "
                      f"{row['events']:>16.2f}", flush=True)
            stop(web)
        stop(daemon)

        print(f"\nseeding {a.finished} finished jobs through on_terminal …", flush=True)
        made_s, _now = scale.seed_finished(srv, Keys("tp", "q"), a.finished)
        print(f"  made in {made_s:.0f} s", flush=True)
        web, base = start_web(config(tmp, srv.url, str(tmp / "none.sock"), "history"))
        procs.append(web)
        day_ago = int(time.time()) - 3600
        queries = [("status=failed", True), ("user=u7", True), ("kind=convert", True), ("", True),
                   ("user=u7&status=failed", True), ("status=failed&page=100", True),
                   ("file=inbox&user=u7", False), (f"started_after={day_ago}&user=u7", False),
                   (f"started_after={day_ago}", False)]
        if a.finished > 10**5:  # walks every finished hash to count them: minutes at 10⁶
            queries.pop()
        print(f"\nhistory over {a.finished} finished jobs, best of 5 through the web process (ms at the client, "
              f"loopback):")
        print(f"{'filter':<34} {'/api/history':>13} {'/history page':>14} {'indexed':>8}")
        for qs, indexed in queries:
            api, _ = best_ms(f"{base}/api/history?{qs}", 5 if indexed else 1)
            html, _ = best_ms(f"{base}/history?{qs}", 5 if indexed else 1)
            print(f"{qs or '(no filter)':<34} {api:>13.1f} {html:>14.1f} {'yes' if indexed else 'walk':>8}", flush=True)
        stop(web)
    finally:
        for p in procs:
            stop(p)
        srv.stop()


if __name__ == "__main__":
    main()
