"""Every write to a job goes through here: one method per Lua script in ``lua/``, plus the claim.

Hazards this module owns:
- ``BLMOVE`` cannot run inside Lua, so claim (BLMOVE) and start (start.lua) are two steps. A process
  killed between them leaves an entry with no stamp in its processing list; the supervisor (local
  death) or the reaper (remote death, stamp.lua) recovers it. That gap is the only non-atomic one.
- Every write after the claim is fenced by the attempt token (settle.lua refuses a stale attempt).
- The client is built per process (``connect``) and never inherited across ``fork``; responses are
  bytes, decoded here, so a producer's binary junk on the list cannot crash a slot.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from importlib import resources
from typing import Any

import msgspec
import redis

from tender_pool.supervisor.keys import Keys

from .connection import FastLane, connect  # noqa: F401  (connect: re-exported for callers)
from tender_pool.supervisor.types import JobError, JobRecord, JobState, SubmitRequest

_LIB = resources.files("tender_pool.slots").joinpath("lua/lib.lua").read_text()
_json = msgspec.json.Encoder()


def _script_text(name: str) -> str:
    body = resources.files("tender_pool.slots").joinpath(f"lua/{name}.lua").read_text()
    return _LIB + "\n" + body


class Undecodable(Exception):
    """A list entry or job hash we cannot turn into a JobRecord; goes to the dead-letter list."""


def _s(v: bytes | str | None) -> str | None:
    if v is None:
        return None
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def decode_job(h: dict[bytes, bytes]) -> JobRecord:
    """The job hash → JobRecord; raises Undecodable with the reason."""
    try:
        d: dict[str, Any] = {k.decode(): v.decode() for k, v in h.items()}
    except UnicodeDecodeError as e:
        raise Undecodable(f"job hash is not UTF-8: {e}") from None
    out: dict[str, Any] = {}
    try:
        for k, v in d.items():
            if k in ("payload", "after", "error", "result"):
                out[k] = msgspec.json.decode(v) if v else None
            elif k == "cancel":
                out[k] = v == "1"
            elif v == "":
                continue
            else:
                out[k] = v
        out = {k: v for k, v in out.items() if v is not None}
        return msgspec.convert(out, JobRecord, strict=False)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise Undecodable(f"job hash does not validate: {e}") from None


@dataclass
class Started:
    """start.lua's verdict. ``action`` is run | parked | ended | stale | missing."""

    action: str
    token: str = ""
    attempt: int = 0
    started_ms: int = 0
    created_ms: int = -1
    detail: list[str] | None = None


class Queue:
    def __init__(self, client: redis.Redis, keys: Keys):
        self.r = client
        self.k = keys
        self.fast = FastLane(client)
        self._texts = {name: _script_text(name) for name in ("start", "settle")}  # the slot's hot path
        self._scripts = {
            name: client.register_script(_script_text(name))
            for name in (
                "enqueue",
                "requeue",
                "deadletter",
                "promote_due",
                "stamp",
                "unstick",
                "cancel",
            )
        }

    # --- producers --------------------------------------------------------------------------------

    def enqueue(self, req: SubmitRequest) -> tuple[bool, str, str]:
        """Queue a job; returns (created, id, state). The same id twice queues one job."""
        job_id = req.id or secrets.token_hex(8)
        created, state = self._scripts["enqueue"](
            keys=[self.k.job(job_id), self.k.ready(req.priority), self.k.ready_lo, self.k.ready_lo],
            args=[job_id, req.kind, req.user, _json.encode(req.payload), req.priority, _json.encode(req.after), ""],
        )
        return bool(created), job_id, _s(state) or ""

    def adopt(self, proc: str, raw: bytes, req: SubmitRequest) -> str:
        """Turn a raw JSON entry a producer pushed onto ``ready`` into a job, at the front."""
        job_id = req.id or secrets.token_hex(8)
        self._scripts["enqueue"](
            keys=[self.k.job(job_id), self.k.ready(req.priority), self.k.ready_lo, proc],
            args=[job_id, req.kind, req.user, _json.encode(req.payload), req.priority, _json.encode(req.after), raw],
        )
        return job_id

    def get(self, job_id: str) -> JobRecord | None:
        h = self.r.hgetall(self.k.job(job_id))
        return decode_job(h) if h else None

    def cancel(self, job: JobRecord, retention_s: int, lock_ttl_ms: int) -> list[str]:
        keys = [
            self.k.job(job.id),
            self.k.ready_hi,
            self.k.ready_lo,
            self.k.wait(job.user),
            self.k.waitusers,
            self.k.delayed,
            self.k.finished,
            self.k.deps(job.id),
            self.k.lock(job.user),
            *(self.k.deps(d) for d in job.after),
        ]
        res = self._scripts["cancel"](keys=keys, args=[job.id, retention_s, lock_ttl_ms, job.user])
        return [_s(x) or "" for x in res]

    # --- the slot's path: claim → start → settle ---------------------------------------------------

    def _attempt_keys(self, proc: str, job: JobRecord) -> list[str]:
        """KEYS[1..9] shared by start.lua and settle.lua (their headers name them)."""
        k = self.k
        return [
            proc,
            k.job(job.id),
            k.started,
            k.lock(job.user),
            k.wait(job.user),
            k.waitusers,
            k.ready_lo,
            k.finished,
            k.deps(job.id),
        ]

    def claim(self, proc: str, timeout: float) -> bytes | None:
        """Interactive first, else block on bulk. A wake token (``Keys.WAKE``) comes back as-is."""
        entry = self.fast.call("LMOVE", self.k.ready_hi, proc, "RIGHT", "LEFT")
        if entry is None:
            entry = self.fast.call("BLMOVE", self.k.ready_lo, proc, "RIGHT", "LEFT", timeout)
        return entry

    def read_job(self, job_id: str) -> dict[bytes, bytes]:
        flat = self.fast.call("HGETALL", self.k.job(job_id))
        if isinstance(flat, dict):  # RESP3
            return flat
        return dict(zip(flat[::2], flat[1::2]))

    def drop_wake(self, proc: str) -> None:
        self.r.lrem(proc, 1, Keys.WAKE)

    def start(
        self,
        proc: str,
        job: JobRecord,
        worker: str,
        timeout_ms: int,
        lock_ttl_ms: int,
        retention_s: int,
        max_waits: int,
        suffix: str = "",
        busy: bytes = b"{}",
        busy_ttl_ms: int = 0,
    ) -> Started:
        """``suffix`` makes the attempt token; pass the same one when retrying after a lost reply."""
        k = self.k
        keys = [*self._attempt_keys(proc, job), k.busy(worker)]
        for dep in job.after:
            keys += [k.job(dep), k.deps(dep)]
        res = self.fast.script(
            self._texts["start"],
            keys,
            [
                job.id,
                suffix or secrets.token_hex(6),
                worker,
                timeout_ms,
                lock_ttl_ms,
                retention_s,
                max_waits,
                job.user,
                busy,
                busy_ttl_ms or lock_ttl_ms,
            ],
        )
        action = _s(res[0]) or ""
        if action == "run":
            return Started(
                "run", token=_s(res[1]) or "", attempt=int(res[2]), started_ms=int(res[3]), created_ms=int(res[4])
            )
        return Started(action, detail=[_s(x) or "" for x in res[1:]])

    def settle(
        self,
        proc: str,
        job: JobRecord,
        token: str,
        outcome: str,
        *,
        result: dict | None = None,
        error: JobError | None = None,
        lock_ttl_ms: int,
        retention_s: int,
        backoff_ms: int = 0,
        counts_try: bool = False,
        worker: str = "",
    ) -> tuple[bool, str]:
        """Returns (accepted, promoted waiter id). Not accepted = fenced: a newer attempt owns it."""
        k = self.k
        res = self.fast.script(
            self._texts["settle"],
            [*self._attempt_keys(proc, job), k.delayed, k.busy(worker or "-")],
            [
                job.id,
                token,
                outcome,
                _json.encode(result) if result is not None else "",
                _json.encode(error) if error is not None else "",
                lock_ttl_ms,
                retention_s,
                backoff_ms,
                job.user,
                "1" if counts_try else "0",
            ],
        )
        if _s(res[0]) == "fenced":
            return False, ""
        return True, _s(res[1]) or ""

    def deadletter(self, proc: str, entry: bytes, reason: str, retention_s: int) -> bool:
        job_id = _s(entry) or ""
        raw_hash = self.r.hgetall(self.k.job(job_id)) if job_id else {}
        dump = _json.encode({_s(a): _s(b) for a, b in raw_hash.items()}).decode() if raw_hash else ""
        return bool(
            self._scripts["deadletter"](
                keys=[proc, self.k.dead, self.k.job(job_id), self.k.finished, self.k.deps(job_id), self.k.ready_lo],
                args=[entry, reason, retention_s, dump, entry.decode("utf-8", "backslashreplace")],
            )
        )

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
    ) -> str:
        job_id = _s(entry) or ""
        user = _s(self.r.hget(self.k.job(job_id), "user")) or ""
        k = self.k
        res = self._scripts["requeue"](
            keys=[
                proc,
                k.job(job_id),
                k.started,
                k.lock(user),
                k.wait(user),
                k.waitusers,
                k.ready_lo,
                k.finished,
                k.deps(job_id),
                k.proclists,
                k.host(owner_host or "-"),
            ],
            args=[entry, reason, owner_incarnation, crash_cap, lock_ttl_ms, retention_s, user, "1" if list_dead else "0"],
        )
        return _s(res[0]) or ""

    def requeue_list(self, proc: str, reason: str, **kw: Any) -> list[tuple[str, str]]:
        """Requeue every entry of a dead list; returns (entry, verdict) pairs."""
        out = []
        for entry in self.r.lrange(proc, 0, -1):
            out.append((_s(entry) or "", self.requeue(proc, entry, reason, **kw)))
        if not self.r.exists(proc) and kw.get("list_dead", True):
            self.r.hdel(self.k.proclists, proc)
        return out

    def stamp(self, proc: str) -> tuple[int, list[tuple[bytes, int]]]:
        res = self._scripts["stamp"](keys=[proc, self.k.started])
        now = int(res[0])
        pairs = [(res[i], int(res[i + 1])) for i in range(1, len(res), 2)]
        return now, pairs

    def promote_due(self, batch: int = 200) -> int:
        return int(self._scripts["promote_due"](keys=[self.k.delayed, self.k.ready_lo], args=[batch]))

    def unstick(self, user: str, lock_ttl_ms: int) -> str:
        k = self.k
        res = self._scripts["unstick"](
            keys=[k.lock(user), k.wait(user), k.waitusers, k.ready_lo], args=[user, lock_ttl_ms]
        )
        return _s(res) or ""

    def poll_attempt(self, job_id: str, token: str) -> str | None:
        """Once a second while a job runs: "cancel" when it was cancelled, "fenced" when its token is
        no longer ours (another host's reaper reclaimed it after our heartbeat lapsed: a partition, a
        stalled supervisor). Stopping then bounds a double run to about a second after the reclaim
        becomes visible, instead of the rest of the job."""
        cancel, current = self.fast.call("HMGET", self.k.job(job_id), "cancel", "token")
        if cancel == b"1":
            return "cancel"
        if (current or b"").decode() != token:
            return "fenced"
        return None


def decode_submit(raw: bytes) -> SubmitRequest:
    """A raw entry pushed by a producer that could only LPUSH: JSON of SubmitRequest."""
    try:
        return msgspec.json.decode(raw, type=SubmitRequest)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise Undecodable(f"not a job id and not a valid job message: {e}") from None


def is_terminal(state: JobState) -> bool:
    return state.terminal
