"""Live changes: the control requests on the status socket, and what a config reload may change.

Control frames (``scale``, ``drain``; their Structs are in ``client/status_protocol.py``) travel on the status socket (``status_protocol``'s framing)
with the read protocol's ``version`` and their own ``control`` version, so read-only clients and
control clients evolve apart: ``{"version": 1, "op": "scale", "control": 1, "workers": 3}``. A request
without ``control`` is a read request; ``drain`` without it is refused as an unknown read.

Who may send them: whoever can ``connect()`` to the socket, i.e. its owner and group (mode 0660,
group ``status.group`` or the daemon's). That is the whole access check, as with Docker's socket;
tests prove it with real unprivileged users.

The server thread never acts: it validates, queues the request for the main loop (which owns the
slot table) and answers "accepted"; clients watch ``status`` for the effect (``tender-pool scale
--wait``, ``tender-pool drain``).

Reload (SIGHUP) keys fall in three groups, decided here and nowhere else:
- ``SUPERVISOR_LIVE``: read by the supervisor each time it needs them; applied at once;
- ``RESTART``: identity and connections (Redis, queue, host, sockets, listeners): the reload keeps the
  running values and says which keys wait for a restart;
- everything else is read by slots at fork: applied by recycling the slots one by one (each finishes
  its current job, exits, and is forked again with the new config).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from tender_pool.client.status_protocol import CONTROL_OPS, CONTROL_VERSION, ControlReply, Request
from tender_pool.store.config import Config
from tender_pool.client.status_protocol import STATUS_PROTOCOL


RESTART = frozenset({
    "redis.url", "redis.prefix", "redis.socket_timeout", "pool.queue", "pool.host_id", "pool.heartbeat",
    "pool.state_dir", "status.socket", "status.group", "metrics.listen", "embedded_redis",
})
SUPERVISOR_LIVE = frozenset({"pool.worker_count", "pool.drain_timeout"})
NOT_SETTINGS = frozenset({"source"})


class Command(msgspec.Struct, frozen=True):
    """What the server thread hands the main loop."""

    op: Literal["scale", "drain"]
    workers: int = 0


def check(req: Request) -> Command | str:
    """A valid control request's Command, or why it is refused."""
    if req.version != STATUS_PROTOCOL:
        return f"protocol version {req.version} not supported"
    if req.control != CONTROL_VERSION:
        return f"control version {req.control} not supported (this daemon speaks {CONTROL_VERSION})"
    if req.op == "scale":
        if req.workers is None or not 1 <= req.workers <= 4:
            return f"scale: workers {req.workers}: an integer from 1 to 4"
        return Command("scale", req.workers)
    if req.op == "drain":
        return Command("drain")
    return f"unknown control request {req.op!r} (control requests: {', '.join(CONTROL_OPS)})"


def _flatten(cfg: Config) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for section, value in msgspec.to_builtins(cfg).items():
        if section in NOT_SETTINGS:
            continue
        if isinstance(value, dict):
            for key, v in value.items():  # handlers.<name> compares as one value
                out[f"{section}.{key}"] = v
        else:
            out[section] = value
    return out


class Change(msgspec.Struct):
    """A reload's changed keys, by how they apply (see the module docstring)."""

    live: list[str]
    slots: list[str]
    restart: list[str]


def classify(old: Config, new: Config) -> Change:
    a, b = _flatten(old), _flatten(new)
    changed = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return Change(
        live=[k for k in changed if k in SUPERVISOR_LIVE],
        slots=[k for k in changed if k not in SUPERVISOR_LIVE and k not in RESTART],
        restart=[k for k in changed if k in RESTART],
    )


def merge(old: Config, new: Config, restart_keys: list[str]) -> Config:
    """``new`` with the restart-only keys put back to their running values."""
    merged = msgspec.structs.replace(new)
    for section in ("redis", "pool", "extract", "status", "metrics"):
        setattr(merged, section, msgspec.structs.replace(getattr(new, section)))
    for key in restart_keys:
        if "." in key:
            section, name = key.split(".", 1)
            setattr(getattr(merged, section), name, getattr(getattr(old, section), name))
        else:
            setattr(merged, key, getattr(old, key))
    return merged


def adopt(running: Config, merged: Config) -> None:
    """Copy ``merged`` into the running Config object in place: the housekeeper, status builder and
    metrics hold that object, so they all see the new values (attribute writes are atomic under the
    GIL; a reader sees the old or the new section, never a torn one)."""
    for f in running.__struct_fields__:
        setattr(running, f, getattr(merged, f))
