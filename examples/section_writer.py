"""A function handler, worked through: one section of a whole-document generation run.

The platform's real job assembles a section's context, calls a model, streams its output to the
user while it arrives, writes the section back and records usage. Here the "model" is a stand-in
that streams words of a made-up text, so the example runs anywhere; the shape is the real one:

    # tender-pool.toml
    [handlers.write_section]
    function = "section_writer:write_section"   # async def: a fresh event loop per attempt
    timeout = 600
    per_user = 2
    path = ["/srv/tender-pool/examples"]        # this directory (absolute)
    after_fork = "section_writer:after_fork"

    # 48 sections, one run, watched live:
    #   for i in $(seq 1 48); do echo "{\"key\": \"s$i\", \"payload\": {\"section\": \"$i\", \"words\": 40}}"; done > items.jsonl
    #   tender-pool runs submit --user u42 --kind write_section --items items.jsonl    # prints the run id
    #   tender-pool runs watch <run id>

Each attempt runs in a forked child of a slot: the module is imported once per slot, so an attempt
costs a fork, not an interpreter start and the platform's imports. Module state (``USAGE`` below)
is the slot's copy: what one attempt changes, no other attempt sees — anything that must outlive
the attempt goes to the return value, Redis or the database.
"""

from __future__ import annotations

import asyncio
import os
import random

from tender_pool.client import Final, JobContext

USAGE = {"tokens": 0}  # per attempt: a copy of the slot's, thrown away with the attempt's child


def after_fork() -> None:
    """Runs in each attempt's child before the function: where the platform disposes of what it
    must not share with the slot (a database engine's pooled connections, an HTTP client's
    sockets) and reseeds what a fork copies (random state)."""
    random.seed(os.urandom(16))


async def fake_model(prompt: str, words: int, delay: float):
    """Stands in for a model SDK's streaming call."""
    rng = random.Random(prompt)
    vocabulary = ["bid", "tender", "supplier", "lot", "clause", "price", "delivery", "schedule", "award", "terms"]
    for i in range(words):
        await asyncio.sleep(delay)
        yield (" " if i else "") + rng.choice(vocabulary)


async def write_section(ctx: JobContext) -> dict:
    section = ctx.payload.get("section")
    if not isinstance(section, str) or not section:
        raise Final("handler_failed", "payload.section (a non-empty string) is required")
    words = int(ctx.payload.get("words", 40))
    ctx.progress(0.0, f"writing section {section}")
    parts: list[str] = []
    async for piece in fake_model(f"{ctx.user}/{section}", words, float(ctx.payload.get("delay", 0.002))):
        parts.append(piece)
        USAGE["tokens"] += 1
        ctx.chunk(piece)  # streamed to whoever follows the run (coalesced to 10 events a second)
        if len(parts) % 10 == 0:
            ctx.progress(len(parts) / words)
    text = f"## {section}\n\n" + "".join(parts) + "\n"
    out_dir = ctx.payload.get("out_dir")
    if out_dir:
        # A side effect outside the pool: only while this attempt still owns the job (a reclaimed
        # job may already run elsewhere), and atomically, so a killed attempt leaves nothing half-written.
        if not ctx.owns():
            raise Final("handler_failed", "this attempt no longer owns the job; not writing")
        tmp = os.path.join(out_dir, f".{ctx.key or ctx.id}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, os.path.join(out_dir, f"{ctx.key or ctx.id}.md"))
    ctx.progress(1.0, "done")
    return {"chars": len(text), "tokens": USAGE["tokens"]}
