"""Pure formatters for the CLI: ``format_*(dict) -> str``, no I/O, no clock (gunicorn ctl's shape).

They take the decoded JSON (the same dicts ``--json`` prints), so what a human reads and what a script
reads can never disagree.
"""

from __future__ import annotations

import json
from typing import Any


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024  # type: ignore[assignment]
    return "-"


def _secs(s: float | None) -> str:
    if s is None:
        return "-"
    s = float(s)
    if s < 60:
        return f"{s:.1f}s"
    m, s = divmod(int(s), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def _pct(p: float | None) -> str:
    return "-" if p is None else f"{p:.0f}%"


def _v(x: Any) -> str:
    return "-" if x is None or x == "" else str(x)


def _cut(s: str | None, n: int) -> str:
    s = _v(s)
    return s if len(s) <= n else "…" + s[-(n - 1) :]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return [fmt(header), *(fmt(r) for r in rows)]


SLOT_HEADER = ["SLOT", "PID", "STATE", "KIND", "JOB", "USER", "FILE", "STARTED", "ELAPSED", "BEAT",
               "CPU", "RSS", "TREE CPU", "TREE RSS", "HEAVIEST"]


def _slot_cells(s: dict) -> list[str]:
    started = s.get("started_at")
    return [
        s["id"], _v(s.get("pid")), s["state"], _v(s.get("kind")), _v(s.get("job_id")), _v(s.get("user")),
        _cut(s.get("file"), 32), started[11:19] if started else "-", _secs(s.get("elapsed_s")),
        _secs(s.get("heartbeat_age_s")), _pct(s.get("cpu_percent")), _bytes(s.get("rss_bytes")),
        _pct(s.get("tree_cpu_percent")), _bytes(s.get("tree_rss_bytes")), _v(s.get("heaviest")),
    ]


def format_status(st: dict) -> str:
    """The daemon's status as ``status`` prints it (systemctl status meets supervisorctl status)."""
    if st.get("error"):
        return f"● tender-pool: unreachable\n  {st['error']}"
    health = "degraded" if st.get("problems") else "healthy"
    if st.get("draining"):
        health += ", draining"
    lines = [
        f"● tender-pool {st.get('host_id') or ''} — {health}  (pid {_v(st.get('pid'))}, up {_secs(st.get('uptime_s'))})",
        f"  slots    {st['configured']} configured, {st['online']} online, {st['busy']} busy, {st['idle']} idle, "
        f"{st['offline']} offline",
        f"  queue    depth {_v(st['queue_depth'])} (queued {_v(st.get('queued'))}, running {_v(st.get('running'))}, "
        f"delayed {_v(st.get('delayed'))}, deferred {_v(st['deferred'])}), waiting ~{_v(st['waiting'])} "
        f"(estimate: depth − busy), dead-letter {_v(st['dead_letter'])}, failed {_v(st['failed'])}",
        f"  redis    {'ok' if st['redis_ok'] else 'UNREACHABLE'}"
        f"{', ' + _memory(st['redis_memory']) if st.get('redis_memory') else ''}",
        *_active_runs(st.get("runs"), st.get("runs_active")),
        *_consumers(st.get("consumers")),
    ]
    c = st.get("counters") or {}
    if c:
        lines.append("  since start  " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in c.items()))
    for p in st.get("problems") or []:
        lines.append(f"  ! {p}")
    for w in st.get("warnings") or []:
        lines.append(f"  warning: {w}")
    lines.append("")
    lines += _table(SLOT_HEADER, [_slot_cells(s) for s in st.get("slots") or []])
    return "\n".join(lines)


def format_redis_view(v: dict) -> str:
    """``status --redis``: every host's slots as its supervisor last wrote them, plus the queue."""
    if v.get("error"):
        return f"● tender-pool (Redis view): {v['error']}"
    q = v.get("queue") or {}
    queued = q.get("ready_hi", 0) + q.get("ready_lo", 0)
    deferred = q.get("deferred_user", 0) + q.get("deferred_dependency", 0)
    lines = [
        "● tender-pool — Redis view (what the hosts' heartbeats say; no local daemon asked)",
        f"  queue    depth {_v(v.get('queue_depth'))} (queued {queued}, running {q.get('processing', 0)}, "
        f"delayed {q.get('delayed', 0)}, deferred {deferred}), waiting ~{_v(v.get('waiting'))} "
        f"(estimate: depth − busy), dead-letter {q.get('dead_letter', 0)}, failed {q.get('failed', 0)}",
        *([f"  redis    {_memory(v['redis_memory'])}"] if v.get("redis_memory") else []),
        *_active_runs(v.get("runs"), v.get("runs_active")),
        *_consumers(v.get("consumers")),
        *(f"  ! {p}" for p in v.get("problems") or []),
        *(f"  warning: {w}" for w in v.get("warnings") or []),
    ]
    busy = {b["worker"]: b for b in v.get("busy") or []}
    if not v.get("hosts"):
        lines.append("  no host heartbeats (no daemon alive on this Redis)")
    for host in v.get("hosts") or []:
        lines.append("")
        lines.append(f"host {host['host_id']}  (supervisor pid {host['pid']}, incarnation {host['incarnation']})")
        rows = []
        for s in host.get("slots") or []:
            b = busy.pop(s["id"], None)
            if b and not s.get("job_id"):
                s = {**s, "kind": b["kind"], "job_id": b["job_id"], "user": b["user"], "file": b["file"]}
            rows.append(_slot_cells(s))
        lines += ["  " + line for line in _table(SLOT_HEADER, rows)]
    if busy:
        lines.append("")
        lines.append("busy states of live hosts without a slot table yet:")
        for b in busy.values():
            lines.append(f"  {b['worker']}  {b['kind']}  job {b['job_id']}  user {b['user']}  file {_v(b['file'])}")
    return "\n".join(lines)


HISTORY_HEADER = ["JOB", "STATE", "KIND", "USER", "FILE", "STARTED", "FINISHED", "ATTEMPTS", "ERROR"]


def format_history(page: dict) -> str:
    rows = []
    for j in page.get("items") or []:
        err = j.get("error") or {}
        f = (j.get("payload") or {}).get("file")
        rows.append([
            j["id"], j["state"], j["kind"], j["user"], _cut(f if isinstance(f, str) else None, 32),
            _v(j.get("started_at")), _v(j.get("finished_at")), str(j.get("attempts", 0)),
            f"{err.get('kind')}: {err.get('message')}"[:60] if err else "-",
        ])
    pages = max(1, -(-page["total"] // page["page_size"])) if page["page_size"] else 1
    foot = f"page {page['page']} of {pages}, {page['total']} job(s) match, newest first"
    return "\n".join([*_table(HISTORY_HEADER, rows), foot])


def format_job(v: dict) -> str:
    """``job``: one job (``job --json``'s dict)."""
    lines = [
        f"job {v['id']}  {v['state']}",
        f"  kind {v['kind']}  user {v['user']}  priority {v['priority']}",
        f"  attempts {v['attempts']}  tries {v['tries']}  interruptions {v['interruptions']}  worker {v.get('worker') or '-'}",
        f"  created {v.get('created_at')}  started {v.get('started_at') or '-'}  finished {v.get('finished_at') or '-'}",
    ]
    if v.get("after"):
        lines.append(f"  after {' '.join(v['after'])}")
    if v.get("payload"):
        lines.append(f"  payload {json.dumps(v['payload'], ensure_ascii=False, separators=(',', ':'))}")
    if v.get("error"):
        lines.append(f"  error {v['error']['kind']}: {v['error']['message']}")
    if v.get("skipped_from"):
        lines.append(f"  skipped: unchanged input, the result of {v['skipped_from']}")
    if v.get("result") is not None:
        lines.append(f"  result {json.dumps(v['result'], ensure_ascii=False, separators=(',', ':'))}")
    return "\n".join(lines)


# --- runs ---------------------------------------------------------------------------------------------

BAR_WIDTH = 24


def _done(c: dict) -> int:
    return c.get("completed", 0) + c.get("failed", 0) + c.get("cancelled", 0) + c.get("skipped", 0)


def format_counts(c: dict | None) -> str:
    """``12/48 done (completed 10, skipped 1, failed 1, cancelled 0), running 4, waiting 2, queued 30``."""
    if not c:
        return "-"
    return (f"{_done(c)}/{c.get('total', 0)} done (completed {c.get('completed', 0)}, skipped {c.get('skipped', 0)}, "
            f"failed {c.get('failed', 0)}, cancelled {c.get('cancelled', 0)}), running {c.get('running', 0)}, "
            f"waiting {c.get('waiting', 0)}, queued {c.get('queued', 0)}")


def progress_bar(c: dict | None, width: int = BAR_WIDTH) -> str:
    """``[########----------------]  33%``: finished jobs of the run (failed and skipped included)."""
    total = (c or {}).get("total", 0)
    done = _done(c or {})
    filled = width * done // total if total else 0
    pct = 100 * done // total if total else 0
    return f"[{'#' * filled}{'-' * (width - filled)}] {pct:3d}%"


def format_event(ev: dict) -> str:
    """``runs watch``: one line per event — the progress bar, the run's state, what happened."""
    what = ev["type"]
    if ev.get("job_id") is not None:
        what += f" {ev.get('key') or ev['job_id']}"
    if ev["type"] == "job_progress":
        if ev.get("progress") is not None:
            what += f" {float(ev['progress']) * 100:.0f}%"
        if ev.get("message"):
            what += f" {ev['message']}"
        if ev.get("chunk"):
            what += f" +{len(ev['chunk'])} chars"
    if ev.get("skipped_from"):
        what += f" (result of {ev['skipped_from']})"
    if ev.get("gap"):
        what += " (events were trimmed: showing the state now)"
    return f"{progress_bar(ev.get('counts'))}  {_v(ev.get('state'))}  {format_counts(ev.get('counts'))}  {what}"


RUN_JOB_HEADER = ["JOB", "KEY", "STATE", "ERROR / SKIPPED FROM"]


def format_run(run: dict) -> str:
    """``runs show``: the run, its counts and each job."""
    rows = [[j["id"], _cut(j["key"], 40), j["state"],
             f"{j['error']['kind']}: {j['error']['message']}"[:60] if j.get("error")
             else f"result of {j['skipped_from']}" if j.get("skipped_from") else "-"] for j in run.get("jobs") or []]
    return "\n".join([
        f"run {run['id']}  {run['state']}",
        f"  user {run['user']}  kind {run['kind']}  created {_v(run.get('created_at'))}  finished {_v(run.get('finished_at'))}",
        f"  {progress_bar(run['counts'])}  {format_counts(run['counts'])}",
        "",
        *_table(RUN_JOB_HEADER, rows),
    ])


RUNS_HEADER = ["RUN", "STATE", "USER", "KIND", "CREATED", "FINISHED", "DONE", "FAILED", "RUNNING"]


def format_runs(runs: list[dict]) -> str:
    """``runs list``: newest first."""
    rows = [[r["id"], r["state"], r["user"], r["kind"], _v(r.get("created_at")), _v(r.get("finished_at")),
             f"{_done(r['counts'])}/{r['counts']['total']}", str(r["counts"]["failed"]), str(r["counts"]["running"])]
            for r in runs]
    return "\n".join([*_table(RUNS_HEADER, rows), f"{len(runs)} run(s), newest first"])


ACTIVE_RUNS_SHOWN = 10


def _memory(m: dict) -> str:
    """``memory 19.9 of 20.0 MiB (99 %, noeviction)`` (without a limit: ``memory 3.1 MiB (no maxmemory)``)."""
    mib = 1024 * 1024
    used, cap = m["used_bytes"], m["maxmemory_bytes"]
    if not cap:
        return f"memory {used / mib:.1f} MiB (no maxmemory)"
    return f"memory {used / mib:.1f} of {cap / mib:.1f} MiB ({100 * used / cap:.0f} %, {m['policy']})"


def _active_runs(runs: list[dict] | None, active: int | None = None) -> list[str]:
    """The newest active runs; ``active`` counts them all (``runs`` lists at most 20)."""
    if not runs:
        return []
    total = max(active or 0, len(runs))
    lines = [f"  runs     {total} active, newest first"]
    for r in runs[:ACTIVE_RUNS_SHOWN]:
        lines.append(f"    {r['id']}  {r['user']}  {r['kind']}  {format_counts(r.get('counts'))}")
    if total > ACTIVE_RUNS_SHOWN:
        lines.append(f"    … and {total - ACTIVE_RUNS_SHOWN} more (tender-pool runs list --state running)")
    return lines


GROUPS_HEADER = ["group", "consumers", "lag", "pending", "oldest pending", "parked", "gap"]


def format_groups(groups: list[dict]) -> str:
    """``events groups``."""
    if not groups:
        return "no consumer groups (tender-pool events register GROUP)"
    rows = [[g["group"], str(g["consumers"]), str(g["lag"]), str(g["pending"]),
             "-" if g["oldest_pending_age_s"] is None else f"{g['oldest_pending_age_s']:.1f}s", str(g["parked"]),
             "GAP: resync" if g["gap"] else "-"] for g in groups]
    return "\n".join(_table(GROUPS_HEADER, rows))


def _consumers(consumers: list[dict] | None) -> list[str]:
    if not consumers:
        return []
    return [f"  events   {c['group']}: lag {c['lag']}, pending {c['pending']}"
            + (f", oldest {c['oldest_pending_age_s']:.0f}s" if c.get("oldest_pending_age_s") else "")
            + (", GAP (resync)" if c.get("gap") else "") for c in consumers]


def format_handlers(rows: list[dict], error: str | None = None) -> str:
    """``tender-pool handlers``: each kind, what it runs, its limits, whether every slot imported it."""
    def imported(r: dict) -> str:
        if r["type"] != "function":
            return "-"
        if r.get("imported") is None and not r.get("imports"):
            return "?"
        ok = sum(1 for v in r["imports"].values() if v == "")
        word = {True: "yes", False: "NO", None: "pending"}[r.get("imported")]
        return f"{word} ({ok}/{len(r['imports'])} slots)"

    cells = [[r["kind"], r["type"], _cut(r["runs"], 60), _secs(r["timeout"]), str(r["per_user"] or "no limit"),
              imported(r)] for r in rows]
    out = _table(["KIND", "TYPE", "RUNS", "TIMEOUT", "PER USER", "IMPORTED"], cells)
    for r in rows:
        for slot, why in sorted((r.get("imports") or {}).items()):
            if why:
                out.append(f"{r['kind']}: {slot} cannot import it: {why}")
    if error:
        out.append(f"(imports unknown: {error})")
    return "\n".join(out)
