"""Each Lua script's KEYS and ARGV as one typed Struct: the caller fills in fields by name, the
Struct lays them out in the order the script's header gives (``keys()``, ``args()``).

A Struct's ``KEYS`` and ``ARGV`` name its fields in the script's order, each with its width: 1 for
one value, N for a block of exactly N (``Keys.state_keys``: 8, ``Keys.hi_keys``: 3), 0 for a list
of any length that runs to the end. tests/store/test_script_headers.py reads every script's header
and checks its Struct against it, position by position, so the header, the Struct and (through the
Struct) every call site say the same thing.
"""

from __future__ import annotations

from typing import ClassVar, Union

import msgspec

Value = Union[str, bytes, int]

STATE = 8  # Keys.state_keys: events, active, inready, backlog:<user>, run:, events:run:, runwait:, runjobs:
HI = 3  # Keys.hi_keys: ready:hi, inready:hi, hibacklog:<user>
REST = 0  # the rest of KEYS or ARGV, any length


class ScriptCall(msgspec.Struct, frozen=True, kw_only=True):
    """One call's KEYS and ARGV (a subclass per script; ``SCRIPT`` names it). ``XCall(...).keys()``
    and ``.args()`` are what ``scripts.register(...)[name](keys=..., args=...)`` takes."""

    SCRIPT: ClassVar[str] = ""
    KEYS: ClassVar[tuple[tuple[str, int], ...]] = ()
    ARGV: ClassVar[tuple[tuple[str, int], ...]] = ()

    def keys(self) -> list[str]:
        return self._laid_out(self.KEYS)

    def args(self) -> list[Value]:
        return self._laid_out(self.ARGV)

    def _laid_out(self, layout: tuple[tuple[str, int], ...]) -> list:
        out: list = []
        for name, width in layout:
            v = getattr(self, name)
            if width == 1:
                out.append(v)
                continue
            if width != REST and len(v) != width:
                raise ValueError(f"{self.SCRIPT}.lua: {name} takes {width} values, not {len(v)}")
            out.extend(v)
        return out


class EnqueueCall(ScriptCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "enqueue"
    KEYS: ClassVar = (("job", 1), ("ready", 1), ("ready_lo", 1), ("proc", 1), ("state_block", STATE),
                      ("hi_keys", HI))
    ARGV: ClassVar = (("id", 1), ("kind", 1), ("user", 1), ("payload", 1), ("priority", 1), ("after", 1),
                      ("raw", 1))
    job: str
    ready: str
    ready_lo: str
    proc: str
    state_block: list[str]
    hi_keys: list[str]
    id: str
    kind: str
    user: str
    payload: bytes
    priority: str
    after: bytes
    raw: Value = ""


class CancelCall(ScriptCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "cancel"
    KEYS: ClassVar = (("job", 1), ("ready_hi", 1), ("ready_lo", 1), ("wait", 1), ("waitusers", 1),
                      ("delayed", 1), ("finished", 1), ("deps", 1), ("lock", 1), ("state_block", STATE),
                      ("semwait", 1), ("hi_keys", HI), ("after_deps", REST))
    ARGV: ClassVar = (("id", 1), ("retention", 1), ("lock_ttl", 1), ("user", 1))
    job: str
    ready_hi: str
    ready_lo: str
    wait: str
    waitusers: str
    delayed: str
    finished: str
    deps: str
    lock: str
    state_block: list[str]
    semwait: str
    hi_keys: list[str]
    after_deps: list[str]
    id: str
    retention: int
    lock_ttl: int
    user: str


class DeadletterCall(ScriptCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "deadletter"
    KEYS: ClassVar = (("proc", 1), ("dead", 1), ("job", 1), ("finished", 1), ("deps", 1), ("ready_lo", 1),
                      ("state_block", STATE), ("hi_keys", HI))
    ARGV: ClassVar = (("entry", 1), ("reason", 1), ("retention", 1), ("job_hash", 1), ("entry_utf8", 1))
    proc: str
    dead: str
    job: str
    finished: str
    deps: str
    ready_lo: str
    state_block: list[str]
    hi_keys: list[str]
    entry: bytes
    reason: str
    retention: int
    job_hash: Value
    entry_utf8: str


class DepwaitsCountCall(ScriptCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "depwaits_count"
    KEYS: ClassVar = (("depwaits", 1), ("deps", REST))
    ARGV: ClassVar = (("ids", REST),)
    depwaits: str
    deps: list[str]
    ids: list[str]


class ProgressCall(ScriptCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "progress"
    KEYS: ClassVar = (("job", 1), ("run", 1), ("run_events", 1), ("events", 1))
    ARGV: ClassVar = (("id", 1), ("token", 1), ("progress", 1))
    job: str
    run: str
    run_events: str
    events: str
    id: str
    token: str
    progress: bytes


class PromoteDueCall(ScriptCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "promote_due"
    KEYS: ClassVar = (("delayed", 1), ("ready_lo", 1), ("ready_hi", 1))
    ARGV: ClassVar = (("batch", 1),)
    delayed: str
    ready_lo: str
    ready_hi: str
    batch: int


class RequeueCall(ScriptCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "requeue"
    KEYS: ClassVar = (("proc", 1), ("job", 1), ("started", 1), ("lock", 1), ("wait", 1), ("waitusers", 1),
                      ("ready_lo", 1), ("finished", 1), ("deps", 1), ("state_block", STATE), ("sem", 1),
                      ("semwait", 1), ("proclists", 1), ("host", 1), ("ready_hi", 1), ("base", 1))
    ARGV: ClassVar = (("entry", 1), ("reason", 1), ("owner_incarnation", 1), ("crash_cap", 1), ("lock_ttl", 1),
                      ("retention", 1), ("user", 1), ("list_dead", 1), ("stamp", 1))
    proc: str
    job: str
    started: str
    lock: str
    wait: str
    waitusers: str
    ready_lo: str
    finished: str
    deps: str
    state_block: list[str]
    sem: str
    semwait: str
    proclists: str
    host: str
    ready_hi: str
    base: str
    entry: Value
    reason: str
    owner_incarnation: str
    crash_cap: int
    lock_ttl: int
    retention: int
    user: str
    list_dead: str
    stamp: Value


class RequeueManyCall(ScriptCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "requeue_many"
    KEYS: ClassVar = (("proc", 1), ("started", 1), ("waitusers", 1), ("ready_lo", 1), ("finished", 1),
                      ("events", 1), ("active", 1), ("inready", 1), ("proclists", 1), ("host", 1),
                      ("ready_hi", 1), ("base", 1))
    ARGV: ClassVar = (("reason", 1), ("owner_incarnation", 1), ("crash_cap", 1), ("lock_ttl", 1),
                      ("retention", 1), ("list_dead", 1), ("entries", REST))
    proc: str
    started: str
    waitusers: str
    ready_lo: str
    finished: str
    events: str
    active: str
    inready: str
    proclists: str
    host: str
    ready_hi: str
    base: str
    reason: str
    owner_incarnation: str
    crash_cap: int
    lock_ttl: int
    retention: int
    list_dead: str
    entries: list[bytes]


class RunAbortCall(ScriptCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "run_abort"
    KEYS: ClassVar = (("run", 1), ("runjobs", 1), ("base", 1))
    ARGV: ClassVar = (("run_id", 1), ("digest", 1), ("at_most", 1))
    run: str
    runjobs: str
    base: str
    run_id: str
    digest: str
    at_most: int


class _RunCall(ScriptCall, frozen=True, kw_only=True):
    """The keys run_cancel, run_queue and run_retry all open with (their headers' KEYS[1..10])."""

    run: str
    runjobs: str
    run_events: str
    runwait: str
    events: str
    active: str
    inready: str
    backlog: str
    ready_hi: str
    ready_lo: str


_RUN_KEYS = (("run", 1), ("runjobs", 1), ("run_events", 1), ("runwait", 1), ("events", 1), ("active", 1),
             ("inready", 1), ("backlog", 1), ("ready_hi", 1), ("ready_lo", 1))


class RunCancelCall(_RunCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "run_cancel"
    KEYS: ClassVar = (*_RUN_KEYS, ("delayed", 1), ("finished", 1), ("wait", 1), ("waitusers", 1), ("lock", 1),
                      ("semwait", 1), ("inready_hi", 1), ("hibacklog", 1), ("per_job", REST))
    ARGV: ClassVar = (("run_id", 1), ("retention", 1), ("lock_ttl", 1), ("user", 1))
    delayed: str
    finished: str
    wait: str
    waitusers: str
    lock: str
    semwait: str
    inready_hi: str
    hibacklog: str
    per_job: list[str]
    run_id: str
    retention: int
    lock_ttl: int
    user: str


class RunQueueCall(_RunCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "run_queue"
    KEYS: ClassVar = (*_RUN_KEYS, ("finished", 1), ("runqueue", 1), ("inready_hi", 1), ("hibacklog", 1),
                      ("base", 1))
    ARGV: ClassVar = (("run_id", 1), ("at_most", 1), ("retention", 1))
    finished: str
    runqueue: str
    inready_hi: str
    hibacklog: str
    base: str
    run_id: str
    at_most: int
    retention: int


class RunRetryCall(_RunCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "run_retry"
    KEYS: ClassVar = (*_RUN_KEYS, ("finished", 1), ("inready_hi", 1), ("hibacklog", 1), ("per_job", REST))
    ARGV: ClassVar = (("run_id", 1), ("retention", 1), ("cancelled", 1), ("user", 1))
    finished: str
    inready_hi: str
    hibacklog: str
    per_job: list[str]
    run_id: str
    retention: int
    cancelled: str
    user: str


class RunSubmitCall(ScriptCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "run_submit"
    KEYS: ClassVar = (("run", 1), ("runjobs", 1), ("runs", 1), ("userruns", 1), ("run_events", 1), ("events", 1),
                      ("runqueue", 1), ("per_item", REST))
    ARGV: ClassVar = (("run_id", 1), ("user", 1), ("kind", 1), ("priority", 1), ("max_parallel", 1),
                      ("overwrite", 1), ("retention", 1), ("digest", 1), ("total", 1), ("first", 1),
                      ("staging", 1), ("per_item_values", REST))
    run: str
    runjobs: str
    runs: str
    userruns: str
    run_events: str
    events: str
    runqueue: str
    per_item: list[str]
    run_id: str
    user: str
    kind: str
    priority: str
    max_parallel: int
    overwrite: str
    retention: int
    digest: str
    total: int
    first: int
    staging: int
    per_item_values: list[Value]


_SETTLE_KEYS = (("proc", 1), ("job", 1), ("started", 1), ("lock", 1), ("wait", 1), ("waitusers", 1),
                ("ready_lo", 1), ("finished", 1), ("deps", 1), ("state_block", STATE), ("sem", 1),
                ("semwait", 1), ("delayed", 1), ("busy", 1), ("done", 1))
_SETTLE_ARGV = (("id", 1), ("token", 1), ("outcome", 1), ("result", 1), ("error", 1), ("lock_ttl", 1),
                ("retention", 1), ("backoff", 1), ("user", 1), ("counts_try", 1), ("handler_started", 1))


class SettleCall(ScriptCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "settle"
    KEYS: ClassVar = (*_SETTLE_KEYS, ("ready_hi", 1), ("markdown", 1))
    ARGV: ClassVar = (*_SETTLE_ARGV, ("input_hash", 1), ("keep_markdown", 1), ("markdown_text", 1))
    proc: str
    job: str
    started: str
    lock: str
    wait: str
    waitusers: str
    ready_lo: str
    finished: str
    deps: str
    state_block: list[str]
    sem: str
    semwait: str
    delayed: str
    busy: str
    done: str
    ready_hi: str
    id: str
    token: str
    outcome: str
    result: Value
    error: Value
    lock_ttl: int
    retention: int
    backoff: int
    user: str
    counts_try: str
    handler_started: str
    input_hash: str
    markdown: str
    keep_markdown: str
    markdown_text: Value


class SettleTakeCall(ScriptCall, frozen=True, kw_only=True):
    """settle.lua's first 22 KEYS and 11 ARGV (``settle_part``), then the take's."""

    SCRIPT: ClassVar[str] = "settle_take"
    KEYS: ClassVar = (("settle_keys", len(_SETTLE_KEYS) + STATE - 1), ("ready_hi", 1), ("host", 1),
                      ("inready_hi", 1), ("base", 1), ("markdown", 1))
    ARGV: ClassVar = (("settle_args", len(_SETTLE_ARGV)), ("suffix", 1), ("worker", 1), ("pid", 1),
                      ("max_waits", 1), ("busy_ttl", 1), ("retry", 1), ("limits", 1), ("lease_left", 1),
                      ("input_hash", 1), ("keep_markdown", 1), ("markdown_text", 1))
    settle_keys: list[str]
    ready_hi: str
    host: str
    inready_hi: str
    settle_args: list[Value]
    base: str
    suffix: str
    worker: str
    pid: int
    max_waits: int
    busy_ttl: int
    retry: str
    limits: Value
    lease_left: int
    input_hash: str
    markdown: str
    keep_markdown: str
    markdown_text: Value


def settle_part(a: SettleCall) -> tuple[list[str], list[Value]]:
    """The KEYS and ARGV settle_take.lua shares with settle.lua (its ``settle_keys``, ``settle_args``)."""
    keys, args = a.keys(), a.args()
    return keys[: len(_SETTLE_KEYS) + STATE - 1], args[: len(_SETTLE_ARGV)]


class StampCall(ScriptCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "stamp"
    KEYS: ClassVar = (("proc", 1), ("started", 1))
    proc: str
    started: str


class TakeCall(ScriptCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "take"
    KEYS: ClassVar = (("proc", 1), ("ready_hi", 1), ("ready_lo", 1), ("started", 1), ("waitusers", 1),
                      ("finished", 1), ("events", 1), ("active", 1), ("inready", 1), ("busy", 1), ("host", 1),
                      ("inready_hi", 1), ("base", 1))
    ARGV: ClassVar = (("entry", 1), ("suffix", 1), ("worker", 1), ("pid", 1), ("lock_ttl", 1),
                      ("retention", 1), ("max_waits", 1), ("busy_ttl", 1), ("retry", 1), ("limits", 1),
                      ("lease_left", 1))
    proc: str
    ready_hi: str
    ready_lo: str
    started: str
    waitusers: str
    finished: str
    events: str
    active: str
    inready: str
    busy: str
    host: str
    inready_hi: str
    base: str
    entry: Value
    suffix: str
    worker: str
    pid: int
    lock_ttl: int
    retention: int
    max_waits: int
    busy_ttl: int
    retry: str
    limits: Value
    lease_left: int


class UnstickCall(ScriptCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "unstick"
    KEYS: ClassVar = (("lock", 1), ("wait", 1), ("waitusers", 1), ("ready_lo", 1), ("ready_hi", 1))
    ARGV: ClassVar = (("user", 1), ("lock_ttl", 1))
    lock: str
    wait: str
    waitusers: str
    ready_lo: str
    ready_hi: str
    user: str
    lock_ttl: int


class BusyClearCall(ScriptCall, frozen=True, kw_only=True):
    SCRIPT: ClassVar[str] = "busy_clear"
    KEYS: ClassVar = (("busy", 1),)
    ARGV: ClassVar = (("id", 1),)
    busy: str
    id: str


def by_script() -> dict[str, type[ScriptCall]]:
    """Every script's call Struct, by script name."""
    out: dict[str, type[ScriptCall]] = {}
    todo = list(ScriptCall.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.SCRIPT:
            out[cls.SCRIPT] = cls
    return out
