"""``Client``: the pool seen from a producer — the platform's web API, the CLI, a script.

Owns every producer-side Redis call (submit, runs, cancel, retry, reads, events, history). It
imports redis, msgspec and, of ours, only the store (the Redis schema: ``keys``, ``records``,
``submission``, ``scripts``, ``connection``, ``config``); ``status()`` alone loads the
status-socket modules, lazily, and they need nothing of the daemon's extras either. A test checks it
in a fresh interpreter.

Threads: a ``Client`` is as thread-safe as its redis-py client (a connection pool): share one per
process. Not across ``fork``: build one in the child. The asyncio side (``aevents``) has its own
``redis.asyncio`` client, made on first use in the running event loop.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterable, Iterator, Mapping

import msgspec
import redis

from tender_pool.store import scripts
from tender_pool.store.script_args import CancelCall, EnqueueCall, RunCancelCall, RunRetryCall
from tender_pool.store.connection import connect
from tender_pool.store.replication import wait_replicated
from tender_pool.store.keys import Keys
from tender_pool.store.records import JobRecord
from tender_pool.store.submission import MAX_RUN_ID, SubmitRequest, check_job_id, check_name, check_submit

from tender_pool.client import consumer, follow, items as _items, records
from tender_pool.client.run_submit import RunWriter
from tender_pool.client.errors import BadInput, NotFound, Unavailable, translated
from tender_pool.client.history import HistoryFilter, HistoryPage, query
from tender_pool.client.models import FINAL_RUN_STATES, Event, Job, JobView, Run, RunSummary

_json = msgspec.json.Encoder()
DEFAULT_RETENTION_S = 604800
DEFAULT_LOCK_TTL_MS = 663_000  # the default extract timeout + kill grace + 60 s (config.lock_ttl_ms)
RUNS_BATCH = 200


class CancelResult(msgspec.Struct):
    """What ``cancel`` did: ``cancelled`` (ended without running), ``signalled`` (running: its
    process group is being killed), or ``already`` (it had ended: ``state`` says how)."""

    job_id: str
    outcome: str
    state: str | None = None

    def __str__(self) -> str:
        return f"{self.outcome} {self.state}" if self.outcome == "already" else self.outcome


class RunCancel(msgspec.Struct):
    """What ``cancel_run`` did: ``cancelled`` (``cancelled`` jobs ended at once, ``signalled``
    running ones are being killed; the run ends ``cancelled`` once they have) or ``already`` (the
    run had ended as ``state``: nothing changed)."""

    run_id: str
    outcome: str
    cancelled: int = 0
    signalled: int = 0
    state: str | None = None


class RunRetry(msgspec.Struct):
    """What ``retry_run`` did: ``retried`` (``retried`` jobs queued again, the run ``running``) or
    ``nothing`` (no failed job, or cancelled one with ``cancelled=True``; the run stays ``state``)."""

    run_id: str
    outcome: str
    retried: int = 0
    state: str | None = None


class Client:
    """``Client(url, prefix, queue)`` or ``Client.from_config()``; see the package docstring."""

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        prefix: str = "tp",
        queue: str = "tender_parse",
        *,
        replicas: int = 0,
        wait_timeout: float = 1.0,
        retention_s: float = DEFAULT_RETENTION_S,
        lock_ttl_ms: int = DEFAULT_LOCK_TTL_MS,
        kinds: Iterable[str] | None = None,
        status_socket: str | None = None,
        socket_timeout: float = 5.0,
        config: Any = None,
    ):
        self.url = url
        self.k = Keys(prefix, queue)
        self.replicas, self.wait_ms = replicas, int(wait_timeout * 1000)
        self.retention_s = int(retention_s)
        self.lock_ttl_ms = lock_ttl_ms
        self.kinds = list(kinds) if kinds is not None else None
        self.status_socket = status_socket
        self.socket_timeout = socket_timeout
        self.config = config
        self.r = connect(url, socket_timeout)
        self._scripts = scripts.register(self.r, "enqueue", "cancel", "run_submit", "run_queue", "run_abort",
                                         "run_cancel", "run_retry")
        self.writer = RunWriter(self.r, self.k, self._scripts, replicas, self.wait_ms)
        self._ar: Any = None
        self._ar_loop: Any = None
        self._probe: Any = None

    @classmethod
    def from_config(cls, path: str | None = None, env: Mapping[str, str] | None = None) -> "Client":
        """The config found as every command finds it (``-c``/``$TENDER_POOL_CONFIG``/…). Raises
        ``config.ConfigError``."""
        from tender_pool.store.config import load

        return cls.for_config(load(path, env))

    @classmethod
    def for_config(cls, cfg: Any) -> "Client":
        """A client for an already loaded ``config.Config``: its Redis, queue, replication rule,
        retention, kinds and status socket."""
        r = cfg.redis
        return cls(r.url, r.prefix, cfg.pool.queue, replicas=r.wait_replicas or 0, wait_timeout=r.wait_timeout,
                   retention_s=cfg.pool.result_retention, lock_ttl_ms=cfg.lock_ttl_ms, kinds=cfg.kinds,
                   status_socket=cfg.status.socket or None, socket_timeout=r.socket_timeout, config=cfg)

    def close(self) -> None:
        self.r.close()

    # --- plain jobs -------------------------------------------------------------------------------

    def _check_kind(self, kind: str) -> None:
        if self.kinds is not None and kind not in self.kinds:
            raise BadInput(f"unknown kind {kind!r}; configured: {', '.join(self.kinds)}")

    def submit(self, user: str, kind: str = "parse_markdown", payload: dict[str, Any] | None = None, *,
               job_id: str | None = None, after: Iterable[str] = (), priority: str = "bulk") -> Job:
        """Queue one job and return it. The same ``job_id`` twice queues one job: the second call
        returns the existing one (queued, running, or finished within the retention). ``after``
        ids must exist. Raises BadInput, Unavailable, NotReplicated (submit again with the same id)."""
        if priority not in ("interactive", "bulk"):
            raise BadInput(f"priority {priority!r}: interactive or bulk")
        req = SubmitRequest(kind=kind, user=user, payload=dict(payload or {}), id=job_id, after=list(after),
                            priority=priority)  # type: ignore[arg-type]
        check_submit(req)
        self._check_kind(kind)
        jid = req.id or secrets.token_hex(8)
        k = self.k
        with translated(self.url):
            if req.after:
                missing = [d for d, n in zip(req.after, self._exist_each(req.after)) if not n]
                if missing:  # a cycle needs an id that does not exist yet: refusing those rules cycles out
                    raise BadInput(f"--after {missing[0]}: no such job")

            call = EnqueueCall(job=k.job(jid), ready=k.ready(req.priority), ready_lo=k.ready_lo, proc=k.ready_lo,
                               state_block=k.state_keys(req.user), hi_keys=k.hi_keys(req.user), id=jid,
                               kind=req.kind, user=req.user, payload=_json.encode(req.payload),
                               priority=req.priority, after=_json.encode(req.after))

            script = self._scripts["enqueue"]
            keys, argv = call.keys(), call.args()

            # The job is read back in the same round trip. (enqueue.lua answering the record instead
            # saves the HGETALL but costs Redis more CPU: a Lua table turned into a reply is dearer
            # than HGETALL's own, bench/bench_pool.py --redis-only.)
            def write(p: Any) -> None:
                # EVALSHA itself: the Script on a pipeline sends SCRIPT EXISTS first, every time
                p.evalsha(script.sha, len(keys), *keys, *argv)
                p.hgetall(k.job(jid))

            def write_loading(p: Any) -> None:  # Redis did not know the script: the Script loads it
                script(keys=keys, args=argv, client=p)
                p.hgetall(k.job(jid))

            try:
                _created, h = wait_replicated(self.r, self.replicas, self.wait_ms, write)
            except redis.exceptions.NoScriptError:  # restarted, failed over or flushed: nothing was written
                _created, h = wait_replicated(self.r, self.replicas, self.wait_ms, write_loading)
        if not h:  # expired at once (a zero retention): it existed
            raise NotFound(f"no such job: {jid}")
        return JobView.of(records.decode_job(records.as_dict(h)))

    def _exist_each(self, ids: list[str]) -> list[int]:
        p = self.r.pipeline(transaction=False)
        for d in ids:
            p.exists(self.k.job(d))
        return p.execute()

    def record(self, job_id: str) -> JobRecord | None:
        """The raw job record (``records.JobRecord``: tokens, counters) or None. Raises Undecodable."""
        with translated(self.url):
            h = self.r.hgetall(self.k.job(job_id))
        return records.decode_job(h) if h else None

    def job(self, job_id: str) -> Job:
        """``job --json`` (a plain job's id, or a run job's ``<run id>/<n>``). Raises NotFound,
        Undecodable, Unavailable."""
        return JobView.of(self._existing(job_id))

    def _existing(self, job_id: str) -> JobRecord:
        """The job's record; NotFound for none, and for a job of a run not sealed yet (staged by a
        submission still under way, or one that died: it expires; the contract, "Runs")."""
        rec = self.record(job_id)
        if rec is None or (rec.run and self._unsealed(rec.run)):
            raise NotFound(f"no such job: {job_id}")
        return rec

    def _unsealed(self, run_id: str) -> bool:
        with translated(self.url):
            return bool(self.r.hexists(self.k.run(run_id), "staging"))

    def cancel(self, job_id: str) -> CancelResult:
        """Cancel a job: ended at once if not running (``cancelled``); a running one is flagged and
        its slot kills its process group within about a second (``signalled``); one that had ended
        is left alone (``already``). Finished results stay. Raises NotFound, Unavailable."""
        rec = self._existing(job_id)
        k = self.k
        call = CancelCall(job=k.job(rec.id), ready_hi=k.ready_hi, ready_lo=k.ready_lo, wait=k.wait(rec.user),
                          waitusers=k.waitusers, delayed=k.delayed, finished=k.finished, deps=k.deps(rec.id),
                          lock=k.lock(rec.user), state_block=k.state_keys(rec.user, getattr(rec, "run", None)),
                          semwait=k.semwait(rec.kind, rec.user), hi_keys=k.hi_keys(rec.user),
                          after_deps=[k.deps(d) for d in rec.after], id=rec.id, retention=self.retention_s,
                          lock_ttl=self.lock_ttl_ms, user=rec.user)
        with translated(self.url):
            res = [records.s(x) or "" for x in self._scripts["cancel"](keys=call.keys(), args=call.args())]
        if res[0] == "missing":
            raise NotFound(f"no such job: {job_id}")
        return CancelResult(rec.id, res[0], res[1] if len(res) > 1 else None)

    def wait(self, job_id: str, timeout: float | None = None) -> Job:
        """Poll until the job has ended and return it; past ``timeout`` seconds, return it as it is
        then (check ``state``). Raises NotFound, Unavailable, BadInput (a timeout that is not a finite
        number of seconds >= 0: NaN would wait for ever, inf overflow the sleep)."""
        if timeout is not None and not (isinstance(timeout, (int, float)) and 0 <= timeout < float("inf")):
            raise BadInput(f"timeout {timeout!r}: a finite number of seconds >= 0, or None")
        end = None if timeout is None else time.monotonic() + timeout
        delay = 0.01
        while True:
            job = self.job(job_id)
            if job.state in ("completed", "failed", "cancelled", "skipped", "dead"):
                return job
            if end is not None and time.monotonic() >= end:
                return job
            time.sleep(delay if end is None else max(0.0, min(delay, end - time.monotonic())))
            delay = min(delay * 1.5, 0.25)

    def owns(self, job_id: str, token: str) -> bool:
        """Does the attempt with this ``TENDER_POOL_ATTEMPT`` token still own its job? False once the
        pool has given the job to another attempt (a reclaim after a partition), ended or dropped
        it: a handler with side effects outside the pool checks it before committing them."""
        with translated(self.url):
            current = self.r.hget(self.k.job(job_id), "token")
        return bool(token) and records.s(current) == token

    def markdown(self, job_id: str) -> str:
        """A completed ``parse_markdown`` job's Markdown: from Redis, where the slot keeps results up
        to ``pool.inline_result_max`` bytes beside the job (``keys.markdown``), else read from
        ``result.markdown_path``, which must be reachable from this host. Raises NotFound, BadInput (not completed, or not an
        extraction), Unavailable (the file is not reachable here)."""
        job = self.job(job_id)
        if job.kind != "parse_markdown":
            raise BadInput(f"job {job_id} is a {job.kind} job, not parse_markdown")
        if job.state not in ("completed", "skipped") or not job.result:
            raise BadInput(f"job {job_id} has no result (state {job.state})")
        rec = self.record(job_id)
        if rec is not None and rec.state.value == "skipped" and rec.skipped_from:
            rec = self.record(rec.skipped_from)  # the completed job whose result it carries
        inline = self.r.get(self.k.markdown(rec.id, rec.attempts)) if rec is not None and rec.attempts else None
        if inline is not None:
            return inline.decode("utf-8")
        path = job.result.get("markdown_path")
        if not isinstance(path, str):
            raise BadInput(f"job {job_id}'s result names no markdown_path")
        try:
            return Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise Unavailable(f"job {job_id}'s Markdown is not reachable from this host: {path}: "
                              f"{e.strerror or e}") from None

    # --- runs -------------------------------------------------------------------------------------

    def submit_run(self, user: str, kind: str, items: Iterable[Any], *, priority: str = "bulk",
                   max_parallel: int | None = None, overwrite: bool = False, run_id: str | None = None) -> Run:
        """Create a run of one job per item (dicts with ``key`` and ``payload``, keys unique; job ids
        ``<run id>/<n>``) and return it (``runs show``). An item whose input hash matches a completed
        job of the same user and kind within the retention is ``skipped`` with that job's result,
        unless ``overwrite``. ``max_parallel`` caps how many of the run's jobs run at once.
        The run is written in bounded chunks and sealed by the last (``run_submit``): ``run_id``
        (else generated) makes a retry after ``Unavailable`` or ``NotReplicated`` resume or return
        the same run, never make a second; the same id with other items or options is BadInput.
        Raises BadInput (naming the item), Unavailable, NotReplicated."""
        check_name(user, "user")
        self._check_kind(kind)
        if priority not in ("interactive", "bulk"):
            raise BadInput(f"priority {priority!r}: interactive or bulk")
        if max_parallel is not None and (not isinstance(max_parallel, int) or max_parallel < 0):
            raise BadInput(f"max_parallel {max_parallel!r}: a positive integer (0 or None: no cap)")
        if run_id is None:
            run_id = "r" + secrets.token_hex(8)
        elif isinstance(run_id, str) and len(run_id) > MAX_RUN_ID:
            raise BadInput(f"run id {run_id[:20]!r}…: at most {MAX_RUN_ID} characters")
        check_job_id(run_id, "run id")
        if not run_id.strip("."):  # its jobs' result directories would be results_dir/../<n>
            raise BadInput(f"run id {run_id!r}: not only dots")
        checked = _items.check_items(items)
        with translated(self.url):
            self.writer.submit(run_id, user, kind, checked, priority=priority, max_parallel=max_parallel or 0,
                               overwrite=overwrite, retention_s=self.retention_s)
            return self.run(run_id)

    def run(self, run_id: str) -> Run:
        """``runs show --json``: the run and each job's id, key, state and error, read at one
        instant. Raises NotFound, Unavailable."""
        check_job_id(run_id, "run id")
        with translated(self.url):
            run, _last = follow.complete(self.r, follow.snapshot(self.k, run_id))
        return run

    def runs(self, user: str | None = None, state: str | None = None, limit: int = 100) -> list[RunSummary]:
        """Runs within the retention, newest first (``runs list``), optionally one user's and in one
        state; at most ``limit``."""
        if user is not None:
            check_name(user, "user")
        index = self.k.userruns(user) if user is not None else self.k.runs
        out: list[RunSummary] = []
        offset = 0
        with translated(self.url):
            while len(out) < limit:
                ids = self.r.zrevrange(index, offset, offset + RUNS_BATCH - 1)
                if not ids:
                    break
                offset += len(ids)
                p = self.r.pipeline(transaction=False)
                for rid in ids:
                    p.hgetall(self.k.run(records.s(rid) or ""))
                for rid, h in zip(ids, p.execute()):
                    if not h:
                        continue  # expired, index not trimmed yet
                    row = records.run_summary(records.s(rid) or "", records.as_dict(h))
                    if state is None or row.state == state:
                        out.append(row)
                        if len(out) >= limit:
                            break
        return out

    def _run_head(self, run_id: str) -> tuple[str, str, list[str]]:
        """(user, kind, job ids) of a run, for the scripts' per-user and per-job KEYS."""
        check_job_id(run_id, "run id")
        p = self.r.pipeline(transaction=False)
        p.hmget(self.k.run(run_id), "user", "kind", "staging")
        p.lrange(self.k.runjobs(run_id), 0, -1)
        (user, kind, staging), ids = p.execute()
        if user is None or staging is not None:  # unsealed: not a run yet
            raise NotFound(f"no such run: {run_id}")
        return records.s(user) or "", records.s(kind) or "", [records.s(j) or "" for j in ids]

    def cancel_run(self, run_id: str) -> RunCancel:
        """Cancel a run: queued and waiting jobs end ``cancelled`` at once, running ones have their
        process group killed, finished results stay; the run ends ``cancelled``. Raises NotFound,
        Unavailable."""
        k = self.k
        with translated(self.url):
            user, kind, ids = self._run_head(run_id)
            call = RunCancelCall(run=k.run(run_id), runjobs=k.runjobs(run_id), run_events=k.run_events(run_id),
                                 runwait=k.runwait(run_id), events=k.events, active=k.active, inready=k.inready,
                                 backlog=k.backlog(user), ready_hi=k.ready_hi, ready_lo=k.ready_lo,
                                 delayed=k.delayed, finished=k.finished, wait=k.wait(user), waitusers=k.waitusers,
                                 lock=k.lock(user), semwait=k.semwait(kind, user), inready_hi=k.inready_hi,
                                 hibacklog=k.hibacklog(user), per_job=[x for j in ids for x in (k.job(j), k.deps(j))],
                                 run_id=run_id, retention=self.retention_s, lock_ttl=self.lock_ttl_ms, user=user)
            res = [records.s(x) or "" for x in self._scripts["run_cancel"](keys=call.keys(), args=call.args())]
        if res[0] == "missing":
            raise NotFound(f"no such run: {run_id}")
        if res[0] == "already":
            return RunCancel(run_id, "already", state=res[1])
        return RunCancel(run_id, "cancelled", int(res[1]), int(res[2]), None)

    def retry_run(self, run_id: str, *, cancelled: bool = False) -> RunRetry:
        """Queue a run's failed jobs again (and its cancelled ones with ``cancelled``): tries reset,
        attempts kept, the run back to ``running`` with ``run_started`` written again. Raises
        NotFound, Unavailable."""
        k = self.k
        with translated(self.url):
            user, _kind, ids = self._run_head(run_id)
            call = RunRetryCall(run=k.run(run_id), runjobs=k.runjobs(run_id), run_events=k.run_events(run_id),
                                runwait=k.runwait(run_id), events=k.events, active=k.active, inready=k.inready,
                                backlog=k.backlog(user), ready_hi=k.ready_hi, ready_lo=k.ready_lo,
                                finished=k.finished, inready_hi=k.inready_hi, hibacklog=k.hibacklog(user),
                                per_job=[k.job(j) for j in ids], run_id=run_id, retention=self.retention_s,
                                cancelled="1" if cancelled else "0", user=user)
            res = [records.s(x) or "" for x in self._scripts["run_retry"](keys=call.keys(), args=call.args())]
        if res[0] == "missing":
            raise NotFound(f"no such run: {run_id}")
        if res[0] == "nothing":
            return RunRetry(run_id, "nothing", 0, res[1])
        return RunRetry(run_id, "retried", int(res[1]), res[2])

    def events(self, run_id: str, since: str | None = None, *, block_ms: int | None = None) -> Iterator[Event]:
        """A run's events: a ``snapshot`` first (its ``id`` is where to resume), then every event
        after it, ending after ``run_finished``; a finished run's snapshot ends it. ``since``
        resumes after that stream id instead (no snapshot), unless the stream was trimmed past it:
        then a snapshot with ``gap`` true comes first. Raises NotFound, BadInput (a bad ``since``),
        Unavailable (a reconnect with the last ``id`` delivered misses nothing)."""
        check_job_id(run_id, "run id")
        steps = follow.follow(self.k, run_id, since, self._block_ms(block_ms))
        with translated(self.url):
            yield from follow.drive(self.r, steps)

    async def aevents(self, run_id: str, since: str | None = None, *,
                      block_ms: int | None = None) -> AsyncIterator[Event]:
        """``events`` as an async generator on ``redis.asyncio`` (for server-sent events)."""
        check_job_id(run_id, "run id")
        steps = follow.follow(self.k, run_id, since, self._block_ms(block_ms))
        r = self._async_client()
        with translated(self.url):
            # redis-py's async cluster queues a transaction's commands on a thread with its own event
            # loop: a client not yet initialized here would open its connections on that loop
            await r.initialize()
            async for ev in follow.adrive(r, steps):
                yield ev

    # --- keeping the platform's tables in step: consumer groups on the queue-wide stream -------------

    def register_consumer_group(self, name: str) -> bool:
        """Create consumer group ``name`` on the queue-wide event stream, at its first entry; from now
        on the stream keeps every entry the group has not acknowledged (up to ``[events]
        max_backlog``). False if it existed. Raises BadInput, Unavailable."""
        with translated(self.url):
            return consumer.register(self.r, self.k, name)

    def unregister_consumer_group(self, name: str) -> bool:
        """Remove a group that is gone for good (it no longer holds back trimming)."""
        with translated(self.url):
            return consumer.unregister(self.r, self.k, name)

    def consumer_groups(self) -> list[consumer.GroupInfo]:
        """Every group with its lag, pending entries, oldest pending age, gap and parked count."""
        with translated(self.url):
            return consumer.groups(self.r, self.k)

    def consume(self, group: str, consumer_name: str, apply: Callable[[list[Event]], Any], *, batch: int = 100,
                block_ms: int = 2000, claim_idle: float = 30, resync: Callable[[list[Any]], Any] | None = None,
                park_after: int = 5, stop: Callable[[], bool] | None = None) -> None:
        """Apply every job transition to the caller's store, at least once: ``apply(events)`` gets up to
        ``batch`` ``Event``s of the queue-wide stream in stream order and they are acknowledged when it
        returns; an exception leaves them pending (retried; parked after ``park_after`` failures of
        one entry). Entries pending on a consumer that died are claimed after ``claim_idle`` s. A gap
        (the group fell ``[events] max_backlog`` behind) calls ``resync(jobs)`` with
        ``consumer.JobSnapshot``s of every job changed since. Runs until ``stop()`` is true; raises
        Unavailable when Redis goes (call it again: it resumes from the group's position).
        Order per job: apply an event only if its ``id`` is newer than the one stored (README)."""
        c = consumer.Consumer(self.k, group, consumer_name, batch=batch, block_ms=self._block_ms(block_ms),
                              claim_idle=claim_idle, park_after=park_after, resync=resync is not None, stop=stop)
        with translated(self.url):
            consumer.run(self.r, c, apply, resync)

    async def aconsume(self, group: str, consumer_name: str, apply: Callable[[list[Event]], Any], *,
                       batch: int = 100, block_ms: int = 2000, claim_idle: float = 30,
                       resync: Callable[[list[Any]], Any] | None = None, park_after: int = 5,
                       stop: Callable[[], bool] | None = None) -> None:
        """``consume`` on ``redis.asyncio``; ``apply`` and ``resync`` may be coroutine functions."""
        c = consumer.Consumer(self.k, group, consumer_name, batch=batch, block_ms=self._block_ms(block_ms),
                              claim_idle=claim_idle, park_after=park_after, resync=resync is not None, stop=stop)
        with translated(self.url):
            await consumer.arun(self._async_client(), c, apply, resync)

    def _block_ms(self, block_ms: int | None) -> int:
        """XREAD's block must end well within the socket timeout, or the read would time out."""
        cap = max(50, int(self.socket_timeout * 1000 * 0.6))
        return min(block_ms, cap) if block_ms else min(2000, cap)

    def _async_client(self) -> Any:
        import asyncio

        loop = asyncio.get_running_loop()
        if self._ar is None or self._ar_loop is not loop:
            self._ar, self._ar_loop = _async_connect(self.url, self.socket_timeout), loop
        return self._ar

    async def aclose(self) -> None:
        if self._ar is not None:
            await self._ar.aclose()
            self._ar = None

    # --- observability ------------------------------------------------------------------------------

    def history(self, *, page: int = 1, page_size: int = 20, status: Iterable[str] = (), user: str | None = None,
                file: str | None = None, job_id: str | None = None, started_after: int | None = None,
                started_before: int | None = None, ended_after: int | None = None,
                ended_before: int | None = None, kind: str | None = None) -> HistoryPage:
        """Finished jobs, newest first (``history --json``); times are ms since the epoch."""
        flt = HistoryFilter(status=list(status), user=user, kind=kind, file=file, job_id=job_id,
                            started_after=started_after, started_before=started_before, ended_after=ended_after,
                            ended_before=ended_before)
        with translated(self.url):
            return query(self.r, self.k, flt, page=page, page_size=page_size)

    def status(self) -> Any:
        """The pool's status (``status --json``'s ``StatusView``): from the local daemon over its
        status socket when there is one here, else what Redis knows of every host (``counters``,
        ``pid`` and ``uptime_s`` are then null). Raises Unavailable when neither answers."""
        from tender_pool.client import status_client

        if self.status_socket and os.path.exists(self.status_socket):
            try:
                reply = status_client.request(self.status_socket)
                if reply.ok and reply.status is not None:
                    return reply.status
            except status_client.StatusUnavailable:
                pass
        if self._probe is None:
            from tender_pool.client.status_probe import QueueProbe

            self._probe = QueueProbe(connect(self.url, min(self.socket_timeout, 2.0)), self.k, self.retention_s)
        view = status_client.read_redis_view(self._probe, self.url)
        if not view.redis_ok:
            raise Unavailable(view.error or f"Redis unreachable at {self.url}")
        return status_client.as_status(view)

    def scale(self, n: int) -> str:
        """``tender-pool scale N`` (without ``--wait``): the local daemon runs ``n`` slots from now on.
        Only over the local status socket (its group decides who may): Unavailable where there is
        none or it refuses the connection, BadInput when the daemon refuses the request."""
        return self._control("scale", n)

    def drain(self) -> str:
        """``tender-pool drain`` without the wait: the local daemon stops claiming; running jobs
        finish (``status`` shows when none runs). Raises as ``scale``."""
        return self._control("drain")

    def _control(self, op: str, workers: int | None = None) -> str:
        from tender_pool.client import status_client

        if not self.status_socket:
            raise Unavailable(f"{op}: no status socket configured for this client")
        try:
            reply = status_client.control(self.status_socket, op, workers)
        except status_client.StatusUnavailable as e:
            raise Unavailable(str(e)) from None
        if not reply.ok:
            raise BadInput(f"{op} refused: {reply.error}")
        return reply.message


def _async_connect(url: str, socket_timeout: float) -> Any:
    """A ``redis.asyncio`` client for ``url`` (Sentinel URLs through ``redis.asyncio.sentinel``,
    cluster URLs through ``redis.asyncio.cluster``: the event reads name one queue's keys, one slot)."""
    import redis.asyncio as aredis

    if url.startswith("redis+cluster://"):
        from redis.asyncio.cluster import ClusterNode, RedisCluster

        from tender_pool.store.config import parse_cluster_url

        return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in parse_cluster_url(url)],
                            socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout)

    if url.startswith("redis+sentinel://"):
        from redis.asyncio.sentinel import Sentinel

        from tender_pool.store.config import parse_sentinel_url

        nodes, service, db = parse_sentinel_url(url)
        return Sentinel(nodes, socket_timeout=socket_timeout).master_for(service, db=db, socket_timeout=socket_timeout)
    return aredis.Redis.from_url(url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout)


__all__ = ["CancelResult", "Client", "FINAL_RUN_STATES", "RunCancel", "RunRetry", "RunSummary"]
