"""The daemon's config for the benchmarks, one text for every bench that starts ``tender-pool run``
(bench_pool.py, peers/systems.py): the same handlers and settings, so their figures compare.

The handlers are shell commands on purpose: a process group per job, as the pool runs every job.
"""

from __future__ import annotations

from pathlib import Path

HANDLERS = """
[handlers.noop]
command = ["/bin/sh", "-c", "echo {}"]
timeout = 30
[handlers.sleep10]
command = ["/bin/sh", "-c", "sleep 0.01; echo '{}'"]
timeout = 30
[handlers.long]
command = ["/bin/sh", "-c", "sleep 3; echo '{}'"]
timeout = 30
[handlers.fail]
command = ["/bin/sh", "-c", "echo '{\\"error\\": {\\"kind\\": \\"handler_failed\\", \\"message\\": \\"bench\\"}}'; exit 3"]
timeout = 30
"""


def write(path: Path, sock: str, prefix: str, host_id: str, tmp: Path, *, pool: str = "",
          input_roots: tuple[str, ...] = ()) -> Path:
    """``pool``: more ``[pool]`` lines (e.g. ``heartbeat = 10``); ``input_roots``: besides ``tmp``."""
    roots = ", ".join(f'"{r}"' for r in (*input_roots, str(tmp)))
    path.write_text(f"""
[redis]
url = "unix://{sock}"
prefix = "{prefix}"
[pool]
worker_count = 4
host_id = "{host_id}"
state_dir = "{tmp}/state"
input_roots = [{roots}]
results_dir = "{tmp}/results"
{pool}
[status]
socket = "{tmp}/status.sock"
[metrics]
listen = ""
{HANDLERS}""")
    return path
