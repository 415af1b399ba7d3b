"""Page count: stored where the file has a trustworthy one, exact for PDF, else estimated.

Why an estimate at all: the queue and the LLM budget want a size in pages, and LibreOffice-written
.doc/.xls carry no page count. The estimate models what LibreOffice's pagination would give:

* word processing: a page holds about ``CJK_PER_PAGE`` CJK characters or ``LATIN_PER_PAGE`` other
  non-blank characters; every table row and every paragraph costs some vertical space on top.
* sheets: each sheet prints in blocks of ``ROWS_PER_PAGE`` rows × a page width of characters, with
  column widths approximated from the longest text in each column.

The constants were fitted on the corpus as a whole (see bench/bench_extract.py), not per file.
"""

from __future__ import annotations

import math

from .blocks import Block, Meta, Para, Sheet, TableBlock
from .markdown import sheet_grid, table_grid

CJK_PER_PAGE = 900.0
LATIN_PER_PAGE = 1500.0
PARA_COST = 18.0  # characters' worth of space a paragraph break costs (line ends, spacing)
ROW_COST = 40.0  # a table row: borders and padding
ROWS_PER_PAGE = 20
PAGE_WIDTH_CHARS = 80


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


def _sheet_pages(sheet: Sheet) -> int:
    if sheet.hidden:
        return 0
    grid = sheet_grid(sheet)
    if not grid:
        return 0
    ncols = max(len(r) for r in grid)
    widths = [0.0] * ncols
    for row in grid:
        for c, v in enumerate(row):
            w = sum(2 if _is_wide(ch) else 1 for ch in v[:60])
            widths[c] = max(widths[c], min(w, 50))
    total_w = sum(max(w, 4) + 1 for w in widths)
    across = max(1, math.ceil(total_w / PAGE_WIDTH_CHARS))
    # long texts wrap in their cells: rows taller than one line
    lines = sum(max(1, max((len(v) // 60 + 1 for v in row), default=1)) for row in grid)
    down = max(1, math.ceil(lines / ROWS_PER_PAGE))
    return across * down


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
    return max(1, round(units + 0.3)), "estimated"
