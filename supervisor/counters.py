"""The one classification of an attempt's end into counters (``tally``): the supervisor adds it to
the counters ``status`` shows, and metrics derive their own labels from the same ``Finished`` report,
so the two never disagree about what an attempt was.
"""

from __future__ import annotations

from tender_pool.client.status_protocol import CountersView
from tender_pool.store.error_kinds import ErrorKind
from tender_pool.slots.reports import AttemptEnd, Finished


def tally(rep: Finished) -> CountersView:
    """One attempt's end, as counter increments."""
    end = rep.outcome
    return CountersView(
        succeeded=int(end == AttemptEnd.COMPLETED),
        failed=int(end in (AttemptEnd.FAILED, AttemptEnd.CANCELLED, AttemptEnd.DEAD)),
        retried=int(end == AttemptEnd.RETRIED),
        deferred=int(end == AttemptEnd.PARKED),
        timed_out=int(rep.error_kind == ErrorKind.TIMEOUT.value and end != AttemptEnd.PARKED),
        killed=int(bool(rep.killed)),
    )


def add_counters(into: CountersView, delta: CountersView) -> None:
    for f in CountersView.__struct_fields__:
        setattr(into, f, getattr(into, f) + getattr(delta, f))
