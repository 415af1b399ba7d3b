"""Per-file wall time through ``extract()`` on the corpus, the page-estimate distribution and coverage.

Run: ``.venv/bin/python bench/bench_extract.py [--kinds docx,xlsx,pdf,doc,xls] [--warm]``.
``--formulas``: instead, issue 17 item 12: the 12k-row bill as openpyxl writes it (formulas without cached values)
against the same bill with the values LibreOffice computed and cached, through each reader path.
``--phases``: instead, where ``extract()``'s CPU time goes on those two bills: each phase's best of ``--rounds``
(the shared strings, each sheet's cells by regex, the pending formulas, the cells built, the evaluation and its
parts, Markdown, the page estimate).
``--ab TREE``: instead, paired A/B of ``extract()`` on those two bills against another checkout (e.g. /work/main,
its own ``.venv``): ``--rounds`` pairs of processes, the order alternating, each the best CPU and wall of 3 forked
runs after one untimed; medians and min-max of the samples, the child's page faults, with the load average.
``--large``: instead, the issue-13 table: every reader variant on the generated 12k-row bill of quantities
(tests/extract/bigbook.py, .xlsx and its LibreOffice .xls twin), 53446.xls, the 130-page .doc, and the stages
of a small .doc through ``run_job`` (best of ``--rounds``), with the machine's load average.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "extract"))

from corpus import corpus_dir, coverage, manifest, name_of, reference_path  # noqa: E402

from tender_pool.extract.api import extract  # noqa: E402
from tender_pool.extract.errors import ExtractError  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default="docx,xlsx,pdf,doc,xls")
    ap.add_argument("--warm", action="store_true", help="use one WarmJvm for doc/xls")
    ap.add_argument("--large", action="store_true", help="the reader-variant table of issue 13")
    ap.add_argument("--formulas", action="store_true", help="the uncached-formula table of issue 17")
    ap.add_argument("--phases", action="store_true", help="extract()'s CPU time by phase on the formula bills")
    ap.add_argument("--ab", metavar="TREE", help="paired A/B on the formula bills against another checkout")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.ab:
        return ab(Path(args.ab), args.rounds)
    if args.phases:
        return phases(args.rounds)
    if args.large:
        return large(args.rounds)
    if args.formulas:
        return formulas(args.rounds)
    kinds = set(args.kinds.split(","))
    warm = None
    if args.warm:
        from tender_pool.extract.jvm import WarmJvm
        warm = WarmJvm()
    ratios: list[tuple[float, str, int, int, str, str]] = []
    covs: list[float] = []
    print(f"{'file':48s} {'engine':10s} {'wall s':>7s} {'pages':>11s} {'src':9s} {'coverage':>8s}")
    for e in manifest():
        if e["kind"] not in kinds:
            continue
        name = name_of(e)
        t0 = time.monotonic()
        try:
            x = extract(str(corpus_dir() / e["file"]), timeout=120, jvm=warm if e["kind"] in ("doc", "xls") else None)
        except ExtractError as exc:
            print(f"{name:48s} {'-':10s} {time.monotonic() - t0:7.2f} {'':>11s} {exc.kind}")
            continue
        wall = time.monotonic() - t0
        cov = ""
        if e["expect"] == "ok":
            ref = reference_path(e)
            if ref is not None:
                c = coverage(ref.read_text("utf-8", "replace"), x.markdown)
                covs.append(c)
                cov = f"{c:8.4f}"
            if e.get("pages"):
                ratios.append((x.pages / e["pages"], name, x.pages, e["pages"], x.pages_source, x.format))
        print(f"{name:48s} {x.engine:10s} {wall:7.2f} {x.pages:5d}/{e.get('pages') or '-':<5} {x.pages_source:9s} {cov}")
    if warm is not None:
        warm.close()
    if ratios:
        within = [r for r in ratios if 0.8 <= r[0] <= 1.2]
        worst = sorted(ratios, key=lambda r: -max(r[0], 1 / r[0]))[:5]
        print(f"\npage estimate: {len(within)}/{len(ratios)} = {len(within) / len(ratios):.0%} within ±20 %; "
              f"median ratio {statistics.median(r[0] for r in ratios):.2f}; worst 5: "
              + ", ".join(f"{w[1]} {w[2]}/{w[3]}" for w in worst))
        for label, kinds_of in (("word processing", ("doc", "docx", "rtf", "html")), ("sheets", ("xls", "xlsx", "csv"))):
            sub = [r for r in ratios if r[5] in kinds_of]
            if sub:
                ok = sum(1 for r in sub if 0.8 <= r[0] <= 1.2)
                print(f"  {label}: {ok}/{len(sub)} within ±20 %")
        for src in ("stored", "exact", "estimated"):
            sub = [r for r in ratios if r[4] == src]
            if sub:
                ok = sum(1 for r in sub if 0.8 <= r[0] <= 1.2)
                print(f"  {src}: {ok}/{len(sub)} within ±20 %")
    if covs:
        print(f"coverage mean {statistics.mean(covs):.4f} over {len(covs)} ok files, min {min(covs):.4f}")
    return 0


def _best(fn, rounds: int) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds of this process) over ``rounds`` calls."""
    wall, cpu = [], []
    for _ in range(rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(wall), min(cpu)


def _forked(fn, rounds: int) -> tuple[float, float]:
    """(best wall, best CPU of the child) of ``fn`` in a forked child, as a daemon slot runs a job: what the
    child pays for memory it touches first (page faults) is in its CPU time."""
    return _forked_faults(fn, rounds)[:2]


def _forked_faults(fn, rounds: int) -> tuple[float, float, int]:
    """``_forked``'s figures and the fewest minor page faults of the child: a count the machine's load hardly
    moves, where a change in the memory a run touches shows when CPU times are too noisy to. (Two checkouts of the
    same code differ by ~5 %: their interpreters' heaps are laid out apart.)"""
    import os

    wall, cpu, faults = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            try:
                fn()
            finally:
                os._exit(0)
        _, status, ru = os.wait4(pid, 0)
        if status:
            raise RuntimeError(f"child exited with status {status}")
        wall.append(time.perf_counter() - t0)
        cpu.append(ru.ru_utime + ru.ru_stime)
        faults.append(ru.ru_minflt)
    return min(wall), min(cpu), min(faults)


def formulas(rounds: int) -> int:
    """Milliseconds (best of ``rounds`` after one untimed run, in a forked child as a slot runs a job) for the bill
    of quantities with formulas and no cached values (bigbook.make_formula_xlsx: ~26k formula cells of ROUND, IF,
    &, SUM, cross-sheet references) and for its LibreOffice resave with every value cached."""
    import bigbook

    from tender_pool.extract.xlsx import read_xlsx_openpyxl
    from tender_pool.extract.xlsx_stream import read_stream

    bigbook.ensure_soffice()
    raw, cached = (str(p) for p in bigbook.formula_paths())
    print(f"{'document':44s} {'variant':44s} {'wall ms':>8s} {'CPU ms':>8s}")
    for doc, path in (("bill 12k rows, formulas without values", raw), ("same bill, values cached (LibreOffice)", cached)):
        for variant, fn, n in (("openpyxl path (before, for uncached formulas)", lambda: read_xlsx_openpyxl(path), 1),
                               ("xlsx-stream -> blocks", lambda: read_stream(path), rounds),
                               ("extract() (blocks + Markdown + pages)", lambda: extract(path), rounds)):
            if n > 1:
                fn()  # warm-up (imports, page cache); the openpyxl row, ~6 s, runs once
            wall, cpu = _forked(fn, n)
            print(f"{doc:44s} {variant:44s} {wall * 1000:8.1f} {cpu * 1000:8.1f}", flush=True)
        x = extract(path)
        print(f"{'':44s} engine {x.engine}; {'; '.join(x.warnings) or 'no warnings'}")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in __import__('os').getloadavg())} "
          f"on {__import__('os').cpu_count()} CPUs")
    return 0


_AB_CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from bench_extract import _forked_faults
from tender_pool.extract.api import extract
path = sys.argv[2]
extract(path)
wall, cpu, faults = _forked_faults(lambda: extract(path), 3)
print(wall * 1000, cpu * 1000, faults)
"""


def ab(other: Path, pairs: int) -> int:
    """Paired A/B of ``extract()`` on the two formula bills: this checkout against ``other`` (its own .venv and
    code), one process per sample, the order alternating so a change in the machine's load falls on both."""
    import os
    import subprocess

    import bigbook

    bigbook.ensure_soffice()
    here = Path(__file__).resolve().parents[1]
    trees = {"this": here, "other": other.resolve()}
    print(f"this = {here}, other = {other.resolve()}; {pairs} pairs; ms (best of 3 forked runs each)")
    print(f"{'document':40s} {'tree':6s} {'CPU median (min-max)':>24s} {'wall median (min-max)':>24s} "
          f"{'page faults median':>19s}")
    loads = [os.getloadavg()[0]]
    for doc, path in zip(("bill 12k rows, formulas without values", "same bill, values cached (LibreOffice)"),
                         bigbook.formula_paths()):
        got: dict[str, list[tuple[float, float, int]]] = {k: [] for k in trees}
        for i in range(pairs):
            for name in (list(trees) if i % 2 == 0 else list(reversed(trees))):
                tree = trees[name]
                out = subprocess.run([str(tree / ".venv" / "bin" / "python"), "-c", _AB_CHILD, str(here / "bench"),
                                      str(path)], capture_output=True, text=True, check=True, cwd=tree,
                                     env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
                wall, cpu, faults = out.stdout.split()
                got[name].append((float(cpu), float(wall), int(faults)))
            loads.append(os.getloadavg()[0])
        for name, samples in got.items():
            cpu = [x[0] for x in samples]
            wall = [x[1] for x in samples]
            print(f"{doc:40s} {name:6s} {statistics.median(cpu):9.0f} ({min(cpu):.0f}-{max(cpu):.0f})"
                  f"{'':6s}{statistics.median(wall):9.0f} ({min(wall):.0f}-{max(wall):.0f})"
                  f"{statistics.median(x[2] for x in samples):17.0f}", flush=True)
    print(f"load average (1 min) over the run: {min(loads):.2f}-{max(loads):.2f} on {os.cpu_count()} CPUs")
    return 0


def phases(rounds: int) -> int:
    """CPU milliseconds of each phase of ``extract()`` (best of ``rounds``, after one untimed run) on the bill with
    formulas and no values and on its LibreOffice resave: the functions that make up each phase are wrapped with
    a CPU clock for the run (nested phases are indented; a parent includes its children)."""
    import bigbook

    from tender_pool.extract import api, xlsx_cells, xlsx_formulas, xlsx_stream

    bigbook.ensure_soffice()
    spent: dict[str, float] = {}
    wrapped = []

    def wrap(owner, name: str, label: str) -> None:
        fn = getattr(owner, name)

        def timed(*a, **k):
            t = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + time.process_time() - t
        wrapped.append((owner, name, fn))
        setattr(owner, name, timed)

    phases_of = (
            (xlsx_stream, "shared_strings", "shared strings"),
            (xlsx_stream, "_fast_cells", "sheets' cells by regex (all of fast_cells)"),
            (xlsx_cells, "_pending", "  formulas without values (_pending)"),
            (xlsx_cells, "cells_of", "  cells built (cells_of)"),
            (xlsx_stream, "sheet_elements", "sheet XML around the cells"),
            (xlsx_stream, "evaluate_workbook", "evaluation (evaluate_workbook)"),
            (xlsx_formulas.SheetValues, "prefill", "  grids: numbers and formulas"),
            (xlsx_formulas.SheetValues, "get", "  other cells read (SheetValues.get; +its clock)"),
            (xlsx_stream, "cells_of", "  computed numbers formatted"),
            (xlsx_stream, "read_stream", "read_stream (all of the reading)"),
            (api, "render", "Markdown"),
            (api, "estimate", "page estimate"))
    for owner, name, label in phases_of:
        wrap(owner, name, label)
    try:
        for doc, path in zip(("bill 12k rows, formulas without values", "same bill, values cached (LibreOffice)"),
                             bigbook.formula_paths()):
            extract(str(path))
            best: dict[str, float] = {}
            totals = []
            for _ in range(rounds):
                spent.clear()
                t = time.process_time()
                extract(str(path))
                totals.append(time.process_time() - t)
                for k, v in spent.items():
                    best[k] = min(best.get(k, v), v)
            print(f"{doc}: extract() CPU ms best {min(totals) * 1000:.0f}, median "
                  f"{statistics.median(totals) * 1000:.0f}, max {max(totals) * 1000:.0f}")
            for _, _, label in phases_of:
                if label in best:
                    print(f"  {label:48s} {best[label] * 1000:8.1f}")
    finally:
        for owner, name, fn in wrapped:
            setattr(owner, name, fn)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in __import__('os').getloadavg())} "
          f"on {__import__('os').cpu_count()} CPUs")
    return 0


def large(rounds: int) -> int:
    """One row per variant: milliseconds, best of ``rounds`` (warm: after one untimed run)."""
    import tempfile

    import bigbook

    from tender_pool.extract.jvm import WarmJvm
    from tender_pool.extract.runner import run_job

    bigbook.ensure_soffice()
    xlsx, xls = (str(p) for p in bigbook.paths())
    files = corpus_dir() / "files"
    big_doc, small_doc, wide_xls = (str(files / n) for n in
                                    ("tender-12-tender-doc-xl.doc", "tender-01-notice.doc", "53446.xls"))
    rows: list[tuple[str, str, float | None]] = []

    print(f"{'document':34s} {'variant':58s} {'wall ms':>8s} {'CPU ms':>8s}   (CPU: this process, or the forked "
          f"child; a JVM's own CPU is not in it)")

    def row(doc: str, variant: str, fn, fork: bool = False) -> None:
        try:
            fn()  # warm-up (imports, JIT, page cache)
            wall, cpu = _forked(fn, rounds) if fork else _best(fn, rounds)
        except Exception as exc:  # noqa: BLE001 - a variant that cannot run is a row too
            print(f"{doc:34s} {variant:58s} n/a ({type(exc).__name__}: {exc})", flush=True)
            return
        rows.append((doc, variant, wall * 1000))
        print(f"{doc:34s} {variant:58s} {wall * 1000:8.1f} {cpu * 1000:8.1f}", flush=True)

    def openpyxl_load(read_only: bool):
        import openpyxl

        wb = openpyxl.load_workbook(xlsx, data_only=True, read_only=read_only)
        for ws in wb.worksheets:
            for r in ws.iter_rows(values_only=True):
                pass
        wb.close()

    def calamine(path: str):
        from python_calamine import CalamineWorkbook

        wb = CalamineWorkbook.from_path(path)
        for name in wb.sheet_names:
            wb.get_sheet_by_name(name).to_python()

    def xlrd_read(path: str):
        from tender_pool.extract.legacy import xlrd_blocks

        xlrd_blocks(path)

    def soffice(path: str, fmt: str):
        with tempfile.TemporaryDirectory() as d:
            bigbook.convert(__import__("pathlib").Path(path), fmt, __import__("pathlib").Path(d))

    from tender_pool.extract import xlsx_stream
    from tender_pool.extract.xlsx import read_xlsx_openpyxl
    from tender_pool.extract.xlsx_stream import read_stream

    def element_stream(path: str):
        fast = xlsx_stream._fast_cells
        xlsx_stream._fast_cells = lambda *a, **k: None
        try:
            read_stream(path)
        finally:
            xlsx_stream._fast_cells = fast

    def lxml_values(path: str):  # the fastest tree-free XML walk: every cell's value, nothing else
        import zipfile

        from lxml import etree

        tag = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}v"
        with zipfile.ZipFile(path) as zf:
            for name in zf.namelist():
                if name.startswith("xl/worksheets/sheet"):
                    with zf.open(name) as part:
                        for _, el in etree.iterparse(part, events=("end",), tag=tag):
                            el.text  # noqa: B018
                            el.clear()

    def expat_values(path: str):  # expat with handlers, no elements built: every cell's value
        import xml.parsers.expat
        import zipfile

        with zipfile.ZipFile(path) as zf:
            for name in zf.namelist():
                if name.startswith("xl/worksheets/sheet"):
                    values: list[str] = []
                    p = xml.parsers.expat.ParserCreate()
                    p.CharacterDataHandler = values.append
                    p.Parse(zf.read(name), True)

    bill = "bill of quantities 12k rows"
    # first, from a lean process (as a daemon slot is: its readers preloaded, nothing else held), each document
    # as a slot's job: run_job in a forked child, the child's CPU measured (the JVM's own CPU is not in it)
    from tender_pool.extract.api import preload

    jobs = tempfile.mkdtemp(prefix="tp-bench-")
    with WarmJvm(max_rss=None) as w:
        for path, doc, jvm in ((xlsx, bill + " .xlsx", None), (xls, bill + " .xls", w),
                               (big_doc, "130-page .doc", w), (small_doc, "small .doc", w), (wide_xls, "53446.xls", w)):
            preload(path)
            row(doc, "ours: run_job in a forked child (a slot's job)",
                lambda: run_job(path, jobs, "job", timeout=120, jvm=jvm), fork=True)  # noqa: B023 - called at once
    row(bill + " .xlsx", "lxml iterparse of the sheets, values only (no strings/formats)", lambda: lxml_values(xlsx))
    row(bill + " .xlsx", "expat handlers over the sheets, values only", lambda: expat_values(xlsx))
    row(bill + " .xlsx", "openpyxl load_workbook, all values", lambda: openpyxl_load(False))
    row(bill + " .xlsx", "openpyxl read_only, all values", lambda: openpyxl_load(True))
    row(bill + " .xlsx", "python-calamine, values only (no formats/setup)", lambda: calamine(xlsx))
    row(bill + " .xlsx", "before: openpyxl reader -> blocks", lambda: read_xlsx_openpyxl(xlsx))
    row(bill + " .xlsx", "xlsx-stream, sheetData as XML elements -> blocks", lambda: element_stream(xlsx))
    row(bill + " .xlsx", "ours: xlsx-stream, cells by kind (regex + comprehensions)", lambda: read_stream(xlsx))
    row(bill + " .xlsx", "ours: extract() (blocks + Markdown + pages)", lambda: extract(xlsx))
    from tender_pool.extract import xls_stream

    with WarmJvm(max_rss=None) as w:
        row(bill + " .xls", "python-calamine BIFF, values only", lambda: calamine(xls))
        row(bill + " .xls", "xlrd formatting_info -> blocks", lambda: xlrd_read(xls))
        row(bill + " .xls", "before: warm JVM (POI usermodel) round trip -> blocks", lambda: w.extract(xls, "xls", 120))
        row(bill + " .xls", "ours: xls-stream (BIFF8 records in-process) -> blocks", lambda: xls_stream.read_stream(xls))
        row(bill + " .xls", "ours: extract()", lambda: extract(xls, timeout=120, jvm=w))
        row("53446.xls (290k cells)", "python-calamine BIFF, values only", lambda: calamine(wide_xls))
        row("53446.xls (290k cells)", "before: warm JVM round trip -> blocks", lambda: w.extract(wide_xls, "xls", 120))
        row("53446.xls (290k cells)", "ours: xls-stream -> blocks", lambda: xls_stream.read_stream(wide_xls))
        row("53446.xls (290k cells)", "ours: extract()", lambda: extract(wide_xls, timeout=120, jvm=w))
        row("130-page .doc", "stage: warm JVM round trip + JSON lines decoded", lambda: w.extract(big_doc, "doc", 120))
        row("130-page .doc", "ours: extract() warm JVM", lambda: extract(big_doc, timeout=120, jvm=w))
        row("130-page .doc", "antiword", lambda: __import__("subprocess").run(
            ["antiword", "-w", "0", "-m", "UTF-8.txt", big_doc], capture_output=True, check=True))
        # a small .doc, stage by stage: the JVM's answer, decoding, Markdown + pages, the result files
        from tender_pool.extract.markdown import render
        from tender_pool.extract.pages import estimate

        blocks = w.extract(small_doc, "doc", 60)
        out = tempfile.mkdtemp(prefix="tp-bench-")
        row("small .doc", "stage: JVM round trip + JSON lines decoded", lambda: w.extract(small_doc, "doc", 60))
        row("small .doc", "stage: Markdown render + page estimate", lambda: (render(blocks), estimate(blocks)))
        row("small .doc", "all: run_job (extract + 2 files written)",
            lambda: run_job(small_doc, out, "job", timeout=60, jvm=w))
        rss_small = w.rss_bytes()
    # the JVM with C2 as well (tiered): faster on a long document, at a larger resident size
    from tender_pool.extract import jvm as jvm_mod

    c1_flags = jvm_mod.MEMORY_FLAGS
    jvm_mod.MEMORY_FLAGS = [f for f in c1_flags if f not in ("-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1")]
    try:
        with WarmJvm(max_rss=None) as tiered:
            for _ in range(10):
                tiered.extract(big_doc, "doc", 120)
            row("130-page .doc", "variant: warm JVM with C2 (tiered) round trip", lambda: tiered.extract(big_doc, "doc",
                                                                                                          120))
            rss = (tiered.rss_bytes() or 0) >> 20
            print(f"{'':34s}   (its RSS after these runs: {rss} MiB; the C1-only JVM's: see below)")
    finally:
        jvm_mod.MEMORY_FLAGS = c1_flags
    row(bill + " .xls", "LibreOffice soffice --convert-to csv (1st sheet)", lambda: soffice(xls, "csv"))
    row(bill + " .xlsx", "LibreOffice soffice --convert-to csv (1st sheet)", lambda: soffice(xlsx, "csv"))
    if rss_small:
        print(f"\nwarm JVM RSS after this run: {rss_small / 2**20:.0f} MiB")
    with WarmJvm(max_rss=None, recycle_after=1000) as fresh:  # the two memory figures, from a fresh JVM
        for _ in range(200):
            fresh.extract(small_doc, "doc", 60)
        after_small = fresh.rss_bytes() or 0
        fresh.extract(xls, "xls", 120)  # the large workbook through POI's usermodel (the JVM's worst case)
        after_large = fresh.rss_bytes() or 0
    print(f"warm JVM RSS after 200 small .doc: {after_small / 2**20:.0f} MiB; after one 12k-row .xls as well: "
          f"{after_large / 2**20:.0f} MiB")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in __import__('os').getloadavg())} "
          f"on {__import__('os').cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
