#!/usr/bin/env python3
"""A command handler that leaves a trail a test can check even when the attempt is SIGKILLed.

It writes ``<record>/<id>@<attempt token>.ticks`` (the token is ``TENDER_POOL_ATTEMPT``, unique per
attempt, so two attempts of one job never share a file): a header line ``# {"user", "pid", "attempt"}``,
then ``time.time()`` every ``every`` seconds (default 0.05) for ``sleep`` seconds (0: one tick, a no-op
job), and ``end <time>`` just before it exits. Every line is one ``write(2)`` on an O_APPEND fd: no
buffer is lost with the process. An attempt without an ``end`` line was killed; it ran from its first
tick to at most its last tick + ``every`` (``tests/system/chaos/spans.py`` reads the trail).

payload: record (directory, required), sleep (seconds), every (tick interval), fail_until (exit 1
while attempt < this: a business failure, retried).
"""
import json
import os
import sys
import time

job = json.load(sys.stdin)
p = job["payload"]
token = os.environ.get("TENDER_POOL_ATTEMPT") or f"{job['attempt']}.none"
every = float(p.get("every", 0.05))
# a run job's id <run>/<n> is written <run>+<n> ('+' is in no job id; chaos/spans.py reads it back)
fd = os.open(os.path.join(p["record"], f"{job['id'].replace('/', '+')}@{token}.ticks"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def line(text: str) -> None:
    os.write(fd, (text + "\n").encode())


line("# " + json.dumps({"user": job["user"], "pid": os.getpid(), "attempt": job["attempt"]}))
end = time.time() + float(p.get("sleep", 0))
while True:
    line(repr(time.time()))
    left = end - time.time()
    if left <= 0:
        break
    time.sleep(min(every, left))
line(f"end {time.time()!r}")
if job["attempt"] < p.get("fail_until", 0):
    print("failing on purpose", file=sys.stderr)
    sys.exit(1)
print(json.dumps({"attempt": job["attempt"], "user": job["user"]}))
