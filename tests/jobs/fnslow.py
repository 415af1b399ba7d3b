"""A function handler's module that takes 0.5 s to import (or $FN_IMPORT_SECONDS) and says so: each
import appends one line (pid, argv) to $FN_IMPORT_LOG, so a test counts imports per process."""

import os
import sys
import time

time.sleep(float(os.environ.get("FN_IMPORT_SECONDS") or 0.5))
if os.environ.get("FN_IMPORT_LOG"):
    with open(os.environ["FN_IMPORT_LOG"], "a") as f:
        f.write(f"{os.getpid()} {' '.join(sys.argv[:2])}\n")


def work(ctx):
    return {"pid": os.getpid(), "ppid": os.getppid()}
