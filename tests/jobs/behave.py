#!/usr/bin/env python3
"""A command handler that misbehaves on request, for the daemon's tests.

payload keys (all optional): record (a directory: write <id>.<attempt>.start/.end with times),
sleep (seconds; with sleep_once only on attempt 1), exit (status), stdout (raw text to print instead of a JSON object), final_error
(exit 3 with {"error": …}), escape (spawn a setsid grandchild and a double-forked child that sleep
forever, writing their pids to <record>/<id>.escaped), ignore_term (ignore SIGTERM), fail_until
(fail with exit 1 while attempt < this), crash_slot (SIGKILL the parent slot process), close_pipes
(close stdout and stderr, then carry on: sleep and exit as asked), progress (a list of objects written
as JSON lines to the progress fd, with progress_gap seconds between them), progress_flood (bytes of
chunk lines to write to the progress fd as fast as possible; the time taken goes to <record>/<id>.flood).
"""
import json
import os
import signal
import subprocess
import sys
import time

job = json.load(sys.stdin)
p = job["payload"]
rec = p.get("record")


def record_path(name):
    """<record>/<name>; a run job's id <run>/<n> makes it <record>/<run>/<n>…: the run's directory."""
    path = os.path.join(rec, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


def mark(what):
    if rec:
        with open(record_path(f"{job['id']}.{job['attempt']}.{what}"), "w") as f:
            f.write(json.dumps({"t": time.time(), "user": job["user"], "pid": os.getpid(),
                                "attempt_env": os.environ.get("TENDER_POOL_ATTEMPT")}))


mark("start")
if p.get("ignore_term"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if p.get("escape"):
    a = subprocess.Popen(["sleep", "300"], start_new_session=True)
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(300)
        os._exit(0)
    os.waitpid(pid, 0)
    if rec:
        with open(record_path(f"{job['id']}.escaped"), "w") as f:
            f.write(str(a.pid))
if p.get("close_pipes"):
    os.close(1)
    os.close(2)
if p.get("crash_slot"):
    os.kill(os.getppid(), signal.SIGKILL)
if p.get("progress") or p.get("progress_flood"):
    pf = os.fdopen(int(os.environ["TENDER_POOL_PROGRESS_FD"]), "w", buffering=1)
    for line in p.get("progress") or []:
        pf.write(json.dumps(line) + "\n")
        if p.get("progress_gap"):
            time.sleep(p["progress_gap"])
    if p.get("progress_flood"):
        t0 = time.time()
        piece = json.dumps({"chunk": "x" * 1000}) + "\n"
        for _ in range(int(p["progress_flood"]) // len(piece)):
            pf.write(piece)
        if rec:
            with open(record_path(f"{job['id']}.flood"), "w") as f:
                f.write(str(time.time() - t0))
    pf.flush()
if p.get("sleep") and not (p.get("sleep_once") and job["attempt"] > 1):
    end = time.time() + float(p["sleep"])
    while time.time() < end:
        time.sleep(min(0.05, max(0.0, end - time.time())))
mark("end")
if job["attempt"] < p.get("fail_until", 0):
    print("failing on purpose", file=sys.stderr)
    sys.exit(1)
if "final_error" in p:
    print(json.dumps({"error": {"kind": p["final_error"], "message": "the handler gave up"}}))
    sys.exit(3)
if "stdout" in p:
    sys.stdout.write(p["stdout"])
    sys.exit(p.get("exit", 0))
if p.get("exit"):
    sys.exit(p["exit"])
print(json.dumps({"echo": p.get("echo"), "attempt": job["attempt"], "user": job["user"]}))
