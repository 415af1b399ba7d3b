"""tender_pool.client — the pool from a producer's side: submit jobs and runs, read them, follow a
run's events, cancel, retry, and the admin page's status and history.

Installs with redis and msgspec only (``pip install tender-pool``; the daemon needs the ``daemon``
extra) and imports nothing of the daemon. Every value it returns is a msgspec Struct whose fields
are the contract's JSON fields (``msgspec.json.encode(run)`` is ``runs show --json``).

    from tender_pool.client import Client

    pool = Client.from_config()                      # or Client("redis://…", prefix="tp", queue="tender_parse")
    run = pool.submit_run("u42", "write_section", [{"key": "1.1", "payload": {"section": "1.1"}}, ...])
    for ev in pool.events(run.id):                   # snapshot, then live events; ends with run_finished
        print(ev.type, ev.key, ev.counts)
    pool.retry_run(run.id)                           # the failed sections again

API: ``submit``, ``submit_run``, ``job``, ``run``, ``runs``, ``cancel``, ``cancel_run``,
``retry_run``, ``wait``, ``events``, ``aevents``, ``status``, ``history``, ``markdown``, ``owns``;
keeping the platform's tables in step: ``register_consumer_group``, ``consume``, ``aconsume``,
``consumer_groups`` (``consumer``).
Errors (``errors``): ``NotFound``, ``Unavailable``, ``BadInput``, ``NotReplicated``.
Function handlers (``context``): ``JobContext`` (what the function is called with), ``Final``.

A web endpoint streaming a run's events as server-sent events (FastAPI); a browser's EventSource
resends the last ``id`` it saw when it reconnects, and the stream resumes right after it:

```python
import msgspec
from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.responses import StreamingResponse

from tender_pool.client import BadInput, Client, NotFound

app = FastAPI()
pool = Client.from_config()  # one per process


def sse(ev) -> str:
    return f"id: {ev.id}\\nevent: {ev.type}\\ndata: {msgspec.json.encode(ev).decode()}\\n\\n"


@app.get("/runs/{run_id}/events")
async def run_events(run_id: str, request: Request):
    events = pool.aevents(run_id, since=request.headers.get("last-event-id"))
    try:
        first = await anext(events)  # an unknown run is a 404 before the stream starts
    except NotFound:
        raise HTTPException(404, f"no such run: {run_id}")
    except BadInput as e:  # a malformed run id or Last-Event-ID
        raise HTTPException(400, str(e))
    except StopAsyncIteration:  # resumed after the run's end: tell EventSource to stop
        return Response(status_code=204)

    async def stream():
        yield sse(first)
        async for ev in events:
            yield sse(ev)

    return StreamingResponse(stream(), media_type="text/event-stream")
```
"""

from tender_pool.client.client import CancelResult, Client, RunCancel, RunRetry
from tender_pool.client.consumer import GroupInfo, JobSnapshot
from tender_pool.store.context import Final, JobContext
from tender_pool.client.errors import BadInput, NotFound, NotReplicated, Unavailable, Undecodable
from tender_pool.client.history import HistoryFilter, HistoryPage
from tender_pool.client.models import Counts, Event, Job, Run, RunJob, RunSummary

__all__ = [
    "BadInput",
    "CancelResult",
    "Client",
    "Counts",
    "Event",
    "Final",
    "GroupInfo",
    "HistoryFilter",
    "HistoryPage",
    "Job",
    "JobContext",
    "JobSnapshot",
    "NotFound",
    "NotReplicated",
    "Run",
    "RunCancel",
    "RunJob",
    "RunRetry",
    "RunSummary",
    "Unavailable",
    "Undecodable",
]
