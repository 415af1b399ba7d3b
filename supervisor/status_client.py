"""Client side of the status socket, and the Redis-only view for ``status --redis``.

Every failure names the socket it tried and why (circus#1021's bare "Timed out" is what not to do).
"""

from __future__ import annotations

import socket
import time

import msgspec
import redis

from .config import Config
from .control import CONTROL_VERSION, ControlReply, Request
from .keys import Keys
from .status_server import REPLY_CAP, ProtocolError, QueueProbe, read_frame, write_frame
from .types import STATUS_PROTOCOL, BusyState, HostSlots, QueueStats, StatusReply, StatusRequest


class StatusUnavailable(Exception):
    """No answer on the socket. ``listening`` is True when something accepted the connection."""

    def __init__(self, path: str, reason: str, listening: bool = False):
        self.path, self.reason, self.listening = path, reason, listening
        super().__init__(f"no daemon answers on {path}: {reason}")


def request(path: str, op: str = "status", timeout: float = 3.0) -> StatusReply:
    body = _roundtrip(path, StatusRequest(version=STATUS_PROTOCOL, op=op), timeout)
    try:
        return msgspec.json.decode(body, type=StatusReply)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise StatusUnavailable(path, f"unexpected reply: {e}", listening=True) from None


def control(path: str, op: str, workers: int | None = None, timeout: float = 3.0) -> ControlReply:
    """One control request (scale, drain). A refusal is ``ok=False`` with ``error``; no answer at
    all (including "permission denied": not in the socket's group) raises StatusUnavailable."""
    frame = Request(version=STATUS_PROTOCOL, op=op, control=CONTROL_VERSION, workers=workers)
    body = _roundtrip(path, frame, timeout)
    try:
        return msgspec.json.decode(body, type=ControlReply)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise StatusUnavailable(path, f"unexpected reply: {e}", listening=True) from None


def _roundtrip(path: str, frame: StatusRequest | Request, timeout: float) -> bytes:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(path)
        except FileNotFoundError:
            raise StatusUnavailable(path, "no such socket (is the daemon running?)") from None
        except ConnectionRefusedError:
            raise StatusUnavailable(path, "connection refused (stale socket)") from None
        except PermissionError:
            raise StatusUnavailable(path, "permission denied (not the daemon's user or in the socket's group)") from None
        except OSError as e:
            raise StatusUnavailable(path, e.strerror or str(e)) from None
        try:
            write_frame(s, frame)
            body = read_frame(s, REPLY_CAP)
        except socket.timeout:
            raise StatusUnavailable(path, f"timed out after {timeout:g} s", listening=True) from None
        except (OSError, ProtocolError) as e:
            raise StatusUnavailable(path, str(e), listening=True) from None
    finally:
        s.close()
    return body


class RedisView(msgspec.Struct):
    """``status --redis --json``: every host's slot table from its heartbeat, the busy states slots
    wrote themselves, and the queue figures."""

    version: int
    redis_ok: bool
    queue: QueueStats | None
    queue_depth: int | None
    waiting: int | None
    hosts: list[HostSlots]
    busy: list[BusyState]
    error: str | None = None


def redis_view(cfg: Config) -> RedisView:
    """What Redis alone knows (another host, or the daemon down). Slot tables expire 3 heartbeats
    after their supervisor stopped writing them, so a dead host drops out of this view by itself."""
    probe = QueueProbe.for_config(cfg, timeout=cfg.redis.socket_timeout)
    k: Keys = probe.k
    try:
        stats = probe.read()
        hosts, busy = [], []
        for key in sorted(probe.r.scan_iter(match=k.host_slots_pattern, count=500)):
            raw = probe.r.get(key)
            if raw:
                try:
                    hosts.append(msgspec.json.decode(raw, type=HostSlots))
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
        for key in sorted(probe.r.scan_iter(match=k.busy_pattern, count=500)):
            raw = probe.r.get(key)
            if raw:
                try:
                    busy.append(msgspec.json.decode(raw, type=BusyState))
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
    except redis.RedisError as e:
        return RedisView(STATUS_PROTOCOL, False, None, None, None, [], [], error=f"Redis unreachable at {cfg.redis.url}: {e}")
    n_busy = len(busy)
    return RedisView(STATUS_PROTOCOL, True, stats, stats.depth, max(0, stats.depth - n_busy), hosts, busy)


def now_ms() -> int:
    return int(time.time() * 1000)
