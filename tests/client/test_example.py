"""The README's FastAPI server-sent-events example (the client package's docstring) runs as written:
against fake ``fastapi`` modules (FastAPI is no dependency of ours) and a real Redis."""

from __future__ import annotations

import asyncio
import re
import sys
import types

import pytest

import tender_pool.client
from .fakeslot import FakeSlot

pytestmark = pytest.mark.timeout(30)


class HTTPException(Exception):
    def __init__(self, status_code: int, detail: str = ""):
        self.status_code, self.detail = status_code, detail


class Response:
    def __init__(self, content=None, status_code: int = 200, media_type: str | None = None):
        self.status_code, self.media_type = status_code, media_type


class StreamingResponse(Response):
    def __init__(self, content, media_type: str | None = None):
        super().__init__(status_code=200, media_type=media_type)
        self.body_iterator = content


class FastAPI:
    def __init__(self):
        self.routes: dict[str, object] = {}

    def get(self, path: str):
        def register(fn):
            self.routes[path] = fn
            return fn
        return register


class Request:
    def __init__(self, headers: dict[str, str]):
        self.headers = headers


def example_code() -> str:
    m = re.search(r"```python\n(.*?)```", tender_pool.client.__doc__, re.S)
    assert m, "the client docstring has no python example"
    return m.group(1)


@pytest.fixture
def app(h, monkeypatch):
    fastapi = types.ModuleType("fastapi")
    fastapi.FastAPI, fastapi.HTTPException, fastapi.Request, fastapi.Response = FastAPI, HTTPException, Request, Response
    responses = types.ModuleType("fastapi.responses")
    responses.StreamingResponse = StreamingResponse
    monkeypatch.setitem(sys.modules, "fastapi", fastapi)
    monkeypatch.setitem(sys.modules, "fastapi.responses", responses)
    monkeypatch.setenv("TENDER_POOL_CONFIG", str(h.config()))
    ns: dict = {}
    exec(compile(example_code(), "client-example", "exec"), ns)
    yield ns
    ns["pool"].close()


def parse(chunks: list[str]) -> list[dict]:
    out = []
    for c in chunks:
        assert c.endswith("\n\n")
        fields = dict(line.split(": ", 1) for line in c.strip("\n").split("\n"))
        out.append(fields)
    return out


def test_the_example_is_about_twenty_lines():
    code = [line for line in example_code().splitlines() if line.strip()]
    assert len(code) <= 26, len(code)


def test_the_example_streams_a_run_and_resumes_from_last_event_id(app):
    pool, endpoint = app["pool"], app["app"].routes["/runs/{run_id}/events"]
    run = pool.submit_run("u1", "behave", [{"key": "a"}, {"key": "b"}])
    slot = FakeSlot(pool, run.id)

    async def scenario():
        resp = await endpoint(run.id, Request({}))
        assert resp.media_type == "text/event-stream"
        chunks = [await anext(resp.body_iterator)]  # the snapshot
        for j in run.jobs:
            slot.move(j.id, "running")
            slot.move(j.id, "completed")
        chunks += [c async for c in resp.body_iterator]
        events = parse(chunks)
        assert [e["event"] for e in events] == ["snapshot", "job_started", "job_completed", "job_started",
                                                "job_completed", "run_finished"]
        assert '"state":"completed"' in events[-1]["data"]
        # EventSource reconnects with the last id: the run has ended, so 204 (stop reconnecting)
        done = await endpoint(run.id, Request({"last-event-id": events[-1]["id"]}))
        assert done.status_code == 204
        # a reconnect from the middle gets exactly the rest
        resp = await endpoint(run.id, Request({"last-event-id": events[2]["id"]}))
        rest = parse([c async for c in resp.body_iterator])
        assert [e["id"] for e in rest] == [e["id"] for e in events[3:]]
        with pytest.raises(HTTPException) as e:
            await endpoint("nosuchrun", Request({}))
        assert e.value.status_code == 404
        await pool.aclose()

    asyncio.run(scenario())
