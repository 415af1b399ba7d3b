"""The in-process BIFF8 reader (extract/xls_stream.py) against POI's usermodel (the JVM), and its number formats.

The fast path must give the blocks the JVM gives — cells, types, wrap flags, merges, hidden sheets, headers and
footers, page setup, pictures — so that a workbook's Markdown and page estimate do not depend on its size.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tender_pool.extract.blocks import Image, Sheet
from tender_pool.extract.numfmt import format_value, formatter
from tender_pool.extract.xls_stream import read_stream

from .corpus import manifest as _manifest

try:
    XLS = [e for e in _manifest() if e["kind"] == "xls" and e["expect"] == "ok"]
except (OSError, ValueError):
    XLS = []


def _cells(sheet: Sheet) -> dict:
    # POI's DataFormatter drops the padding before an accounting "-"; the Markdown strips it either way
    return {(c.r, c.c): (c.v.strip(), c.type, c.wrap) for c in sheet.cells}


def _compare(ours: list, poi: list) -> list[str]:
    diffs = []
    so, sp = [b for b in ours if isinstance(b, Sheet)], [b for b in poi if isinstance(b, Sheet)]
    assert [s.name for s in so] == [s.name for s in sp]
    for a, b in zip(so, sp):
        ca, cb = _cells(a), _cells(b)
        diffs += [f"{a.name}!{k}: {ca.get(k)} != {cb.get(k)}" for k in sorted(set(ca) | set(cb)) if ca.get(k) != cb.get(k)]
        if sorted((m.r1, m.c1, m.r2, m.c2) for m in a.merges) != sorted((m.r1, m.c1, m.r2, m.c2) for m in b.merges):
            diffs.append(f"{a.name}: merges")
        if (a.hidden, a.header, a.footer) != (b.hidden, b.header, b.footer):
            diffs.append(f"{a.name}: hidden/header/footer {(a.hidden, a.header, a.footer)} != {(b.hidden, b.header, b.footer)}")
        for field in a.setup.__struct_fields__:
            # POI reports a page break one row (column) before the one the record names; we keep the record's
            if field not in ("row_breaks", "col_breaks") and getattr(a.setup, field) != getattr(b.setup, field):
                diffs.append(f"{a.name}: setup.{field} {getattr(a.setup, field)} != {getattr(b.setup, field)}")
    ia = [(i.type, i.sheet, i.row, i.col) for i in ours if isinstance(i, Image)]
    ib = [(i.type, i.sheet, i.row, i.col) for i in poi if isinstance(i, Image)]
    if ia != ib:
        diffs.append(f"pictures {ia} != {ib}")
    return diffs


@pytest.mark.timeout(300)
def test_stream_reader_agrees_with_poi_on_the_corpus(corpus_dir, request):
    """Every ok .xls the pass models (small ones too, by lifting the size floor) reads as POI reads it."""
    request.getfixturevalue("jvm_build")
    from tender_pool.extract.jvm import WarmJvm

    read = 0
    problems: dict[str, list[str]] = {}
    with WarmJvm(max_rss=None) as w:
        for e in XLS:
            path = str(corpus_dir / e["file"])
            ours = read_stream(path, min_bytes=0)
            if ours is None:
                continue  # BIFF5, pictures POI must type, …: the JVM's path
            read += 1
            diffs = _compare(ours, w.extract(path, "xls", 60))
            if diffs:
                problems[Path(path).name] = diffs[:5]
    assert read >= 15, f"the stream pass modelled only {read} of {len(XLS)} corpus workbooks"
    assert not problems, problems


@pytest.mark.timeout(300)
def test_large_bill_takes_the_stream_path_with_poi_blocks(bigbook, request):
    request.getfixturevalue("jvm_build")
    from tender_pool.extract.api import extract
    from tender_pool.extract.jvm import WarmJvm

    xls = str(bigbook[1])
    ours = read_stream(xls)
    assert ours is not None and ours[0].engine == "xls-stream"
    with WarmJvm(max_rss=None) as w:
        assert _compare(ours, w.extract(xls, "xls", 120)) == []
        assert extract(xls, timeout=120, jvm=w).engine == "xls-stream"


def test_biff5_and_encrypted_workbooks_stay_with_poi(corpus_dir):
    """What the pass does not model is left to the JVM (None), never half read."""
    names = {"testEXCEL_5.xls", "testEXCEL_95.xls", "password.xls"}
    entries = [e for e in _manifest() if Path(e["file"]).name in names]
    assert len(entries) == len(names)
    for e in entries:
        assert read_stream(str(corpus_dir / e["file"])) is None, e["file"]


CODES = ["General", "0.000", "#,##0.00", "0", "#,##0", "0.0%", "#,##0.00_);(#,##0.00)", "0.00_ ",
         "[$$-409]#,##0.00_);([$$-409]#,##0.00)", '_-* #,##0.00_-;-* #,##0.00_-;_-* "-"??_-;_-@_-',
         '0.00;[Red]-0.00;"zero"', "0.0E+00", '"¥"#,##0.00', "#,##0,", "0.0#", "00.0"]


def test_compiled_formatter_equals_format_value():
    rng = random.Random(13)
    values = [0, 1, -1, 0.5, 2.5, -2.5, 0.625, 4521330.625, -0.001, 1e-7, 10 ** 12 + 0.5, -0.0] + \
        [rng.uniform(-1e6, 1e6) for _ in range(500)] + [rng.randint(-10 ** 6, 10 ** 6) / 8 for _ in range(200)]
    for code in CODES:
        f = formatter(code)
        bad = [(v, f(v), format_value(v, code, is_date=False)) for v in values
               if f(v) != format_value(v, code, is_date=False)]
        assert not bad, (code, bad[:3])


def test_number_formats_as_a_spreadsheet_shows_them():
    assert format_value(4521330.625, "#,##0.00") == "4,521,330.63"  # ties round up, not to even
    assert format_value(0.125, "0.00") == "0.13"
    assert format_value(-1253.66, "[$$-409]#,##0.00_);([$$-409]#,##0.00)") == "($1,253.66)"  # currency kept
    assert format_value(5.5, "0.00_ ") == "5.50"  # a padding code whose space was trimmed
