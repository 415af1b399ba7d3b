"""A worksheet element by element (expat): the reader of every shape the regular expressions do not model, and
of the small elements around the cells (columns, merges, breaks, page setup, margins, header/footer, drawing).

A part over ``WHOLE_PART`` bytes is streamed with its rows cleared. Same cell semantics as ``xlsx_cells``
(tests/extract/test_xlsx.py and test_xlsx_formulas.py compare both).
"""

from __future__ import annotations

from tender_pool.extract.blocks import Merge, SheetCell
from tender_pool.extract.numfmt import format_value
from tender_pool.extract.ooxml import Package
from tender_pool.extract.xlsx_formulas import Pending, SheetValues
from tender_pool.extract.xlsx_parts import (NS, R_NS, ROW, TRUE, NeedsOpenpyxl, Styles, col_index, elements,
                                          float_or)
from tender_pool.extract.xlsx_strings import text_of
from tender_pool.extract.xlsx_view import Breaks, Dim, FitToPage, SheetView

_C, _V, _F, _IS = (f"{{{NS}}}{t}" for t in ("c", "v", "f", "is"))
_DIGITS = "0123456789"


def sheet_elements(pkg: Package, part: str, view: SheetView, strings: list[str], styles: Styles, epoch,
                   xml: bytes | None = None):
    """(cells, merges, values, pending) of one worksheet read element by element (or only the elements around
    the cells when ``xml`` is the part without its sheetData, as ``fast_cells`` leaves it), filling ``view``."""
    from openpyxl.utils.cell import range_boundaries
    from openpyxl.utils.datetime import from_excel, from_ISO8601
    from openpyxl.utils.units import DEFAULT_COLUMN_WIDTH
    from openpyxl.worksheet.dimensions import SheetFormatProperties
    from openpyxl.worksheet.header_footer import HeaderFooter
    from openpyxl.worksheet.page import PageMargins, PrintPageSetup

    tags = [f"{{{NS}}}{t}" for t in ("row", "col", "mergeCell", "pageMargins", "pageSetup", "headerFooter",
                                     "sheetFormatPr", "pageSetUpPr", "rowBreaks", "colBreaks", "hyperlink",
                                     "drawing")]
    cells: list[SheetCell] = []
    merges: list[Merge] = []
    append = cells.append
    letters: dict[str, int] = {}
    codes, dates, durations, wrap = styles.codes, styles.dates, styles.durations, styles.wrap
    nstyles = len(codes)
    row_no = 0
    max_col = 0
    raw: dict[str, tuple] = {}  # reference -> (type, value, formula text): what formulas without a value read
    pending: list[Pending] = []
    row_breaks: list[int] = []
    col_breaks: list[int] = []
    for el in elements(pkg, part, tags, xml):
        tag = el.tag
        if tag == ROW:
            r = el.get("r")
            row_no = (int(r) if r.isdigit() else int(float(r))) if r else row_no + 1
            attrs = el.attrib
            if len(attrs) > (("r" in attrs) + ("spans" in attrs)):
                hidden = attrs.get("hidden") in TRUE
                view.row_dimensions[row_no] = Dim(hidden=hidden, ht=float_or(attrs.get("ht")),
                                                   custom=attrs.get("customHeight") in TRUE)
            col = 0
            r0 = row_no - 1
            for c in el:
                if c.tag != _C:
                    continue
                ref = c.get("r")
                if ref:
                    col = col_index(ref.rstrip(_DIGITS), letters)
                else:
                    col += 1
                if col > max_col:
                    max_col = col
                t = c.get("t") or "n"
                s = c.get("s")
                sid = int(s) if s else 0
                v = None
                f_el = None
                inline = None
                for ch in c:
                    ct = ch.tag
                    if ct == _V:
                        v = ch.text
                    elif ct == _F:
                        f_el = ch
                    elif ct == _IS:
                        inline = ch
                key = (ref if ref else _col_letters(col) + str(row_no)).replace("$", "")
                if t == "inlineStr":
                    if inline is None:
                        continue
                    text = text_of(inline)
                    raw[key] = (t, text, None)
                    if text:
                        append(SheetCell(r0, col - 1, text, "string", sid in wrap))
                    continue
                if not v:
                    if f_el is not None and t != "str":  # (a cached ="" result is an empty str)
                        if f_el.get("t") == "shared" or not f_el.text:
                            raise NeedsOpenpyxl("shared formula without a cached value")
                        raw[key] = (t, None, f_el.text)
                        pending.append(Pending(key.rstrip(_DIGITS), key[len(key.rstrip(_DIGITS)):], sid, f_el.text))
                    elif f_el is not None:
                        raw[key] = ("str", "", None)
                    continue
                raw[key] = (t, v, None)
                if t == "n":
                    num = float(v) if ("." in v or "E" in v or "e" in v) else int(v)
                    code = codes[sid] if sid < nstyles else "General"
                    if sid in dates:
                        try:
                            value = from_excel(num, epoch, timedelta=sid in durations)
                        except (OverflowError, ValueError):
                            append(SheetCell(r0, col - 1, "#VALUE!", "error"))
                            continue
                        if sid in durations:  # a timedelta: openpyxl's reader does not call it a date
                            append(SheetCell(r0, col - 1, format_value(value, code, is_date=False), "number"))
                        else:
                            append(SheetCell(r0, col - 1, format_value(value, code, is_date=True), "date"))
                    else:
                        append(SheetCell(r0, col - 1, format_value(num, code, is_date=False), "number"))
                elif t == "s":
                    text = strings[int(v)]
                    if text:
                        append(SheetCell(r0, col - 1, text, "string", sid in wrap))
                elif t == "str":
                    append(SheetCell(r0, col - 1, v, "string", sid in wrap))
                elif t == "b":
                    append(SheetCell(r0, col - 1, "TRUE" if int(v) else "FALSE", "bool"))
                elif t == "e":
                    append(SheetCell(r0, col - 1, v, "error", sid in wrap))
                elif t == "d":
                    value = from_ISO8601(v)
                    append(SheetCell(r0, col - 1, format_value(value, codes[sid] if sid < nstyles else "General",
                                                              is_date=True), "date"))
            el.clear()
        elif tag.endswith("}col"):
            try:
                lo = int(el.get("min"))
                hi = int(el.get("max") or lo)
            except (TypeError, ValueError):
                continue
            width = float_or(el.get("width"))
            view.column_dimensions[lo] = Dim(min=lo, max=hi, width=DEFAULT_COLUMN_WIDTH if width is None else width,
                                              hidden=el.get("hidden") in TRUE)
        elif tag.endswith("}mergeCell"):
            ref = el.get("ref") or ""
            try:
                c1, r1, c2, r2 = range_boundaries(ref)
            except (TypeError, ValueError):
                continue
            merges.append(Merge(r1 - 1, c1 - 1, r2 - 1, c2 - 1))
            max_col = max(max_col, c2)
        elif tag.endswith("}hyperlink"):
            ref = el.get("ref") or ""
            try:
                max_col = max(max_col, range_boundaries(ref)[2])
            except (TypeError, ValueError):
                pass
        elif tag.endswith("Breaks"):
            for brk in el:
                try:
                    (row_breaks if tag.endswith("}rowBreaks") else col_breaks).append(int(brk.get("id") or 0))
                except ValueError:
                    continue
        elif tag.endswith("}pageMargins"):
            view.page_margins = PageMargins.from_tree(el)
        elif tag.endswith("}pageSetup"):
            view.page_setup = PrintPageSetup.from_tree(el)
        elif tag.endswith("}headerFooter"):
            view.HeaderFooter = HeaderFooter.from_tree(el)
        elif tag.endswith("}sheetFormatPr"):
            view.sheet_format = SheetFormatProperties.from_tree(el)
        elif tag.endswith("}pageSetUpPr"):
            view.sheet_properties = FitToPage(FitToPage(el.get("fitToPage") in TRUE))
        elif tag.endswith("}drawing"):
            view.drawing = el.get(f"{{{R_NS}}}id")
    view.max_column = max(1, max_col)
    view.row_breaks, view.col_breaks = Breaks(row_breaks), Breaks(col_breaks)
    return cells, merges, SheetValues(lambda: raw, strings, False, pending, None,
                                      lambda: {k: float(v) for k, (t, v, _) in raw.items() if v and t == "n"}), pending


def _col_letters(n: int) -> str:
    s = ""
    while n:
        n, r = divmod(n - 1, 26)
        s = chr(65 + r) + s
    return s
