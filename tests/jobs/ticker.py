#!/usr/bin/env python3
"""A command handler that proves when it ran: it appends the time to <record>/<id>.<attempt>.ticks every
100 ms for payload["sleep"] seconds (so an attempt killed before it could write an end record still
shows how long it ran), then prints {"attempt": n}."""
import json
import os
import sys
import time

job = json.load(sys.stdin)
p = job["payload"]
path = os.path.join(p["record"], f"{job['id']}.{job['attempt']}.ticks")
end = time.time() + float(p.get("sleep", 1))
with open(path, "a", buffering=1) as f:
    while True:
        f.write(f"{time.time()}\n")
        if time.time() >= end:
            break
        time.sleep(0.1)
print(json.dumps({"attempt": job["attempt"]}))
