"""The streaming .xlsx reader gives the blocks openpyxl's full load gives, on the corpus and a large bill."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import pytest

from tender_pool.extract.api import extract
from tender_pool.extract.blocks import Image, Sheet
from tender_pool.extract.xlsx import read_xlsx_openpyxl
from tender_pool.extract.xlsx_stream import NeedsOpenpyxl, _fast_strings, read_stream

from .corpus import manifest as _manifest

try:
    XLSX = [e for e in _manifest() if e["kind"] == "xlsx" and e["expect"] == "ok"]
except (OSError, ValueError):
    XLSX = []


def _by_place(cells: list) -> list:
    return sorted(cells, key=lambda c: (c.r, c.c))


def _same(a: list, b: list) -> None:
    sa = [x for x in a if isinstance(x, Sheet)]
    sb = [x for x in b if isinstance(x, Sheet)]
    assert [s.name for s in sa] == [s.name for s in sb]
    for x, y in zip(sa, sb):
        # the stream lists cells a kind at a time (xlsx_stream._cells_of): the same cells, in another order
        assert (_by_place(x.cells), x.hidden, x.header, x.footer) == (_by_place(y.cells), y.hidden, y.header, y.footer)
        # the one intended difference: the stream keeps a row's customHeight flag (openpyxl calls every stored
        # height custom), so its "refitted" marker may be absent on the openpyxl side, and a refitted row at the
        # default height (which xlsx_setup leaves out) is there as a custom one
        def rows(setup):
            return [h[:2] for h in setup.heights if h[1] != setup.default_height]

        assert msgspec.structs.replace(x.setup, heights=rows(x.setup)) == \
            msgspec.structs.replace(y.setup, heights=rows(y.setup)) if x.setup else not y.setup
        key = lambda m: (m.r1, m.c1, m.r2, m.c2)  # noqa: E731 - openpyxl keeps merges in a set
        assert sorted(x.merges, key=key) == sorted(y.merges, key=key)


@pytest.mark.parametrize("entry", XLSX, ids=lambda e: Path(e["file"]).name)
def test_stream_equals_openpyxl_on_corpus(entry, corpus_dir):
    path = str(corpus_dir / entry["file"])
    try:
        streamed = read_stream(path)
    except NeedsOpenpyxl:  # formulas without cached values: the openpyxl path is the reader, by design
        assert "formula" in " ".join(extract(path).warnings)
        return
    _same(read_xlsx_openpyxl(path), streamed)


def test_stream_equals_openpyxl_on_large_bill(bigbook):
    xlsx, _ = bigbook
    t0 = time.process_time()  # CPU time: a shared 2-core machine's load does not fail it
    streamed = read_stream(str(xlsx))
    took = time.process_time() - t0
    _same(read_xlsx_openpyxl(str(xlsx)), streamed)
    assert sum(len(s.cells) for s in streamed if isinstance(s, Sheet)) > 90_000
    assert took < 2.0, f"streaming the 12k-row bill took {took:.2f} s of CPU"  # openpyxl: ~5 s; we: ~0.6 s


def test_shared_strings_shortcut_matches_the_parser():
    xml = ('<?xml version="1.0" encoding="UTF-8"?><sst xmlns="x"><si><t>a&amp;b&#13;&#x41;\r\nc</t>'
           '<rPh sb="0"><t>ふ</t></rPh><phoneticPr fontId="1"/></si><si/><si><r><t xml:space="preserve"> 混</t></r>'
           '<r><rPr><b/><sz val="11"/></rPr><t>凝土</t></r></si></sst>').encode()
    assert _fast_strings(xml) == ["a&b\rA\nc", "", " 混凝土"]
    assert _fast_strings(xml.replace(b"<t>a", b"<t><![CDATA[a]]>")) is None  # left to the parser


def test_drawing_pictures_become_image_blocks(tmp_path):
    import zipfile

    src = tmp_path / "pic.xlsx"
    import openpyxl

    wb = openpyxl.Workbook()
    wb.active["A1"] = "设备照片"
    wb.save(src)
    # add a drawing with one picture anchored at C5 by hand (openpyxl needs PIL to write images)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp_path / "out.xlsx", "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "xl/worksheets/sheet1.xml":
                data = data.replace(b"</worksheet>", b'<drawing r:id="rId9" xmlns:r="http://schemas.openxmlformats.'
                                    b'org/officeDocument/2006/relationships"/></worksheet>')
            zout.writestr(item, data)
        xdr = "http://schemas.openxmlformats.org/drawingml/2006/spreadsheetDrawing"
        a = "http://schemas.openxmlformats.org/drawingml/2006/main"
        r = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
        rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
        zout.writestr("xl/worksheets/_rels/sheet1.xml.rels", f'<Relationships xmlns="http://schemas.openxmlformats.org/'
                      f'package/2006/relationships"><Relationship Id="rId9" Type="{rel}/drawing" '
                      f'Target="../drawings/drawing1.xml"/></Relationships>')
        zout.writestr("xl/drawings/drawing1.xml", f'<xdr:wsDr xmlns:xdr="{xdr}" xmlns:a="{a}" xmlns:r="{r}">'
                      f'<xdr:oneCellAnchor><xdr:from><xdr:col>2</xdr:col><xdr:colOff>0</xdr:colOff><xdr:row>4</xdr:row>'
                      f'<xdr:rowOff>0</xdr:rowOff></xdr:from><xdr:ext cx="952500" cy="476250"/><xdr:pic><xdr:blipFill>'
                      f'<a:blip r:embed="rId1"/></xdr:blipFill><xdr:spPr><a:xfrm><a:off x="0" y="0"/>'
                      f'<a:ext cx="952500" cy="476250"/></a:xfrm></xdr:spPr></xdr:pic></xdr:oneCellAnchor></xdr:wsDr>')
        zout.writestr("xl/drawings/_rels/drawing1.xml.rels", f'<Relationships xmlns="http://schemas.openxmlformats.org/'
                      f'package/2006/relationships"><Relationship Id="rId1" Type="{rel}/image" '
                      f'Target="../media/image1.png"/></Relationships>')
        zout.writestr("xl/media/image1.png", b"\x89PNG\r\n\x1a\n")
    images = [b for b in read_stream(str(tmp_path / "out.xlsx")) if isinstance(b, Image)]
    assert images == [Image(type="png", width=100, height=50, sheet="Sheet", row=4, col=2)]
    assert "*[image: png 100×50 on sheet Sheet at C5]*" in extract(str(tmp_path / "out.xlsx")).markdown


def test_large_twins_get_the_same_page_estimate(bigbook, jvm_build):
    """The same LibreOffice-written bill as .xlsx and as .xls: estimates within 10 % of each other
    (LibreOffice itself prints 768 pages of it). Before rows kept their customHeight flag the .xlsx got 617 and
    the .xls 722."""
    from tender_pool.extract.jvm import WarmJvm

    xlsx, xls = bigbook
    with WarmJvm() as w:
        a = extract(str(xlsx), timeout=120).pages
        b = extract(str(xls), timeout=120, jvm=w).pages
    assert abs(a - b) <= 0.1 * max(a, b), (a, b)
    assert 0.8 * 768 <= a <= 1.2 * 768
