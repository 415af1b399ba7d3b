#!/usr/bin/env python3
"""Pool benchmark: throughput, pick-up latency, Redis commands per job, idle memory, crash recovery.

Runs a private redis-server on a Unix socket and a real `tender-pool run` with 4 slots and command
handlers, then prints a table. Figures, not assertions: the machines are noisy, so compare ratios of
rows taken in one run. ``make bench`` runs this quick table; the comparison with the peers, measured
the same way for every system, is ``bench/compare`` (``--peers`` here runs its quick version for
Dramatiq and RQ after this table).

    .venv/bin/python bench/bench_pool.py [--jobs 2000] [--peers]
    .venv/bin/python bench/bench_pool.py --redis-only [--jobs 1000] [--reps 3] [--base TREE]

Redis per job (``redis_per_job``): a clean burst of no-op jobs gives the commands (INFO commandstats,
Lua-internal calls included) and Redis's CPU (INFO ``used_cpu_*``) per job; a second burst with the
slow log at 0 µs attributes every command to the script (or plain command) that ran it and to its side
(producer: ``Client.submit``; daemon: slots and supervisor), with the stream work (XADD, XTRIM, group
reads: every X… command) in its own column, and each script's own time (its slow-log duration).
``--base TREE`` (another checkout of this repository, e.g. a worktree of main) runs the same bench on
that tree's code too, interleaved with this one's, for a paired A/B in one run. On a loaded machine the
CPU figures of whole bursts swing by ±30 %; ``--scripts-ab TREE`` compares the two trees' enqueue.lua
and settle_take.lua call by call instead (one redis-server, no daemon, the two trees' calls
interleaved, each call's slow-log duration), which holds to a few per cent; ``--aa`` runs it with the
base tree on both sides, to see the method's own bias.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import psutil
import redis

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "bench" / "peers"))
BIN = Path(sys.executable).with_name("tender-pool")

import pool_toml  # noqa: E402
from measure import IDLE_SETTLE_S, breakdown, idle_pss, pss_mib, tree  # noqa: E402  (as bench/compare)
from tender_pool.client import Client  # noqa: E402


def start_redis(tmp: Path) -> tuple[subprocess.Popen, str]:
    sock = str(tmp / "redis.sock")
    p = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", sock, "--dir", str(tmp), "--save", "", "--appendonly", "yes",
         "--appendfsync", "everysec", "--loglevel", "warning"],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            if redis.Redis(unix_socket_path=sock).ping():
                break
        except redis.RedisError:
            time.sleep(0.02)
    return p, sock


def write_config(tmp: Path, sock: str, prefix: str) -> Path:
    return pool_toml.write(tmp / f"{prefix}.toml", sock, prefix, f"bench-{prefix}", tmp, pool="heartbeat = 10",
                           input_roots=(str(REPO / "jvm" / "training"),))


def start_pool(tmp: Path, sock: str, log_path: str | None) -> tuple[subprocess.Popen, Client]:
    """``tender-pool run`` on the bench config (its log to ``log_path``, if given) and a producer's Client."""
    cfg = write_config(tmp, sock, "bench")
    log = open(log_path, "w") if log_path else subprocess.DEVNULL
    d = subprocess.Popen([str(BIN), "run", "-c", str(cfg)], stderr=log, start_new_session=True)
    return d, Client(f"unix://{sock}", "bench")


def wait_done(q: Client, ids: list[str], timeout: float = 600, admin: redis.Redis | None = None) -> None:
    r = admin or q.r
    end = time.monotonic() + timeout
    fin = q.k.finished
    while r.zcard(fin) < len(ids):
        if time.monotonic() > end:
            raise SystemExit(f"timed out: {r.zcard(fin)}/{len(ids)} finished")
        time.sleep(0.05)


def run_batch(q: Client, kind: str, n: int, daemon_pid: int) -> dict:
    q.r.delete(q.k.finished)
    c0 = int(q.r.info("stats")["total_commands_processed"])
    ids = []
    pipe_t0 = time.monotonic()
    for i in range(n):
        jid = q.submit(f"u{i % 50}", kind, {}).id
        ids.append(jid)
    enqueue_s = time.monotonic() - pipe_t0
    wait_done(q, ids)
    c1 = int(q.r.info("stats")["total_commands_processed"])
    pipe = q.r.pipeline()
    for j in ids:
        pipe.hmget(q.k.job(j), "started_at", "finished_at", "state")
    rows = pipe.execute()
    starts = [int(r[0]) for r in rows]
    ends = [int(r[1]) for r in rows]
    bad = sum(1 for r in rows if r[2] != b"completed")
    span = (max(ends) - min(starts)) / 1000
    return {"jobs": n, "jobs_per_s": n / span, "span_s": span, "not_completed": bad,
            # the producer's included (Client.submit: enqueue.lua and the HGETALL read-back; the
            # Redis-per-job rows below split it out), and the bench's own polls
            "redis_cmds_per_job": (c1 - c0) / n, "enqueue_per_s": n / enqueue_s}


# --- Redis per job ----------------------------------------------------------------------------------

ADMIN = "bench-admin"  # the bench's own reads (polls, INFO, SLOWLOG): left out of the per-job figures
PRODUCER = "bench-producer"


def script_names() -> dict[str, str]:
    """EVALSHA's sha → the script's name, for the code this process runs."""
    from tender_pool.store import scripts

    out = {hashlib.sha1(scripts.text(n).encode()).hexdigest(): n for n in scripts.NAMES}
    for b in getattr(scripts, "BATCHES", ()):
        out[hashlib.sha1(scripts.batch_text(b).encode()).hexdigest()] = f"{b}_many"
    return out


def cpu_s(r: redis.Redis) -> tuple[float, float]:
    """Redis's CPU seconds so far: (whole process, main thread)."""
    i = r.info("cpu")
    return (float(i["used_cpu_user"]) + float(i["used_cpu_sys"]),
            float(i.get("used_cpu_user_main_thread", 0)) + float(i.get("used_cpu_sys_main_thread", 0)))


def commandstats(r: redis.Redis) -> dict[str, tuple[int, int]]:
    return {k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"])) for k, v in r.info("commandstats").items()}


def is_event(name: str) -> bool:
    """Stream work (XADD, XTRIM, XREADGROUP, XACK, XAUTOCLAIM, …): its own column."""
    return name.lower().startswith("x")


def submit_burst(q: Client, admin: redis.Redis, n: int) -> None:
    admin.delete(q.k.finished)
    ids = [q.submit(f"u{i % 50}", "noop", {}).id for i in range(n)]
    wait_done(q, ids, admin=admin)


def redis_clean(q: Client, admin: redis.Redis, n: int) -> dict:
    """A burst of ``n`` no-op jobs with nothing but INFO around it: commands and CPU per job."""
    idle_c0, idle_cpu0 = commandstats(admin), cpu_s(admin)
    time.sleep(2.0)
    idle_c1, idle_cpu1 = commandstats(admin), cpu_s(admin)
    c0, cpu0, t0 = commandstats(admin), cpu_s(admin), time.monotonic()
    submit_burst(q, admin, n)
    c1, cpu1, span = commandstats(admin), cpu_s(admin), time.monotonic() - t0
    by_name = {k: c1[k][0] - c0.get(k, (0, 0))[0] for k in c1 if c1[k][0] != c0.get(k, (0, 0))[0]}
    for k in ("info", "zcard", "del", "client|setname"):  # the bench's own
        by_name.pop(k, None)
    idle_calls = sum(v[0] for v in idle_c1.values()) - sum(v[0] for v in idle_c0.values()) - 3  # 3 INFOs
    total = sum(v for k, v in by_name.items() if not is_event(k))
    events = sum(v for k, v in by_name.items() if is_event(k))
    return {"cmds": total / n, "events": events / n, "cpu_us": (cpu1[0] - cpu0[0]) / n * 1e6,
            "main_us": (cpu1[1] - cpu0[1]) / n * 1e6, "span_s": span,
            "idle_cmds_s": idle_calls / 2.0, "idle_cpu_us_s": (idle_cpu1[0] - idle_cpu0[0]) / 2.0 * 1e6,
            "evalsha_us": (c1.get("evalsha", (0, 0))[1] - c0.get("evalsha", (0, 0))[1]) / n}


def redis_breakdown(q: Client, admin: redis.Redis, n: int) -> dict:
    """A burst of ``n`` no-op jobs with the slow log at 0 µs: every command, the ones a script ran
    (client ``?:0``, logged before the script's own entry) given to that script."""
    names = script_names()
    admin.config_set("slowlog-max-len", 5_000_000)
    admin.config_set("slowlog-log-slower-than", 0)
    admin.slowlog_reset()
    try:
        submit_burst(q, admin, n)
    finally:
        admin.config_set("slowlog-log-slower-than", 10000)
    entries = sorted(admin.slowlog_get(-1), key=lambda e: e["id"])
    admin.slowlog_reset()
    admin.config_set("slowlog-max-len", 128)
    groups: dict[str, Counter] = defaultdict(Counter)
    inner: dict[str, Counter] = defaultdict(Counter)  # group → inner command name → count
    pending: list[str] = []
    for e in entries:
        args = e["command"].split(b" ")
        name = args[0].decode().lower()
        if e.get("client_address") == b"?:0":
            pending.append(name)
            continue
        client = (e.get("client_name") or b"").decode()
        if client == ADMIN:
            pending = []
            continue
        side = "producer" if client == PRODUCER else "daemon"
        label = names.get(args[1].decode(), args[1][:8].decode()) if name in ("evalsha", "eval") else name
        g = groups[f"{side}: {label}"]
        g["calls"] += 1
        g["usec"] += e["duration"]
        for x in [name, *pending]:
            g["events" if is_event(x) else "cmds"] += 1
            inner[f"{side}: {label}"][x] += 1
        pending = []
    return {"groups": groups, "inner": inner, "n": n}


def redis_per_job(q: Client, admin: redis.Redis, n: int) -> tuple[dict, dict]:
    """The clean burst and the attributed one (after a warm-up burst)."""
    submit_burst(q, admin, min(n, 200))
    return redis_clean(q, admin, n), redis_breakdown(q, admin, n)


def print_breakdown(b: dict) -> None:
    n = b["n"]
    groups = b["groups"]
    print(f"\nRedis per no-op job by script, slow-log burst of {n} jobs (events = stream commands, apart; "
          f"µs = the script's slow-log duration, its Lua-internal commands included)")
    print(f"  {'side: script or command':<28} {'calls':>6} {'cmds':>6} {'events':>6} {'µs':>7}  commands inside")
    tot = Counter()
    for label, g in sorted(groups.items(), key=lambda kv: -kv[1]["cmds"]):
        tot.update(g)
        inside = ", ".join(f"{k} {v / n:.2f}" for k, v in b["inner"][label].most_common())
        print(f"  {label:<28} {g['calls'] / n:>6.2f} {g['cmds'] / n:>6.2f} {g['events'] / n:>6.2f} "
              f"{g['usec'] / n:>7.1f}  {inside}")
    print(f"  {'total':<28} {tot['calls'] / n:>6.2f} {tot['cmds'] / n:>6.2f} {tot['events'] / n:>6.2f} "
          f"{tot['usec'] / n:>7.1f}")
    by_name = Counter()
    for c in b["inner"].values():
        by_name.update(c)
    print("  by command name, per job: " + ", ".join(f"{k} {v / n:.2f}" for k, v in by_name.most_common()))


def redis_only(args: argparse.Namespace) -> None:
    """``--redis-only``: just the Redis-per-job figures, ``--reps`` times (with ``--base``, this tree's
    and the base tree's runs interleaved: base, ours, base, ours, …)."""
    if args.base and not os.environ.get("BENCH_POOL_CHILD"):
        return redis_ab(args)
    tmp = Path(tempfile.mkdtemp(prefix="tp-bench-"))
    rp, sock = start_redis(tmp)
    try:
        d, q = start_pool(tmp, sock, args.log)
        q.r.connection_pool.connection_kwargs["client_name"] = PRODUCER
        admin = redis.Redis(unix_socket_path=sock, client_name=ADMIN)
        while len(psutil.Process(d.pid).children()) < 4:
            time.sleep(0.05)
        time.sleep(1.5)
        for rep in range(args.reps):
            clean, b = redis_per_job(q, admin, args.jobs)
            print(f"REDIS {clean['cmds']:.2f} cmds/job + {clean['events']:.2f} events/job, "
                  f"CPU {clean['cpu_us']:.1f} µs/job (main thread {clean['main_us']:.1f}; EVALSHA usec "
                  f"{clean['evalsha_us']:.1f}), {args.jobs} jobs in {clean['span_s']:.2f} s; idle "
                  f"{clean['idle_cmds_s']:.0f} cmds/s {clean['idle_cpu_us_s']:.0f} µs/s; load {open('/proc/loadavg').read().split()[0]}",
                  flush=True)
            print_breakdown(b)
        d.send_signal(signal.SIGTERM)
        d.wait(30)
    finally:
        rp.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def redis_ab(args: argparse.Namespace) -> None:
    """Base and ours interleaved, each run a fresh redis-server and daemon (this script, the tree's code)."""
    shim = _shim(Path(args.base).resolve())
    rows: dict[str, list[str]] = {"base": [], "ours": []}
    try:
        for _ in range(args.reps):
            for side in ("base", "ours"):
                env = dict(os.environ, BENCH_POOL_CHILD="1")
                if side == "base":
                    env["PYTHONPATH"] = str(shim)
                out = subprocess.run([sys.executable, __file__, "--redis-only", "--reps", "1", "--jobs",
                                      str(args.jobs)], env=env, capture_output=True, text=True)
                print(f"=== {side}\n{out.stdout}{out.stderr[-2000:] if out.returncode else ''}", flush=True)
                rows[side] += [line for line in out.stdout.splitlines() if line.startswith("REDIS ")]
        for side, lines in rows.items():
            print(f"{side}:")
            for line in lines:
                print("  " + line)
    finally:
        shutil.rmtree(shim, ignore_errors=True)


def _shim(base: Path) -> Path:
    """A directory that makes ``import tender_pool`` load ``base``'s code (on PYTHONPATH)."""
    shim = Path(tempfile.mkdtemp(prefix="tp-base-shim-"))
    pkg = shim / "tender_pool"
    pkg.mkdir()
    for sub in ("store", "supervisor", "slots", "extract", "client", "web"):
        (pkg / sub).symlink_to(base / sub)
    (pkg / "__init__.py").write_text("")
    return shim


def scripts_ab(base_tree: str, n: int, aa: bool) -> None:
    """enqueue.lua and settle_take.lua of the base tree and of this one, call by call (see the top)."""
    import msgspec

    from tender_pool.slots.queue import Queue, Started, TakeArgs
    from tender_pool.store.connection import connect
    from tender_pool.store.keys import Keys
    from tender_pool.store.script_args import EnqueueCall

    shim = _shim(Path(base_tree).resolve())
    tmp = Path(tempfile.mkdtemp(prefix="tp-bench-"))
    rp, sock = start_redis(tmp)
    try:
        def text(name: str, base: bool) -> str:
            env = dict(os.environ, PYTHONPATH=str(shim)) if base else dict(os.environ)
            code = f"from tender_pool.store import scripts; print(scripts.text({name!r}), end='')"
            return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                  check=True).stdout

        r = redis.Redis(unix_socket_path=sock)
        ta = TakeArgs(worker="w1", pid=1, lock_ttl_ms=60000, retention_s=3600, max_waits=100, busy_ttl_ms=60000,
                      limits=msgspec.json.encode({"*": [10000, 1]}))
        queues, label, enq, cur = {}, {}, {}, {}
        for side in ("base", "ours"):
            q = Queue(connect(f"unix://{sock}"), Keys(f"ab{side}", "q"))
            for name in ("take", "settle_take", "enqueue"):
                t = text(name, side == "base" or aa) + ("\n-- ours" if side == "ours" and aa else "")
                q._texts[name] = t
                label[hashlib.sha1(t.encode()).hexdigest()] = f"{side} {name}"
            enq[side] = r.script_load(q._texts["enqueue"])
            queues[side] = q

        def submit(side: str, jid: str, user: str) -> None:
            k = queues[side].k
            c = EnqueueCall(job=k.job(jid), ready=k.ready("bulk"), ready_lo=k.ready_lo, proc=k.ready_lo,
                            state_block=k.state_keys(user), hi_keys=k.hi_keys(user), id=jid, kind="noop", user=user,
                            payload=b"{}", priority="bulk", after=b"[]")
            keys = c.keys()
            r.evalsha(enq[side], len(keys), *keys, *c.args())

        for side, q in queues.items():
            submit(side, "j0", "u0")
            cur[side] = q.take("p", ta, "x0")
        r.config_set("slowlog-max-len", 100 * n)  # every Lua-internal command takes an entry too
        r.config_set("slowlog-log-slower-than", 0)
        r.slowlog_reset()
        for i in range(1, n + 1):
            for side in (("base", "ours") if i % 2 else ("ours", "base")):
                submit(side, f"j{i}", f"u{i % 50}")
                q, t = queues[side], cur[side]
                _, cur[side] = q.settle_take("p", q.get(t.entry.decode()), t.started.token, "completed", ta, f"x{i}",
                                             result={})
                assert isinstance(cur[side].started, Started)
        r.config_set("slowlog-log-slower-than", 10000)
        got: dict[str, list[int]] = defaultdict(list)
        for e in r.slowlog_get(-1):
            a = e["command"].split(b" ")
            if a[0] == b"EVALSHA" and a[1].decode() in label:
                got[label[a[1].decode()]].append(e["duration"])
        print(f"per call, slow-log µs (Lua-internal commands included), {n} calls a side interleaved; "
              f"load {open('/proc/loadavg').read().split()[0]}{' (A/A: base on both sides)' if aa else ''}")
        for name, v in sorted(got.items()):
            v.sort()
            print(f"  {name:<18} p10 {v[len(v) // 10]:>5}  p25 {v[len(v) // 4]:>5}  median {statistics.median(v):>7.1f}"
                  f"  ({len(v)} calls)")
    finally:
        rp.kill()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(shim, ignore_errors=True)


def pickup(q: Client, n: int = 200) -> dict:
    lat = []
    for i in range(n):
        jid = q.submit(f"p{i}", "noop", {}).id
        while True:
            v = q.r.hmget(q.k.job(jid), "created_at", "started_at", "state")
            if v[2] == b"completed":
                break
            time.sleep(0.002)
        lat.append(int(v[1]) - int(v[0]))
        time.sleep(0.02)
    lat.sort()
    return {"p50_ms": statistics.median(lat), "p99_ms": lat[int(len(lat) * 0.99) - 1], "max_ms": lat[-1]}


def parse_latency(q: Client, path: str, n: int = 20, warmup: int = 8) -> dict:
    """parse_markdown of one small document through the daemon: claim (started_at) → Markdown
    stored and the job settled (finished_at), Redis TIME. The first run starts the slot's warm JVM
    and imports the reader; it is reported apart, and ``warmup`` more runs let every slot start its
    JVM before the measured ones."""
    out = []
    for i in range(n + 1 + warmup):
        jid = q.submit(f"x{i}", "parse_markdown", {"file": path}).id
        while True:
            v = q.r.hmget(q.k.job(jid), "started_at", "finished_at", "state")
            if v[2] in (b"completed", b"failed"):
                break
            time.sleep(0.002)
        if v[2] != b"completed":
            raise SystemExit(f"parse_markdown failed: {q.record(jid)}")
        out.append(int(v[1]) - int(v[0]))
    first, rest = out[0], sorted(out[1 + warmup :])
    return {"first_ms": first, "p50_ms": statistics.median(rest), "p90_ms": rest[int(len(rest) * 0.9) - 1]}


def memory(pid: int, settle_s: float | None = None) -> dict:
    """PSS of the daemon's tree (warm JVMs excluded), with ``measure.idle_pss``'s settling when
    ``settle_s`` is given: the idle figure is read after work, as bench/compare reads it."""
    if settle_s is None:
        procs = tree([pid])
        pss, parts = pss_mib(procs), breakdown(procs)
    else:
        pss, procs, parts = idle_pss([pid], settle_s)
    rss = sum(p.memory_info().rss for p in procs)
    return {"processes": len(procs), "rss_mib": rss / 2**20, "pss_mib": pss, "parts": parts}


def recovery(q: Client, daemon_pid: int) -> float:
    jid = q.submit("crash", "long", {}).id
    while q.r.hget(q.k.job(jid), "state") != b"running":
        time.sleep(0.005)
    worker = q.r.hget(q.k.job(jid), "worker").decode()
    slot_no = worker.rsplit("slot", 1)[1]
    slot = next(p for p in psutil.Process(daemon_pid).children() if f"slot {slot_no} " in " ".join(p.cmdline()))
    t0 = time.monotonic()
    slot.kill()
    while q.r.hget(q.k.job(jid), "attempts") != b"2":
        time.sleep(0.002)
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--peers", action="store_true", help="also run Dramatiq and RQ on the same no-op work")
    ap.add_argument("--log", help="write the daemon's log here")
    ap.add_argument("--redis-only", action="store_true", help="only the Redis-per-job figures")
    ap.add_argument("--reps", type=int, default=1, help="--redis-only: bursts (runs, with --base) of each")
    ap.add_argument("--base", help="--redis-only: another checkout to measure too, interleaved (paired A/B)")
    ap.add_argument("--scripts-ab", metavar="TREE", help="enqueue/settle_take of TREE against ours, call by call")
    ap.add_argument("--aa", action="store_true", help="--scripts-ab with TREE on both sides (the method's bias)")
    args = ap.parse_args()
    if args.scripts_ab:
        return scripts_ab(args.scripts_ab, args.jobs, args.aa)
    if args.redis_only:
        return redis_only(args)
    tmp = Path(tempfile.mkdtemp(prefix="tp-bench-"))
    rp, sock = start_redis(tmp)
    try:
        d, q = start_pool(tmp, sock, args.log)
        while len(psutil.Process(d.pid).children()) < 4:
            time.sleep(0.05)
        time.sleep(1.5)
        boot = memory(d.pid)  # before any job: not the idle figure (the slots grow over their first jobs)
        admin = redis.Redis(unix_socket_path=sock, client_name=ADMIN)
        q.r.connection_pool.connection_kwargs["client_name"] = PRODUCER
        noop = run_batch(q, "noop", args.jobs, d.pid)
        rclean, rbreak = redis_per_job(q, admin, min(args.jobs, 1000))
        sl = run_batch(q, "sleep10", args.jobs, d.pid)
        time.sleep(1.0)
        pk = pickup(q)
        idle = memory(d.pid, settle_s=IDLE_SETTLE_S)  # after 2 × --jobs + 200 command-handler jobs, then idle
        doc = parse_latency(q, str(REPO / "jvm" / "training" / "notice.doc"))
        xls = parse_latency(q, str(REPO / "jvm" / "training" / "signin.xls"))
        parsed = memory(d.pid, settle_s=IDLE_SETTLE_S)  # slots with the .doc/.xls readers imported; JVMs apart
        rec = recovery(q, d.pid)
        d.send_signal(signal.SIGTERM)
        d.wait(30)
        rows = [
            ("no-op jobs/s (4 slots)", f"{noop['jobs_per_s']:.0f}", f"{args.jobs} jobs in {noop['span_s']:.2f} s, {noop['not_completed']} not completed"),
            ("10 ms-sleep jobs/s (4 slots)", f"{sl['jobs_per_s']:.0f}", f"{args.jobs} jobs in {sl['span_s']:.2f} s"),
            ("Redis commands per job", f"{noop['redis_cmds_per_job']:.1f}", "INFO total_commands_processed, Lua-internal calls and the producer's included"),
            ("  by commandstats (daemon + producer)", f"{rclean['cmds']:.1f} + {rclean['events']:.1f}",
             "commands + stream commands (XADD …), a clean burst; by script below"),
            ("Redis CPU per no-op job", f"{rclean['cpu_us']:.0f} µs",
             f"INFO used_cpu_user+sys over the burst (main thread {rclean['main_us']:.0f} µs; idle "
             f"{rclean['idle_cpu_us_s']:.0f} µs/s)"),
            ("pick-up latency p50 / p99 (idle)", f"{pk['p50_ms']:.0f} / {pk['p99_ms']:.0f} ms", f"max {pk['max_ms']} ms; Redis TIME ms resolution"),
            ("idle RSS supervisor+slots", f"{idle['rss_mib']:.1f} MiB", f"{idle['processes']} processes"),
            ("idle PSS supervisor+slots", f"{idle['pss_mib']:.1f} MiB",
             f"after the jobs above, idle 2 s (as bench/compare): {idle['parts']}"),
            ("  PSS right after boot", f"{boot['pss_mib']:.1f} MiB", f"before any job: {boot['parts']}"),
            ("  PSS after parse_markdown jobs", f"{parsed['pss_mib']:.1f} MiB",
             f"readers imported in the slots, warm JVMs excluded: {parsed['parts']}"),
            ("parse_markdown small .doc, claim → stored", f"{doc['p50_ms']:.0f} / {doc['p90_ms']:.0f} ms",
             f"p50 / p90, warm JVM; first run {doc['first_ms']} ms (JVM start + imports)"),
            ("parse_markdown small .xls, claim → stored", f"{xls['p50_ms']:.0f} / {xls['p90_ms']:.0f} ms",
             f"p50 / p90, warm JVM; first run {xls['first_ms']} ms"),
            ("SIGKILLed slot's job running again", f"{rec * 1000:.0f} ms", "kill → attempt 2 started"),
            ("enqueue rate (one client)", f"{noop['enqueue_per_s']:.0f}/s", "enqueue.lua, one round trip each"),
        ]
        if args.peers:
            rows += peers(tmp, sock, args.jobs, noop["jobs_per_s"])
        w = max(len(r[0]) for r in rows)
        print(f"\n{'measure':<{w}}  {'value':>16}  note")
        for name, val, note in rows:
            print(f"{name:<{w}}  {val:>16}  {note}")
        print_breakdown(rbreak)
    finally:
        rp.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def peers(tmp: Path, sock: str, n: int, ours: float) -> list[tuple[str, str, str]]:
    """The peers are measured by bench/compare, first job start → last finish for everyone (this
    table's own figures above include no worker boot either); its quick run, Dramatiq and RQ."""
    rc = subprocess.run([str(REPO / "bench" / "compare"), "--quick", "--no-scale", "--only", "tender-pool,dramatiq,rq"]).returncode
    return [("peers", "see the table above" if rc == 0 else f"bench/compare exited {rc}", "bench/compare --quick")]


if __name__ == "__main__":
    main()
