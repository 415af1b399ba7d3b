"""Writing a run: staged in bounded chunks, sealed by the last one, then queued in bounded chunks.

Why chunks: one script holds all of Redis while it runs; a run written in one script blocked every
host ~33 µs an item (3.2 s for 80,000 items, past any socket timeout: the submitter saw a failure
while the run existed, and its retry made a second). Here every script call is bounded by
``STAGE_ITEMS`` / ``STAGE_BYTES`` (``run_submit.lua``) or ``QUEUE_JOBS`` (``run_queue.lua``), each
a few milliseconds of Redis time (the figure is in the README).

Why it is safe to retry anything, any number of times:
- Staging writes job hashes nobody can claim (in no ready list) and the run hash, all expiring at one
  instant (``STAGE_TTL_MS`` after the first chunk) unless the last chunk seals the run; a chunk is
  written only at the run's cursor ``staged``, so a chunk whose reply was lost is never written twice
  (the script answers where the cursor is). The run hash keeps the submission's ``digest`` (user,
  kind, options, every item's key and payload): the same run id with the same items resumes (or
  returns the sealed run), with anything else is ``BadInput``.
- Queuing moves a cursor (``queued_to``) in the sealed run's hash, one atomic chunk at a time; a
  retry, or the housekeeper for a submitter that died (``queue_pending``), goes on from it.

A call that fails on a connection error or a timeout is sent again (``CALL_TRIES``) before the
error reaches the caller: with a generated run id, a retry of the caller's own would make a new
run, so the client does its best not to give up while the reply alone was lost.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, Callable, Iterator, Sequence

import msgspec
import redis

from tender_pool.store.replication import wait_replicated
from tender_pool.store.keys import Keys
from tender_pool.store.script_args import RunAbortCall, RunQueueCall, RunSubmitCall, ScriptCall
from tender_pool.store.submission import BadInput, run_job_id

from tender_pool.client import items as _items, records

# Measured (bench/bench_run_submit.py, README "Measurements"): Redis CPU ~18 µs an item staged and
# ~31 µs a job queued on the loaded 2-core development machine (load 16-19): ~1.9 ms a call each.
STAGE_ITEMS = 100  # items per staging chunk
STAGE_BYTES = 512 * 1024  # payload bytes per staging chunk (one larger payload goes alone)
QUEUE_JOBS = 60  # jobs per queuing chunk (job_queued carries the row fields: ~30 µs a job)
STAGE_TTL_MS = 3_600_000  # an unsealed run (and what it staged) expires this long after its first chunk
CALL_TRIES = 4
RETRY_PAUSE_S = (0.05, 0.2, 0.5)

_json = msgspec.json.Encoder()


def digest(user: str, kind: str, priority: str, max_parallel: int, overwrite: bool,
           items: Sequence[_items.Item]) -> str:
    """What makes two submissions "the same": user, kind, options and every item's key and
    canonical payload, in order (not the input files' bytes: a retry of the same command is the same
    submission even if a file changed meanwhile)."""
    h = hashlib.sha256(_json.encode([user, kind, priority, max_parallel, overwrite]))
    for it in items:
        h.update(b"\n")
        h.update(_json.encode([it.key, msgspec.json.encode(it.payload, order="sorted").decode()]))
    return h.hexdigest()


def chunks(encoded: Sequence[bytes], start: int) -> Iterator[tuple[int, int]]:
    """(first, end) index ranges from ``start``: at most STAGE_ITEMS items and STAGE_BYTES of payload
    each (a single larger payload is a chunk of its own)."""
    i, n = start, len(encoded)
    while i < n:
        end, size = i, 0
        while end < n and end - i < STAGE_ITEMS and (end == i or size + len(encoded[end]) <= STAGE_BYTES):
            size += len(encoded[end])
            end += 1
        yield i, end
        i = end


class RunWriter:
    """The run-writing calls of one ``Client`` (its Redis, keys, scripts and replication rule)."""

    def __init__(self, r: redis.Redis, k: Keys, scripts: dict[str, Any], replicas: int, wait_ms: int,
                 stage_ttl_ms: int = STAGE_TTL_MS, tries: int = CALL_TRIES):
        self.r, self.k, self.scripts = r, k, scripts
        self.replicas, self.wait_ms, self.stage_ttl_ms = replicas, wait_ms, stage_ttl_ms
        self.tries = tries  # the housekeeper passes 1: its loop backs off itself, its heartbeat must not wait

    def _call(self, call: ScriptCall) -> list[str]:
        """One script call, replicated as configured, sent again after a lost reply (every script
        here is idempotent: see the module docstring)."""
        name, keys, args = call.SCRIPT, call.keys(), call.args()
        for n in range(self.tries):
            try:
                res = wait_replicated(self.r, self.replicas, self.wait_ms,
                                      lambda p: self.scripts[name](keys=keys, args=args, client=p))[0]
                return [records.s(x) or "" for x in res]
            except (redis.ConnectionError, redis.TimeoutError):
                if n == self.tries - 1:
                    raise
                time.sleep(RETRY_PAUSE_S[min(n, len(RETRY_PAUSE_S) - 1)])
        raise AssertionError("unreachable")

    def submit(self, run_id: str, user: str, kind: str, items: Sequence[_items.Item], *, priority: str,
               max_parallel: int, overwrite: bool, retention_s: int,
               hash_of: Callable[[str, dict[str, Any]], str] | None = None) -> None:
        """Stage, seal and queue the run (or resume it, or find it sealed). Raises BadInput (the run
        id exists with other items or options; a job id in the way: nothing is left written).
        ``hash_of``: an item's input hash (default ``items.input_hash``, each distinct file read
        once per submission)."""
        if hash_of is None:
            digests: dict[str, str | None] = {}
            hash_of = lambda kd, payload: _items.input_hash(kd, payload, digests)  # noqa: E731
        k = self.k
        d = digest(user, kind, priority, max_parallel, overwrite, items)
        encoded = [msgspec.json.encode(it.payload) for it in items]
        total = len(items)
        pos = self._resume_at(run_id, d)
        restarts = 0
        while pos is not None and pos < total:
            first, end = next(chunks(encoded, pos))
            jobs: list[str] = []
            values: list[Any] = []
            for i in range(first, end):
                jid = run_job_id(run_id, i + 1)
                jobs.append(k.job(jid))
                values += [jid, items[i].key, encoded[i], "" if overwrite else hash_of(kind, items[i].payload)]
            res = self._call(RunSubmitCall(
                run=k.run(run_id), runjobs=k.runjobs(run_id), runs=k.runs, userruns=k.userruns(user),
                run_events=k.run_events(run_id), events=k.events, runqueue=k.runqueue, per_item=jobs, run_id=run_id,
                user=user, kind=kind, priority=priority, max_parallel=max_parallel,
                overwrite="1" if overwrite else "0", retention=retention_s, digest=d, total=total, first=first,
                staging=self.stage_ttl_ms, per_item_values=values))
            if res[0] in ("staged", "at"):
                pos = int(res[1])
            elif res[0] in ("sealed", "legacy"):
                pos = None
            elif res[0] == "expired":  # the unsealed run expired under us: start it again, once or twice
                restarts += 1
                if restarts > 2:
                    raise BadInput(f"run {run_id}: its staging keeps expiring; submit it again")
                pos = 0
            elif res[0] == "different":
                raise BadInput(f"run id {run_id} exists with other items or options")
            elif res[0] == "collision":
                self.abort(run_id, d)
                raise BadInput(f"run {run_id}: job {res[1]} exists already; nothing written")
            else:
                raise AssertionError(f"run_submit.lua answered {res!r}")
        self.queue(run_id, retention_s)

    def _resume_at(self, run_id: str, d: str) -> int | None:
        """Where staging goes on: 0 for a new run, the cursor of an unsealed one with this digest,
        None for a sealed (or pre-digest) one. Raises BadInput for another digest."""
        have, staging, staged = self.r.hmget(self.k.run(run_id), "digest", "staging", "staged")
        if have is None:
            return None if self.r.exists(self.k.run(run_id)) else 0
        if records.s(have) != d:
            raise BadInput(f"run id {run_id} exists with other items or options")
        return int(staged or 0) if staging == b"1" else None

    def queue(self, run_id: str, retention_s: int, max_calls: int | None = None) -> tuple[bool, int]:
        """Queue a sealed run's remaining jobs, one bounded chunk a call: (all queued, calls made),
        at most ``max_calls`` calls (the housekeeper's share of a pass)."""
        k = self.k
        user = records.s(self.r.hget(k.run(run_id), "user"))
        if user is None:
            self.r.zrem(k.runqueue, run_id)
            return True, 0
        call = RunQueueCall(run=k.run(run_id), runjobs=k.runjobs(run_id), run_events=k.run_events(run_id),
                            runwait=k.runwait(run_id), events=k.events, active=k.active, inready=k.inready,
                            backlog=k.backlog(user), ready_hi=k.ready_hi, ready_lo=k.ready_lo, finished=k.finished,
                            runqueue=k.runqueue, inready_hi=k.inready_hi, hibacklog=k.hibacklog(user), base=k.base,
                            run_id=run_id, at_most=QUEUE_JOBS, retention=retention_s)
        calls = 0
        while max_calls is None or calls < max_calls:
            calls += 1
            res = self._call(call)
            if res[0] != "more":
                return res[0] != "unsealed", calls
        return False, calls

    def abort(self, run_id: str, d: str) -> None:
        """Take back what this submission staged of an unsealed run, a bounded chunk a call."""
        k = self.k
        call = RunAbortCall(run=k.run(run_id), runjobs=k.runjobs(run_id), base=k.base, run_id=run_id, digest=d,
                            at_most=STAGE_ITEMS * 4)
        while self._call(call)[0] == "more":
            pass


def queue_pending(writer: RunWriter, retention_s: int, older_than_ms: int, now_ms: int, max_calls: int) -> int:
    """The housekeeper's part: go on queuing the runs sealed more than ``older_than_ms`` ago (Redis
    TIME ms) whose queuing has not finished (their submitter died or stalled), at most ``max_calls``
    chunks in all. Returns the chunks queued."""
    spent = 0
    for rid in writer.r.zrangebyscore(writer.k.runqueue, "-inf", now_ms - older_than_ms, start=0, num=10):
        if spent >= max_calls:
            break
        _done, n = writer.queue(records.s(rid) or "", retention_s, max_calls=max_calls - spent)
        spent += n
    return spent
