"""Run Spin on model/protocol.pml in a scratch directory and read its verdict."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

MODEL = Path(__file__).resolve().parents[2] / "model" / "protocol.pml"
# The three protocol changes the model proposes (model/README.md, "Findings"); without them spin
# finds the counterexamples test_spin.py shows.
FIXES = ("FIX_STAMP_RECHECK", "FIX_START_LPOS", "FIX_START_HOSTKEY")
ZERO = dict(CRASHES=0, ERRS=0, LAPSES=0, CANCELS=0, LATES=0, FREEZES=0, RETRIES=0)


@dataclass
class Verdict:
    errors: int
    stored: int
    seconds: float
    trail_steps: int  # length of the counterexample, 0 if none
    trail: str  # the counterexample's Redis-visible steps, "" if none
    output: str


def run(tmp: Path, budgets: dict[str, int], flags: tuple[str, ...] = (), liveness: bool = False) -> Verdict:
    """Safety (assertions, invariant, invalid end states) or, with ``liveness``, the ``settles``
    LTL property under weak fairness."""
    defs = [f"-D{k}={v}" for k, v in {**ZERO, **budgets}.items()] + [f"-D{f}" for f in flags]
    shutil.copy(MODEL, tmp / "protocol.pml")
    subprocess.run(["spin", "-a", *defs, "protocol.pml"], cwd=tmp, check=True, capture_output=True)
    cc = ["-DNFAIR=4"] if liveness else ["-DSAFETY", "-DNOCLAIM"]
    subprocess.run(["gcc", "-O0", "-w", *cc, "-o", "pan", "pan.c"], cwd=tmp, check=True, capture_output=True)
    t0 = time.monotonic()
    args = ["./pan", "-m3000000"] + (["-a", "-f"] if liveness else [])
    out = subprocess.run(args, cwd=tmp, capture_output=True, text=True).stdout
    seconds = time.monotonic() - t0
    errors = int(re.search(r"errors: (\d+)", out).group(1))
    stored = int(re.search(r"(\d+) states, stored", out).group(1))
    steps, trail = 0, ""
    if errors:
        sim = subprocess.run(["spin", *defs, "-t", "-p", "protocol.pml"], cwd=tmp, capture_output=True, text=True).stdout
        moves = [ln for ln in sim.splitlines() if re.match(r"\s*\d+:\s+proc", ln)]
        steps = max((int(ln.split(":")[0]) for ln in moves), default=0)
        keep = re.compile(r"\[(P\.\w+\[[^]]*\] = |running\[e\] = \(running|lease\[\w+\] = |assert|errs = |hdead)")
        trail = "\n".join(re.sub(r"\s+", " ", ln.strip()) for ln in moves if keep.search(ln))
    return Verdict(errors, stored, seconds, steps, trail, out)
