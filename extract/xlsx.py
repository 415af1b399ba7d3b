"""Excel 2007+ (.xlsx/.xlsm) reader: cached values, merges, number formats as displayed, page setup.

Two paths, one output. ``read_xlsx`` reads each worksheet's cells by patterns over its XML (``xlsx_stream``)
and builds the blocks itself: a 12,000-row bill of quantities in ~0.2 s of CPU where openpyxl's full load
takes ~5 s (bench/bench_extract.py --large has every variant: openpyxl normal and read-only, lxml and expat
walks, python-calamine). Everything but the cells (page setup, margins, header/footer, print
titles and areas) is decoded by openpyxl's own small element classes, and cell semantics follow
openpyxl's ``data_only`` reader, so both paths give the same blocks (tests/extract/test_xlsx.py
compares them on the corpus).

Why ``data_only``: we want what Excel last displayed, not formulas. Files written by generators
(openpyxl itself, many web exports) store formulas *without* cached results; both paths compute them with
``formula.Evaluator`` (the stream in ``xlsx_formulas``) and show the formula text (``=VLOOKUP(…)``) for
what it does not evaluate, with a warning. Only a shared formula without a cached value still sends a
workbook to the openpyxl path, which translates shared formulas cell by cell.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
import warnings as pywarnings
import zipfile

from tender_pool.extract.blocks import Block, Merge, Meta, Sheet, SheetCell
from tender_pool.extract.errors import ExtractError, short
from tender_pool.extract.numfmt import format_value
from tender_pool.extract.ooxml import Package
from tender_pool.extract.formula import Unsupported
from tender_pool.extract.xlsx_formulas import formula_warnings
from tender_pool.extract.xlsx_setup import hf_text, page_setup
from tender_pool.extract.zipparts import read_member

_F_WITHOUT_V = re.compile(rb"<(?:\w+:)?f[ >/](?:(?!</(?:\w+:)?c>).)*?</(?:\w+:)?c>", re.S)


def _formula_cells_without_cache(path: str) -> bool:
    """True when some worksheet holds a formula cell with no cached <v> value."""
    try:
        with zipfile.ZipFile(path) as zf:
            for name in zf.namelist():
                if name.startswith("xl/worksheets/") and name.endswith(".xml"):
                    data = read_member(zf, name)
                    for m in _F_WITHOUT_V.finditer(data):
                        if not re.search(rb"<(?:\w+:)?v>[^<]", m.group(0)):
                            return True
    except (zipfile.BadZipFile, OSError):
        return False
    return False


def _openpyxl_cells(wb, wb_f):
    """The evaluator's ``cell(sheet, col, row)`` over openpyxl's two loads: the cached value, else the formula."""
    from openpyxl.utils.cell import column_index_from_string

    from tender_pool.extract.formula import Formula, Unsupported

    def cell(sheet: str, col: str, row: str):
        try:
            ws, ws_f = wb[sheet], wb_f[sheet]
        except KeyError:
            raise Unsupported(f"no sheet {sheet}") from None
        key = (int(row), column_index_from_string(col))
        c = ws._cells.get(key)  # never ws.cell(): it would create the cells a range reads
        v = c.value if c is not None else None
        if v is None:
            c = ws_f._cells.get(key)
            fv = c.value if c is not None else None
            if isinstance(fv, str) and fv.startswith("=") and c.data_type == "f":
                return Formula(fv[1:], row)
            return None
        if isinstance(v, bool) or isinstance(v, str):
            return v
        if isinstance(v, (int, float)):
            return float(v)
        raise Unsupported(f"a {type(v).__name__} value")

    return cell


def read_xlsx(path: str) -> list[Block]:
    """The streaming path (xlsx_stream), or openpyxl's where a workbook needs it."""
    import xml.etree.ElementTree as ET

    from lxml import etree

    from tender_pool.extract.xlsx_parts import NeedsOpenpyxl
    from tender_pool.extract.xlsx_stream import read_stream

    try:
        return read_stream(path)
    except (ExtractError, NeedsOpenpyxl):
        if isinstance(sys.exc_info()[1], ExtractError):
            raise
    except (KeyError, IndexError, ValueError, TypeError, AttributeError, etree.LxmlError, ET.ParseError,
            zipfile.BadZipFile, OSError, EOFError):
        pass  # damage the stream does not model: openpyxl decides between text and a typed error
    return read_xlsx_openpyxl(path)


def _computed_cell(c, value) -> SheetCell | None:
    """The cell of a computed value, as the cached value would have given it (an empty text gives none)."""
    from openpyxl.utils.datetime import from_excel
    from openpyxl.styles.numbers import is_date_format

    from tender_pool.extract.formula import XlError

    r0, c0 = c.row - 1, c.column - 1
    if isinstance(value, bool):
        return SheetCell(r0, c0, "TRUE" if value else "FALSE", "bool")
    if isinstance(value, str):
        wrap = bool(c.has_style and c.alignment is not None and c.alignment.wrap_text)
        return SheetCell(r0, c0, value, "string", wrap) if value else None
    if isinstance(value, XlError):
        wrap = bool(c.has_style and c.alignment is not None and c.alignment.wrap_text)
        return SheetCell(r0, c0, value.code, "error", wrap)
    value = float(f"{value:.15g}")  # what a cached value holds (xlsx_formulas writes the same digits)
    if is_date_format(c.number_format):
        try:
            return SheetCell(r0, c0, format_value(from_excel(value), c.number_format, is_date=True), "date")
        except (OverflowError, ValueError):
            return SheetCell(r0, c0, "#VALUE!", "error")
    return SheetCell(r0, c0, format_value(value, c.number_format, is_date=False), "number")


def read_xlsx_openpyxl(path: str) -> list[Block]:
    """The whole workbook through openpyxl: the path for formulas without cached values."""
    import openpyxl

    Package(path).close()  # size cap and zip sanity before openpyxl
    warns: list[str] = []
    try:
        with pywarnings.catch_warnings():
            pywarnings.simplefilter("ignore")
            wb = openpyxl.load_workbook(path, data_only=True, read_only=False)
            wb_f = None
            if _formula_cells_without_cache(path):
                wb_f = openpyxl.load_workbook(path, data_only=False, read_only=False)
    except ExtractError:
        raise
    except (KeyError, zipfile.BadZipFile, OSError, ValueError, TypeError, AttributeError, IndexError) as exc:
        msg = short(exc)
        if "encrypt" in msg.lower():
            raise ExtractError("encrypted", "password-protected workbook") from None
        raise ExtractError("corrupt", f"unreadable workbook ({msg})") from None
    except Exception as exc:  # lxml/openpyxl internals raise many types on damaged parts
        raise ExtractError("corrupt", f"unreadable workbook ({short(exc)})") from None
    blocks: list[Block] = [Meta(format="xlsx", engine="openpyxl")]
    from tender_pool.extract.xlsx_drawings import sheet_pictures

    try:
        pictures = sheet_pictures(path)  # openpyxl itself loads pictures only with Pillow installed
    except (KeyError, ValueError, zipfile.BadZipFile, OSError, SyntaxError):
        pictures = {}
    uncached = computed = 0
    evaluator = None
    if wb_f is not None:
        from tender_pool.extract.formula import Evaluator
        evaluator = Evaluator(_openpyxl_cells(wb, wb_f))
    for ws in wb.worksheets:
        cells: list[SheetCell] = []
        ws_f = wb_f[ws.title] if wb_f is not None else None
        for row in ws.iter_rows():
            for c in row:
                v = c.value
                if v is None:
                    if ws_f is not None:
                        fc = ws_f._cells.get((c.row, c.column))
                        fv = fc.value if fc is not None else None
                        if isinstance(fv, str) and fv.startswith("=") and fc.data_type == "f":
                            try:
                                value = evaluator.value(ws.title, c.column_letter, str(c.row))
                            except Unsupported:
                                cells.append(SheetCell(c.row - 1, c.column - 1, fv, "formula"))
                                uncached += 1
                                continue
                            computed += 1
                            cell = _computed_cell(c, value)
                            if cell is not None:
                                cells.append(cell)
                    continue
                if isinstance(v, str):
                    if v == "":
                        continue
                    typ = "error" if c.data_type == "e" else "string"
                    wrap = bool(c.has_style and c.alignment is not None and c.alignment.wrap_text)
                    cells.append(SheetCell(c.row - 1, c.column - 1, v, typ, wrap))  # type: ignore[arg-type]
                    continue
                if isinstance(v, bool):
                    cells.append(SheetCell(c.row - 1, c.column - 1, "TRUE" if v else "FALSE", "bool"))
                    continue
                is_date = isinstance(v, (dt.datetime, dt.date, dt.time))
                text = format_value(v, c.number_format, is_date=is_date)
                cells.append(SheetCell(c.row - 1, c.column - 1, text, "date" if is_date else "number"))
        merges = [Merge(r.min_row - 1, r.min_col - 1, r.max_row - 1, r.max_col - 1) for r in ws.merged_cells.ranges]
        header = hf_text(ws.oddHeader) if ws.oddHeader else ""
        footer = hf_text(ws.oddFooter) if ws.oddFooter else ""
        blocks.append(Sheet(name=ws.title, cells=cells, merges=merges, hidden=ws.sheet_state != "visible",
                            header=header, footer=footer, setup=page_setup(ws)))
        blocks += pictures.get(ws.title, [])
    warns += formula_warnings(computed, uncached)
    blocks[0] = Meta(format="xlsx", engine="openpyxl", warnings=warns)
    return blocks
