"""The regex cell path (``xlsx_cells``) against the element path (``xlsx_elements``) and openpyxl on shapes a
bill rarely has: number texts longer than 15 characters, formulas with and without cached values beside
booleans, errors and inline strings, formula elements with attributes."""

from __future__ import annotations

import zipfile

import openpyxl

from tender_pool.extract import xlsx_stream
from tender_pool.extract.blocks import Sheet
from tender_pool.extract.xlsx import read_xlsx_openpyxl
from tender_pool.extract.xlsx_stream import read_stream


def _cells(blocks) -> list:
    return [sorted(((c.r, c.c, c.v, c.type, c.wrap) for c in b.cells)) for b in blocks if isinstance(b, Sheet)]


def _write(path, rows) -> None:
    wb = openpyxl.Workbook()
    ws = wb.active
    for row in rows:
        ws.append(row)
    ws["B1"].number_format = "0.00"
    ws["B2"].number_format = "0.00"
    wb.save(path)


def _sheet_xml(path, edit) -> None:
    """Rewrites the first worksheet's XML in place (what openpyxl cannot write: long number texts, attributes)."""
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == "xl/worksheets/sheet1.xml":
                data = edit(data)
            dst.writestr(info, data)
    tmp.replace(path)


def test_long_number_texts_read_as_both_paths_and_openpyxl_read_them(tmp_path, monkeypatch):
    path = tmp_path / "long.xlsx"
    _write(path, [[1.5, 2.25, "a"], [3, 4, "b"], [5, 6, None]])
    _sheet_xml(path, lambda d: d.replace(b"<v>1.5</v>", b"<v>0.10000000000000001</v>")
               .replace(b"<v>2.25</v>", b"<v>2.2500000000000001</v>")
               .replace(b"<v>5</v>", b"<v>1234567890123456789</v>"))
    fast = read_stream(str(path))
    assert _cells(fast) == _cells(read_xlsx_openpyxl(str(path)))
    monkeypatch.setattr(xlsx_stream, "_fast_cells", lambda *a, **k: None)
    assert _cells(fast) == _cells(read_stream(str(path)))


def test_formulas_of_every_result_type_and_attributed_formula_elements(tmp_path, monkeypatch):
    path = tmp_path / "kinds.xlsx"
    _write(path, [[2, 3, "=A1*B1", "=A1>B1", "=1/0", '="x"&A1', "text"], [4, 5, "=SUM(A1:B2)", "=C1+C2"]])
    _sheet_xml(path, lambda d: d.replace(b"<f>SUM(", b'<f ca="1">SUM('))
    fast = read_stream(str(path))
    monkeypatch.setattr(xlsx_stream, "_fast_cells", lambda *a, **k: None)
    slow = read_stream(str(path))
    assert _cells(fast) == _cells(slow)
    got = {(c.r, c.c): c.v for b in fast if isinstance(b, Sheet) for c in b.cells}
    assert (got[(0, 2)], got[(0, 3)], got[(0, 4)], got[(0, 5)], got[(1, 2)], got[(1, 3)]) == (
        "6", "FALSE", "#DIV/0!", "x2", "14", "20")


def test_cached_text_results_read_by_a_formula_without_value_on_another_sheet(tmp_path, monkeypatch):
    """A sheet of LibreOffice's shapes (t="str" text results, one of them empty) read through the evaluator by a
    formula of another sheet stored without its value: the common-shape path gives what the general one gives."""
    path = tmp_path / "str.xlsx"
    wb = openpyxl.Workbook()
    first = wb.active
    first.title = "A"
    first.append(["=B!A1&\"y\"", "=B!B1+1", "=B!C1*2"])
    second = wb.create_sheet("B")
    second.append(["x", "z", 3])
    wb.save(path)
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == "xl/worksheets/sheet2.xml":
                start, end = data.index(b"<sheetData>"), data.index(b"</sheetData>")
                data = (data[:start] + b'<sheetData><row r="1"><c r="A1" t="str"><f>"ab"</f><v>ab</v></c>'
                        b'<c r="B1" t="str"><f>""</f><v></v></c><c r="C1" t="n"><v>3</v></c></row>' + data[end:])
            dst.writestr(info, data)
    tmp.replace(path)
    fast = read_stream(str(tmp_path / "str.xlsx"))
    got = {(c.r, c.c): c.v for b in fast if isinstance(b, Sheet) and b.name == "A" for c in b.cells}
    assert got == {(0, 0): "aby", (0, 1): "#VALUE!", (0, 2): "6"}
    monkeypatch.setattr(xlsx_stream, "_fast_cells", lambda *a, **k: None)
    assert _cells(fast) == _cells(read_stream(str(path)))


def test_a_comment_in_sheet_data_sends_the_sheet_to_the_element_path(tmp_path):
    """A comment's text can look like a cell to the patterns (and to the cell count); a parser skips it. The fast
    path refuses a sheetData holding a comment (``fast_cells``: the cheap "!" test first, then "<!--")."""
    path = tmp_path / "comment.xlsx"
    _write(path, [[1.5, 2.25, "a"], [3, 4, "b"]])
    ghost = b'<!-- <c r="D1" t="inlineStr"><is><t>ghost</t></is></c> --><c r="A1"'
    _sheet_xml(path, lambda d: d.replace(b'<c r="A1"', ghost, 1))
    with zipfile.ZipFile(path) as zf:
        assert ghost in zf.read("xl/worksheets/sheet1.xml")
    cells = _cells(read_stream(str(path)))
    assert cells == _cells(read_xlsx_openpyxl(str(path))) and "ghost" not in str(cells), cells
