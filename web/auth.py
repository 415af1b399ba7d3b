"""Who may see the admin web and who may act in it: ``Principal`` and the ``auth`` callables.

Deny by default. ``create_app`` has no default ``auth``: a host must say who gets in, because a
FastAPI dependency does not protect an app mounted under it (the bypass of the research notes, §3.6).
``auth(request)`` (sync or async) returns a ``Principal`` or None; None is 401, a principal without
the permission a route needs is 403. Two named shortcuts exist and nothing else:

- ``local_only``: loopback clients only, and never a request carrying ``Forwarded`` or
  ``X-Forwarded-For`` (a reverse proxy on the same host would otherwise let everyone in as
  127.0.0.1 — Hangfire's default filter, and the regression that opened it, #1958);
- ``allow_all_insecure``: every request is an operator. The name is the warning.

``token_auth(token)`` is the standalone server's: ``Authorization: Bearer <token>``, or the session
cookie the login form sets. The cookie holds an HMAC of the token, never the token, so the cookie
alone does not reveal it; it is ``HttpOnly; SameSite=Strict`` and scoped to the mount's path.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import ipaddress
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Union

VIEW, ACT = "view", "act"
SESSION_COOKIE = "tp_web_session"


@dataclass(frozen=True)
class Principal:
    """Someone the host let in: ``name`` goes to the action log; ``can`` holds ``view`` (pages and
    JSON) and ``act`` (cancel, retry, drain, scale)."""

    name: str
    can: frozenset[str] = field(default_factory=lambda: frozenset({VIEW, ACT}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "can", frozenset(self.can))


Auth = Callable[[Any], Union["Principal | None", Awaitable["Principal | None"]]]


async def resolve(auth: Auth, request: Any) -> Principal | None:
    """``auth(request)``, awaited when it is async; anything but a Principal counts as None."""
    got = auth(request)
    if inspect.isawaitable(got):
        got = await got
    return got if isinstance(got, Principal) else None


def _loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def local_only(request: Any) -> Principal | None:
    """An operator on this machine: a loopback peer with no proxy header."""
    headers = request.headers
    if "forwarded" in headers or "x-forwarded-for" in headers:
        return None
    client = request.client
    if client is None or not _loopback(client.host):
        return None
    return Principal("local")


def allow_all_insecure(request: Any) -> Principal | None:
    """Everyone may view and act. Only behind something else that authenticates."""
    return Principal("anyone")


def session_value(token: str) -> str:
    """What the session cookie holds for ``token``: an HMAC, so the cookie never carries the token."""
    return hmac.new(token.encode(), b"tender-pool web session", hashlib.sha256).hexdigest()


def token_auth(token: str, name: str = "token") -> Callable[[Any], Principal | None]:
    """``Authorization: Bearer <token>`` or the login form's session cookie; compared in constant
    time. The token holder may view and act (``--read-only`` takes acting away for everyone)."""
    if not token:
        raise ValueError("an empty token would let everyone in")
    session = session_value(token)

    def check(request: Any) -> Principal | None:
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
            return Principal(name)
        cookie = request.cookies.get(SESSION_COOKIE, "")
        if cookie and hmac.compare_digest(cookie.encode(), session.encode()):
            return Principal(name)
        return None

    check.token = token  # type: ignore[attr-defined]  # the login form compares against it
    return check
