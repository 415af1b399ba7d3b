"""Query parameters of the history and runs pages, read and bounded in one place.

Every number a visitor can type is clamped (page sizes, pages, limits: the DoS-by-parameter CVEs of
the research notes, §3.5); text filters are length-capped; a value that cannot mean anything (a
page that is not a number, a state that is not final, a time that is not a time) is a 400 naming
the parameter, as the CLI exits 2 for it.
"""

from __future__ import annotations

from typing import Any, Mapping

from tender_pool.client.history import parse_time

FINAL_STATES = ("completed", "failed", "cancelled", "skipped", "dead")
RUN_STATES = ("pending", "running", "completed", "partial_success", "failed", "cancelled")
TEXT_FILTERS = ("user", "kind", "file", "job_id")
TIME_FILTERS = ("started_after", "started_before", "ended_after", "ended_before")
MAX_TEXT = 200
MAX_PAGE = 100_000
API_MAX_PAGE_SIZE = 1000  # history --json's own bound (--page-size 1..1000)
HTML_MAX_PAGE_SIZE = 200
MAX_RUNS = 200


class BadParam(ValueError):
    """A query parameter that cannot be used: 400 with this message."""


def _int(q: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = (q.get(name) or "").strip()
    if not raw:
        return default
    try:
        n = int(raw)
    except ValueError:
        raise BadParam(f"{name}: {raw[:40]!r} is not a whole number") from None
    return max(lo, min(hi, n))


def _text(q: Mapping[str, str], name: str) -> str | None:
    raw = q.get(name)
    if raw is None or raw.strip() == "":
        return None
    if len(raw) > MAX_TEXT:
        raise BadParam(f"{name}: longer than {MAX_TEXT} characters")
    return raw.strip()


def history_query(q: Any, *, max_page_size: int, default_page_size: int = 20) -> dict[str, Any]:
    """``Client.history`` keyword arguments from a query string (a Starlette ``QueryParams``:
    ``status`` may repeat, or be comma-separated)."""
    states: list[str] = []
    for raw in q.getlist("status"):
        for s in raw.split(","):
            s = s.strip()
            if not s:
                continue
            if s not in FINAL_STATES:
                raise BadParam(f"status: {s[:40]!r} is not a final state ({', '.join(FINAL_STATES)})")
            if s not in states:
                states.append(s)
    out: dict[str, Any] = {
        "status": states,
        "page": _int(q, "page", 1, 1, MAX_PAGE),
        "page_size": _int(q, "page_size", default_page_size, 1, max_page_size),
    }
    for name in TEXT_FILTERS:
        out[name] = _text(q, name)
    for name in TIME_FILTERS:
        raw = _text(q, name)
        if raw is None:
            out[name] = None
            continue
        try:
            out[name] = parse_time(raw)
        except (ValueError, OverflowError):
            raise BadParam(f"{name}: {raw[:40]!r} is not an RFC 3339 time, a date or epoch seconds") from None
    return out


def runs_query(q: Mapping[str, str]) -> dict[str, Any]:
    state = _text(q, "state")
    if state is not None and state not in RUN_STATES:
        raise BadParam(f"state: {state[:40]!r} is not a run state ({', '.join(RUN_STATES)})")
    return {"user": _text(q, "user"), "state": state, "limit": _int(q, "limit", 50, 1, MAX_RUNS)}
