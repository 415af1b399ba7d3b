"""The ``tender-pool`` command (click). Thin: each command loads the config, calls one owner, prints.

Exit codes are CONTRACT.md's: 2 bad config / usage / bad input, 4 Redis unreachable (submit, job),
3 extraction error (extract). Only ``run`` imports the daemon.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, NoReturn

import click
import msgspec

from .config import Config, ConfigError, load
from .types import MAX_PAYLOAD_DEPTH, BadInput, JobRecord, JobView, SubmitRequest, check_submit

EXIT_BAD_INPUT = 2
EXIT_REDIS = 4


def _config(path: str | None) -> Config:
    try:
        return load(path)
    except ConfigError as e:
        click.echo(f"config: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)


def _fail(msg: str, code: int) -> NoReturn:
    click.echo(f"tender-pool: {msg}", err=True)
    sys.exit(code)


def _not_utf8(value: str) -> bool:
    """click hands over undecodable argv bytes as lone surrogates (surrogateescape)."""
    return any(0xDC80 <= ord(c) <= 0xDCFF for c in value)


def _queue(cfg: Config):
    from tender_pool.slots.queue import Queue

    return Queue.for_config(cfg)


config_option = click.option(
    "-c", "--config", "config_path", type=click.Path(dir_okay=False), help="Config file (else $TENDER_POOL_CONFIG, ./tender-pool.toml, /etc/tender-pool/tender-pool.toml)."
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """tender-pool: the tender-document parsing worker pool (supervisor, slots, Redis queue)."""


@main.command()
@config_option
def run(config_path: str | None) -> None:
    """Run the supervisor in the foreground (what systemd runs). Exit 0 after a clean drain."""
    cfg = _config(config_path)
    from .daemon import Supervisor

    sys.exit(Supervisor(cfg).run())


@main.command()
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--user", "-u", required=True, help="The platform user the job belongs to (one running job per user).")
@click.option("--kind", "-k", default="parse_markdown", show_default=True, help="Job kind: parse_markdown or a [handlers.NAME].")
@click.option("--payload", help="JSON object; merged with {\"file\": …} when FILE is given.")
@click.option("--job-id", help="Idempotency key: an id that already exists queues nothing.")
@click.option("--after", multiple=True, help="Run only after this job completed (repeatable).")
@click.option("--priority", type=click.Choice(["interactive", "bulk"]), default="bulk", show_default=True)
@click.option("--wait", is_flag=True, help="Wait for the job to end and print it as `job --json` does.")
@click.option("--timeout", type=float, help="With --wait: give up after this many seconds (exit 1).")
@click.option("--json", "as_json", is_flag=True, help='Print {"id", "state"}.')
@config_option
def submit(
    file: str | None,
    user: str,
    kind: str,
    payload: str | None,
    job_id: str | None,
    after: tuple[str, ...],
    priority: str,
    wait: bool,
    timeout: float | None,
    as_json: bool,
    config_path: str | None,
) -> None:
    """Queue one job. Exit 0 queued (or completed with --wait), 1 ended otherwise or timed out,
    2 bad input, 4 Redis unreachable."""
    import redis

    from tender_pool.slots.connection import NotReplicated

    cfg = _config(config_path)
    for opt, value in (("--user", user), ("--payload", payload), ("--job-id", job_id), ("--kind", kind), *(("--after", a) for a in after)):
        if value is not None and _not_utf8(value):
            _fail(f"{opt}: not valid UTF-8", EXIT_BAD_INPUT)
    body: dict[str, Any] = {}
    if payload:
        try:
            body = msgspec.json.decode(payload)
        except msgspec.DecodeError as e:
            _fail(f"--payload is not JSON: {e}", EXIT_BAD_INPUT)
        except RecursionError:
            _fail(f"--payload is nested deeper than {MAX_PAYLOAD_DEPTH} levels", EXIT_BAD_INPUT)
        if not isinstance(body, dict):
            _fail("--payload must be a JSON object", EXIT_BAD_INPUT)
    if file:
        path = os.path.abspath(file)
        if not os.path.isfile(path):
            _fail(f"{file}: no such file", EXIT_BAD_INPUT)
        body["file"] = path
    if kind not in cfg.kinds:
        _fail(f"unknown kind {kind!r}; configured: {', '.join(cfg.kinds)}", EXIT_BAD_INPUT)
    req = SubmitRequest(kind=kind, user=user, payload=body, id=job_id, after=list(after), priority=priority)  # type: ignore[arg-type]
    try:
        check_submit(req)
    except BadInput as e:
        _fail(str(e), EXIT_BAD_INPUT)
    try:
        q = _queue(cfg)
        for dep in req.after:  # a cycle needs an id that does not exist yet: refusing those rules cycles out
            if not q.r.exists(q.k.job(dep)):
                _fail(f"--after {dep}: no such job", EXIT_BAD_INPUT)
        created, jid, state = q.enqueue(req)
        if wait:
            _wait_and_print(q, jid, timeout)
        if as_json:
            click.echo(msgspec.json.encode({"id": jid, "state": state}).decode())
        else:
            click.echo(jid)
    except NotReplicated as e:
        _fail(f"not acknowledged: the job may be lost by a failover ({e}; redis.wait_replicas = "
              f"{cfg.redis.wait_replicas}); submit it again with the same --job-id", EXIT_REDIS)
    except redis.RedisError as e:
        _fail(f"Redis unreachable at {cfg.redis.url}: {e}", EXIT_REDIS)


def _wait_and_print(q, job_id: str, timeout: float | None) -> NoReturn:
    end = time.monotonic() + timeout if timeout else None
    delay = 0.01
    while True:
        rec = q.get(job_id)
        if rec is not None and rec.state.terminal:
            click.echo(msgspec.json.encode(JobView.of(rec)).decode())
            sys.exit(0 if rec.state.value == "completed" else 1)
        if end is not None and time.monotonic() >= end:
            if rec is not None:
                click.echo(msgspec.json.encode(JobView.of(rec)).decode())
            click.echo(f"tender-pool: timed out waiting for {job_id}", err=True)
            sys.exit(1)
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)


@main.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True)
@config_option
def job(job_id: str, as_json: bool, config_path: str | None) -> None:
    """Show one job: state, attempts, timings, error, result. Exit 2 if there is no such job."""
    import redis

    from tender_pool.slots.queue import Undecodable

    cfg = _config(config_path)
    try:
        rec = _queue(cfg).get(job_id)
    except Undecodable as e:
        _fail(f"job {job_id} exists but cannot be decoded: {e}", 1)
    except redis.RedisError as e:
        _fail(f"Redis unreachable at {cfg.redis.url}: {e}", EXIT_REDIS)
    if rec is None:
        _fail(f"no such job: {job_id}", EXIT_BAD_INPUT)
    view = JobView.of(rec)
    if as_json:
        click.echo(msgspec.json.encode(view).decode())
    else:
        click.echo(format_job(rec, view))


def format_job(rec: JobRecord, v: JobView) -> str:
    lines = [
        f"job {v.id}  {v.state}",
        f"  kind {v.kind}  user {v.user}  priority {v.priority}",
        f"  attempts {v.attempts}  tries {v.tries}  interruptions {v.interruptions}  worker {v.worker or '-'}",
        f"  created {v.created_at}  started {v.started_at or '-'}  finished {v.finished_at or '-'}",
    ]
    if v.after:
        lines.append(f"  after {' '.join(v.after)}")
    if v.payload:
        lines.append(f"  payload {msgspec.json.encode(v.payload).decode()}")
    if v.error:
        lines.append(f"  error {v.error.kind}: {v.error.message}")
    if v.result is not None:
        lines.append(f"  result {msgspec.json.encode(v.result).decode()}")
    return "\n".join(lines)


@main.command()
@click.argument("job_id")
@config_option
def cancel(job_id: str, config_path: str | None) -> None:
    """Cancel a job: ended at once if not running; a running one has its process group killed."""
    import redis

    cfg = _config(config_path)
    try:
        q = _queue(cfg)
        rec = q.get(job_id)
        if rec is None:
            _fail(f"no such job: {job_id}", EXIT_BAD_INPUT)
        res = q.cancel(rec, int(cfg.pool.result_retention), cfg.lock_ttl_ms)
    except redis.RedisError as e:
        _fail(f"Redis unreachable at {cfg.redis.url}: {e}", EXIT_REDIS)
    click.echo(" ".join(res))
    sys.exit(0 if res[0] in ("cancelled", "signalled") else 1)


EXIT_HEALTHY, EXIT_DEGRADED, EXIT_UNREACHABLE = 0, 1, 2


def _status_once(cfg: Config, via_redis: bool) -> tuple[dict, str, int]:
    """(JSON dict, text, exit code) for one look at the pool."""
    from . import render
    from .status_client import StatusUnavailable, redis_view, request
    from .status_protocol import StatusView

    if via_redis:
        v = msgspec.to_builtins(redis_view(cfg))
        return v, render.format_redis_view(v), EXIT_HEALTHY if v["redis_ok"] else EXIT_DEGRADED
    try:
        reply = request(cfg.status.socket)
        if not reply.ok or reply.status is None:
            raise StatusUnavailable(cfg.status.socket, reply.error or "empty reply", listening=True)
        view = reply.status
    except StatusUnavailable as e:
        view = StatusView.unreachable(cfg.pool.worker_count, cfg.pool.host_id, str(e))
        d = msgspec.to_builtins(view)
        return d, render.format_status(d), EXIT_UNREACHABLE
    d = msgspec.to_builtins(view)
    return d, render.format_status(d), EXIT_DEGRADED if view.problems else EXIT_HEALTHY


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the status object (CONTRACT.md fields).")
@click.option("--watch", is_flag=True, help="Refresh in place every --interval seconds until ^C.")
@click.option("--interval", type=float, default=2.0, show_default=True, help="With --watch.")
@click.option("--redis", "via_redis", is_flag=True, help="Ask Redis, not the local socket: every host's slots.")
@config_option
def status(as_json: bool, watch: bool, interval: float, via_redis: bool, config_path: str | None) -> None:
    """Slots, queue, counters and Redis reachability. Exit 0 healthy, 1 degraded (a slot offline or
    crash-looping, Redis unreachable, a job past its deadline), 2 daemon unreachable."""
    cfg = _config(config_path)
    while True:
        d, text, code = _status_once(cfg, via_redis)
        out = msgspec.json.encode(d).decode() if as_json else text
        if watch:
            click.echo("\x1b[H\x1b[2J" + out if not as_json else out)
            try:
                time.sleep(max(0.2, interval))
            except KeyboardInterrupt:
                sys.exit(code)
            continue
        click.echo(out)
        sys.exit(code)


def _control(cfg: Config, op: str, workers: int | None = None):
    """Send one control request; exit 2 when no daemon answers (or we may not talk to it), 1 when
    it refuses."""
    from .status_client import StatusUnavailable, control

    try:
        reply = control(cfg.status.socket, op, workers)
    except StatusUnavailable as e:
        _fail(str(e), EXIT_UNREACHABLE)
    if not reply.ok:
        _fail(f"{op} refused: {reply.error}", 1)
    click.echo(reply.message)
    return reply


def _watch(cfg: Config, done, timeout: float | None, what: str, done_msg: str = "") -> NoReturn:
    """Poll the daemon's status until ``done(status dict)``; exit 0, or 1 after ``timeout``."""
    from .status_client import StatusUnavailable, request

    end = time.monotonic() + timeout if timeout else None
    while True:
        try:
            reply = request(cfg.status.socket)
        except StatusUnavailable as e:
            _fail(str(e), EXIT_UNREACHABLE)
        st = msgspec.to_builtins(reply.status) if reply.status is not None else {}
        if st and done(st):
            if done_msg:
                click.echo(done_msg)
            sys.exit(0)
        if end is not None and time.monotonic() >= end:
            _fail(f"timed out after {timeout:g} s waiting for {what}", 1)
        time.sleep(0.2)


@main.command()
@click.argument("workers", type=click.IntRange(1, 4))
@click.option("--wait", is_flag=True, help="Wait until exactly WORKERS slots run (surplus slots finish their job first).")
@click.option("--timeout", type=float, help="With --wait: give up after this many seconds (exit 1).")
@config_option
def scale(workers: int, wait: bool, timeout: float | None, config_path: str | None) -> None:
    """Run WORKERS slots (1-4) from now on, live. Extra slots start; surplus slots finish their
    current job, then exit (no job is killed). Also resumes a drained pool. Lasts until the next
    scale, or a reload whose file changed worker_count. Exit 0 accepted (with --wait: done), 1 refused
    or timed out, 2 no daemon answers or permission denied (not in the socket's group)."""
    cfg = _config(config_path)
    _control(cfg, "scale", workers)
    if wait:
        _watch(cfg, lambda st: len(st["slots"]) == workers and all(r["state"] in ("idle", "busy") for r in st["slots"]),
               timeout, f"{workers} running slots")


@main.command()
@click.option("--timeout", type=float, help="Give up waiting after this many seconds (exit 1); the drain goes on.")
@config_option
def drain(timeout: float | None, config_path: str | None) -> None:
    """Stop claiming, let running jobs finish, and return once no job runs (for deploys). The
    supervisor stays up with no slot running, so `systemctl restart` is then instant and loses
    nothing; `tender-pool scale N` resumes instead. Exit 0 idle, 1 refused or timed out, 2 no
    daemon answers or permission denied."""
    cfg = _config(config_path)
    _control(cfg, "drain")
    _watch(cfg, lambda st: all(r["pid"] is None for r in st["slots"]), timeout, "running jobs to finish",
           "drained: no job running, nothing claims (`tender-pool scale N` resumes)")


@main.command()
@click.option("--status", "states", multiple=True, help="Job state (completed, failed, cancelled, skipped, dead); repeatable.")
@click.option("--user", help="Exactly this user.")
@click.option("--file", "file_part", help="Substring of the input file's path (case-insensitive).")
@click.option("--job-id", help="Exactly this job.")
@click.option("--started-after", help="RFC 3339 time, date, or epoch seconds (inclusive).")
@click.option("--started-before", help="(exclusive)")
@click.option("--ended-after", help="(inclusive)")
@click.option("--ended-before", help="(exclusive)")
@click.option("--page", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--page-size", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print {page, page_size, total, items: [job --json objects]}.")
@config_option
def history(states: tuple[str, ...], user: str | None, file_part: str | None, job_id: str | None,
            started_after: str | None, started_before: str | None, ended_after: str | None,
            ended_before: str | None, page: int, page_size: int, as_json: bool, config_path: str | None) -> None:
    """Finished jobs, newest first, from Redis (survives restarts; kept pool.result_retention seconds)."""
    import redis

    from . import render
    from .history import HistoryFilter, parse_time, query
    from .keys import Keys

    cfg = _config(config_path)
    times: dict[str, int | None] = {}
    for name, val in (("started_after", started_after), ("started_before", started_before),
                      ("ended_after", ended_after), ("ended_before", ended_before)):
        try:
            times[name] = parse_time(val) if val else None
        except ValueError:
            _fail(f"--{name.replace('_', '-')} {val!r}: an RFC 3339 time, a date, or epoch seconds", EXIT_BAD_INPUT)
    flt = HistoryFilter(status=list(states), user=user, file=file_part, job_id=job_id, **times)
    try:
        q = _queue(cfg)
        res = query(q.r, Keys(cfg.redis.prefix, cfg.pool.queue), flt, page=page, page_size=page_size)
    except redis.RedisError as e:
        _fail(f"Redis unreachable at {cfg.redis.url}: {e}", EXIT_REDIS)
    if as_json:
        click.echo(msgspec.json.encode(res).decode())
    else:
        click.echo(render.format_history(msgspec.to_builtins(res)))


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the extraction JSON (CONTRACT.md) instead of Markdown.")
@click.option("--timeout", type=float, help="Hard timeout in seconds.")
def extract(file: str, as_json: bool, timeout: float | None) -> None:
    """Extract one document locally (no Redis): Markdown on stdout. Exit 3 on an extraction error."""
    from tender_pool.extract.api import main_extract

    sys.exit(main_extract(file, as_json, timeout))


if __name__ == "__main__":  # pragma: no cover
    main()
