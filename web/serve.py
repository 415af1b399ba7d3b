"""``tender-pool web``: the admin web on its own, under uvicorn.

Who gets in: on a loopback address with no token, ``local_only`` (this machine's users, no proxy
header); with ``--token-file``, the token (``Authorization: Bearer``, or the login form's session
cookie) wherever it listens. A non-loopback ``--listen`` without a token is refused (exit 2): a
dashboard reachable from the network with no auth is the incident the research notes open with.

Exit codes as ``run``'s: 0 after a clean stop (SIGTERM/SIGINT), 2 bad usage (listen address, token
file), 1 any other fatal error (the port is taken: uvicorn exits 1 itself).
"""

from __future__ import annotations

import ipaddress
import logging
import sys
from typing import Any

from tender_pool.web.app import create_app
from tender_pool.web.auth import local_only, token_auth

DEFAULT_LISTEN = "127.0.0.1:9465"
EXIT_OK, EXIT_FATAL, EXIT_USAGE = 0, 1, 2


class UsageError(ValueError):
    """Bad ``--listen`` or ``--token-file``: exit 2 with this message."""


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[v6]:PORT`` or ``:PORT`` (loopback)."""
    host, sep, port = listen.rpartition(":")
    if not sep:
        raise UsageError(f"--listen {listen!r}: HOST:PORT")
    host = host.strip("[]") or "127.0.0.1"
    try:
        n = int(port)
    except ValueError:
        raise UsageError(f"--listen {listen!r}: the port is not a number") from None
    if not 0 < n < 65536:
        raise UsageError(f"--listen {listen!r}: the port must be 1..65535")
    return host, n


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as e:
        raise UsageError(f"--token-file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--token-file {path}: not UTF-8 text") from None
    if len(token) < 16:
        raise UsageError(f"--token-file {path}: the token must be at least 16 characters")
    return token


def build(client: Any, listen: str, token_file: str | None, read_only: bool) -> tuple[Any, str, int]:
    """(app, host, port), or UsageError."""
    host, port = parse_listen(listen)
    if token_file:
        auth = token_auth(read_token(token_file))
    elif is_loopback(host):
        auth = local_only
    else:
        raise UsageError(f"--listen {listen}: not a loopback address, so --token-file is required")
    return create_app(client, auth=auth, read_only=read_only), host, port


def serve(client: Any, listen: str = DEFAULT_LISTEN, token_file: str | None = None, read_only: bool = False) -> int:
    """Run until SIGTERM/SIGINT; the exit code."""
    try:
        app, host, port = build(client, listen, token_file, read_only)
    except UsageError as e:
        print(f"tender-pool web: {e}", file=sys.stderr)
        return EXIT_USAGE
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("tender_pool.web").info(
        "admin web on http://%s:%d/ (%s%s)", host if ":" not in host else f"[{host}]", port,
        "token" if token_file else "loopback only", ", read-only" if read_only else "")
    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            """SIGTERM/SIGINT is a clean stop (exit 0, as `run`), not a death by the signal, which
            uvicorn re-raises after its shutdown; a second one stops at once."""
            if self.should_exit:
                self.force_exit = True
            self.should_exit = True

    # proxy_headers off: local_only must see the real peer, and refuses proxy headers itself
    server = Server(uvicorn.Config(app, host=host, port=port, proxy_headers=False, server_header=False,
                                          lifespan="off", log_level="info", timeout_graceful_shutdown=3))
    try:
        server.run()
    except SystemExit as e:  # uvicorn exits 1 itself when it cannot bind
        return int(e.code or 0) and EXIT_FATAL
    return EXIT_OK if server.started else EXIT_FATAL
