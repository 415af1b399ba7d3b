"""Formulas stored without cached values are computed in the streaming .xlsx path.

The workbook is a bill of quantities written by openpyxl (which stores formulas without results): products of
cells under ROUND, IF with string concatenation, SUM over ranges and lists, cross-sheet references, a summary
sheet (bigbook.make_formula_xlsx). The reference values are LibreOffice's: its resave of the same file computes
and caches every formula. Speed is in bench/bench_extract.py --formulas, not here.
"""

from __future__ import annotations

import pytest

from tender_pool.extract.api import extract
from tender_pool.extract.blocks import Sheet
from tender_pool.extract.formula import DIV0, VALUE, Evaluator, Formula, Unsupported
from tender_pool.extract.xlsx import read_xlsx_openpyxl
from tender_pool.extract.xlsx_stream import read_stream

from .test_xlsx import _same

SCALE = 10  # a tenth of the 12,000-row bill: every formula shape, ~1,200 rows, LibreOffice in seconds


@pytest.fixture(scope="module")
def formula_bill():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("bigbook", Path(__file__).with_name("bigbook.py"))
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    mod.ensure_soffice()
    return mod.formula_paths(SCALE)


def _cells(blocks) -> dict:
    return {(s.name, c.r, c.c): (c.v, c.type, c.wrap) for s in blocks if isinstance(s, Sheet) for c in s.cells}


def test_uncached_formulas_are_computed_in_the_fast_path_as_libreoffice_computes_them(formula_bill):
    raw, computed_by_lo = formula_bill
    x = extract(str(raw))
    assert x.engine == "xlsx-stream"  # not openpyxl's full load
    assert any("computed" in w for w in x.warnings) and not any("formula text" in w for w in x.warnings), x.warnings
    ours, ref = _cells(read_stream(str(raw))), _cells(read_stream(str(computed_by_lo)))
    assert len(ours) > 10_000
    diff = [(k, ours.get(k), ref.get(k)) for k in sorted(set(ours) | set(ref)) if ours.get(k) != ref.get(k)]
    assert not diff, f"{len(diff)} cells differ from LibreOffice's values, e.g. {diff[:5]}"
    # and what the bill computes is there: the summary's grand total line and a subtotal label
    assert "含税总价:" in x.markdown and "小计1(第1-" in x.markdown


def test_cached_empty_text_results_are_empty_cells(formula_bill):
    """LibreOffice caches an ="" result as <c t="str"><f>…</f><v></v></c>: a cached value (the empty text), not a
    formula without one — before, the whole workbook went to openpyxl and showed those cells' formula text."""
    _, computed_by_lo = formula_bill
    x = extract(str(computed_by_lo))
    assert x.engine == "xlsx-stream" and x.warnings == []
    assert "=IF(" not in x.markdown


def test_fast_path_equals_the_openpyxl_path(formula_bill):
    raw, _ = formula_bill
    _same(read_xlsx_openpyxl(str(raw)), read_stream(str(raw)))


# ---------------------------------------------------------------- the evaluator's semantics


def _book(cells: dict[str, object]):
    """An evaluator over one sheet "S" (and "T"): values by reference, formulas as "=…" strings."""
    def cell(sheet: str, col: str, row: str):
        v = cells.get(f"{sheet}!{col}{row}")
        if isinstance(v, str) and v.startswith("="):
            return Formula(v[1:], row)
        return v
    return Evaluator(cell)


@pytest.mark.parametrize("formula,row,want", [
    ("ROUND(A1*B1,2)", "1", 7.41),  # 2.5 * 2.964 = 7.41
    ("ROUND(2.675,2)", "3", 2.68),  # half away from zero on the decimal value, as Excel shows it
    ("ROUND(-2.5,0)", "2", -3.0),
    ("ROUNDUP(1.21,1)+ROUNDDOWN(1.29,1)", "2", 2.5),
    ("SUM(A1:B2)", "9", 2.5 + 2.964 + 10),  # text in a range is skipped
    ("SUM(A1,\"3\",TRUE)", "9", 2.5 + 3 + 1),  # typed-in arguments are coerced
    ("A1&\"x\"&B1&C9", "9", "2.5x2.964"),  # numbers as General, an empty cell as ""
    ("\"小计\"&2&\"(第\"&1&\"-\"&200&\"项)\"", "2", "小计2(第1-200项)"),  # the row number inside string literals
    ("IF(A1>2,\"大\",\"小\")", "4", "大"),
    ("IF(A2=\"ABC\",1,0)", "4", 1.0),  # text compares case-insensitively
    ("IF(C9=0,\"empty\")", "4", "empty"),  # an empty cell equals 0
    ("IF(A1>100,1)", "4", False),
    ("A1/0", "4", DIV0),
    ("A2*2", "4", VALUE),  # text in arithmetic
    ("IFERROR(A1/0,-1)", "4", -1.0),
    ("'T'!A1*2+T!A2", "4", 2 * 4.0 + 1.0),  # cross-sheet, quoted and not
    ("A3", "7", 2.5 * 2.964 * 2),  # a formula cell is computed first
    ("-2^2", "7", 4.0),  # unary minus binds tighter than ^, as in Excel
    ("50%*A1", "7", 1.25),
    ("AND(A1>1,OR(B1<1,TRUE))", "7", True),
    ("MOD(-7,3)+INT(-1.5)", "7", 2.0 - 2.0),
    ("SUMPRODUCT(A1:A2,B1:B2)", "7", 2.5 * 2.964),
    ("COUNT(A1:B2)+COUNTA(A1:B2)", "7", 3 + 4),
    ("AVERAGE(A1,B1)", "7", (2.5 + 2.964) / 2),
])
def test_evaluator(formula, row, want):
    ev = _book({"S!A1": 2.5, "S!B1": 2.964, "S!A2": "abc", "S!B2": 10.0, "S!A3": "=A1*B1*2", "T!A1": 4.0,
                "T!A2": 1.0})
    got = ev.evaluate(formula, "S", row)
    if isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-12)
    else:
        assert got == want


def test_rows_share_a_compilation_and_each_reads_its_own_row():
    """The row-template compilation: F2*G2 and F12*G12 share ``F#*G#``; a row number that also appears in a
    constant (row 2: ROUND(F2*G2,2)) or inside another number (row 1: H12) is put back exactly."""
    cells = {f"S!F{r}": float(r) for r in range(1, 30)} | {f"S!G{r}": 10.0 for r in range(1, 30)}
    ev = _book(cells)
    assert [ev.evaluate(f"F{r}*G{r}", "S", str(r)) for r in (2, 12, 21)] == [20.0, 120.0, 210.0]
    assert ev.evaluate("ROUND(F2*G2,2)", "S", "2") == 20.0
    assert ev.evaluate("F12+1", "S", "1") == 13.0
    assert ev.evaluate("SUM(F1:F11)", "S", "1") == sum(range(1, 12))


@pytest.mark.parametrize("formula", ["VLOOKUP(A1,B1:C9,2,0)", "SUM(A:A)", "TAX_RATE*A1", "A1+#REF!", "A1:B2"])
def test_what_is_not_evaluated_is_unsupported(formula):
    with pytest.raises(Unsupported):
        _book({"S!A1": 1.0}).evaluate(formula, "S", "5")


def test_circular_references_are_unsupported():
    ev = _book({"S!A1": "=B1+1", "S!B1": "=A1+1"})
    with pytest.raises(Unsupported):
        ev.value("S", "A", "1")


def test_element_path_computes_the_same(formula_bill, monkeypatch):
    """Sheets the regex shortcut does not model (prefixed names, rich inline strings …) are read element by element:
    their formula cells without values are computed the same way."""
    from tender_pool.extract import xlsx_stream

    raw, _ = formula_bill
    fast = read_stream(str(raw))
    monkeypatch.setattr(xlsx_stream, "_fast_cells", lambda *a, **k: None)
    _same(fast, read_stream(str(raw)))


def test_shared_formula_without_values_goes_to_openpyxl(tmp_path):
    """A shared formula's other cells hold no text (``<f t="shared" si="0"/>``): openpyxl's path translates them."""
    import zipfile

    import openpyxl

    src = tmp_path / "src.xlsx"
    wb = openpyxl.Workbook()
    ws = wb.active
    for r in range(1, 4):
        ws.append([r, 2.5, f"=A{r}*B{r}"])
    wb.save(src)
    out = tmp_path / "shared.xlsx"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "xl/worksheets/sheet1.xml":
                data = data.replace(b"<f>A1*B1</f>", b'<f t="shared" ref="C1:C3" si="0">A1*B1</f>')
                data = data.replace(b"<f>A2*B2</f>", b'<f t="shared" si="0"/>').replace(b"<f>A3*B3</f>",
                                                                                       b'<f t="shared" si="0"/>')
            zout.writestr(item, data)
    x = extract(str(out))
    assert x.engine == "openpyxl"
    cells = _cells([b for b in read_xlsx_openpyxl(str(out))])
    assert [cells[("Sheet", r, 2)][0] for r in range(3)] == ["2.5", "5", "7.5"]


def test_formulas_of_one_shape_share_one_code_object():
    """Speed: a bill's subtotals differ in their constants only (SUM(H3:H202), SUM(H204:H403)):
    one compiled function serves them all, each with its own constants, and each computes its own range."""
    from tender_pool.extract import formula

    cells = {f"S!H{r}": float(r) for r in range(1, 500)}
    ev = _book(cells)
    assert ev.evaluate("SUM(H3:H202)", "S", "203") == sum(range(3, 203))
    assert ev.evaluate("SUM(H204:H403)", "S", "404") == sum(range(204, 404))
    (f1, p1), (f2, p2) = formula._compile("SUM(H3:H202)"), formula._compile("SUM(H204:H403)")
    assert f1 is f2 and p1 != p2
    assert formula._compile("\"小计\"&1&\"(第\"&3")[0] is formula._compile("\"合计\"&7&\"(第\"&9")[0]


def test_round_equals_rounding_the_15_digit_text():
    """ROUND/ROUNDUP/ROUNDDOWN decide from the float itself away from ties and integers (speed): the same as
    rounding the value's 15-significant-digit text, on ties, decimals and a bill's products."""
    import math
    import random

    from tender_pool.extract.formula import _round

    def by_text(x, digits, mode):
        q = 10.0 ** int(digits)
        y = float(f"{abs(x) * q:.15g}")
        n = math.floor(y + 0.5) if mode == "half-up" else math.ceil(y) if mode == "up" else math.floor(y)
        r = n / q if q >= 1 else n * (1 / q)
        return -r if x < 0 else r

    rng = random.Random(12)
    xs = [2.675, 1.005, -2.5, 0.285, 1.15, 8.345, 1e-20, 0.1 + 0.2, 999999999999.995, 4.35 * 100 / 100]
    xs += [round(rng.uniform(-1e5, 1e5), rng.randint(0, 5)) for _ in range(3000)]
    xs += [round(rng.uniform(1, 5000), 3) * round(rng.uniform(10, 900), 2) for _ in range(3000)]
    for x in xs:
        for digits in (0, 1, 2, 3, -1):
            for mode in ("half-up", "up", "down"):
                assert _round(x, digits, mode) == by_text(x, digits, mode), (x, digits, mode)


def test_unescape_all_splits_one_text_node_and_falls_back_when_a_text_holds_the_separator():
    """The regex path decodes every formula text and inline string in one expat parse (speed): one text node split
    at U+E000; a text holding U+E000 (raw or as a reference) takes the element-per-item parse, with the same result."""
    from tender_pool.extract.xlsx_stream import unescape_all

    assert unescape_all([b"IF(H3&gt;=1,&quot;&#22797;&quot;&amp;E3)", b"", b"a\r\nb", b""]) == [
        'IF(H3>=1,"复"&E3)', "", "a\nb", ""]
    assert unescape_all([b"x&#57344;y", b"z", "\ue000".encode()]) == ["x\ue000y", "z", "\ue000"]


def test_text_read_by_formulas_is_indexed_by_column(tmp_path, monkeypatch):
    """Speed: formulas that read a sheet's text (a bill's IF(H5>=…,"复核:"&E5,"")) index only the columns they
    read, never every cell of the sheet; each cell read is what the index of every cell gives."""
    import openpyxl

    from tender_pool.extract import xlsx_formulas

    made = []
    real = xlsx_formulas.SheetValues

    class Recording(real):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            made.append(self)

    monkeypatch.setattr("tender_pool.extract.xlsx_cells.SheetValues", Recording)
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "S"
    for r in range(1, 41):
        ws.append([f"甲{r}&<", float(r), True if r % 3 else None, f"=A{r}&B{r}", f"=IF(B{r}>20,F{r},C{r})",
                   "x" if r % 2 else None])
    wb.save(tmp_path / "t.xlsx")
    x = extract(str(tmp_path / "t.xlsx"))
    assert x.engine == "xlsx-stream" and "甲5&<5" in x.markdown, x.markdown[:400]
    (values,) = made
    assert values._cells is None and sorted(values._columns) == ["A", "C", "F"]
    whole = real(values._build, values._strings, True, list(values._formulas.values()), values._decode,
                 values._numbers)
    for col in "ABCDEFG":
        for r in range(0, 43):
            assert values.get(col, str(r)) == whole.get(col, str(r)), (col, r)
    assert whole._cells is not None and values._cells is not None and not values._columns  # (past 3 columns)


def test_formula_texts_are_decoded_once_per_row_template(monkeypatch):
    """Speed: the regex path decodes a formula's text once per row template (its row number replaced by ``#``),
    not once per cell — a bill's 26k formula texts are ~20 templates, every IF text full of ``&#…;`` references.
    Where a template might not be its text's (the row number inside a reference, a reference to a digit or
    ``#``, a ``#`` of the text's own, an ``&`` the ``#`` could make a reference of) the cell's own text is
    decoded; either way each text is what decoding it alone gives."""
    from tender_pool.extract import xlsx_cells
    from tender_pool.extract.xlsx_strings import unescape_all

    rows = [str(r).encode() for r in range(1, 60)]
    bodies = [b"IF(H%s&gt;=1000000,&quot;&#22797;&#26680;:&quot;&amp;E%s,&quot;&quot;)" % (r, r) for r in rows]
    bodies += [b"ROUND(F%s*G%s,2)" % (r, r) for r in rows]
    decoded = []
    monkeypatch.setattr(xlsx_cells, "unescape_all", lambda items: decoded.append(len(items)) or unescape_all(items))
    texts, templated = xlsx_cells._texts(bodies, rows + rows)
    # the references to 复 (22797) and 核 (26680) hold these rows' numbers: those cells decode their own text
    own = [r for r in rows if r in b"22797" or r in b"26680"]
    assert [r for r, t in zip(rows, templated) if not t] == own == [b"2", b"6", b"7", b"8", b"9", b"22", b"26", b"27"]
    # one parse: 3 IF templates (rows 1 and 10 put # into 1000000 too) and the 8 cells' own texts
    assert all(templated[len(rows):]) and decoded == [3 + 8]
    assert texts[2] == 'IF(H#>=1000000,"复核:"&E#,"")' and texts[3] is texts[2]
    assert texts[0] == 'IF(H#>=#000000,"复核:"&E#,"")' and texts[1] == 'IF(H2>=1000000,"复核:"&E2,"")'
    for cases in ([b"A#1", b"B1"], [b"&#51;+A3", b"&#x33;&amp;3"], [b"&amp;12+1", b"x&12;"], [b"&lt;3", b"3"]):
        got, flags = xlsx_cells._texts(cases, [b"3"] * len(cases))
        assert [t.replace("#", "3") if f else t for t, f in zip(got, flags)] == unescape_all(cases)
        assert all(t.replace("3", "#") == g for t, g, f in zip(unescape_all(cases), got, flags) if f)
    assert xlsx_cells._texts([b"&#51;+A3", b"A3&lt;1"], [b"3", b"3"])[1] == [False, True]


def test_inline_text_read_by_formulas_skips_the_raw_entries(tmp_path, monkeypatch):
    """Speed: where a sheet holds only numbers, formulas without values and inline strings (openpyxl's shapes), a
    formula reading text gets it from one column's inline strings decoded in one parse, never from the cells' raw
    entries (no index of them built, no conversion per cell read); each value read is what the raw entries give,
    references, CRs and empty strings included."""
    import openpyxl

    made = []
    real = __import__("tender_pool.extract.xlsx_formulas", fromlist=["SheetValues"]).SheetValues

    class Recording(real):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            made.append(self)

    monkeypatch.setattr("tender_pool.extract.xlsx_cells.SheetValues", Recording)
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "S"
    for r in range(1, 31):
        ws.append([f"甲{r}&<\"" if r % 4 else ("a\r\nb" if r == 8 else ""), float(r), f"=A{r}&B{r}",
                   f"=IF(B{r}>20,A{r},E{r})", None if r % 3 else "x"])
    ws["F3"] = "&#51;"
    ws["G3"] = "=F3&A99"
    wb.save(tmp_path / "t.xlsx")
    x = extract(str(tmp_path / "t.xlsx"))
    assert x.engine == "xlsx-stream" and "甲5&<\"5" in x.markdown and "&#51;" in x.markdown, x.markdown[:400]
    (values,) = made
    assert values._cells is None and not values._columns and sorted(values._text_columns) == ["A", "E", "F"]
    whole = real(values._build, values._strings, True, list(values._formulas.values()), values._decode,
                 values._numbers)
    for col in "ABCDEFG":
        for r in range(0, 33):
            got = values.get(col, str(r))
            assert got == whole.get(col, str(r)) and type(got) is type(whole.get(col, str(r))), (col, r)


def test_known_texts_and_booleans_need_no_coercion():
    """Speed: what is a text for sure (a string, a concatenation) is not passed through ``_text`` again, a
    comparison's boolean not through ``_truth``, and a comparison with a number tests the type of one side only:
    the bill's IF(H5>=1000000,"复核:"&E5,"") calls nothing but for the text it reads. The values stay Excel's."""
    from tender_pool.extract.formula import _Gen

    src, _ = _Gen('IF(H#>=1000000,"复核:"&E#,"")').source()
    assert "_truth" not in src and src.count("_text(") == 1 and src.count("is float") == 3, src  # (was 4)
    src, _ = _Gen('"a"&"b"&C#&(1>2)').source()
    assert src.count("_text(") == 2, src  # the reference and the boolean
    ev = _book({"S!A1": "x", "S!B1": 2.0, "S!C1": True})
    assert ev.evaluate('"a"&"b"&A1&(1>2)&(B1>1)&C1', "S", "1") == "abxFALSETRUETRUE"
    assert ev.evaluate('IF(A1>=1,"y","n")&IF(B1>=2,"y","n")&IF(C1>=1,"y","n")', "S", "1") == "yyy"
    assert ev.evaluate('IF(A1="X",1,2)+IF("b">A1,10,20)', "S", "1") == 21.0



def test_a_running_formula_is_marked_in_its_grid():
    """Speed: a formula being computed is marked by its own grid entry (no set of marks, a tuple and two set
    operations a cell): a reference back to it is circular, and one that fails leaves its entry as it was."""
    from tender_pool.extract import formula

    seen = {}
    cells = {"S!A1": "=B1+1", "S!A3": "=FOO(1)", "S!A4": "=A3+1"}

    def cell(sheet, col, row):
        if col + row == "B1":
            seen["A1"] = ev.grids["S"].get("A1")
            return 2.0
        v = cells.get(f"{sheet}!{col}{row}")
        return Formula(v[1:], row) if isinstance(v, str) else v

    ev = Evaluator(cell, {"S": lambda: {"A4": Formula("A3+1", "4")}})
    assert ev.value("S", "A", "1") == 3.0 and seen["A1"] is formula._ACTIVE and ev.grids["S"]["A1"] == 3.0
    with pytest.raises(Unsupported):
        ev.value("S", "A", "4")
    assert "A3" not in ev.grids["S"] and type(ev.grids["S"]["A4"]) is Formula and ev._depth == 0


def test_a_formula_passed_while_it_runs_is_circular():
    """The grid mark holds for a formula the caller passes in too (``compute``, the openpyxl path's): computed
    while it runs, it is circular at once, as the set of marks said before."""
    from tender_pool.extract import formula

    calls = []

    def cell(sheet, col, row):
        calls.append(col + row)
        if col + row == "B1":
            return ev.compute("S", "A", "1", "B1+1")  # A1 again, while A1 runs
        return None

    ev = Evaluator(cell)
    with pytest.raises(Unsupported, match="circular"):
        ev.compute("S", "A", "1", "B1+1")
    assert calls == ["B1"] and ev._depth == 0 and "A1" not in ev.grids["S"]
    assert formula._ACTIVE not in ev.grids["S"].values()
