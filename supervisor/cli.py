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
from .types import JobRecord, JobView, SubmitRequest

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


def _queue(cfg: Config):
    from tender_pool.slots.queue import Queue, connect

    from .keys import Keys

    return Queue(connect(cfg.redis.url, cfg.redis.socket_timeout), Keys(cfg.redis.prefix, cfg.pool.queue))


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

    cfg = _config(config_path)
    body: dict[str, Any] = {}
    if payload:
        try:
            body = msgspec.json.decode(payload)
        except msgspec.DecodeError as e:
            _fail(f"--payload is not JSON: {e}", EXIT_BAD_INPUT)
        if not isinstance(body, dict):
            _fail("--payload must be a JSON object", EXIT_BAD_INPUT)
    if file:
        path = os.path.abspath(file)
        if not os.path.isfile(path):
            _fail(f"{file}: no such file", EXIT_BAD_INPUT)
        body["file"] = path
    if kind not in cfg.kinds:
        _fail(f"unknown kind {kind!r}; configured: {', '.join(cfg.kinds)}", EXIT_BAD_INPUT)
    if not user.strip() or any(c in user for c in "{}\n"):
        _fail(f"--user {user!r}: a non-empty name without braces or newlines", EXIT_BAD_INPUT)
    if job_id is not None and (not job_id or any(c in job_id for c in "{} \n")):
        _fail(f"--job-id {job_id!r}: a non-empty id without braces or spaces", EXIT_BAD_INPUT)
    req = SubmitRequest(kind=kind, user=user, payload=body, id=job_id, after=list(after), priority=priority)  # type: ignore[arg-type]
    try:
        q = _queue(cfg)
        created, jid, state = q.enqueue(req)
        if wait:
            _wait_and_print(q, jid, timeout)
        if as_json:
            click.echo(msgspec.json.encode({"id": jid, "state": state}).decode())
        else:
            click.echo(jid)
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


if __name__ == "__main__":  # pragma: no cover
    main()
