"""What of a job's payload the admin web shows: ``redact`` (``create_app``'s hook), by default
``mask_secrets``.

Dashboards show arguments, and arguments carry secrets (Hangfire's warning, Oban's
``format_job_args``, bull-board's "treat dashboard access as Redis access"). Every payload the app
shows — the job page, the history page and the JSON of ``/api/history`` — goes through the hook first.
"""

from __future__ import annotations

import re
from typing import Any, Callable

SECRET_KEY = re.compile(r"pass|secret|token|api[_-]?key|credential|authorization|cookie|private", re.I)
MASK = "••••••"

Redact = Callable[[dict[str, Any]], Any]


def mask_secrets(payload: Any) -> Any:
    """A copy with the value of every key that looks like a secret masked, at any depth."""
    if isinstance(payload, dict):
        return {k: MASK if isinstance(k, str) and SECRET_KEY.search(k) else mask_secrets(v)
                for k, v in payload.items()}
    if isinstance(payload, list):
        return [mask_secrets(v) for v in payload]
    return payload
