"""``FakeSlot``: job transitions written the way lib/state.lua's ``set_state`` writes them (job state, run
counts, one event on the run's stream), so the event reader is tested against the documented stream
shape without a daemon's timing."""

from __future__ import annotations

import json

from tender_pool.client import Client

BUCKET = {"dead": "failed"}
EVENT = {"running": "job_started", "completed": "job_completed", "failed": "job_failed",
         "cancelled": "job_cancelled", "skipped": "job_skipped"}


class FakeSlot:
    """Moves a run's jobs like a slot would, writing exactly what set_state writes."""

    def __init__(self, client: Client, run_id: str):
        self.c, self.r, self.k, self.run_id = client, client.r, client.k, run_id

    def counts(self) -> dict:
        names = ["total", "queued", "waiting", "running", "completed", "failed", "cancelled", "skipped"]
        return dict(zip(names, (int(x or 0) for x in self.r.hmget(self.k.run(self.run_id), names))))

    def move(self, job_id: str, new: str, maxlen: int | None = None) -> None:
        k, run = self.k, self.k.run(self.run_id)
        old = self.r.hget(k.job(job_id), "state").decode()
        key = self.r.hget(k.job(job_id), "key").decode()
        p = self.r.pipeline(transaction=True)
        p.hset(k.job(job_id), "state", new)
        p.hincrby(run, BUCKET.get(old, old), -1)
        p.hincrby(run, BUCKET.get(new, new), 1)
        p.execute()
        c = self.counts()
        state = self.r.hget(run, "state").decode()
        if new == "running" and state == "pending":
            state = "running"
            self.r.hset(run, "state", state)
        ended = c["completed"] + c["failed"] + c["cancelled"] + c["skipped"]
        final = None
        if ended == c["total"]:
            final = "completed" if c["failed"] == 0 and c["cancelled"] == 0 else (
                "failed" if c["completed"] + c["skipped"] == 0 else "partial_success")
            state = final
        self.emit({"type": EVENT[new], "run_id": self.run_id, "state": state, "counts": c, "job_id": job_id,
                   "key": key, "job_state": new}, maxlen)
        if final:
            created = int(self.r.hget(run, "created_at"))
            self.r.hset(run, mapping={"state": final, "finished_at": created + 1500})
            self.emit({"type": "run_finished", "run_id": self.run_id, "state": final, "counts": c,
                       "job_id": None, "key": None, "job_state": None}, maxlen)

    def progress(self, job_id: str, progress=None, message=None, chunk=None, maxlen: int | None = None) -> None:
        key = self.r.hget(self.k.job(job_id), "key").decode()
        self.emit({"type": "job_progress", "run_id": self.run_id, "state": self.r.hget(self.k.run(self.run_id), "state").decode(),
                   "counts": self.counts(), "job_id": job_id, "key": key, "job_state": "running",
                   "progress": progress, "message": message, "chunk": chunk}, maxlen)

    def emit(self, body: dict, maxlen: int | None) -> None:
        """To the run's stream, and (but progress) to the queue's ``events`` stream, as lib/events.lua's emit."""
        kw = {"maxlen": maxlen, "approximate": False} if maxlen else {}
        self.r.xadd(self.k.run_events(self.run_id), {"e": json.dumps(body)}, **kw)
        if body["type"] != "job_progress":
            self.r.xadd(self.k.events, {"e": json.dumps(body)})
