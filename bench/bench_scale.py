#!/usr/bin/env python3
"""Cost as the work grows (issue 12), on a private redis-server (no persistence), in-process:

- claim + start: the slot's steady-state round trip (settle_take.lua: settle this job, take and
  start the next), jobs/s and Redis CPU per job with 10³, 10⁵, 10⁶ jobs queued (enqueued with
  pipelines of enqueue.lua, 1000 users, bulk); the Redis memory per queued job; the status probe
  (``QueueProbe.read``, the Redis side of the daemon's ``status``) at each size;
- over 10⁶ finished jobs in retention (made by the real ``on_terminal``: lib/terminal.lua + a seeding loop,
  1000 users, 3 kinds, 5 % failed) and the 10⁶ queued still there: ``history.query`` pages
  (``--user U``, ``--status failed``, unfiltered, deep pages, combined filters), the status probe
  and ``Client.status()`` without a daemon (its Redis view), the history trim of one sweep;
- the reaper's pass (``Housekeeper.reap``) over 10⁴ entries in the processing lists of 100 dead
  hosts, claimed and started (running) or claimed only.

Timings are best of N wall times (the machine is shared: its load average is printed); Redis CPU is
the server's own (``INFO cpu``) per job. ``--old REV`` also times history and the status probe as
they were at git revision REV (``client/history.py``, ``client/status_probe.py`` loaded from
it), once each: over 10⁶ finished the old history takes minutes a page.

    .venv/bin/python bench/bench_scale.py [--quick] [--old REV] [--only reaper]

``--quick``: sizes 10³, 10⁴, 10⁵ and 10⁵ finished (about a minute). ``--only reaper``: the two
reaper passes alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import redis

REPO = Path(__file__).resolve().parents[1]

from tender_pool.client import Client  # noqa: E402
from tender_pool.client import history  # noqa: E402
from tender_pool.store import history_index  # noqa: E402
from tender_pool.store import scripts  # noqa: E402
from tender_pool.slots.queue import Queue, TakeArgs, Taken  # noqa: E402
from tender_pool.store.keys import Keys, Owner  # noqa: E402
from tender_pool.client.status_probe import QueueProbe  # noqa: E402
from tender_pool.store.records import JobError  # noqa: E402

USERS = 1000
KINDS = ("parse_markdown", "write_section", "convert")
RETENTION = 7 * 86400
PROC = "tp:{q}:proc:bench:1:1.1"
ENQ_CHUNK = 2000

# Seeds finished jobs through the real on_terminal (lib/terminal.lua and what it needs are prepended): each job hash is the
# template's fields with its own id, user, kind, times, then on_terminal as a settle would call it.
# KEYS: finished, ready:lo; ARGV: base, retention, template field count F, F pairs, then per job:
# id, user, kind, state, finish ms.
SEED = """
local base, retention, nf = ARGV[1], ARGV[2], tonumber(ARGV[3])
local tpl = {}
for i = 4, 3 + 2 * nf do tpl[#tpl + 1] = ARGV[i] end
for i = 4 + 2 * nf, #ARGV, 5 do
  local id, fin = ARGV[i], tonumber(ARGV[i + 4])
  local jk = base .. ':job:' .. id
  redis.call('HSET', jk, unpack(tpl))
  redis.call('HSET', jk, 'id', id, 'user', ARGV[i + 1], 'kind', ARGV[i + 2], 'state', ARGV[i + 3],
    'created_at', fin - 40, 'started_at', fin - 30, 'finished_at', fin)
  on_terminal(jk, base .. ':deps:' .. id, KEYS[2], KEYS[1], id, fin, retention)
end
return 1
"""


class Server:
    """A private redis-server on a Unix socket, no persistence (bulk loads stay fast)."""

    def __init__(self, root: Path):
        self.sock = str(root / "redis.sock")
        self.proc = subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--port", "0", "--unixsocket", self.sock,
             "--unixsocketperm", "700", "--dir", str(root), "--save", "", "--appendonly", "no",
             "--maxmemory-policy", "noeviction", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"unix://{self.sock}"
        end = time.monotonic() + 10
        while True:
            try:
                if redis.Redis(unix_socket_path=self.sock).ping():
                    break
            except redis.RedisError:
                if time.monotonic() > end:
                    raise SystemExit("redis-server did not start")
                time.sleep(0.05)
        self.r = redis.Redis(unix_socket_path=self.sock)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_s(r: redis.Redis) -> float:
    i = r.info("cpu")
    return float(i["used_cpu_user"]) + float(i["used_cpu_sys"])


def used_memory(r: redis.Redis) -> int:
    return int(r.info("memory")["used_memory"])


def best_ms(fn, n: int = 5) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(n):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best * 1000, out


def take_args() -> TakeArgs:
    return TakeArgs(worker="bench-1", pid=os.getpid(), lock_ttl_ms=60_000, retention_s=RETENTION, max_waits=100,
                    busy_ttl_ms=60_000, limits=msgspec.json.encode({"*": [60_000, 1]}))


# --- queued ---------------------------------------------------------------------------------------


def enqueue(r: redis.Redis, k: Keys, n: int, start: int = 0, users: int = USERS) -> float:
    """n bulk jobs through enqueue.lua, ENQ_CHUNK a pipeline; returns seconds."""
    sha = r.script_load(scripts.text("enqueue"))
    t = time.perf_counter()
    for lo in range(start, start + n, ENQ_CHUNK):
        p = r.pipeline(transaction=False)
        for i in range(lo, min(start + n, lo + ENQ_CHUNK)):
            jid, user = f"q{i:08d}", f"u{i % users}"
            keys = [k.job(jid), k.ready_lo, k.ready_lo, k.ready_lo, *k.state_keys(user), *k.hi_keys(user)]
            args = [jid, KINDS[i % 3], user, f'{{"file":"/srv/tender-pool/inbox/{jid}.docx"}}', "bulk", "[]", ""]
            p.evalsha(sha, len(keys), *keys, *args)
        p.execute()
    return time.perf_counter() - t


def claim_start(q: Queue, jobs: int) -> tuple[float, float]:
    """``jobs`` settle_take round trips (each settles one job and starts the next): (jobs/s, Redis
    CPU ms per job)."""
    ta = take_args()
    t = q.take(PROC, ta, "s0")
    if not isinstance(t, Taken):
        raise SystemExit(f"nothing to take: {t!r}")
    r = q.r
    c0, t0 = cpu_s(r), time.perf_counter()
    for i in range(jobs):
        rec = _record(t)
        _, t = q.settle_take(PROC, rec, t.started.token, "completed", ta, f"s{i + 1}", result={"value": {}})
        if not isinstance(t, Taken):
            raise SystemExit(f"ran dry after {i} jobs: {t!r}")
    wall, cpu = time.perf_counter() - t0, cpu_s(r) - c0
    q.settle(PROC, _record(t), t.started.token, "completed", result={"value": {}}, lock_ttl_ms=60_000,
             retention_s=RETENTION, worker=ta.worker)
    return jobs / wall, cpu * 1000 / jobs


def _record(t: Taken):
    from tender_pool.client.records import decode_job

    return decode_job(t.record)


def sizes_table(srv: Server, k: Keys, sizes: list[int], jobs: int, reps: int, old) -> list[dict]:
    r = srv.r
    q = Queue(r, k)
    rows = []
    have = 0
    r.flushall()
    m0 = used_memory(r)
    for size in sizes:
        # grow the same queue (what was measured is put back at the end): 10⁶ is enqueued once
        enq_s = enqueue(r, k, size - have, have)
        have = size
        row = {"size": size, "enqueue_per_s": (size - (rows[-1]["size"] if rows else 0)) / enq_s,
               "bytes_per_job": (used_memory(r) - m0) / size}
        probe = QueueProbe(r, k, RETENTION)
        row["status_ms"], st = best_ms(probe.read)
        if st.queued != size:
            raise SystemExit(f"status says {st.queued} queued, {size} are")
        if old is not None:
            row["status_old_ms"], _ = best_ms(old.QueueProbe(r, k, RETENTION).read, 1)
        best = None
        m = min(jobs, size // 2)
        for rep in range(reps):
            # topped up first by what the repetition takes: it runs with size + m down to size queued
            enqueue(r, k, m + 1, 10**9 + size * 10 + rep * (m + 1))
            jps, cpu_ms = claim_start(q, m)
            if best is None or jps > best[0]:
                best = (jps, cpu_ms)
        row["jobs_per_s"], row["redis_cpu_ms"], row["measured"] = best[0], best[1], m
        rows.append(row)
        print(f"  {size:>9} queued: {row['jobs_per_s']:.0f} jobs/s, {row['redis_cpu_ms'] * 1000:.0f} µs Redis CPU/job, "
              f"{row['bytes_per_job']:.0f} B/job, status probe {row['status_ms']:.2f} ms   (load {load_avg()})",
              flush=True)
    return rows


# --- finished -------------------------------------------------------------------------------------


def templates(srv: Server, k: Keys) -> dict[str, dict]:
    """A really completed and a really failed job's hash (through take and settle)."""
    r = srv.r
    q = Queue(r, k)
    enqueue(r, k, 2, 10**9 - 10)
    ta = take_args()
    out = {}
    for verdict in ("completed", "failed"):
        t = q.take(PROC, ta, f"tpl-{verdict}", entry=b"")
        rec = _record(t)
        if verdict == "completed":
            q.settle(PROC, rec, t.started.token, "completed",
                     result={"value": {"markdown_path": "/srv/tender-pool/results/x/doc.md", "pages": 12}},
                     lock_ttl_ms=60_000, retention_s=RETENTION, worker=ta.worker)
        else:
            q.settle(PROC, rec, t.started.token, "failed", error=JobError("corrupt", "the file is not a valid DOCX"),
                     lock_ttl_ms=60_000, retention_s=RETENTION, worker=ta.worker, counts_try=True)
        h = r.hgetall(k.job(rec.id))
        out[verdict] = {a.decode(): b.decode() for a, b in h.items()}
    return out


def seed_finished(srv: Server, k: Keys, n: int) -> tuple[float, int]:
    """n finished jobs, one per ms up to now, through on_terminal; returns (seconds, now ms)."""
    r = srv.r
    tpls = templates(srv, k)
    sha = r.script_load(scripts.prelude("terminal") + SEED)
    heads = {}
    for state, h in tpls.items():
        fields = {f: v for f, v in h.items() if f not in ("id", "user", "kind", "state", "created_at", "started_at",
                                                          "finished_at")}
        flat = [x for kv in fields.items() for x in kv]
        heads[state] = [k.base, RETENTION, len(fields), *flat]
    now = int(time.time() * 1000)
    t = time.perf_counter()
    batch = 500
    for lo in range(0, n, batch):
        # one script call per template state per batch (the template rides in ARGV)
        per = {"completed": [], "failed": []}
        for j in range(lo, min(n, lo + batch)):
            state = "failed" if failed(j) else "completed"
            per[state] += [f"f{j:08d}", f"u{j % USERS}", KINDS[j % 3], state, now - (n - j)]
        p = r.pipeline(transaction=False)
        for state, jobs in per.items():
            if jobs:
                p.evalsha(sha, 2, k.finished, k.ready_lo, *heads[state], *jobs)
        p.execute()
    return time.perf_counter() - t, now


def failed(j: int) -> bool:
    """5 % of the seeded jobs, spread over every user."""
    return (j + j // USERS) % 20 == 0


QUERIES = (
    ("--user u7", dict(user="u7"), 1),
    ("--status failed", dict(status=["failed"]), 1),
    ("--status failed --page 100", dict(status=["failed"]), 100),
    ("--kind convert", dict(kind="convert"), 1),
    ("(no filter)", dict(), 1),
    ("(no filter) --page 1000", dict(), 1000),
    ("--status failed --status cancelled", dict(status=["failed", "cancelled"]), 1),
    ("--user u7 --status failed", dict(user="u7", status=["failed"]), 1),
    ("--kind convert --status failed", dict(kind="convert", status=["failed"]), 1),
    ("--user u7 --file inbox", dict(user="u7", file="inbox"), 1),
)


def history_table(srv: Server, k: Keys, old) -> list[dict]:
    r = srv.r
    rows = []
    for label, flt, page in QUERIES:
        ms, res = best_ms(lambda: history.query(r, k, history.HistoryFilter(**flt), page=page, page_size=20))
        row = {"label": label, "ms": ms, "total": res.total, "items": len(res.items)}
        if old is not None and label in ("--user u7", "--status failed"):
            oflt = old.HistoryFilter(**flt)
            row["old_ms"], ores = best_ms(lambda: old.query(r, k, oflt, page=page, page_size=20), 1)
            row["old_same"] = ores.total == res.total and [j.id for j in ores.items] == [j.id for j in res.items]
        rows.append(row)
    return rows


# --- the reaper -----------------------------------------------------------------------------------


class _Log:
    def __getattr__(self, name):
        return lambda *a, **kw: None


def reaper_pass(srv: Server, k: Keys, entries: int, hosts: int, started: bool) -> dict:
    """``entries`` jobs in the processing lists of ``hosts`` dead hosts (registered, their host keys
    gone), started (running: take.lua) or only claimed; one reap; seconds and what came back."""
    from tender_pool.store.config import load
    from tender_pool.supervisor.housekeeper import Housekeeper

    r = srv.r
    r.flushall()
    q = Queue(r, k)
    enqueue(r, k, entries, users=entries)  # one job per user: all in ready:lo, none parks at its start
    per = entries // hosts
    ta = take_args()
    owners = [Owner(f"dead{h}", f"inc{h}", "boot", 4242) for h in range(hosts)]
    procs = [k.proc(o.host, o.incarnation, 1, 1) for o in owners]
    p = r.pipeline(transaction=False)
    for o, proc in zip(owners, procs):
        p.hset(k.proclists, proc, o.encode())
    p.execute()
    if started:
        # take.lua: a dead host's slots had claimed and started each
        for i in range(entries):
            proc = procs[i % hosts]
            t = q.take(proc, msgspec.structs.replace(ta, worker=f"dead-{i % hosts}"), f"x{i}")
            if not isinstance(t, Taken):
                raise SystemExit(f"take: {t!r}")
    else:
        # claimed only (the BLMOVE → take.lua gap), as BLMOVEs would
        p = r.pipeline(transaction=False)
        for h in range(hosts):
            for _ in range(per):
                p.lmove(k.ready_lo, procs[h], "RIGHT", "LEFT")
        p.execute()
    in_lists = sum(r.llen(x) for x in procs)
    cfg_path = Path(tempfile.mkdtemp()) / "bench.toml"
    cfg_path.write_text(f'[redis]\nurl = "{srv.url}"\nprefix = "tp"\n[pool]\nqueue = "q"\nheartbeat = 2\n'
                        f'host_id = "bench"\nstate_dir = "{cfg_path.parent}"\n')
    cfg = load(str(cfg_path), {})
    hk = Housekeeper(cfg, Queue(r, k), Owner("bench", "live", "boot", os.getpid()), _Log())
    hk.quiet_enough = lambda now: True  # a fresh server: the outage guard would wait out its uptime
    c0, t0 = cpu_s(r), time.perf_counter()
    hk.reap(time.monotonic())  # Queue.requeue_lists_many: requeue_many.lua, 100 entries a call, 200 a round trip
    wall, cpu = time.perf_counter() - t0, cpu_s(r) - c0
    left = sum(r.llen(x) for x in procs)
    back = r.llen(k.ready_lo) + r.llen(k.ready_hi)
    return {"entries": in_lists, "hosts": hosts, "started": started, "pass_s": wall, "redis_cpu_s": cpu,
            "left": left, "reclaimed": hk.reclaimed, "queued_after": back}


# --- the old code, for before/after ---------------------------------------------------------------


def load_old(rev: str):
    """``client/history.py`` and ``client/status_probe.py`` as they were at ``rev``, as modules
    inside the installed packages (their relative imports resolve)."""
    out = type("Old", (), {})()
    for path, pkg, name in (("client/history.py", "tender_pool.client", "_old_history"),
                            ("client/status_probe.py", "tender_pool.supervisor", "_old_status_probe")):
        text = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{path}"], check=True, capture_output=True,
                              text=True).stdout
        f = Path(tempfile.mkdtemp()) / f"{name}.py"
        f.write_text(text)
        spec = importlib.util.spec_from_file_location(f"{pkg}.{name}", f)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        for attr in ("query", "HistoryFilter", "QueueProbe"):
            if hasattr(mod, attr):
                setattr(out, attr, getattr(mod, attr))
    return out


def print_reaps(reaps: list[dict]) -> list[str]:
    """The reaper rows; returns what is over its 1 s target."""
    slow = []
    for x in reaps:
        how = "running" if x["started"] else "claimed, not started"
        print(f"reaper pass over {x['entries']} entries ({how}) "
              f"of {x['hosts']} dead hosts: {x['pass_s'] * 1000:.0f} ms ({x['redis_cpu_s'] * 1000:.0f} ms Redis CPU); "
              f"{x['reclaimed']} reclaimed, {x['left']} left in the lists, {x['queued_after']} queued after")
        if x["pass_s"] > 1:
            slow.append(f"reaper pass ({'running' if x['started'] else 'claimed'}) over 1 s")
    return slow


def reaper_only() -> None:
    """``--only reaper``: the two reaper passes on a fresh server (a few seconds, mostly the setup)."""
    print(f"bench_scale --only reaper: {os.cpu_count()} cores, load average {load_avg()}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    srv = Server(tmp)
    try:
        reaps = [reaper_pass(srv, Keys("tp", "q"), 10_000, 100, True),
                 reaper_pass(srv, Keys("tp", "q"), 10_000, 100, False)]
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    slow = print_reaps(reaps)
    print(f"load average now {load_avg()}")
    print("\nslow: " + ("; ".join(slow) if slow else "nothing over its target"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="sizes 10³, 10⁴, 10⁵; 10⁵ finished")
    ap.add_argument("--old", metavar="REV", help="also time history and the status probe as at git REV")
    ap.add_argument("--jobs", type=int, default=2000, help="claim+start round trips per repetition")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", choices=["reaper"], help="run only that part (reaper: its two passes, seconds)")
    a = ap.parse_args()
    if a.only == "reaper":
        return reaper_only()
    sizes = [10**3, 10**4, 10**5] if a.quick else [10**3, 10**5, 10**6]
    finished = 10**5 if a.quick else 10**6
    old = load_old(a.old) if a.old else None
    print(f"bench_scale: {os.cpu_count()} cores, load average {load_avg()}, redis "
          f"{subprocess.run(['redis-server', '--version'], capture_output=True, text=True).stdout.split()[2]}",
          flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    srv = Server(tmp)
    k = Keys("tp", "q")
    try:
        t_all = time.monotonic()
        print("\nclaim + start (settle_take round trips) as the queue grows:", flush=True)
        rows = sizes_table(srv, k, sizes, a.jobs, a.reps, old)
        print(f"\nseeding {finished} finished jobs through on_terminal (the {sizes[-1]} queued stay) …", flush=True)
        made_s, seeded_at = seed_finished(srv, k, finished)
        mem = used_memory(srv.r)
        hist = history_table(srv, k, old)
        probe = QueueProbe(srv.r, k, RETENTION)
        status_ms, st = best_ms(probe.read)
        client = Client(srv.url, "tp", "q", retention_s=RETENTION)
        client_ms, _ = best_ms(client.status, 1)
        status_old_ms = best_ms(old.QueueProbe(srv.r, k, RETENTION).read, 1)[0] if old else None
        recount = sum(1 for j in range(finished) if failed(j)) + 1  # + the failed template
        cutoff = seeded_at - finished // 2  # the older half is past the retention
        c0, t0 = cpu_s(srv.r), time.perf_counter()
        removed = history_index.trim(srv.r, k, cutoff)  # one sweep: bounded steps
        trim_s, trim_cpu = time.perf_counter() - t0, cpu_s(srv.r) - c0
        sweeps, t0 = 1, time.perf_counter()
        while srv.r.zcount(k.finished, "-inf", cutoff):
            removed += history_index.trim(srv.r, k, cutoff)
            sweeps += 1
        rest_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        history_index.trim(srv.r, k, cutoff + 5000)  # a sweep 5 s later: 5000 more past the retention (1000 jobs/s)
        trim_next_ms = (time.perf_counter() - t0) * 1000
        print("\nreaper passes …", flush=True)
        reaps = [reaper_pass(srv, k, 10_000, 100, True), reaper_pass(srv, k, 10_000, 100, False)]
        total_s = time.monotonic() - t_all
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n=== cost as the work grows (load average now {load_avg()}; {total_s:.0f} s in all) ===")
    print(f"\nclaim+start: best of {a.reps} × min({a.jobs}, size/2) settle_take round trips, the queue topped up "
          "by as many first")
    print(f"\n{'queued jobs':>12} {'jobs/s':>8} {'vs first':>9} {'Redis µs/job':>13} {'B/queued job':>13} "
          f"{'enqueue/s':>10} {'status probe ms':>16}" + (f" {'(old) ms':>9}" if old else ""))
    base = rows[0]
    for x in rows:
        print(f"{x['size']:>12} {x['jobs_per_s']:>8.0f} {x['jobs_per_s'] / base['jobs_per_s']:>9.2f} "
              f"{x['redis_cpu_ms'] * 1000:>13.0f} {x['bytes_per_job']:>13.0f} {x['enqueue_per_s']:>10.0f} "
              f"{x['status_ms']:>16.2f}" + (f" {x['status_old_ms']:>9.1f}" if old else ""))
    print(f"\nover {finished} finished jobs in retention ({USERS} users, 3 kinds, 5 % failed; made through "
          f"on_terminal in {made_s:.0f} s) and {sizes[-1]} queued; Redis used_memory {mem / 2**20:.0f} MiB:")
    for h in hist:
        extra = ""
        if "old_ms" in h:
            extra = f"   old: {h['old_ms']:.0f} ms ({'same page' if h['old_same'] else 'DIFFERENT page'})"
        print(f"  history {h['label']:<36} page: {h['ms']:8.2f} ms  (total {h['total']}, {h['items']} items){extra}")
    print(f"  status probe (the daemon's status, Redis side): {status_ms:.2f} ms, failed = {st.failed} "
          f"(recount {recount})" + (f"   old: {status_old_ms:.0f} ms" if old else ""))
    print(f"  Client.status() without a daemon (its Redis view: probe + the hosts zset, their tables and busy states): {client_ms:.0f} ms")
    print(f"  trim, half the history past the retention at once: {removed} removed in {sweeps} sweeps (each at most "
          f"{history_index.TRIM_STEPS} steps of {history_index.TRIM_STEP}); the first {trim_s * 1000:.0f} ms ({trim_cpu * 1000:.0f} ms "
          f"Redis CPU), the rest {rest_s * 1000:.0f} ms; then a sweep 5000 more past it: {trim_next_ms:.1f} ms")
    print()
    slow = print_reaps(reaps)
    spread = max(x["jobs_per_s"] for x in rows) / min(x["jobs_per_s"] for x in rows) - 1
    if spread > 0.10:
        slow.append(f"claim+start jobs/s spread {spread * 100:.0f} % across sizes (target 10 %)")
    if max(x["status_ms"] for x in rows + [{"status_ms": status_ms}]) > 50:
        slow.append("status probe over 50 ms")
    for h in hist[:2]:
        if h["ms"] > 100:
            slow.append(f"history {h['label']} over 100 ms")
    print("\nslow: " + ("; ".join(slow) if slow else "nothing over its target"))


if __name__ == "__main__":
    main()
