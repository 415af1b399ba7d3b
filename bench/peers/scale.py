"""Issue 12's "cost flat as the work grows" table, tender-pool only (harness side, our venv).

- claim + start + run + settle, jobs/s of the real daemon (4 slots, ``sh -c`` no-op) with 10³, 10⁵,
  10⁶ jobs queued (enqueued with pipelines of enqueue.lua); Redis memory per queued job; Redis CPU,
  commands and read events per job at each size;
- ``QueueProbe.read`` (the Redis side of ``status``) with 10⁶ queued and over 10⁶ finished, in-process;
- ``history.query`` pages, ``--user U`` and ``--status failed``, over 10⁶ finished jobs, in-process.
  The finished set is made by copying the hashes of jobs that really completed and failed (new ids,
  users, finish times) and adding them to ``finished``: if history gains an index written by the
  terminal path, this bench must make its set through that path instead (it warns when it sees keys
  it did not make);
- the reaper's pass (``Housekeeper.reap``) over 10⁴ entries in the processing lists of 100 dead
  hosts (claimed, never started: the BLMOVE → start.lua gap), in-process.
Prints what misses its target; fixes nothing.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

from measure import RedisCounters
from systems import Ours, enqueue_many


def wait_for(pred, limit: float = 600) -> None:
    end = time.monotonic() + limit
    while not pred():
        if time.monotonic() > end:
            raise SystemExit("scale: timed out waiting for the daemon (see ours.log)")
        time.sleep(0.01)


def used_memory(r) -> int:
    return int(r.info("memory")["used_memory"])


def flat_sizes(ours: Ours, sizes: list[int], measured: int, redis_pid: int) -> list[dict]:
    from tender_pool.supervisor.status_probe import QueueProbe

    r, counters, out = ours.r, RedisCounters(ours.r, redis_pid), []
    for size in sizes:
        r.flushall()
        m0 = used_memory(r)
        t = time.monotonic()
        reqs = list(ours._requests("noop", size))
        enq_s = time.monotonic() - t
        t = time.monotonic()
        enqueue_many(ours.q, reqs)
        enq_s = time.monotonic() - t
        del reqs
        row = {"size": size, "bytes_per_job": (used_memory(r) - m0) / size, "enqueue_per_s": size / enq_s}
        probe = QueueProbe(r, ours.q.k, 86400)
        t = time.perf_counter()
        probe.read()
        row["status_ms"] = (time.perf_counter() - t) * 1000
        ours.start()
        try:
            ours.wait_slots()
            warm = min(200, size // 10)
            wait_for(lambda: ours.done() >= warm)
            c0, t0, d0 = counters.snap(), time.monotonic(), ours.done()
            target = min(d0 + measured, size)  # never more than is queued
            wait_for(lambda: ours.done() >= target)
            c1, t1, d1 = counters.snap(), time.monotonic(), ours.done()
        finally:
            ours.stop()
        d, n = counters.delta(c0, c1), d1 - d0
        row.update(jobs_per_s=n / (t1 - t0), redis_cpu_ms=d["cpu"] * 1000 / n, cmds=d["cmds"] / n,
                   reads=d["reads"] / n)
        out.append(row)
        print(f"  {size:>9} queued: {row['jobs_per_s']:.0f} jobs/s, {row['bytes_per_job']:.0f} B/job, "
              f"status probe {row['status_ms']:.1f} ms", flush=True)
    return out


def finished_set(ours: Ours, n: int, users: int = 1000, failed_share: float = 0.05) -> dict:
    """n finished jobs in retention, copied from a real completed and a real failed job."""
    from tender_pool.supervisor.history import HistoryFilter, query
    from tender_pool.supervisor.status_probe import QueueProbe

    r, k = ours.r, ours.q.k
    r.flushall()
    ours.start()
    try:
        ours.wait_slots()
        ours.enqueue("noop", 1)
        ours.enqueue("fail", 1)
        wait_for(lambda: ours.done() >= 2)
        time.sleep(0.3)
    finally:
        ours.stop()
    tpl = {}
    for jid in r.zrange(k.finished, 0, -1):
        h = r.hgetall(k.job(jid.decode()))
        tpl[h[b"state"].decode()] = (jid.decode(), h)
    known = {k.job(j) for j, _ in tpl.values()} | {k.finished}
    extra = sorted(x.decode() for x in r.keys("*") if x.decode() not in known)
    if "failed" not in tpl or "completed" not in tpl:
        raise SystemExit(f"templates missing: {sorted(tpl)}")
    now = int(time.time() * 1000)
    every = int(1 / failed_share)
    t = time.monotonic()
    for i in range(0, n, 10000):
        p = r.pipeline(transaction=False)
        z = {}
        for j in range(i, min(n, i + 10000)):
            state = "failed" if j % every == 0 else "completed"
            _, h = tpl[state]
            jid = secrets.token_hex(8)
            fin = now - (n - j)  # one per ms, newest last
            h = dict(h)
            h[b"id"], h[b"user"] = jid, f"u{j % users}"
            h[b"finished_at"], h[b"started_at"], h[b"created_at"] = fin, fin - 2, fin - 3
            p.hset(k.job(jid), mapping=h)
            p.pexpire(k.job(jid), 86400_000)
            z[jid] = fin
        p.zadd(k.finished, z)
        p.execute()
    made_s = time.monotonic() - t
    row = {"n": n, "made_s": made_s, "unknown_keys": extra}
    for label, flt in (("user", HistoryFilter(user="u7")), ("failed", HistoryFilter(status=["failed"]))):
        t = time.perf_counter()
        page = query(r, k, flt, page=1, page_size=20)
        row[f"history_{label}_ms"] = (time.perf_counter() - t) * 1000
        row[f"history_{label}_total"] = page.total
        row[f"history_{label}_items"] = len(page.items)
    probe = QueueProbe(r, k, 86400)
    t = time.perf_counter()
    probe.read()
    row["status_first_ms"] = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    probe.read()
    row["status_next_ms"] = (time.perf_counter() - t) * 1000
    return row


class _Log:
    def __getattr__(self, name):
        return lambda *a, **kw: None


def reaper_pass(ours: Ours, entries: int = 10_000, hosts: int = 100) -> dict:
    from tender_pool.slots.queue import Queue
    from tender_pool.supervisor.config import load
    from tender_pool.supervisor.keys import Owner
    from tender_pool.supervisor.reaper import Housekeeper

    r, k = ours.r, ours.q.k
    r.flushall()
    enqueue_many(ours.q, list(ours._requests("noop", entries)))
    per = entries // hosts
    p = r.pipeline(transaction=False)
    for h in range(hosts):
        owner = Owner(f"dead{h}", secrets.token_hex(4), "boot", 4242)
        proc = k.proc(owner.host, owner.incarnation, 1, 1)
        for _ in range(per):
            p.lmove(k.ready_lo, proc, "RIGHT", "LEFT")
        p.hset(k.proclists, proc, owner.encode())
    p.execute()
    cfg = load(str(ours.cfg))
    hk = Housekeeper(cfg, Queue(ours.q.r, k), Owner(cfg.pool.host_id, "bench", "boot", 1), _Log())
    t = time.perf_counter()
    hk.reap(time.monotonic())
    pass_s = time.perf_counter() - t
    back = r.llen(k.ready_lo) + r.llen(k.ready_hi)
    return {"entries": entries, "hosts": hosts, "pass_s": pass_s, "requeued": back, "reclaimed": hk.reclaimed}


def run(tmp: Path, sock: str, quick: bool, redis_pid: int) -> None:
    ours = Ours("tender-pool", sock, tmp)
    sizes = [10**3, 10**4, 10**5] if quick else [10**3, 10**5, 10**6]
    print("\ncost as the work grows (tender-pool):", flush=True)
    rows = flat_sizes(ours, sizes, 500 if quick else 3000, redis_pid)
    hist = finished_set(ours, 10**5 if quick else 10**6)
    reap = reaper_pass(ours)
    ours.r.flushall()
    print(f"\n{'queued jobs':>12} {'jobs/s':>8} {'vs 10³':>7} {'B/queued job':>13} {'Redis CPU ms/job':>17} "
          f"{'cmds/job':>9} {'reads/job':>10} {'enqueue/s':>10} {'status probe ms':>16}")
    base = rows[0]["jobs_per_s"]
    for x in rows:
        print(f"{x['size']:>12} {x['jobs_per_s']:>8.0f} {x['jobs_per_s'] / base:>7.2f} {x['bytes_per_job']:>13.0f} "
              f"{x['redis_cpu_ms']:>17.3f} {x['cmds']:>9.1f} {x['reads']:>10.1f} {x['enqueue_per_s']:>10.0f} "
              f"{x['status_ms']:>16.1f}")
    n = hist["n"]
    print(f"\nover {n} finished jobs in retention (1000 users, 5 % failed; made in {hist['made_s']:.0f} s):")
    print(f"  history --user u7        page 1 of 20: {hist['history_user_ms']:8.1f} ms   "
          f"(total {hist['history_user_total']}, {hist['history_user_items']} items)   target < 100 ms")
    print(f"  history --status failed  page 1 of 20: {hist['history_failed_ms']:8.1f} ms   "
          f"(total {hist['history_failed_total']}, {hist['history_failed_items']} items)   target < 100 ms")
    print(f"  status probe (Redis side of status): first {hist['status_first_ms']:.1f} ms, next "
          f"{hist['status_next_ms']:.1f} ms   target < 50 ms")
    if hist["unknown_keys"]:
        print(f"  WARNING: keys the terminal path wrote beside the job hashes and 'finished': "
              f"{hist['unknown_keys'][:6]}: the copied set lacks them")
    print(f"\nreaper pass over {reap['entries']} entries of {reap['hosts']} dead hosts: {reap['pass_s'] * 1000:.0f} ms "
          f"({reap['reclaimed']} reclaimed, {reap['requeued']} back in ready)   target < 1000 ms")
    slow = []
    if any(abs(x["jobs_per_s"] / base - 1) > 0.10 for x in rows):
        slow.append("claim+start jobs/s vary more than 10 % across queue sizes")
    if max(x["status_ms"] for x in rows) > 50 or hist["status_first_ms"] > 50:
        slow.append("status probe over 50 ms")
    for lab in ("user", "failed"):
        if hist[f"history_{lab}_ms"] > 100:
            slow.append(f"history --{'status failed' if lab == 'failed' else 'user U'} over 100 ms")
    if reap["pass_s"] > 1:
        slow.append("reaper pass over 1 s")
    print("slow: " + ("; ".join(slow) if slow else "nothing over its target"))
