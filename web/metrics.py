"""``tender_pool_web_actions_total{action, outcome}``, when prometheus-client is installed (it is an
extra of the daemon, not of the web: a host without it simply has no counter).

One counter per registry, however many apps are mounted (a second ``Counter`` of the same name would
be refused by the registry); it is kept on the registry object itself, so nothing here is global.
"""

from __future__ import annotations

from typing import Any

NAME = "tender_pool_web_actions"
ATTR = "tender_pool_web_actions_counter"


def action_counter(registry: Any = None) -> Any:
    try:
        import prometheus_client
    except ImportError:
        return None
    reg = registry if registry is not None else prometheus_client.REGISTRY
    counter = getattr(reg, ATTR, None)
    if counter is None:
        counter = prometheus_client.Counter(NAME, "Admin web actions by action and outcome (ok, refused, error).",
                                            ["action", "outcome"], registry=reg)
        setattr(reg, ATTR, counter)
    return counter
