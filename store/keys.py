"""Every Redis key name tender-pool uses, in one place.

All keys share the hash tag ``{<queue>}`` (``tp:{tender_parse}:…``) so that every Lua script touches
one Redis Cluster slot; scripts receive every key as KEYS. A script that learns a name's parts only
from data (a job's user read in the same step) gets the base in KEYS and builds the name through
``lua/lib/keys.lua``, which spells what this class spells (tests/store/test_key_names.py compares
the two in a real Redis). The price, stated plainly: the whole pool lives on one shard.

| key | type | what |
|---|---|---|
| ``ready:hi`` / ``ready:lo`` | list | job ids; producers LPUSH, slots pop the RIGHT end; ``hi`` = interactive |
| ``proc:<host>:<inc>:<slot>.<n>`` | list | one slot incarnation's claimed ids (BLMOVE target) |
| ``proclists`` | hash | processing list → its ``Owner``, encoded ``<host>\t<incarnation>|<boot id>|<pid>`` |
| ``started`` | hash | job id → claim stamp, ms (Redis TIME); the reaper stamps any entry without one |
| ``job:<id>`` | hash | the job record (``records.JobRecord``) |
| ``lock:<user>`` | string | attempt token of the user's running job, or ``r:<id>`` reserved for a promoted waiter |
| ``wait:<user>`` | list | the user's parked job ids: interactive ones (``!<id>``) first, each class FIFO |
| ``waitusers`` | set | users with parked jobs (for the lost-promotion sweep) |
| ``deps:<id>`` | list | jobs parked until ``<id>`` ends (``!<id>``: an interactive one, lib/classes.lua ``park_entry``) |
| ``delayed`` | zset | job id → due ms, business retries with backoff |
| ``dead`` | list | dead-letter entries ``{raw, reason, at}`` |
| ``host:<host>`` | string | liveness of a host's supervisor: ``Owner.holder`` (incarnation, boot id, pid), PX 3 × heartbeat |
| ``reaper`` | string | lease: one reaper per Redis at a time (correctness does not depend on it) |
| ``finished`` | zset | job id → finish ms, for history and retention |
| ``busy:<worker id>`` | string | a slot's running attempt (``records.BusyState`` JSON), PX longest timeout + 120 s |
| ``slots:<host>`` | string | a host's slot table (``status_protocol.HostSlots`` JSON), PX 3 × heartbeat, for ``status --redis`` |
| ``depwaits`` | set | ids that have a ``deps:<id>`` list (parked dependents), so counting them needs no SCAN |
| ``active`` | hash | user → running attempts (±1 on entering/leaving ``running``, lib/state.lua ``set_state``) |
| ``inready`` | hash | user → id of the user's one "fair" entry in ``ready:lo`` (or parked behind its user) |
| ``backlog:<user>`` | list | the user's further bulk job ids, FIFO (RPUSH / LPOP); one goes to ``ready:lo`` when the fair entry starts or ends |
| ``inready:hi`` / ``hibacklog:<user>`` | hash / list | the same for interactive jobs and ``ready:hi`` (round robin across users inside the class) |
| ``sem:<kind>:<user>`` | zset | ``per_user`` = N > 1: attempt token → expiry ms, at most N members |
| ``semwait:<kind>:<user>`` | list | jobs parked for that semaphore, as ``wait:<user>`` |
| ``events`` | stream | every job transition (``job_queued`` … ``job_failed``) and ``run_*``; one field ``e`` = JSON; trimmed by the housekeeper only (``supervisor/stream_trim.py``): below what every consumer group still needs, never past ``[events] max_backlog``; ``MAXLEN ~ 100000`` without a group |
| ``events:gap:<group>`` | string | a consumer group lost entries to the ``max_backlog`` cap (``consumer.Gap`` JSON); the consumer resyncs, then deletes it |
| ``events:parked:<group>`` | list | entries a group's ``apply`` failed on every try (``consumer.Parked`` JSON), acknowledged so the rest go on |
| ``run:<id>`` | hash | a run: id, user, kind, state, priority, max_parallel, overwrite, created_at, finished_at, cancel, total and one count per job state; ``digest`` (its items'), ``staging``/``staged``/``stage_until`` while unsealed, ``queued_to`` (queuing cursor) |
| ``runjobs:<id>`` | list | the run's job ids (``<run id>/<n>``) in item order |
| ``runqueue`` | zset | sealed runs whose jobs are still being queued (chunk by chunk, cursor ``queued_to`` in the run hash) → seal ms |
| ``runs`` | zset | run id → created ms (trimmed with the retention at submit) |
| ``userruns:<user>`` | zset | the user's run ids → created ms |
| ``events:run:<id>`` | stream | the run's events (field ``e`` = JSON), ``MAXLEN ~ 10000``, expires with the retention once finished |
| ``runwait:<id>`` | list | run jobs parked by ``max_parallel`` (``!<id>``: interactive); one is released when a run job leaves ``running`` |
| ``md:<id>:<attempt>`` | string | a parse_markdown attempt's Markdown up to ``pool.inline_result_max`` bytes, PX retention; written by the settle that completes the job (settle.lua, settle_take.lua: a fenced attempt's is never written) |
| ``done:<kind>:<user>:<hash>`` | string | id of the completed job with that input hash, PX retention (skip) |
| ``writecheck`` | list | never written: ``status`` sends ``LPUSHX`` (a no-op on a missing key) to learn whether Redis refuses writes |
"""

from __future__ import annotations

import re

import msgspec


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class Keys:
    WAKE = "~wake"  # token pushed to the front of ready:lo so a slot blocked there looks at ready:hi

    def __init__(self, prefix: str, queue: str):
        self.base = f"{prefix}:{{{queue}}}"
        self.ready_hi = f"{self.base}:ready:hi"
        self.ready_lo = f"{self.base}:ready:lo"
        self.proclists = f"{self.base}:proclists"
        self.started = f"{self.base}:started"
        self.waitusers = f"{self.base}:waitusers"
        self.delayed = f"{self.base}:delayed"
        self.dead = f"{self.base}:dead"
        self.reaper = f"{self.base}:reaper"
        self.finished = f"{self.base}:finished"
        self.hosts = f"{self.base}:hosts"  # zset: host id → its last heartbeat (ms): who to look up for status
        # history indexes beside ``finished`` (lib/terminal.lua on_terminal builds the same names from it, through lib/keys.lua)
        self.finished_trim = f"{self.finished}:trim"  # zset: index member → a score at or below its oldest entry
        self.finished_catch_up = f"{self.finished}:catch_up"  # string: finish ms indexed up to, or "done"

    def finished_index(self, member: str) -> str:
        """A history index (zset: job id → finish ms): ``member`` is ``state:<s>``, ``user:<u>`` or
        ``kind:<k>``, as it is named inside ``finished_trim``."""
        return f"{self.finished}:{member}"

    def ready(self, priority: str) -> str:
        return self.ready_hi if priority == "interactive" else self.ready_lo

    def proc(self, host_id: str, incarnation: str, slot: int, seq: int) -> str:
        return f"{self.base}:proc:{host_id}:{incarnation}:{slot}.{seq}"

    def proc_parts(self, name: str) -> tuple[str, str, int, int] | None:
        """``proc``'s inverse: (host id, incarnation, slot, seq) of a processing list of this base,
        None for any other name (lib/keys.lua ``proc_parts`` reads a name the same way)."""
        head = f"{self.base}:proc:"
        if not name.startswith(head):
            return None
        m = re.fullmatch(r"([^:]+):([^:]+):([0-9]+)\.([0-9]+)", name[len(head):])
        return (m[1], m[2], int(m[3]), int(m[4])) if m else None

    @property
    def proc_pattern(self) -> str:
        return f"{self.base}:proc:*"

    def job(self, job_id: str) -> str:
        return f"{self.base}:job:{job_id}"

    def lock(self, user: str) -> str:
        return f"{self.base}:lock:{user}"

    def wait(self, user: str) -> str:
        return f"{self.base}:wait:{user}"

    def deps(self, job_id: str) -> str:
        return f"{self.base}:deps:{job_id}"

    def host(self, host_id: str) -> str:
        return f"{self.base}:host:{host_id}"

    def markdown(self, job_id: str, attempt: int) -> str:
        """The Markdown of a parse_markdown job's attempt (the completed one is ``job.attempts``)."""
        return f"{self.base}:md:{job_id}:{attempt}"

    def busy(self, worker_id: str) -> str:
        return f"{self.base}:busy:{worker_id}"

    def host_slots(self, host_id: str) -> str:
        return f"{self.base}:slots:{host_id}"

    @property
    def write_check(self) -> str:
        """Never written: status sends ``LPUSHX`` here (a no-op on a missing key) to learn whether
        Redis refuses writes right now (out of memory, MISCONF, a replica), and Redis's words."""
        return f"{self.base}:writecheck"

    @property
    def depwaits(self) -> str:
        return f"{self.base}:depwaits"

    # --- fairness, concurrency and runs (lib/state.lua ``set_state``) --------------------------------

    @property
    def active(self) -> str:
        return f"{self.base}:active"

    @property
    def inready(self) -> str:
        return f"{self.base}:inready"

    @property
    def inready_hi(self) -> str:
        """user → the user's one fair entry in ``ready:hi`` (``inready`` for the interactive class)."""
        return f"{self.base}:inready:hi"

    @property
    def events(self) -> str:
        return f"{self.base}:events"

    @property
    def runs(self) -> str:
        return f"{self.base}:runs"

    def events_gap(self, group: str) -> str:
        return f"{self.base}:events:gap:{group}"

    def events_parked(self, group: str) -> str:
        return f"{self.base}:events:parked:{group}"

    @property
    def job_pattern(self) -> str:
        """SCAN pattern of every job hash (a consumer's resync; never on a hot path)."""
        return f"{_glob_escape(self.base)}:job:*"

    @property
    def runqueue(self) -> str:
        """Sealed runs whose jobs are still being queued → seal ms (run_queue.lua; the submitter, a
        retry of it, or the housekeeper moves the cursor on)."""
        return f"{self.base}:runqueue"

    def backlog(self, user: str) -> str:
        return f"{self.base}:backlog:{user}"

    def hibacklog(self, user: str) -> str:
        """The user's further interactive job ids, FIFO (``backlog:<user>`` of ``ready:hi``). Not
        ``backlog:hi:<user>``: that is user ``hi:<user>``'s bulk backlog."""
        return f"{self.base}:hibacklog:{user}"

    def hi_keys(self, user: str) -> list[str]:
        """The interactive class's fair keys every script that queues or starts a job takes as one
        block (lib/ctx.lua ``with_hi``): ready:hi, inready:hi, hibacklog:<user>."""
        return [self.ready_hi, self.inready_hi, self.hibacklog(user)]

    def sem(self, kind: str, user: str) -> str:
        return f"{self.base}:sem:{kind}:{user}"

    def semwait(self, kind: str, user: str) -> str:
        return f"{self.base}:semwait:{kind}:{user}"

    def run(self, run_id: str) -> str:
        return f"{self.base}:run:{run_id}"

    def runjobs(self, run_id: str) -> str:
        return f"{self.base}:runjobs:{run_id}"

    def run_events(self, run_id: str) -> str:
        return f"{self.base}:events:run:{run_id}"

    def runwait(self, run_id: str) -> str:
        return f"{self.base}:runwait:{run_id}"

    def userruns(self, user: str) -> str:
        return f"{self.base}:userruns:{user}"

    def done(self, kind: str, user: str, input_hash: str) -> str:
        return f"{self.base}:done:{kind}:{user}:{input_hash}"

    def state_keys(self, user: str, run_id: str | None = None) -> list[str]:
        """The 8 keys every script that changes a job's state takes as one block (lib/ctx.lua
        ``state_ctx``): events, active, inready, backlog:<user>, then the job's run keys run:<run>,
        events:run:<run>, runwait:<run>, runjobs:<run> — ``run:-`` … placeholders for a plain job
        (never touched: the script reads the job's ``run`` field)."""
        r = run_id or "-"
        return [self.events, self.active, self.inready, self.backlog(user),
                self.run(r), self.run_events(r), self.runwait(r), self.runjobs(r)]


class Owner(msgspec.Struct, frozen=True):
    """Who owns a processing list: a host's supervisor incarnation. Stored as the ``proclists``
    value ``<host>\t<holder>``, where ``holder`` = ``<incarnation>|<boot id>|<pid>`` is also the
    ``host:<host>`` key's value while that supervisor lives (requeue.lua compares the two strings).

    A list found by SCAN but never registered knows only its name, ``proc:<host>:<incarnation>:…``:
    ``boot_id`` and ``pid`` are then empty and ``partial`` is true."""

    host: str
    incarnation: str
    boot_id: str = ""
    pid: int = 0
    partial: bool = False

    @property
    def holder(self) -> str:
        return f"{self.incarnation}|{self.boot_id}|{self.pid}"

    def encode(self) -> str:
        return f"{self.host}\t{self.holder}"

    @classmethod
    def decode(cls, value: str) -> "Owner":
        host, _, holder = value.partition("\t")
        return cls.of_holder(host, holder)

    @classmethod
    def of_holder(cls, host: str, holder: str) -> "Owner":
        inc, _, rest = holder.partition("|")
        boot, _, pid = rest.partition("|")
        return cls(host, inc, boot, int(pid) if pid.isdigit() else 0)

    @classmethod
    def from_list_name(cls, proc: str) -> "Owner":
        """``…:proc:<host>:<incarnation>:<slot>.<n>`` → a partial owner (host and incarnation)."""
        parts = proc.split(":proc:", 1)[-1].split(":")
        return cls(parts[0], parts[1] if len(parts) > 1 else "", partial=True)

    def holds(self, current: str | None) -> bool:
        """Does ``current`` (the ``host:<host>`` value now) name this owner's incarnation?"""
        if current is None:
            return False
        if self.partial:
            return current.partition("|")[0] == self.incarnation
        return current == self.holder
