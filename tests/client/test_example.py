"""The README's FastAPI server-sent-events example (the client package's docstring) runs as written:
against fake ``fastapi`` modules (FastAPI is no dependency of ours) and a real Redis."""

from __future__ import annotations

import asyncio
import re
import sys
import types
from pathlib import Path

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


README = Path(__file__).resolve().parents[2] / "README.md"


def example_code(source: str = "docstring") -> str:
    """The FastAPI example of the client package's docstring, or of the README (the same endpoint;
    both are run, so neither can drift into one that fails)."""
    text = tender_pool.client.__doc__ if source == "docstring" else README.read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "FastAPI" in b]
    assert len(blocks) == 1, f"the {source} has {len(blocks)} FastAPI examples"
    return blocks[0]


@pytest.fixture(params=["docstring", "readme"])
def app(h, monkeypatch, request):
    fastapi = types.ModuleType("fastapi")
    fastapi.FastAPI, fastapi.HTTPException, fastapi.Request, fastapi.Response = FastAPI, HTTPException, Request, Response
    responses = types.ModuleType("fastapi.responses")
    responses.StreamingResponse = StreamingResponse
    monkeypatch.setitem(sys.modules, "fastapi", fastapi)
    monkeypatch.setitem(sys.modules, "fastapi.responses", responses)
    monkeypatch.setenv("TENDER_POOL_CONFIG", str(h.config()))
    ns: dict = {}
    exec(compile(example_code(request.param), f"client-example-{request.param}", "exec"), ns)
    yield ns
    ns["pool"].close()


def parse(chunks: list[str]) -> list[dict]:
    out = []
    for c in chunks:
        assert c.endswith("\n\n")
        fields = dict(line.split(": ", 1) for line in c.strip("\n").split("\n"))
        out.append(fields)
    return out


@pytest.mark.parametrize("source", ["docstring", "readme"])
def test_the_example_is_about_twenty_lines(source):
    code = [line for line in example_code(source).splitlines() if line.strip()]
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


def test_the_example_answers_400_for_a_malformed_run_id_or_last_event_id(app):
    """The client raises BadInput for both; an endpoint catching only NotFound
    answered 500."""
    pool, endpoint = app["pool"], app["app"].routes["/runs/{run_id}/events"]
    run = pool.submit_run("u1", "behave", [{"key": "a"}])

    async def scenario():
        for run_id, headers in (("no such run!", {}), (run.id, {"last-event-id": "garbage"})):
            with pytest.raises(HTTPException) as e:
                await endpoint(run_id, Request(headers))
            assert e.value.status_code == 400, (run_id, headers)
            assert e.value.detail
        await pool.aclose()

    asyncio.run(scenario())
