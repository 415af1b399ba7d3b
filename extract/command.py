"""``tender-pool extract FILE [--json] [--timeout S]``: ``main_extract``, apart from ``api`` so that
the hard-timeout wrapper (``isolated``, which runs ``api.extract`` in a child) sits between them.

CLI behaviour of ``main_extract`` (what ``tender-pool extract FILE [--json] [--timeout S]`` does):

* success: exit 0; Markdown on stdout, or with ``--json`` the extraction JSON.
* extraction failure: exit 3; with ``--json`` ``{"error": {"kind", "message"}}`` on stdout, without
  it one line ``extract: <kind>: <message>`` on stderr.
* an empty document raises ``empty``; a workbook whose sheets hold no values is still returned (its
  sheet names and headers are content) with the warning "the workbook has no cell values".
* ``--timeout S`` is hard: the extraction runs in a forked child killed at the deadline
  (``isolated``), which answers ``timeout`` even when a C call (zlib, lxml) would run on past the
  SIGALRM deadline; without it the extraction runs in this process, unbounded.
* a missing or unreadable FILE is treated as a failure of that file, not a usage error: exit 3 with
  kind ``file_not_found`` (a contract error kind), so scripts get the same JSON shape for every
  per-file problem. Exit 2 stays for click's own usage errors (bad options), raised before this runs.
"""

from __future__ import annotations

import sys

import msgspec

from tender_pool.extract.api import extract
from tender_pool.extract.errors import ExtractError
from tender_pool.extract.isolated import extract_isolated

_json = msgspec.json.Encoder()


def main_extract(path: str, as_json: bool, timeout: float | None) -> int:
    try:
        if timeout is not None and timeout > 0:  # hard: a forked child, killed at the deadline
            result = extract_isolated(path, timeout=timeout)
        else:
            result = extract(path)
    except ExtractError as exc:
        if as_json:
            sys.stdout.buffer.write(_json.encode(exc.to_dict()) + b"\n")
        else:
            print(f"extract: {exc.kind}: {exc.message}", file=sys.stderr)
        sys.stdout.flush()
        return 3
    if as_json:
        sys.stdout.buffer.write(_json.encode(result) + b"\n")
    else:
        sys.stdout.write(result.markdown)
    sys.stdout.flush()
    return 0
