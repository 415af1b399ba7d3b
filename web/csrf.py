"""Cross-site request forgery: every action is a POST that must come from our own pages.

Two checks, both required (the research notes, §3.3):

1. the request is same-origin: ``Sec-Fetch-Site: same-origin`` where the browser sends it; where it
   does not (plain-HTTP origins that are not "potentially trustworthy", e.g. a LAN address: Sidekiq
   #6926), an ``Origin`` equal to the request's own scheme://host. A request with neither is refused:
   a script without a browser can send ``Origin`` itself.
2. a token tied to the principal: ``HMAC(app secret, principal name)``, rendered into each form (and a
   ``<meta>`` for scripts) and compared in constant time. The secret is the app's own, new each
   start, so a token dies with the process and two mounts never accept each other's.

HTTP Basic or a cookie is replayed by the browser on a cross-site request, which is why neither is a
defence on its own; a Bearer header is not, but the same two checks apply to it anyway.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

FIELD = "csrf"
HEADER = "x-csrf-token"


def token(secret: bytes, principal_name: str) -> str:
    return hmac.new(secret, principal_name.encode(), hashlib.sha256).hexdigest()


def own_origin(request: Any) -> str:
    """The origin this request was sent to, as a browser spells it in ``Origin``."""
    url = request.url
    default = {"http": 80, "https": 443}.get(url.scheme)
    port = f":{url.port}" if url.port and url.port != default else ""
    return f"{url.scheme}://{url.hostname}{port}"


def same_origin(request: Any) -> str | None:
    """None when the request is same-origin, else why not."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return None if site == "same-origin" else f"Sec-Fetch-Site: {site}"
    origin = request.headers.get("origin")
    if origin is None:
        return "neither Sec-Fetch-Site nor Origin"
    return None if origin == own_origin(request) else f"Origin {origin} is not {own_origin(request)}"


def check(request: Any, secret: bytes, principal_name: str, given: str | None) -> str | None:
    """None when the POST may proceed, else the reason it is refused (403)."""
    why = same_origin(request)
    if why:
        return why
    given = given or request.headers.get(HEADER) or ""
    if not given:
        return "missing CSRF token"
    if not hmac.compare_digest(given.encode(), token(secret, principal_name).encode()):
        return "wrong CSRF token"
    return None
