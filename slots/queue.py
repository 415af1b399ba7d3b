"""Every write to a job goes through here: one method per Lua script in ``lua/``, plus the claim.

Hazards this module owns:
- ``BLMOVE`` cannot run inside Lua, so an idle slot's claim (BLMOVE) and start (take.lua) are two
  steps. A process killed between them leaves an entry with no stamp in its processing list; the
  supervisor (local death) or the reaper (remote death, stamp.lua) recovers it. That gap is the only
  non-atomic one. A busy slot settles its job and takes the next in one step (settle_take.lua),
  with LMOVE inside the script: only what is already queued, never a blocking wait.
- Every write after the claim is fenced by the attempt token (settle.lua refuses a stale attempt).
- The client is built per process (``connect``) and never inherited across ``fork``; responses are
  bytes, decoded here, so a producer's binary junk on the list cannot crash a slot.
- Script texts and registrations come from ``scripts`` (their one owner); the typed answers of
  settle.lua, take.lua and settle_take.lua are ``answers``' (re-exported here).
"""

from __future__ import annotations

import secrets
from typing import Any

import msgspec
import redis

from tender_pool.store.keys import Keys
from tender_pool.store.outcomes import Stop
from tender_pool.store.records import (  # noqa: F401  (decode_job, Undecodable: re-exported for callers)
    JobError,
    JobRecord,
    Undecodable,
    decode_job,
)
from tender_pool.store.submission import BadInput, SubmitRequest, check_submit

from tender_pool.store import scripts
from tender_pool.store.script_args import (
    DeadletterCall,
    EnqueueCall,
    ProgressCall,
    PromoteDueCall,
    RequeueCall,
    RequeueManyCall,
    SettleCall,
    SettleTakeCall,
    StampCall,
    TakeCall,
    UnstickCall,
    settle_part,
)
from tender_pool.slots.answers import (  # noqa: F401  (re-exported: callers import the answers from here too)
    BadRecord,
    Empty,
    Ended,
    NoLease,
    Parked,
    RawEntry,
    Started,
    SettleAnswer,
    SettleReply,
    Stale,
    StartResult,
    TakeArgs,
    Taken,
    TakeResult,
    Verdict,
    start_result,
    take_result,
)
from tender_pool.store.connection import connect  # noqa: F401  (connect: re-exported for callers)
from tender_pool.store.fastlane import FastLane
from tender_pool.store.replication import wait_replicated

_json = msgspec.json.Encoder()


def _s(v: bytes | str | None) -> str | None:
    if v is None:
        return None
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


class _LazyTexts(dict):
    """name → the script's text, read when first asked for (``scripts.text`` caches it per process)."""

    def __missing__(self, name: str) -> str:
        text = self[name] = scripts.text(name)
        return text


class _LazyScripts(dict):
    """name → a redis-py Script on ``client``, registered when first asked for."""

    def __init__(self, client: redis.Redis):
        super().__init__()
        self.client = client

    def __missing__(self, name: str) -> Any:
        script = self[name] = scripts.register(self.client, name)[name]
        return script


class Queue:
    """``replicas``/``wait_ms``: a job's creation (enqueue.lua) and its attempts' start and settle are
    acknowledged only once that many replicas have them (``WAIT``, in the same round trip); fewer
    raise ``replication.NotReplicated``. A failover then cannot silently drop an acknowledged write."""

    def __init__(self, client: redis.Redis, keys: Keys, *, replicas: int = 0, wait_ms: int = 1000):
        self.r = client
        self.k = keys
        self.replicas, self.wait_ms = replicas, wait_ms
        self.fast = FastLane(client)
        # Script texts (each carries the lib parts it needs, up to ~42 KB) are registered on first use:
        # every slot and the supervisor make a Queue, and each uses only a few of them. The texts
        # themselves are cached per process (``scripts.text``); the supervisor builds them all before
        # forking the slots (``Supervisor._prepare_fork``), so the slots share one copy.
        self._texts = _LazyTexts()  # the slot's hot path, sent by the FastLane
        self._scripts = _LazyScripts(client)

    @classmethod
    def for_config(cls, cfg: Any, socket_timeout: float | None = None) -> "Queue":
        """A queue on a client of this process's own, with the config's replication rule."""
        r = cfg.redis
        client = connect(r.url, r.socket_timeout if socket_timeout is None else socket_timeout)
        return cls(client, Keys(r.prefix, cfg.pool.queue), replicas=r.wait_replicas, wait_ms=r.wait_timeout_ms)

    # --- raw producers' entries (a client's submit is ``Client.submit``) ---------------------------

    def _enqueue_call(self, job_id: str, req: SubmitRequest, proc: str, raw: bytes | str) -> EnqueueCall:
        k = self.k
        return EnqueueCall(job=k.job(job_id), ready=k.ready(req.priority), ready_lo=k.ready_lo, proc=proc,
                           state_block=k.state_keys(req.user), hi_keys=k.hi_keys(req.user), id=job_id,
                           kind=req.kind, user=req.user, payload=_json.encode(req.payload), priority=req.priority,
                           after=_json.encode(req.after), raw=raw)

    def adopt(self, proc: str, raw: bytes, req: SubmitRequest) -> str:
        """Turn a raw JSON entry a producer pushed onto ``ready`` into a job, at the front."""
        job_id = req.id or secrets.token_hex(8)
        call = self._enqueue_call(job_id, req, proc, raw)
        wait_replicated(
            self.r, self.replicas, self.wait_ms,
            lambda p: self._scripts["enqueue"](keys=call.keys(), args=call.args(), client=p),
        )
        return job_id

    def get(self, job_id: str) -> JobRecord | None:
        h = self.r.hgetall(self.k.job(job_id))
        return decode_job(h) if h else None

    # --- the slot's path: claim → start → settle ---------------------------------------------------

    def register_list(self, proc: str, owner: str) -> None:
        """``proclists[proc] = owner`` (an encoded ``keys.Owner``): done by the slot itself before
        its first claim into ``proc``, so a reaper can always find what it claims."""
        self.fast.call("HSET", self.k.proclists, proc, owner)

    def claim(self, proc: str, timeout: float, interactive_first: bool = True) -> bytes | None:
        """Interactive first, else block on bulk. A wake token (``Keys.WAKE``) comes back as-is.
        ``interactive_first`` False: the caller's take just found ready:hi empty."""
        entry = self.fast.call("LMOVE", self.k.ready_hi, proc, "RIGHT", "LEFT") if interactive_first else None
        if entry is None:
            entry = self.fast.call("BLMOVE", self.k.ready_lo, proc, "RIGHT", "LEFT", timeout)
        return entry

    def read_job(self, job_id: str) -> dict[bytes, bytes]:
        flat = self.fast.call("HGETALL", self.k.job(job_id))
        if isinstance(flat, dict):  # RESP3
            return flat
        return dict(zip(flat[::2], flat[1::2]))

    def take(self, proc: str, ta: TakeArgs, suffix: str, entry: bytes = b"", retry: bool = False) -> TakeResult:
        """take.lua: start ``entry`` (already moved into ``proc`` by a BLMOVE) or, with none, the next
        queued job; one round trip, the job record included. ``suffix`` makes the attempt token:
        pass the same one, with ``retry``, after a lost reply."""
        k = self.k
        call = TakeCall(
            proc=proc, ready_hi=k.ready_hi, ready_lo=k.ready_lo, started=k.started, waitusers=k.waitusers,
            finished=k.finished, events=k.events, active=k.active, inready=k.inready, busy=k.busy(ta.worker),
            host=ta.host_key or k.host("-"), inready_hi=k.inready_hi, base=k.base,
            entry=entry, suffix=suffix, worker=ta.worker, pid=ta.pid, lock_ttl=ta.lock_ttl_ms,
            retention=ta.retention_s, max_waits=ta.max_waits, busy_ttl=ta.busy_ttl_ms, retry="1" if retry else "0",
            limits=ta.limits, lease_left=ta.min_lease_ms)
        res = self.fast.script(
            self._texts["take"],
            call.keys(),
            call.args(),
            replicas=self.replicas,
            timeout_ms=self.wait_ms,
        )
        return take_result(res)

    def settle_take(
        self,
        proc: str,
        job: JobRecord,
        token: str,
        verdict: "Verdict | str",
        ta: TakeArgs,
        suffix: str,
        *,
        result: dict | None = None,
        error: JobError | None = None,
        backoff_ms: int = 0,
        counts_try: bool = False,
        launched: bool = True,
        retry: bool = False,
        input_hash: str | None = None,
        markdown: tuple[int, str] | None = None,
    ) -> tuple["SettleReply", TakeResult]:
        """settle_take.lua: ``settle`` this attempt, then ``take`` the next queued job for ``proc``
        (LMOVE only: never waits), in one round trip. Same retry rules as both."""
        k = self.k
        settle = self._settle_call(proc, job, token, verdict, ta.worker, result=result, error=error,
                                   lock_ttl_ms=ta.lock_ttl_ms, retention_s=ta.retention_s,
                                   backoff_ms=backoff_ms, counts_try=counts_try, launched=launched,
                                   input_hash=input_hash, markdown=markdown)
        keys, args = settle_part(settle)
        call = SettleTakeCall(
            settle_keys=keys, ready_hi=settle.ready_hi, host=ta.host_key or k.host("-"), inready_hi=k.inready_hi,
            base=k.base, markdown=settle.markdown, settle_args=args, suffix=suffix, worker=ta.worker, pid=ta.pid,
            max_waits=ta.max_waits, busy_ttl=ta.busy_ttl_ms, retry="1" if retry else "0", limits=ta.limits,
            lease_left=ta.min_lease_ms, input_hash=settle.input_hash, keep_markdown=settle.keep_markdown,
            markdown_text=settle.markdown_text)
        res = self.fast.script(
            self._texts["settle_take"],
            call.keys(),
            call.args(),
            replicas=self.replicas,
            timeout_ms=self.wait_ms,
        )
        return _settle_reply(res), take_result(res[2])

    def drop_wake(self, proc: str) -> None:
        self.r.lrem(proc, 1, Keys.WAKE)

    def settle(
        self,
        proc: str,
        job: JobRecord,
        token: str,
        verdict: Verdict | str,
        *,
        result: dict | None = None,
        error: JobError | None = None,
        lock_ttl_ms: int,
        retention_s: int,
        backoff_ms: int = 0,
        counts_try: bool = False,
        worker: str = "",
        launched: bool = True,
        input_hash: str | None = None,
        markdown: tuple[int, str] | None = None,
    ) -> SettleReply:
        """Fenced by ``token``: a newer attempt's job is never touched. ``launched`` False (no handler
        process was started: a rejected input) takes this start back out of ``attempts``.
        ``input_hash``: the hash the attempt recorded of its input (``inputs.py``); a completed run
        item stores it as its ``input_hash`` and under ``done:`` (None: the job's own, as submitted).
        ``markdown``: (attempt, text), a parse_markdown attempt's Markdown, kept beside the job
        (``Keys.markdown``) by the same script when it completes the job: a fenced attempt's never."""
        call = self._settle_call(proc, job, token, verdict, worker or "-", result=result, error=error,
                                 lock_ttl_ms=lock_ttl_ms, retention_s=retention_s, backoff_ms=backoff_ms,
                                 counts_try=counts_try, launched=launched, input_hash=input_hash,
                                 markdown=markdown)
        res = self.fast.script(self._texts["settle"], call.keys(), call.args(), replicas=self.replicas,
                               timeout_ms=self.wait_ms)
        return _settle_reply(res)

    def _settle_call(self, proc: str, job: JobRecord, token: str, verdict: Verdict | str, worker: str, *,
                     result: dict | None, error: JobError | None, lock_ttl_ms: int, retention_s: int,
                     backoff_ms: int, counts_try: bool, launched: bool, input_hash: str | None,
                     markdown: tuple[int, str] | None = None) -> SettleCall:
        """settle.lua's call, whose first KEYS and ARGV settle_take.lua takes too (``settle_part``); the
        input hash it stores is the attempt's, else the job's own."""
        k = self.k
        h = job.input_hash if input_hash is None else input_hash
        md_attempt, md_text = markdown if markdown is not None else (0, "")
        return SettleCall(
            proc=proc, job=k.job(job.id), started=k.started, lock=k.lock(job.user), wait=k.wait(job.user),
            waitusers=k.waitusers, ready_lo=k.ready_lo, finished=k.finished, deps=k.deps(job.id),
            state_block=k.state_keys(job.user, job.run), sem=k.sem(job.kind, job.user),
            semwait=k.semwait(job.kind, job.user), delayed=k.delayed, busy=k.busy(worker),
            done=k.done(job.kind, job.user, h) if h else k.done("-", "-", "-"), ready_hi=k.ready_hi,
            id=job.id, token=token, outcome=Verdict(verdict).value,
            result=_json.encode(result) if result is not None else "",
            error=_json.encode(error) if error is not None else "",
            lock_ttl=lock_ttl_ms, retention=retention_s, backoff=backoff_ms, user=job.user,
            counts_try="1" if counts_try else "0", handler_started="1" if launched else "0", input_hash=h or "",
            markdown=k.markdown(job.id, md_attempt), keep_markdown="1" if markdown is not None else "0",
            markdown_text=md_text.encode("utf-8"))

    def progress(self, job: JobRecord, token: str, event: dict) -> bool:
        """One job_progress event (progress.lua), fenced by the attempt token. False when fenced."""
        k = self.k
        r = job.run or "-"
        call = ProgressCall(job=k.job(job.id), run=k.run(r), run_events=k.run_events(r), events=k.events, id=job.id,
                            token=token, progress=_json.encode(event))
        return bool(self.fast.script(self._texts["progress"], call.keys(), call.args()))

    def attempt_end(self, job_id: str) -> tuple[str, int, str]:
        """(state, attempts, error kind) of a job now: after a settle answered ``fenced`` on a retry,
        tells whether our first try did land before its reply was lost."""
        state, attempts, error = self.fast.call("HMGET", self.k.job(job_id), "state", "attempts", "error")
        kind = ""
        if error:
            try:
                kind = msgspec.json.decode(error, type=JobError).kind
            except (msgspec.DecodeError, msgspec.ValidationError):
                pass
        return _s(state) or "", int(attempts or 0), kind

    def deadletter(self, proc: str, entry: bytes, reason: str, retention_s: int) -> bool:
        job_id = _s(entry) or ""
        raw_hash = self.r.hgetall(self.k.job(job_id)) if job_id else {}
        dump = _json.encode({_s(a): _s(b) for a, b in raw_hash.items()}).decode() if raw_hash else ""
        user = run = None
        if raw_hash:
            user, run = _s(raw_hash.get(b"user")), _s(raw_hash.get(b"run"))
        k = self.k
        call = DeadletterCall(proc=proc, dead=k.dead, job=k.job(job_id), finished=k.finished, deps=k.deps(job_id),
                              ready_lo=k.ready_lo, state_block=k.state_keys(user or "-", run),
                              hi_keys=k.hi_keys(user or "-"), entry=entry, reason=reason, retention=retention_s,
                              job_hash=dump, entry_utf8=entry.decode("utf-8", "backslashreplace"))
        return bool(self._scripts["deadletter"](keys=call.keys(), args=call.args()))

    # --- recovery ---------------------------------------------------------------------------------

    def requeue(
        self,
        proc: str,
        entry: bytes,
        reason: str,
        *,
        crash_cap: int,
        lock_ttl_ms: int,
        retention_s: int,
        owner_host: str = "",
        owner_incarnation: str = "",
        list_dead: bool = True,
        stamp: int | None = None,
    ) -> str:
        """requeue.lua for one entry; ``stamp``: the claim stamp the caller judged too old (the
        script leaves the entry alone if it has another by now)."""
        fields = self.r.hmget(self.k.job(_s(entry) or ""), "user", "kind", "run")
        call = self._requeue_call(proc, entry, fields, reason, crash_cap, lock_ttl_ms, retention_s,
                                  owner_host, owner_incarnation, list_dead, stamp)
        return _s(self._scripts["requeue"](keys=call.keys(), args=call.args())[0]) or ""

    def _requeue_call(self, proc: str, entry: bytes, fields: list, reason: str, crash_cap: int, lock_ttl_ms: int,
                      retention_s: int, owner_host: str, owner_incarnation: str, list_dead: bool,
                      stamp: int | None) -> RequeueCall:
        """requeue.lua's call for ``entry``, from its job's (user, kind, run)."""
        user, kind, run = (_s(v) for v in fields)
        user = user or ""
        job_id = _s(entry) or ""
        k = self.k
        return RequeueCall(proc=proc, job=k.job(job_id), started=k.started, lock=k.lock(user), wait=k.wait(user),
                           waitusers=k.waitusers, ready_lo=k.ready_lo, finished=k.finished, deps=k.deps(job_id),
                           state_block=k.state_keys(user, run), sem=k.sem(kind or "-", user),
                           semwait=k.semwait(kind or "-", user), proclists=k.proclists,
                           host=k.host(owner_host or "-"), ready_hi=k.ready_hi, base=k.base, entry=entry,
                           reason=reason, owner_incarnation=owner_incarnation, crash_cap=crash_cap,
                           lock_ttl=lock_ttl_ms, retention=retention_s, user=user,
                           list_dead="1" if list_dead else "0", stamp="" if stamp is None else stamp)

    # Entries per requeue_many.lua call (of one list; ~4 ms of Redis for 100 running jobs), and per
    # round trip (in as many calls as that takes, of any lists): Redis serves other clients between
    # our round trips, so a mass reclaim delays a slot's settle by ~10 ms at most.
    REQUEUE_MANY_CALL = 100
    REQUEUE_MANY_TRIP = 200

    def requeue_list_many(self, proc: str, reason: str, *, crash_cap: int, lock_ttl_ms: int, retention_s: int,
                          owner_host: str = "", owner_incarnation: str = "",
                          list_dead: bool = True) -> list[tuple[str, str]]:
        """Every entry of one list ``proc`` (of that owner) requeued: ``requeue_lists_many`` for one list."""
        return self.requeue_lists_many([(proc, owner_host, owner_incarnation)], reason, crash_cap=crash_cap,
                                       lock_ttl_ms=lock_ttl_ms, retention_s=retention_s, list_dead=list_dead)[0]

    def requeue_lists_many(self, lists: list[tuple[str, str, str]], reason: str, *, crash_cap: int,
                           lock_ttl_ms: int, retention_s: int, list_dead: bool = True) -> list[list[tuple[str, str]]]:
        """Every entry of each list ``(proc, owner host, owner incarnation)`` through requeue.lua's
        logic, atomic per entry and re-checking its list's owner (as ``requeue`` is for one entry), by
        requeue_many.lua: calls of ``REQUEUE_MANY_CALL`` entries of one list, pipelined
        ``REQUEUE_MANY_TRIP`` entries a round trip across lists, the lists read in one round trip.
        The script reads each job's user, kind and run and spells its keys itself, so Python sends
        only the entries and Redis runs the scripts' prelude once a call, not once an entry (a dead
        host's 10⁴ entries: ~0.5 s of requeue.lua's own work, not ~1.2 s). Returns each list's
        (entry, verdict) pairs, in the order of ``lists``."""
        if not lists:
            return []
        script = self._scripts.get("requeue_many")
        if script is None:
            script = self._scripts["requeue_many"] = scripts.register_batch(self.r, "requeue")
        k = self.k
        pipe = self.r.pipeline(transaction=False)
        for proc, _, _ in lists:
            pipe.lrange(proc, 0, -1)
        read = pipe.execute()
        calls: list[tuple[int, RequeueManyCall]] = []  # (index in lists, the call)
        for i, ((proc, owner_host, owner_incarnation), entries) in enumerate(zip(lists, read)):
            calls += [(i, RequeueManyCall(
                proc=proc, started=k.started, waitusers=k.waitusers, ready_lo=k.ready_lo, finished=k.finished,
                events=k.events, active=k.active, inready=k.inready, proclists=k.proclists,
                host=k.host(owner_host or "-"), ready_hi=k.ready_hi, base=k.base, reason=reason,
                owner_incarnation=owner_incarnation, crash_cap=crash_cap, lock_ttl=lock_ttl_ms,
                retention=retention_s, list_dead="1" if list_dead else "0",
                entries=entries[at : at + self.REQUEUE_MANY_CALL]))
                for at in range(0, len(entries), self.REQUEUE_MANY_CALL)]
        out: list[list[tuple[str, str]]] = [[] for _ in lists]
        trip: list[tuple[int, RequeueManyCall]] = []

        def send() -> None:
            if len(trip) == 1:
                replies = [script(keys=trip[0][1].keys(), args=trip[0][1].args())]
            else:
                # EVALSHA itself, not the Script on a pipeline (a SCRIPT EXISTS round trip each time);
                # a call Redis did not know the script for (restarted, flushed) did nothing: it is
                # made again alone, which loads the script
                p = self.r.pipeline(transaction=False)
                for _, c in trip:
                    keys = c.keys()
                    p.evalsha(script.sha, len(keys), *keys, *c.args())
                replies = p.execute(raise_on_error=False)
                for n, (_, c) in enumerate(trip):
                    if isinstance(replies[n], redis.exceptions.NoScriptError):
                        replies[n] = script(keys=c.keys(), args=c.args())
                    elif isinstance(replies[n], Exception):
                        raise replies[n]
            for (i, c), verdicts in zip(trip, replies):
                out[i] += [(_s(e) or "", _s(v) or "") for e, v in zip(c.entries, verdicts)]

        size = 0
        for call in calls:
            trip.append(call)
            size += len(call[1].entries)
            if size >= self.REQUEUE_MANY_TRIP:
                send()
                trip, size = [], 0
        if trip:
            send()
        # An entry's requeue drops a dead list it emptied from proclists (requeue.lua's tidy); the
        # lists that were empty already are dropped here.
        empty = [proc for (proc, _, _), entries in zip(lists, read) if not entries]
        if list_dead and empty:
            pipe = self.r.pipeline(transaction=False)
            for proc in empty:
                pipe.exists(proc)
            gone = [proc for proc, n in zip(empty, pipe.execute()) if not n]
            if gone:
                self.r.hdel(k.proclists, *gone)
        return out

    def stamp(self, proc: str) -> tuple[int, list[tuple[bytes, int]]]:
        res = self._scripts["stamp"](keys=StampCall(proc=proc, started=self.k.started).keys())
        now = int(res[0])
        pairs = [(res[i], int(res[i + 1])) for i in range(1, len(res), 2)]
        return now, pairs

    def promote_due(self, batch: int = 200) -> int:
        call = PromoteDueCall(delayed=self.k.delayed, ready_lo=self.k.ready_lo, ready_hi=self.k.ready_hi, batch=batch)
        return int(self._scripts["promote_due"](keys=call.keys(), args=call.args()))

    def unstick(self, user: str, lock_ttl_ms: int) -> str:
        k = self.k
        call = UnstickCall(lock=k.lock(user), wait=k.wait(user), waitusers=k.waitusers, ready_lo=k.ready_lo,
                           ready_hi=k.ready_hi, user=user, lock_ttl=lock_ttl_ms)
        return _s(self._scripts["unstick"](keys=call.keys(), args=call.args())) or ""

    def poll_attempt(self, job_id: str, token: str) -> Stop | None:
        """Once a second while a job runs: "cancel" when it was cancelled, "fenced" when its token is
        no longer ours (another host's reaper reclaimed it after our heartbeat lapsed: a partition, a
        stalled supervisor). Stopping then bounds a double run to about a second after the reclaim
        becomes visible, instead of the rest of the job."""
        cancel, current = self.fast.call("HMGET", self.k.job(job_id), "cancel", "token")
        if cancel == b"1":
            return Stop.CANCEL
        if (current or b"").decode() != token:
            return Stop.FENCED
        return None

    def lease_left_ms(self, host_id: str) -> int:
        """Milliseconds our host key has left (-2: gone). A slot's own view of its host's lease, for
        when its supervisor cannot fence (stopped, or its housekeeper starved)."""
        return int(self.fast.call("PTTL", self.k.host(host_id)))


MAX_DEPENDENCY_WALK = 200


def dependency_cycle(q: "Queue", req: SubmitRequest) -> list[str] | None:
    """For a raw producer's job (``submit`` refuses unknown ``after`` ids, so only raw entries can
    close a cycle): the cycle its ``after`` ids lead back to it through, or None. Walks existing
    jobs' ``after`` lists breadth-first, at most MAX_DEPENDENCY_WALK jobs."""
    if not req.id or not req.after:
        return None
    parent: dict[str, str] = {d: req.id for d in req.after}
    frontier, seen = list(req.after), set(req.after)
    while frontier and len(seen) <= MAX_DEPENDENCY_WALK:
        p = q.r.pipeline(transaction=False)
        for dep in frontier:
            p.hget(q.k.job(dep), "after")
        nxt = []
        for dep, raw in zip(frontier, p.execute()):
            try:
                after = msgspec.json.decode(raw) if raw else []
            except msgspec.DecodeError:
                after = []
            for d in after if isinstance(after, list) else []:
                if d == req.id:
                    path = [dep]
                    while path[-1] != req.id:
                        path.append(parent[path[-1]])
                    return [req.id, *reversed(path[:-1]), req.id]
                if isinstance(d, str) and d not in seen:
                    seen.add(d)
                    parent[d] = dep
                    nxt.append(d)
        frontier = nxt
    return None


def _settle_reply(res: list) -> SettleReply:
    """settle.lua's answer (settle_take.lua's first two elements)."""
    if _s(res[0]) == "fenced":
        return SettleReply(SettleAnswer.FENCED, "")
    return SettleReply(SettleAnswer.OK, _s(res[1]) or "")


def decode_submit(raw: bytes) -> SubmitRequest:
    """A raw entry pushed by a producer that could only LPUSH: JSON of SubmitRequest."""
    try:
        req = msgspec.json.decode(raw, type=SubmitRequest)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise Undecodable(f"not a job id and not a valid job message: {e}") from None
    except RecursionError:
        raise Undecodable("a job message nested too deep to decode") from None
    try:
        check_submit(req)  # the same rules as `submit` (CONTRACT: ids, users, payload)
    except BadInput as e:
        raise Undecodable(str(e)) from None
    return req
