"""The security headers every response of the admin web carries, as a plain ASGI wrapper (a
``BaseHTTPMiddleware`` would buffer the server-sent event streams).

- A strict Content-Security-Policy: our own script and style files only, no inline script, no
  ``eval``, no framing, forms and connections to ourselves only. Job data that slipped past the
  autoescaping still could not run.
- ``nosniff``, ``Referrer-Policy: same-origin``, and ``Cache-Control: no-store`` on everything but
  the static files (data pages must not linger in shared or back-button caches).
"""

from __future__ import annotations

from typing import Any

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
COMMON = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]


class SecurityHeaders:
    """Wraps the app; ``dashboard`` is reachable for hosts and tests as ``app.dashboard``."""

    def __init__(self, app: Any, dashboard: Any):
        self.app = app
        self.dashboard = dashboard

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        static = scope.get("path", "").startswith(scope.get("root_path", "") + "/static/") or \
            scope.get("path", "").startswith("/static/")

        async def with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"cache-control"] \
                    if not static else list(message.get("headers", []))
                headers += COMMON
                headers.append((b"cache-control", b"public, max-age=300" if static else b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)
