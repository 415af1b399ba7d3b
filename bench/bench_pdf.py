#!/usr/bin/env python3
"""PDF readers side by side: speed, text recall and table cells, on the corpus's PDFs and on PDFs made
from its generated .docx files with LibreOffice (as the corpus's own PDFs were made).

    .venv/bin/python bench/bench_pdf.py [--reps 3] [--no-convert]

For each PDF: the median wall time of ``--reps`` reads (after one warm-up) by pypdf (the previous
reader), pdfminer.six and PDFium (``extract.pdf``, what the pool uses now: text and tables); the
recall of each against the generator's truth text (Dice over the multiset of letters and digits,
as the corpus manifest's ``agreement``); and the share of truth table cells in place
(``tests/extract/cells.py``) for our reader. pdfminer.six is optional (``pip install pdfminer.six``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "extract"))
from cells import in_place  # noqa: E402
from tender_pool.extract.api import read_blocks  # noqa: E402
from tender_pool.extract.blocks import TableBlock  # noqa: E402
from tender_pool.extract.markdown import render  # noqa: E402

CORPUS = Path(os.environ.get("TENDER_POOL_CORPUS", REPO.parent / "shared" / "corpus"))


def dice(a: str, b: str) -> float:
    ca = collections.Counter(c for c in a if c.isalnum())
    cb = collections.Counter(c for c in b if c.isalnum())
    total = sum(ca.values()) + sum(cb.values())
    return 2 * sum((ca & cb).values()) / total if total else 1.0


def pypdf_text(path: str) -> str:
    from pypdf import PdfReader
    return "\n".join(p.extract_text() or "" for p in PdfReader(path).pages)


def pdfminer_text(path: str) -> str:
    from pdfminer.high_level import extract_text
    return extract_text(path)


def ours(path: str) -> tuple[str, list]:
    blocks = read_blocks(path, timeout=120)
    return render(blocks).markdown, [b.table for b in blocks if isinstance(b, TableBlock)]


def timed(fn, path: str, reps: int):
    out = fn(path)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(path)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000, out


def pdfs(convert: bool) -> list[tuple[str, Path, Path]]:
    """(name, pdf, truth.json): the corpus's PDFs, then the generated .docx converted here."""
    out = []
    for pdf in sorted((CORPUS / "files").glob("*.pdf")):
        out.append((pdf.name, pdf, CORPUS / "refs" / f"{pdf.name}.truth.json"))
    if convert and shutil.which("soffice"):
        tmp = Path(tempfile.mkdtemp(prefix="tp-pdf-"))
        docx = sorted((CORPUS / "files").glob("*.docx"))
        subprocess.run(["soffice", "--headless", "--convert-to", "pdf", "--outdir", str(tmp), *map(str, docx)],
                       capture_output=True, timeout=900)
        for d in docx:
            pdf = tmp / (d.stem + ".pdf")
            truth = CORPUS / "refs" / f"{d.name}.truth.json"
            if pdf.exists() and truth.exists():
                out.append((f"{d.stem}.docx→pdf", pdf, truth))
    return out


def truth_text(truth_json: Path) -> str:
    txt = truth_json.with_name(truth_json.name.replace(".truth.json", ".truth.txt"))
    return txt.read_text("utf-8") if txt.exists() else ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-convert", action="store_true")
    a = ap.parse_args()
    try:
        import pdfminer  # noqa: F401
        readers = ["pypdf", "pdfminer", "pdfium"]
    except ImportError:
        readers = ["pypdf", "pdfium"]
    rows = []
    sums: dict[str, list] = collections.defaultdict(list)
    cells_found = cells_total = 0
    for name, pdf, truth in pdfs(not a.no_convert):
        ref = truth_text(truth)
        row = [name]
        for r in readers:
            if r == "pdfium":
                ms, (text, tables) = timed(ours, str(pdf), a.reps)
                found, total = in_place(json.loads(truth.read_text("utf-8")), tables)
                cells_found, cells_total = cells_found + found, cells_total + total
            else:
                ms, text = timed(pypdf_text if r == "pypdf" else pdfminer_text, str(pdf), a.reps)
            rec = dice(text, ref)
            sums[r].append((ms, rec))
            row += [f"{ms:.0f}", f"{rec:.3f}"]
        row.append(f"{found}/{total}" if total else "-")
        rows.append(row)
    if not rows:
        raise SystemExit(f"no PDFs under {CORPUS} (set TENDER_POOL_CORPUS)")
    header = ["pdf"] + [f"{r} {w}" for r in readers for w in ("ms", "recall")] + ["cells in place"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print()
    for r in readers:
        ms = [m for m, _ in sums[r]]
        rec = [x for _, x in sums[r]]
        print(f"{r:9s} median {statistics.median(ms):7.0f} ms (min {min(ms):.0f}, max {max(ms):.0f}); "
              f"recall median {statistics.median(rec):.3f} (min {min(rec):.3f})")
    if cells_total:
        print(f"table cells in place (pdfium reader): {cells_found}/{cells_total} = {cells_found / cells_total:.3f}")


if __name__ == "__main__":
    main()
