"""The ``tender-pool`` command (click). Thin: each command loads the config, calls one owner, prints.

Exit codes are the contract's: 2 bad config / usage / bad input / no such job or run, 4 Redis
unreachable, 3 extraction error (extract). Only ``run`` imports the daemon; every producer-side
command (submit, job, cancel, history, runs) goes through ``tender_pool.client``, which owns the
Redis calls: this module has none of its own.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from typing import Any, Iterator, NoReturn

import click
import msgspec

from tender_pool.store.config import Config, ConfigError, load, one_line
from tender_pool.store.records import TERMINAL_STATES
from tender_pool.store.submission import MAX_PAYLOAD_DEPTH

TERMINAL = {s.value for s in TERMINAL_STATES}

EXIT_BAD_INPUT = 2
EXIT_REDIS = 4


def _config(path: str | None) -> Config:
    try:
        return load(path)
    except ConfigError as e:
        click.echo(f"config: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)


def _fail(msg: str, code: int) -> NoReturn:
    click.echo(f"tender-pool: {one_line(msg)}", err=True)  # an id with a line break stays on one line
    sys.exit(code)


def _text_arg(what: str, value: str) -> str:
    """An id or name from argv that cannot be a key: undecodable bytes (click's surrogates)."""
    if _not_utf8(value):
        _fail(f"{what}: not valid UTF-8", EXIT_BAD_INPUT)
    return value


def _not_utf8(value: str) -> bool:
    """click hands over undecodable argv bytes as lone surrogates (surrogateescape)."""
    return any(0xDC80 <= ord(c) <= 0xDCFF for c in value)


def _seconds(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A duration option (``--timeout``, ``--interval``): a finite number above 0. ``nan`` compared
    false against every deadline (a wait that never ended), ``inf`` overflowed ``time.sleep``, and 0
    or less meant "no timeout" to some commands and "at once" to others."""
    if value is not None and not (math.isfinite(value) and value > 0):
        _fail(f"{param.opts[0]} {value!r}: a finite number of seconds above 0", EXIT_BAD_INPUT)
    return value


def _client(cfg: Config):
    from tender_pool.client import Client

    return Client.for_config(cfg)


@contextlib.contextmanager
def _calls(cfg: Config) -> Iterator[None]:
    """The client's errors → the contract's exit codes: 2 no such job or run / bad input, 4 Redis
    unreachable or the write not acknowledged by enough replicas."""
    import redis

    from tender_pool.client import BadInput, NotFound, NotReplicated, Unavailable

    try:
        yield
    except (NotFound, BadInput) as e:
        _fail(str(e), EXIT_BAD_INPUT)
    except NotReplicated as e:
        _fail(f"not acknowledged: the write may be lost by a failover ({e}; redis.wait_replicas = "
              f"{cfg.redis.wait_replicas}); submit it again with the same id", EXIT_REDIS)
    except Unavailable as e:
        _fail(str(e), EXIT_REDIS)
    except redis.RedisError as e:
        _fail(f"Redis error at {cfg.redis.url}: {e}", EXIT_REDIS)


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
    from tender_pool.supervisor.daemon import Supervisor

    sys.exit(Supervisor(cfg).run())


@main.command()
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--user", "-u", required=True, help="The platform user the job belongs to (one running job per user).")
@click.option("--kind", "-k", default="parse_markdown", show_default=True, help="Job kind: parse_markdown or a [handlers.NAME].")
@click.option("--payload", help="JSON object; merged with {\"file\": …} when FILE is given.")
@click.option("--job-id", help="Idempotency key: an id that already exists queues nothing. No '/' (a run's jobs are <run id>/<n>).")
@click.option("--after", multiple=True, help="Run only after this job completed (repeatable).")
@click.option("--priority", type=click.Choice(["interactive", "bulk"]), default="bulk", show_default=True)
@click.option("--wait", is_flag=True, help="Wait for the job to end and print it as `job --json` does.")
@click.option("--timeout", type=float, callback=_seconds, help="With --wait: give up after this many seconds (exit 1).")
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
    with _calls(cfg):
        c = _client(cfg)
        job = c.submit(user, kind, body, job_id=job_id, after=after, priority=priority)
        if wait:
            job = c.wait(job.id, timeout)
            click.echo(msgspec.json.encode(job).decode())
            if job.state not in TERMINAL:
                _fail(f"timed out waiting for {job.id}", 1)
            sys.exit(0 if job.state == "completed" else 1)
    if as_json:
        click.echo(msgspec.json.encode({"id": job.id, "state": job.state}).decode())
    else:
        click.echo(job.id)


@main.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True)
@config_option
def job(job_id: str, as_json: bool, config_path: str | None) -> None:
    """Show one job: state, attempts, timings, error, result. Exit 2 if there is no such job."""
    from tender_pool.client import Undecodable

    from tender_pool.supervisor import render

    cfg = _config(config_path)
    job_id = _text_arg("job id", job_id)
    with _calls(cfg):
        try:
            job = _client(cfg).job(job_id)
        except Undecodable as e:
            _fail(f"job {job_id} exists but cannot be decoded: {e}", 1)
    if as_json:
        click.echo(msgspec.json.encode(job).decode())
    else:
        click.echo(render.format_job(msgspec.to_builtins(job)))


@main.command()
@click.argument("job_id")
@config_option
def cancel(job_id: str, config_path: str | None) -> None:
    """Cancel a job: ended at once if not running; a running one has its process group killed.
    Exit 0 cancelled (or already ended), 2 no such job, 4 Redis unreachable."""
    cfg = _config(config_path)
    job_id = _text_arg("job id", job_id)
    with _calls(cfg):
        res = _client(cfg).cancel(job_id)
    click.echo(str(res))


EXIT_HEALTHY, EXIT_DEGRADED, EXIT_UNREACHABLE = 0, 1, 2


def _status_once(cfg: Config, via_redis: bool) -> tuple[dict, str, int]:
    """(JSON dict, text, exit code) for one look at the pool."""
    from tender_pool.supervisor import render
    from tender_pool.client.status_client import StatusUnavailable, redis_view, request
    from tender_pool.client.status_protocol import StatusView

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
@click.option("--json", "as_json", is_flag=True, help="Print the status object as JSON.")
@click.option("--watch", is_flag=True, help="Refresh in place every --interval seconds until ^C.")
@click.option("--interval", type=float, callback=_seconds, default=2.0, show_default=True, help="With --watch.")
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
    from tender_pool.client.status_client import StatusUnavailable, control

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
    from tender_pool.client.status_client import StatusUnavailable, request

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
@click.option("--timeout", type=float, callback=_seconds, help="With --wait: give up after this many seconds (exit 1).")
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
@click.option("--timeout", type=float, callback=_seconds, help="Give up waiting after this many seconds (exit 1); the drain goes on.")
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
@click.option("--kind", help="Exactly this kind (parse_markdown, or a [handlers.NAME]).")
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
def history(states: tuple[str, ...], user: str | None, kind: str | None, file_part: str | None, job_id: str | None,
            started_after: str | None, started_before: str | None, ended_after: str | None,
            ended_before: str | None, page: int, page_size: int, as_json: bool, config_path: str | None) -> None:
    """Finished jobs, newest first, from Redis (survives restarts; kept pool.result_retention seconds)."""
    from tender_pool.client.history import parse_time

    from tender_pool.supervisor import render

    cfg = _config(config_path)
    for s in states:
        if s not in TERMINAL:  # "running" or a typo would list nothing and look like an empty history
            _fail(f"--status {s!r}: not a finished state (one of {', '.join(sorted(TERMINAL))})", EXIT_BAD_INPUT)
    times: dict[str, int | None] = {}
    for name, val in (("started_after", started_after), ("started_before", started_before),
                      ("ended_after", ended_after), ("ended_before", ended_before)):
        try:
            times[name] = parse_time(val) if val is not None else None
        except ValueError as e:
            _fail(f"--{name.replace('_', '-')} {val!r}: {e}", EXIT_BAD_INPUT)
    with _calls(cfg):
        res = _client(cfg).history(page=page, page_size=page_size, status=states, user=user, kind=kind,
                                   file=file_part, job_id=job_id, **times)
    if as_json:
        click.echo(msgspec.json.encode(res).decode())
    else:
        click.echo(render.format_history(msgspec.to_builtins(res)))


@main.group()
def runs() -> None:
    """Runs: many jobs of one user and kind with one id, one progress stream, cancel and retry.
    Exit codes as for `job`: 2 no such run or bad input, 4 Redis unreachable."""


@runs.command("submit")
@click.option("--user", "-u", required=True, help="The platform user the run belongs to.")
@click.option("--kind", "-k", required=True, help="Job kind of every item: parse_markdown or a [handlers.NAME].")
@click.option("--items", "items_path", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help='JSONL, one {"key": "1.1.1", "payload": {...}} a line; keys unique. "-" reads stdin.')
@click.option("--priority", type=click.Choice(["interactive", "bulk"]), default="bulk", show_default=True)
@click.option("--max-parallel", type=click.IntRange(min=1), help="At most N of the run's jobs run at once.")
@click.option("--overwrite", is_flag=True, help="Run every item, even one whose input is unchanged since a completed job.")
@click.option("--run-id", help="Idempotency key: submitting again with this id and the same items resumes or "
              "returns that run, never a second one (other items: exit 2). Else an id is generated.")
@click.option("--json", "as_json", is_flag=True, help="Print the run as `runs show --json` does.")
@config_option
def runs_submit(user: str, kind: str, items_path: str, priority: str, max_parallel: int | None, overwrite: bool,
                run_id: str | None, as_json: bool, config_path: str | None) -> None:
    """Create a run: one job per line of --items (ids <run id>/<n>), queued at once (or skipped: an
    item whose input hash equals a completed job's still in retention points at that job's result).
    The run is written in chunks and sealed by the last: after a timeout (exit 4), submit again with
    the same --run-id. Prints the run id. Exit 2 for a bad or repeated line (its number named), an
    empty file, or a --run-id that exists with other items."""
    from tender_pool.client.items import read_jsonl
    from tender_pool.client.errors import BadInput

    cfg = _config(config_path)
    for opt, value in (("--user", user), ("--kind", kind), ("--run-id", run_id)):
        if value is not None and _not_utf8(value):
            _fail(f"{opt}: not valid UTF-8", EXIT_BAD_INPUT)
    try:
        with click.open_file(items_path, "rb") as f:
            items = read_jsonl(f)
    except OSError as e:
        _fail(f"--items {items_path}: {e.strerror or e}", EXIT_BAD_INPUT)
    except BadInput as e:
        _fail(f"--items {items_path}: {e}", EXIT_BAD_INPUT)
    with _calls(cfg):
        run = _client(cfg).submit_run(user, kind, items, priority=priority, max_parallel=max_parallel,
                                      overwrite=overwrite, run_id=run_id)
    click.echo(msgspec.json.encode(run).decode() if as_json else run.id)


@runs.command("show")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="id, user, kind, state, created_at, finished_at, counts, jobs.")
@config_option
def runs_show(run_id: str, as_json: bool, config_path: str | None) -> None:
    """A run now: state, counts, each job's id, key, state and error."""
    from tender_pool.supervisor import render

    cfg = _config(config_path)
    run_id = _text_arg("run id", run_id)
    with _calls(cfg):
        run = _client(cfg).run(run_id)
    click.echo(msgspec.json.encode(run).decode() if as_json else render.format_run(msgspec.to_builtins(run)))


@runs.command("watch")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="One event object a line, the snapshot first.")
@click.option("--since", help="Resume after this event id (the `id` of the last event seen): no snapshot.")
@config_option
def runs_watch(run_id: str, as_json: bool, since: str | None, config_path: str | None) -> None:
    """Follow a run: a snapshot, then every event, a progress bar line each, until the run ends.
    Exit 0 when it completed, 1 otherwise (partial_success, failed, cancelled, or interrupted)."""
    from tender_pool.supervisor import render

    cfg = _config(config_path)
    run_id = _text_arg("run id", run_id)
    state: str | None = None
    with _calls(cfg):
        c = _client(cfg)
        try:
            for ev in c.events(run_id, since=since):
                d = msgspec.to_builtins(ev)
                click.echo(msgspec.json.encode(ev).decode() if as_json else render.format_event(d))
                state = ev.state
        except KeyboardInterrupt:
            sys.exit(1)
        except BrokenPipeError:
            sys.exit(1)
        if state is None:  # resumed after the end: nothing came
            state = c.run(run_id).state
    sys.exit(0 if state == "completed" else 1)


@runs.command("cancel")
@click.argument("run_id")
@config_option
def runs_cancel(run_id: str, config_path: str | None) -> None:
    """Cancel a run: queued and waiting jobs end at once, running ones have their process group
    killed; finished results stay. Exit 0 cancelled (or already ended)."""
    cfg = _config(config_path)
    run_id = _text_arg("run id", run_id)
    with _calls(cfg):
        res = _client(cfg).cancel_run(run_id)
    if res.outcome == "already":
        click.echo(f"already {res.state}")
    else:
        click.echo(f"cancelled: {res.cancelled} job(s) ended now, {res.signalled} running job(s) being stopped")


@runs.command("retry")
@click.argument("run_id")
@click.option("--cancelled", "with_cancelled", is_flag=True, help="Also run the cancelled jobs again.")
@config_option
def runs_retry(run_id: str, with_cancelled: bool, config_path: str | None) -> None:
    """Run a run's failed jobs again (tries reset); the run goes back to running."""
    cfg = _config(config_path)
    run_id = _text_arg("run id", run_id)
    with _calls(cfg):
        res = _client(cfg).retry_run(run_id, cancelled=with_cancelled)
    if res.outcome == "nothing":
        click.echo(f"nothing to retry (run {res.state})")
    else:
        click.echo(f"retried {res.retried} job(s); run {res.state}")


@runs.command("list")
@click.option("--user", help="Exactly this user's runs.")
@click.option("--state", type=click.Choice(["pending", "running", "completed", "partial_success", "failed", "cancelled"]))
@click.option("--limit", type=click.IntRange(1, 10000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="A JSON array of runs without their jobs.")
@config_option
def runs_list(user: str | None, state: str | None, limit: int, as_json: bool, config_path: str | None) -> None:
    """Runs within the retention, newest first."""
    from tender_pool.supervisor import render

    cfg = _config(config_path)
    with _calls(cfg):
        rows = _client(cfg).runs(user=user, state=state, limit=limit)
    click.echo(msgspec.json.encode(rows).decode() if as_json else render.format_runs(msgspec.to_builtins(rows)))


@main.group()
def events() -> None:
    """Consumer groups of the queue-wide event stream (the platform's database kept in step)."""


@events.command("register")
@click.argument("group")
@config_option
def events_register(group: str, config_path: str | None) -> None:
    """Create GROUP at the stream's start: from now on nothing it has not acknowledged is trimmed
    (up to [events] max_backlog entries)."""
    cfg = _config(config_path)
    with _calls(cfg):
        created = _client(cfg).register_consumer_group(_text_arg("group", group))
    click.echo(f"registered {group}" if created else f"{group} was registered already")


@events.command("unregister")
@click.argument("group")
@config_option
def events_unregister(group: str, config_path: str | None) -> None:
    """Remove GROUP (XGROUP DESTROY): it no longer holds back trimming. Exit 2 if there is none."""
    cfg = _config(config_path)
    with _calls(cfg):
        gone = _client(cfg).unregister_consumer_group(_text_arg("group", group))
    if not gone:
        _fail(f"no such consumer group: {group}", EXIT_BAD_INPUT)
    click.echo(f"unregistered {group}")


@events.command("groups")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of groups with their lag.")
@config_option
def events_groups(as_json: bool, config_path: str | None) -> None:
    """Every consumer group with its lag: entries not yet delivered, pending (delivered, not
    acknowledged), the oldest pending entry's age, entries parked after failing, and a gap."""
    from tender_pool.supervisor import render

    cfg = _config(config_path)
    with _calls(cfg):
        rows = _client(cfg).consumer_groups()
    click.echo(msgspec.json.encode(rows).decode() if as_json else render.format_groups(msgspec.to_builtins(rows)))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="A JSON array: kind, type, runs, timeout, per_user, imported, imports.")
@config_option
def handlers(as_json: bool, config_path: str | None) -> None:
    """Each job kind: what it runs, its timeout and per_user, and whether every slot imported it
    (function handlers). Exit 0, 1 when a slot could not import one, 2 daemon unreachable (the
    config's kinds are printed all the same)."""
    from tender_pool.supervisor import render
    from tender_pool.supervisor.status_builder import handler_rows
    from tender_pool.client.status_client import StatusUnavailable, request

    cfg = _config(config_path)
    error, code = None, EXIT_HEALTHY
    try:
        reply = request(cfg.status.socket, op="handlers")
        if not reply.ok or reply.handlers is None:
            raise StatusUnavailable(cfg.status.socket, reply.error or "no handlers in the reply", listening=True)
        rows = reply.handlers
        code = EXIT_DEGRADED if any(r.imported is False for r in rows) else EXIT_HEALTHY
    except StatusUnavailable as e:
        rows, error, code = handler_rows(cfg, []), str(e), EXIT_UNREACHABLE
    d = msgspec.to_builtins(rows)
    click.echo(msgspec.json.encode(d).decode() if as_json else render.format_handlers(d, error))
    sys.exit(code)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the extraction JSON instead of Markdown.")
@click.option("--timeout", type=float, callback=_seconds, help="Hard timeout in seconds.")
def extract(file: str, as_json: bool, timeout: float | None) -> None:
    """Extract one document locally (no Redis): Markdown on stdout. Exit 3 on an extraction error."""
    from tender_pool.extract.command import main_extract

    sys.exit(main_extract(file, as_json, timeout))


@main.command()
@click.option("--listen", default="127.0.0.1:9465", show_default=True, help="HOST:PORT; a non-loopback host needs --token-file.")
@click.option("--token-file", type=click.Path(dir_okay=False), help="A file holding the token (Authorization: Bearer, or the login form).")
@click.option("--read-only", is_flag=True, help="No actions (cancel, retry, drain, scale) for anyone.")
@config_option
def web(listen: str, token_file: str | None, read_only: bool, config_path: str | None) -> None:
    """The admin web (needs the `web` extra): live slots and queue, runs, history, jobs, actions.
    Loopback without a token: this machine's users only. Exit 0 after a clean stop, 2 bad config
    or usage, 1 other fatal (as `run`)."""
    cfg = _config(config_path)
    try:
        from tender_pool.web.serve import serve
    except ImportError as e:
        _fail(f"web: {e} (install the web extra: pip install 'tender-pool[web]')", EXIT_BAD_INPUT)
    sys.exit(serve(_client(cfg), listen, token_file, read_only))


if __name__ == "__main__":  # pragma: no cover
    main()
