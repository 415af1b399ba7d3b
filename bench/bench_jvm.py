"""Wall time and peak RSS of the legacy extractor vs. the usual command-line converters.

Why: the JVM's start-up dominates small files; this shows what the AppCDS archive and the warm serve JVM buy
on this machine, next to antiword/catdoc/xls2csv/soffice. Commands are interleaved in shuffled order within
each round so background load hits all of them alike; medians are reported.

    .venv/bin/python bench/bench_jvm.py [--rounds 5] [--corpus DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tender_pool.extract import jvm

REPO = Path(__file__).resolve().parents[1]
FILES = ["tender-01-notice.doc", "tender-12-tender-doc-xl.doc", "tender-sheet-06-signin.xls", "53446.xls"]
TIME = "/usr/bin/time"


def timed(argv: list[str]) -> tuple[float, int]:
    """(wall seconds, peak RSS KiB) of one command run under GNU time."""
    with tempfile.NamedTemporaryFile("r") as tf:
        t0 = time.perf_counter()
        subprocess.run([TIME, "-o", tf.name, "-f", "%M", *argv], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        wall = time.perf_counter() - t0
        lines = [ln for ln in tf.read().split() if ln.isdigit()]
        return wall, int(lines[-1]) if lines else 0


def commands(path: Path, kind: str, soffice_dir: str) -> dict[str, list[str] | None]:
    jar = str(jvm.jvm_dir() / jvm.JAR_NAME)
    cmds: dict[str, list[str] | None] = {
        "cli cold, no AppCDS": ["java", "-Xmx512m", "-jar", jar, kind, str(path)],
        "cli cold, AppCDS+flags": [*jvm.java_command("512m"), kind, str(path)],
        "antiword": ["antiword", "-w", "0", "-m", "UTF-8.txt", str(path)] if kind == "doc" else None,
        "catdoc/xls2csv": (["catdoc", "-d", "utf-8", str(path)] if kind == "doc" else ["xls2csv", "-d", "utf-8", str(path)]),
        "soffice": ["soffice", f"-env:UserInstallation=file://{soffice_dir}", "--headless", "--convert-to",
                    "txt" if kind == "doc" else "csv", "--outdir", soffice_dir, str(path)],
    }
    for name, argv in cmds.items():
        if argv is not None and shutil.which(argv[0]) is None:
            cmds[name] = None
    return cmds


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--corpus", default=os.environ.get("TENDER_POOL_CORPUS") or str(REPO.parent / "shared" / "corpus"))
    args = ap.parse_args()
    corpus = Path(args.corpus)
    manifest = {Path(e["file"]).name: e for e in json.loads((corpus / "manifest.json").read_text())["files"]}
    soffice_dir = tempfile.mkdtemp(prefix="tp-bench-soffice-")
    samples: dict[tuple[str, str], list[tuple[float, int]]] = {}
    missing: set[str] = set()
    warm = jvm.WarmJvm(recycle_after=10_000)
    try:
        for f in FILES:  # the warm JVM's first pass per file is its own warm-up, not measured
            warm.extract(corpus / "files" / f, manifest[f]["kind"], timeout=120)
        for _ in range(args.rounds):
            jobs = []
            for f in FILES:
                kind = manifest[f]["kind"]
                for name, argv in commands(corpus / "files" / f, kind, soffice_dir).items():
                    if argv is None:
                        if not (name == "antiword" and kind == "xls"):
                            missing.add(name)
                        continue
                    jobs.append((f, name, argv))
                jobs.append((f, "warm JVM", None))
            random.shuffle(jobs)
            for f, name, argv in jobs:
                if argv is None:
                    t0 = time.perf_counter()
                    warm.extract(corpus / "files" / f, manifest[f]["kind"], timeout=120)
                    wall = time.perf_counter() - t0
                    with open(f"/proc/{warm.pid}/status") as st:
                        rss = next(int(ln.split()[1]) for ln in st if ln.startswith("VmHWM"))
                    samples.setdefault((f, name), []).append((wall, rss))
                else:
                    samples.setdefault((f, name), []).append(timed(argv))
    finally:
        warm.close()
        shutil.rmtree(soffice_dir, ignore_errors=True)

    cols = ["cli cold, no AppCDS", "cli cold, AppCDS+flags", "warm JVM", "antiword", "catdoc/xls2csv", "soffice"]
    print(f"rounds: {args.rounds}; cells: median wall ms / peak RSS MiB (warm JVM: RSS high-water mark of the JVM)")
    print("| file | pages | " + " | ".join(cols) + " | AppCDS/cold | pages/s (AppCDS, warm) |")
    print("|---|---:|" + "---:|" * (len(cols) + 2))
    for f in FILES:
        pages = manifest[f].get("pages")
        row, med = [], {}
        for c in cols:
            s = samples.get((f, c))
            if not s:
                row.append("–")
                continue
            med[c] = statistics.median(w for w, _ in s)
            row.append(f"{med[c] * 1000:.0f} / {statistics.median(r for _, r in s) / 1024:.0f}")
        ratio = med.get("cli cold, AppCDS+flags", 0) / med["cli cold, no AppCDS"] if "cli cold, no AppCDS" in med else 0
        pps = (f"{pages / med['cli cold, AppCDS+flags']:.0f}, {pages / med['warm JVM']:.0f}"
               if pages and pages >= 10 and "warm JVM" in med else "")
        print(f"| {f} | {pages} | " + " | ".join(row) + f" | {ratio:.2f} | {pps} |")
    for m in sorted(missing):
        print(f"note: {m} not installed, column skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
