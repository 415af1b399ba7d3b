"""Page count: stored where the file has a trustworthy one, exact for PDF, else estimated.

Why an estimate at all: the queue and the LLM budget want a size in pages, and LibreOffice-written
.doc/.xls carry no page count. The estimate models what LibreOffice's pagination would give:

* word processing: a page holds about ``CJK_PER_PAGE`` CJK characters or ``LATIN_PER_PAGE`` other
  non-blank characters; every table row and every paragraph costs some vertical space on top.
  Hard page breaks and new-page section breaks (``Meta.page_breaks``) add ``BREAK_COST`` each.
* sheets: LibreOffice's own pagination modelled from the sheet's page setup (``Sheet.setup``): paper,
  orientation, margins, scale / fit-to-pages, print areas, manual breaks, column widths and row heights,
  rows grown by wrapped text; empty pages are skipped, as LibreOffice does (see ``_sheet_pages``).

The constants were fitted on the corpus as a whole (see bench/bench_extract.py), not per file.
"""

from __future__ import annotations

import math

from .blocks import Block, Meta, PageSetup, Para, Sheet, TableBlock
from .markdown import table_grid

CJK_PER_PAGE = 900.0
LATIN_PER_PAGE = 1500.0
PARA_COST = 18.0  # characters' worth of space a paragraph break costs (line ends, spacing)
ROW_COST = 40.0  # a table row: borders and padding
DENSITY = 0.9  # scales the text/row units above (fitted with BREAK_COST and ROUNDING on the whole corpus)
BREAK_COST = 0.7  # pages a hard page break or new-page section break adds on average (its page's unused rest)
ROUNDING = 0.5


def _is_wide(ch: str) -> bool:
    o = ord(ch)
    return 0x2E80 <= o <= 0x9FFF or 0xAC00 <= o <= 0xD7AF or 0xF900 <= o <= 0xFAFF or 0xFF00 <= o <= 0xFFEF


def _text_units(text: str) -> float:
    wide = other = 0
    for ch in text:
        if ch.isspace():
            continue
        if _is_wide(ch):
            wide += 1
        else:
            other += 1
    return wide / CJK_PER_PAGE + other / LATIN_PER_PAGE


# Paper sizes by Excel paper code, inches (width, height).
PAPER = {1: (8.5, 11.0), 2: (8.5, 11.0), 3: (11.0, 17.0), 4: (17.0, 11.0), 5: (8.5, 14.0), 6: (5.5, 8.5),
         7: (7.25, 10.5), 8: (11.69, 16.54), 9: (8.27, 11.69), 10: (8.27, 11.69), 11: (5.83, 8.27),
         12: (10.12, 14.33), 13: (7.17, 10.12), 66: (16.54, 23.39), 70: (4.13, 5.83)}
DEFAULT_PAPER = (8.27, 11.69)  # A4 where the file stores none (fitted: A4 and Letter score alike)
DEFAULT_MARGINS = [0.75, 0.75, 1.0, 1.0]
CHAR_PT = 5.25 * 1.2  # points per character of column width (7 px digit at 96 dpi, ×1.2 fitted)
TEXT_PT = 5.25 * 1.2  # points per character of cell text, for text running over into empty cells
CJK_TEXT = 1.6  # a CJK character's width in Latin characters (wrap and overflow)


def _sheet_pages(sheet: Sheet) -> int:
    """Printed pages of one sheet, the way LibreOffice paginates it.

    The sheet's own page setup counts: paper, orientation and scale (these two ignored when the file marks
    its settings unset),
    margins, scale or fit-to-pages (never enlarging), print areas, repeated rows and manual breaks.
    Columns and rows fill pages greedily; rows with wrapped text and no hand-set height grow to fit it;
    unwrapped text runs on over empty cells to its right (LibreOffice extends the print range for it);
    pages without any cell are not printed (LibreOffice's default).
    """
    if sheet.hidden or not sheet.cells:
        return 0
    s = sheet.setup or PageSetup()
    cells = sheet.cells
    # the paper code is used even where the file marks its settings unset (fitted); orientation and scale are not
    pw, ph = PAPER.get(s.paper) or DEFAULT_PAPER
    if s.valid and s.landscape:
        pw, ph = ph, pw
    m = s.margins if len(s.margins) == 4 else DEFAULT_MARGINS
    page_w = max(72.0, (pw - m[0] - m[1]) * 72)
    page_h = max(72.0, (ph - m[2] - m[3]) * 72)
    dw = s.default_width or 8
    default_col = (dw * 7 + 5) / 7 * CHAR_PT
    line = s.default_height or 12.75
    widths = [w * CHAR_PT for w in s.widths]
    manual: dict[int, float] = {}
    heights: dict[int, float] = {}
    for e in s.heights:
        (manual if len(e) == 2 else heights)[int(e[0])] = float(e[1])
    need: dict[int, int] = {}
    for c in cells:
        if c.wrap and c.r not in manual:
            chars = s.widths[c.c] if c.c < len(s.widths) else dw + 0.7
            if chars <= 0:
                continue
            n = sum(max(1, math.ceil(_width(piece) / max(1.0, chars - 0.7))) for piece in c.v.split("\n"))
            need[c.r] = max(need.get(c.r, 0), n)
    for r, n in need.items():
        if n > 1:
            heights[r] = max(heights.get(r, line), n * line)
    heights.update(manual)
    used: dict[int, set[int]] = {}
    for c in cells:
        used.setdefault(c.r, set()).add(c.c)
    areas = s.areas or [[0, 0, max(c.r for c in cells), max(c.c for c in cells)]]
    total = 0
    for r1, c1, r2, c2 in areas:
        inside = [c for c in cells if r1 <= c.r <= r2 and c1 <= c.c <= c2]
        if not inside:
            continue
        if not s.areas:
            r2, c2 = max(c.r for c in inside), max(c.c for c in inside)
        colw = [widths[c] if c < len(widths) else default_col for c in range(c1, c2 + 1)]
        rowh = [heights.get(r, line) for r in range(r1, r2 + 1)]
        if s.fit:
            z = 1.0
            if s.fit_width > 0:
                z = min(z, page_w * s.fit_width / max(1.0, sum(colw)))
            if s.fit_height > 0:
                z = min(z, page_h * s.fit_height / max(1.0, sum(rowh)))
            z = max(z, 0.1)
        else:
            z = max(10, min(400, s.scale or 100)) / 100.0 if s.valid else 1.0
        # unwrapped text: which columns right of its cell it runs over (may extend past the area's end)
        runs: list[tuple[int, int, int]] = []
        for c in inside:
            if c.wrap or c.type != "string":
                continue
            over = _width(max(c.v.split("\n"), key=len)) * TEXT_PT - colw[c.c - c1]
            k = c.c + 1
            while over > 0 and k not in used[c.r] and k < c1 + 256:
                if k - c1 >= len(colw):
                    colw.append(widths[k] if k < len(widths) else default_col)
                over -= colw[k - c1]
                k += 1
            if k > c.c + 1:
                runs.append((c.r, c.c + 1, k - 1))
        rep = sum(rowh[: s.repeat_rows]) if s.repeat_rows else 0.0
        # fit-to-pages wins over manual breaks, as in Excel (fitted: LibreOffice's count agrees better so)
        row_breaks = set() if s.fit else {b - r1 for b in s.row_breaks}
        col_breaks = set() if s.fit else {b - c1 for b in s.col_breaks}
        pr = _paginate(rowh, page_h, z, row_breaks, rep)
        pc = _paginate(colw, page_w, z, col_breaks, 0.0)
        pages = {(pr[c.r - r1], pc[c.c - c1]) for c in inside}
        for r, a, b in runs:
            pages.update((pr[r - r1], pc[k - c1]) for k in range(a, b + 1))
        total += len(pages)
    return total


def _width(text: str) -> float:
    return sum(CJK_TEXT if _is_wide(ch) else 1.0 for ch in text)


def _paginate(sizes: list[float], limit: float, zoom: float, breaks: set[int], repeat: float) -> list[int]:
    """Page index of each row (or column): fill greedily; a manual break starts a new page."""
    out: list[int] = []
    page, acc = 0, 0.0
    for i, size in enumerate(sizes):
        size *= zoom
        room = limit - (repeat * zoom if page > 0 else 0.0)
        if acc > 0 and (acc + size > room or i in breaks):
            page, acc = page + 1, 0.0
        acc += size
        out.append(page)
    return out


def estimate(blocks: list[Block]) -> tuple[int, str]:
    """(pages, pages_source)"""
    meta = next((b for b in blocks if isinstance(b, Meta)), None)
    if meta is not None and meta.pages:
        return meta.pages, ("exact" if meta.format == "pdf" else "stored")
    sheets = [b for b in blocks if isinstance(b, Sheet)]
    if sheets:
        return max(1, sum(_sheet_pages(s) for s in sheets)), "estimated"
    units = 0.0
    for b in blocks:
        if isinstance(b, Para) and b.story == "body":
            units += _text_units(b.text) + PARA_COST / LATIN_PER_PAGE
        elif isinstance(b, TableBlock) and b.story == "body":
            grid, nested = table_grid(b.table)
            for row in grid:
                seen = set()
                for v in row:
                    if v not in seen:
                        seen.add(v)
                        units += _text_units(v)
                units += ROW_COST / LATIN_PER_PAGE
            for _, _, t in nested:
                units += len(t.rows) * ROW_COST / LATIN_PER_PAGE
    breaks = (meta.page_breaks or 0) if meta is not None else 0
    return max(1, round(units * DENSITY + BREAK_COST * breaks + ROUNDING)), "estimated"
