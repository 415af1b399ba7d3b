"""The slot's side of what a start holds: the user's lock or the kind's semaphore, and the lease.

The lock itself is Redis's: the script that starts a job (take.lua, settle_take.lua's take, or
take.lua) takes the user's lock (``per_user`` 1: every such kind shares it), a place in the
kind's per-user semaphore (``per_user`` N > 1), or nothing (0), in the same step that stamps
the attempt and writes the slot's busy state; the settle releases it in the step that records
the outcome, and hands it to the user's next waiter. The lock's TTL is ``Config.lock_ttl_ms``
(longest timeout + kill grace + 60 s): a crashed holder frees the user by itself, a live one
never loses its lock while its job may still run.

What the slot owns here is what those scripts are told and what it holds meanwhile:
- the per-kind rules (``kind_limits``: a kind's timeout plus kill grace, and its per_user), sent
  with every take as ``TakeArgs``;
- the host lease a start needs (with a fence, our host key must have more left than one more
  poll plus a kill: otherwise a job would start only to be fenced at once), and the lapsed
  state after a take refused for it (``NoLease``): the slot claims nothing until it is renewed;
- the busy marker of the attempt it holds (``hold``, ``drop``).
"""

from __future__ import annotations

import os
from typing import Callable

import msgspec
import redis

from tender_pool.store.config import Config
from tender_pool.store.keys import Keys

from tender_pool.slots.answers import Started, TakeArgs
from tender_pool.slots.busy import BusyTracker
from tender_pool.slots.queue import Queue


def poll_every(cfg: Config) -> float:
    """How often a running attempt polls its job (cancel, token) and, with a fence, the lease."""
    return min(1.0, max(0.2, cfg.pool.heartbeat / 3))


def kind_limits(cfg: Config) -> dict[str, list[int]]:
    """Per kind the timeout (+ kill grace) stamped on an attempt, in ms, and its per_user rule;
    "*" for a kind this slot does not know (take.lua's defaults: the extraction timeout, the
    user's lock), which the attempt then fails as having no handler."""
    grace = cfg.pool.kill_grace
    limits = {
        kind: [int(((cfg.handler_timeout(kind) or cfg.extract.timeout) + grace) * 1000), cfg.per_user(kind)]
        for kind in ("parse_markdown", *cfg.handlers)
    }
    limits["*"] = [int((cfg.extract.timeout + grace) * 1000), 1]
    return limits


def take_args(cfg: Config, worker_id: str, busy_ttl: int, min_lease_ms: int = 0) -> TakeArgs:
    """take.lua's constant arguments for this slot (``kind_limits``, the lock TTL, the lease)."""
    return TakeArgs(
        worker=worker_id,
        pid=os.getpid(),
        lock_ttl_ms=cfg.lock_ttl_ms,
        retention_s=int(cfg.pool.result_retention),
        max_waits=cfg.pool.max_waits,
        busy_ttl_ms=busy_ttl,
        limits=msgspec.json.encode(kind_limits(cfg)),
        host_key=Keys(cfg.redis.prefix, cfg.pool.queue).host(cfg.pool.host_id) if min_lease_ms else "",
        min_lease_ms=min_lease_ms,
    )


class Lock:
    def __init__(self, cfg: Config, worker_id: str, q: Queue, busy: BusyTracker, log,
                 on_error: Callable[[redis.RedisError], None]):
        self.cfg = cfg
        self.q = q
        self.busy = busy
        self.log = log
        self.on_error = on_error
        self.ttl_ms = cfg.lock_ttl_ms
        self.poll_every = poll_every(cfg)
        # A running attempt stops once the host key has less left than one more poll plus a kill.
        self.lease_min_ms = int((cfg.pool.kill_grace + self.poll_every + 0.1) * 1000) if cfg.pool.fence else 0
        self.args = take_args(cfg, worker_id, busy.ttl_ms, self._take_lease_ms())
        self.lapsed = False  # a take found our host's lease too short: claim nothing until renewed

    def _take_lease_ms(self) -> int:
        """What our lease must have left for a take to start a job: enough for one more poll after
        the one that would stop it (``lease_min_ms``), so a job never starts only to be fenced at
        once; capped at 1.5 heartbeats, below the 2 a renewed key always has left (0: no fence)."""
        if not self.lease_min_ms:
            return 0
        hb_ms = self.cfg.pool.heartbeat * 1000
        return int(max(self.lease_min_ms, min(self.lease_min_ms + self.poll_every * 1000, 1.5 * hb_ms)))

    # --- the lease ----------------------------------------------------------------------------------

    def refused(self) -> None:
        """A take started nothing: our lease was too short (``NoLease``)."""
        if not self.lapsed:
            self.log.error("lease_lapsing_not_claiming", lease_min_ms=self.args.min_lease_ms)
        self.lapsed = True

    def renewed(self) -> bool:
        """After a take refused for a lapsing lease: whether our supervisor has renewed it since
        (one PTTL per poll interval until then; nothing at all in the steady state)."""
        try:
            if self.q.lease_left_ms(self.cfg.pool.host_id) < self.args.min_lease_ms:
                return False
        except redis.RedisError as e:
            self.on_error(e)
            return False
        self.log.info("lease_renewed_claiming")
        self.lapsed = False
        return True

    def lapsing(self) -> bool:
        """While an attempt runs: our host key expires before another poll plus a kill could
        finish, so our supervisor is not renewing it (stopped, starved) and cannot fence."""
        return bool(self.lease_min_ms) and self.q.lease_left_ms(self.cfg.pool.host_id) < self.lease_min_ms

    # --- what an attempt holds ----------------------------------------------------------------------

    def hold(self, st: Started) -> None:
        """The start wrote the busy state in the same step that gave us the lock; the settle clears
        it (guarded by job id) or the next start replaces it."""
        self.busy.started(st.attempt, st.started_ms, st.created_ms)

    def drop(self, job_id: str) -> None:
        """An exception between start and settle: our busy state must not outlive the attempt."""
        self.busy.clear(job_id)
