"""Server-sent events: the pool's status fanned out to every viewer, and a run's event stream.

``StatusHub``: one reader per app, however many tabs watch. The first subscriber starts a task that
calls ``read()`` (``Client.status()``, in a worker thread: it is blocking) every ``interval`` seconds
and hands each changed reading, encoded once, to every subscriber's one-slot mailbox (a slow viewer
skips stale readings rather than queueing them); the last one to leave stops it. So ten viewers cost
one reading a second, not ten, and nobody watching costs nothing. The task lives in the event loop
of the request that started it: the hub holds no loop-bound state between subscribers.

``run_stream``: a run's events from ``Client.aevents``; the SSE ``id`` is the Redis stream id, so a
browser's automatic reconnect (``Last-Event-ID``) or our own after going offline (``?since=``)
resumes right after the last event it saw: every event once. The reader runs in its own task so
the response can send a keep-alive comment while Redis has nothing to say.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator, Callable

import anyio
import msgspec

RETRY_MS = 3000
PING_S = 15.0
_encode = msgspec.json.Encoder()


def frame(data: bytes, event: str | None = None, id: str | None = None) -> bytes:
    """One SSE message. ``data`` is one line of JSON (msgspec never writes a raw newline)."""
    head = b""
    if id is not None:
        head += b"id: " + id.encode() + b"\n"
    if event is not None:
        head += b"event: " + event.encode() + b"\n"
    return head + b"data: " + data + b"\n\n"


class StatusHub:
    """One ``read()`` loop per app, shared by every subscriber (see the module docstring)."""

    def __init__(self, read: Callable[[], bytes], interval: float = 1.0):
        self.read = read
        self.interval = interval
        self.latest: bytes | None = None
        self.reads = 0  # how many times read() ran (the tests check it is one loop, not one per viewer)
        self._boxes: set[asyncio.Queue[bytes]] = set()
        self._task: asyncio.Task[None] | None = None

    @property
    def viewers(self) -> int:
        return len(self._boxes)

    async def _loop(self) -> None:
        while self._boxes:
            try:
                data = await anyio.to_thread.run_sync(self.read)
            except Exception as e:  # noqa: BLE001 - a failed read is shown, and the loop goes on
                data = _encode.encode({"error": f"{type(e).__name__}: {e}"})
            self.reads += 1
            if data != self.latest:
                self.latest = data
                for box in list(self._boxes):
                    if box.full():
                        box.get_nowait()  # drop the stale reading: only the newest matters
                    box.put_nowait(data)
            await asyncio.sleep(self.interval)

    async def subscribe(self) -> AsyncIterator[bytes]:
        """Each reading as it changes, the latest known first."""
        box: asyncio.Queue[bytes] = asyncio.Queue(maxsize=1)
        if self.latest is not None:
            box.put_nowait(self.latest)
        self._boxes.add(box)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())
        try:
            while True:
                try:
                    yield await asyncio.wait_for(box.get(), PING_S)
                except asyncio.TimeoutError:
                    yield b""  # nothing new: the caller sends a keep-alive comment
        finally:
            self._boxes.discard(box)
            if not self._boxes and self._task is not None:
                self._task.cancel()
                self._task = None


async def status_stream(hub: StatusHub) -> AsyncIterator[bytes]:
    yield f"retry: {RETRY_MS}\n\n".encode()
    async for data in hub.subscribe():
        yield frame(data, "status") if data else b": ping\n\n"


async def run_stream(events: AsyncIterator[Any], first: Any) -> AsyncIterator[bytes]:
    """SSE frames for ``first`` and every later event of ``events`` (``Client.aevents``)."""
    box: asyncio.Queue[Any] = asyncio.Queue(maxsize=64)
    done = object()

    async def pump() -> None:
        try:
            async for ev in events:
                await box.put(ev)
        except Exception as e:  # noqa: BLE001 - Redis went away: the browser reconnects with its last id
            await box.put(e)
        finally:
            await box.put(done)

    task = asyncio.get_running_loop().create_task(pump())
    try:
        yield f"retry: {RETRY_MS}\n\n".encode()
        yield frame(_encode.encode(first), first.type, first.id)
        while True:
            try:
                ev = await asyncio.wait_for(box.get(), PING_S)
            except asyncio.TimeoutError:
                yield b": ping\n\n"
                continue
            if ev is done or isinstance(ev, Exception):
                return
            yield frame(_encode.encode(ev), ev.type, ev.id)
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        with contextlib.suppress(BaseException):
            await events.aclose()
