"""What the pages print: durations, sizes, percentages, a job's timings, JSON shown to a person.
Pure functions of values (Jinja filters); escaping stays Jinja's job."""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

_json = msgspec.json.Encoder()


def _parse(ts: str | None) -> dt.datetime | None:
    if not ts:
        return None
    try:
        return dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None


def timings(job: Any) -> dict[str, float | None]:
    c, s, f = _parse(job.created_at), _parse(job.started_at), _parse(job.finished_at)
    return {"waited_s": (s - c).total_seconds() if c and s else None,
            "ran_s": (f - s).total_seconds() if s and f else None,
            "total_s": (f - c).total_seconds() if c and f else None}


def size(n: Any) -> str:
    if n is None:
        return "–"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def seconds(s: Any) -> str:
    if s is None:
        return "–"
    s = float(s)
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


def percent(p: Any) -> str:
    return "–" if p is None else f"{float(p):.0f} %"


def pretty_json(obj: Any) -> str:
    return msgspec.json.format(_json.encode(obj), indent=2).decode()
