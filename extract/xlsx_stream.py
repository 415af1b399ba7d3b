"""The fast .xlsx path: a workbook's sheets read part by part, then their blocks.

Owns the order of the work: the workbook-level parts (``xlsx_parts``: sheets, epoch, print names, styles), the
shared strings (``xlsx_strings``), each worksheet's cells by regular expressions over its bytes where its shape
allows (``xlsx_cells``) and element by element otherwise and for everything around the cells
(``xlsx_elements``), filling a ``xlsx_view.SheetView`` that ``xlsx_setup.page_setup`` decodes as it decodes an
openpyxl Worksheet, then the pictures (``xlsx_drawings``).

Formula cells without a cached value (generators such as openpyxl store none) are collected while the sheets
are read and computed once every sheet's values are in (``xlsx_formulas``, ``formula``), so such a workbook
stays on this path. ``NeedsOpenpyxl`` is raised for what this path does not model (a shared formula without a
cached value); the caller then takes the openpyxl path.
"""

from __future__ import annotations

from tender_pool.extract.blocks import Block, Meta, Sheet
from tender_pool.extract.ooxml import Package
from tender_pool.extract.xlsx_cells import cells_of
from tender_pool.extract.xlsx_cells import fast_cells as _fast_cells  # looked up here: the bench and a test swap it
from tender_pool.extract.xlsx_drawings import images, sheet_pictures
from tender_pool.extract.xlsx_elements import sheet_elements
from tender_pool.extract.xlsx_formulas import evaluate_workbook, formula_warnings
from tender_pool.extract.xlsx_parts import WHOLE_PART, NeedsOpenpyxl, Styles, workbook
from tender_pool.extract.xlsx_setup import hf_text, page_setup
from tender_pool.extract.xlsx_strings import fast_strings as _fast_strings
from tender_pool.extract.xlsx_strings import shared_strings, unescape_all
from tender_pool.extract.xlsx_view import SheetView, print_names

# the stream's surface: its reader, the picture reader of the openpyxl path, the exception that sends a workbook
# there, and the pieces the tests check on their own
__all__ = ["NeedsOpenpyxl", "read_stream", "sheet_pictures", "unescape_all", "_fast_strings", "_fast_cells"]


def read_stream(path: str) -> list[Block]:
    """Blocks of an .xlsx by streaming; raises NeedsOpenpyxl, or what the XML and zip layers raise."""
    pkg = Package(path)
    try:
        sheets, epoch, names, strings_part, styles_part = workbook(pkg)
        strings = shared_strings(pkg, strings_part)
        styles = Styles(pkg.xml(styles_part) if styles_part else None)
        read = []
        for pos, (title, state, part) in enumerate(sheets):
            if part is None or part not in pkg.names:
                continue
            view = SheetView(title)
            view.default_font = styles.font
            cells, merges, values, pending = _sheet(pkg, part, view, strings, styles, epoch)
            print_names(view, names.get(pos, {}))
            read.append((title, state, part, view, cells, merges, values, pending))
        warnings: list[str] = []
        if any(x[7] for x in read):  # formulas without cached values: computed once every sheet's values are in
            more, computed, shown = evaluate_workbook([(x[0], x[6], x[7]) for x in read], styles, epoch, cells_of)
            for x in read:
                x[4].extend(more.get(x[0], ()))
            warnings += formula_warnings(computed, shown)
        blocks: list[Block] = [Meta(format="xlsx", engine="xlsx-stream", warnings=warnings)]
        for title, state, part, view, cells, merges, _, _ in read:
            hf = view.HeaderFooter
            blocks.append(Sheet(name=title, cells=cells, merges=merges, hidden=state != "visible",
                                header=hf_text(hf.oddHeader) if hf.oddHeader else "",
                                footer=hf_text(hf.oddFooter) if hf.oddFooter else "",
                                setup=page_setup(view)))
            blocks += images(pkg, part, view.drawing, title)
        return blocks
    finally:
        pkg.close()


def _sheet(pkg: Package, part: str, view: SheetView, strings: list[str], styles: Styles, epoch):
    """(cells, merges, values, pending) of one worksheet: sheetData by ``fast_cells`` where it can, else element
    by element; ``values`` and ``pending`` (formula cells without a cached value) are for ``xlsx_formulas``."""
    if pkg.zf.getinfo(part).file_size <= WHOLE_PART:
        data = pkg.read(part)
        fast = _fast_cells(data, view, strings, styles, epoch)
        if fast is not None:
            cells, max_col, rest, values, pending = fast
            _, merges, _, _ = sheet_elements(pkg, part, view, strings, styles, epoch, rest)
            view.max_column = max(view.max_column, max_col)
            return cells, merges, values, pending
    return sheet_elements(pkg, part, view, strings, styles, epoch)
