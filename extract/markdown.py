"""Blocks → Markdown for a language model.

Merged cells — the one rule: **a merged value is written once in every row the merge covers, in the
merge's first column; the other columns it covers in that row hold ``←``** ("same as the cell to the
left"). So a vertically merged category (``商务部分`` over three rows) is repeated on each row and every
row stays self-contained for an LLM reading row by row, while a title merged across 30 columns is not
written 30 times. No value can vanish: the text is always in the merge's first column.

Word table grids are rebuilt, not trusted from cell counts: when cells carry ``left``/``width``
(POI/HWPF) the column boundaries are the union of all cell edges, so a LibreOffice horizontal merge
that POI reports as one wide cell still covers the right columns; ``vmerge="cont"`` cells take the
value of the cell above. Readers that know spans (docx gridSpan, HTML colspan/rowspan) give
``colspan``/``rowspan`` and are placed HTML-style around cells occupied from rows above.

Nested tables are rendered right after the row that contains them, introduced by a line
``> nested table in row R, column C:`` so the model can tie them back. GFM has no nested tables.

Cells: ``|`` is escaped as ``\\|``, line breaks become ``<br>``. Sheets are one ``## <name>`` section
each (``(hidden sheet)`` flagged) with a column-letter header row so cell addresses stay visible.
Page headers/footers, footnotes, endnotes, comments and text boxes go into their own sections after
the body, headed ``## [Page headers]`` etc., so they are never mistaken for body text.
"""

from __future__ import annotations

import bisect
import itertools
import re
from typing import Iterable

import msgspec

from tender_pool.extract.blocks import Block, Cell, End, Failure, Image, Meta, Para, Sheet, Table, TableBlock
from tender_pool.extract.errors import ExtractError

COVERED = "←"  # a column covered by a horizontal merge
EDGE_TOLERANCE = 30  # twips; Word rounds cell edges differently per row


class Rendered(msgspec.Struct):
    markdown: str
    tables: int
    images: int
    sheets: int
    warnings: list[str]
    meta: Meta | None


_STORY_TITLES = {
    "header": "Page headers",
    "footer": "Page footers",
    "footnote": "Footnotes",
    "endnote": "Endnotes",
    "comment": "Comments",
    "textbox": "Text boxes",
}


_CELL_SPECIAL = re.compile(r"[\\|\r\n\x0b]")


def escape_cell(text: str) -> str:
    if not _CELL_SPECIAL.search(text):  # the common cell: nothing to escape or break
        return text.strip()
    text = text.replace("\\", "\\\\").replace("|", "\\|")
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x0b", "\n")
    parts = [p.strip() for p in text.split("\n")]
    return "<br>".join(p for p in parts if p)


def _clean(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\x0b", "\n").strip()


# ---------------------------------------------------------------- table grids


def table_grid(table: Table) -> tuple[list[list[str]], list[tuple[int, int, Table]]]:
    """Resolve spans into a rectangular grid of texts (merged values repeated).

    Returns the grid and the nested tables as (row, col, table), 0-based.
    """
    rows = table.rows
    if not rows:
        return [], []
    if all(c.left is not None and c.width is not None and c.width > 0 for r in rows for c in r) \
            and any(r for r in rows):
        return _grid_from_edges(rows)
    return _grid_from_spans(rows)


def _cluster_edges(values: Iterable[int]) -> list[int]:
    out: list[int] = []
    for v in sorted(set(values)):
        if not out or v - out[-1] > EDGE_TOLERANCE:
            out.append(v)
    return out


def _nearest(edges: list[int], v: int) -> int:
    """Index of the edge nearest to v (the lower one on a tie); ``edges`` ascending, as _cluster_edges gives."""
    i = bisect.bisect_left(edges, v)
    if i == 0:
        return 0
    if i == len(edges):
        return i - 1
    return i - 1 if v - edges[i - 1] <= edges[i] - v else i


def _grid_from_edges(rows: list[list[Cell]]):
    edges = _cluster_edges(
        [c.left for r in rows for c in r] + [c.left + c.width for r in rows for c in r]  # type: ignore[operator]
    )
    ncols = max(1, len(edges) - 1)
    grid: list[list[str | None]] = [[None] * ncols for _ in rows]
    origin_text: list[list[str | None]] = [[None] * ncols for _ in rows]
    nested: list[tuple[int, int, Table]] = []
    for ri, row in enumerate(rows):
        for cell in row:
            a = min(_nearest(edges, cell.left), ncols - 1)  # type: ignore[arg-type]
            b = max(a + 1, min(_nearest(edges, cell.left + cell.width), ncols))  # type: ignore[operator]
            text = _clean(cell.text)
            if cell.vmerge == "cont" and ri > 0:
                above = origin_text[ri - 1][a]
                if above is not None and (not text or text == above):
                    text = above
            for ci in range(a, b):
                grid[ri][ci] = text if ci == a else COVERED
                origin_text[ri][ci] = text
            if cell.table is not None:
                nested.append((ri, a, cell.table))
    return [[t or "" for t in r] for r in grid], nested


def _grid_from_spans(rows: list[list[Cell]]):
    occupied: dict[tuple[int, int], str] = {}
    out: list[list[str]] = []
    nested: list[tuple[int, int, Table]] = []
    for ri, row in enumerate(rows):
        line: dict[int, str] = {}
        col = 0
        for cell in row:
            while (ri, col) in occupied:
                line[col] = occupied[(ri, col)]
                col += 1
            text = _clean(cell.text)
            span = max(1, cell.colspan)
            if cell.vmerge == "cont" and ri > 0 and col < len(out[ri - 1]):
                above = out[ri - 1][col]
                if not text or text == above:
                    text = above
            for k in range(span):
                line[col + k] = text if k == 0 else COVERED
                for rr in range(1, max(1, cell.rowspan)):
                    occupied[(ri + rr, col + k)] = text if k == 0 else COVERED
            if cell.table is not None:
                nested.append((ri, col, cell.table))
            col += span
        # cells still occupied by rowspans at the end of this row
        while (ri, col) in occupied:
            line[col] = occupied[(ri, col)]
            col += 1
        for (r, c), t in occupied.items():
            if r == ri and c not in line:
                line[c] = t
        width = max(line) + 1 if line else 0
        out.append([line.get(c, "") for c in range(width)])
    ncols = max((len(r) for r in out), default=0)
    return [r + [""] * (ncols - len(r)) for r in out], nested


def render_grid(grid: list[list[str]], header: list[str] | None = None) -> list[str]:
    if not grid:
        return []
    ncols = max(len(r) for r in grid)
    if ncols == 0:
        return []
    rows = [[escape_cell(t) for t in r] + [""] * (ncols - len(r)) for r in grid]
    if header is None:
        head, body = rows[0], rows[1:]
    else:
        head, body = [escape_cell(h) for h in header], rows
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * ncols]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return lines


def render_table(table: Table, depth: int = 0) -> list[str]:
    grid, nested = table_grid(table)
    if not any(any(t for t in r) for r in grid) and not nested:
        return []
    by_row: dict[int, list[tuple[int, Table]]] = {}
    for r, c, t in nested:
        by_row.setdefault(r, []).append((c, t))
    if not by_row:
        return render_grid(grid)
    # Split the table after each row that holds a nested table; the continuation keeps the header.
    lines: list[str] = []
    start = 0
    header = grid[0]
    for r in sorted(by_row):
        chunk = grid[start: r + 1]
        if start == 0:
            lines += render_grid(chunk)
        elif chunk:
            lines += render_grid(chunk, header)
        for c, t in by_row[r]:
            lines.append("")
            lines.append(f"> nested table in row {r + 1}, column {c + 1}:")
            lines.append("")
            lines += render_table(t, depth + 1)
            lines.append("")
        start = r + 1
    if start < len(grid):
        lines.append("> (table continues)")
        lines.append("")
        lines += render_grid(grid[start:], header)
    return lines


# ---------------------------------------------------------------- sheets


def col_letter(c: int) -> str:
    s = ""
    c += 1
    while c:
        c, rem = divmod(c - 1, 26)
        s = chr(65 + rem) + s
    return s


def _sheet_rows(sheet: Sheet) -> tuple[dict[int, dict[int, str]], int]:
    """Stripped non-empty values by row and column, merged values repeated; and the column count.

    Stripping here is what ``escape_cell`` would do to the value anyway (it strips each line), so rows
    without a special character can be joined as they are: one pass per cell instead of a call per cell
    (a 100k-cell sheet: ~0.35 s -> ~0.06 s)."""
    rows: dict[int, dict[int, str]] = {}
    for cell in sheet.cells:
        v = cell.v
        if v:
            try:
                rows[cell.r][cell.c] = v.strip()
            except KeyError:
                rows[cell.r] = {cell.c: v.strip()}
    for m in sheet.merges:
        first = rows.get(m.r1)
        v = first.get(m.c1) if first is not None else None
        if v is None:
            continue
        # guard against absurd merges (whole columns) blowing up the output
        if (m.r2 - m.r1 + 1) * (m.c2 - m.c1 + 1) > 10000:
            continue
        for r in range(m.r1, m.r2 + 1):
            d = rows.setdefault(r, {})
            for c in range(m.c1, m.c2 + 1):
                d.setdefault(c, v if c == m.c1 else COVERED)
    ncols = max(map(max, rows.values()), default=-1) + 1
    return rows, ncols


def sheet_grid(sheet: Sheet) -> list[list[str]]:
    """Non-empty rows of a sheet, trailing empty columns trimmed, merged values repeated."""
    rows, ncols = _sheet_rows(sheet)
    return [[d.get(c, "") for c in range(ncols)] for d in (rows[r] for r in sorted(rows))]


def render_sheet(sheet: Sheet) -> list[str]:
    title = f"## {sheet.name}" + (" (hidden sheet)" if sheet.hidden else "")
    lines = [title, ""]
    rows, ncols = _sheet_rows(sheet)
    if rows:
        lines.append("| " + " | ".join(col_letter(c) for c in range(ncols)) + " |")
        lines.append("|" + "---|" * ncols)
        cols = range(ncols)
        blank = itertools.repeat("")
        table = [list(map(rows[r].get, cols, blank)) for r in sorted(rows)]
        if _CELL_SPECIAL.search("".join(map("".join, table))):  # a pipe, backslash or line break: escape those rows
            special = _CELL_SPECIAL.search
            table = [[escape_cell(v) for v in vals] if special("".join(vals)) else vals for vals in table]
        lines += ["| " + " | ".join(vals) + " |" for vals in table]
    else:
        lines.append("*(empty sheet)*")
    if sheet.header.strip():
        lines += ["", f"*Sheet header:* {_clean(sheet.header)}"]
    if sheet.footer.strip():
        lines += ["", f"*Sheet footer:* {_clean(sheet.footer)}"]
    return lines


# ---------------------------------------------------------------- documents


def render_para(p: Para) -> str:
    text = _clean(p.text)
    if not text:
        return ""
    text = text.replace("\n", "  \n")
    if p.heading:
        return "#" * min(6, max(1, p.heading)) + " " + text.replace("  \n", " ")
    if p.list_marker:
        return "  " * max(0, p.list_level) + (p.list_marker if p.list_marker in "-*+•·▪◦" else p.list_marker) \
            + " " + text
    return text


def render(blocks: list[Block]) -> Rendered:
    body: list[str] = []
    stories: dict[str, list[str]] = {}
    seen_story: dict[str, set[str]] = {}
    tables = images = sheets = 0
    warnings: list[str] = []
    meta: Meta | None = None

    def emit(story: str, chunk: list[str]) -> None:
        if not chunk:
            return
        if story == "body":
            body.extend(chunk)
            body.append("")
            return
        key = "\n".join(chunk)
        seen = seen_story.setdefault(story, set())
        if key in seen:  # the same header text repeated per section
            return
        seen.add(key)
        stories.setdefault(story, []).extend(chunk + [""])

    for b in blocks:
        if isinstance(b, Para):
            line = render_para(b)
            if line:
                emit(b.story, [line])
        elif isinstance(b, TableBlock):
            lines = render_table(b.table)
            if lines:
                tables += 1
                emit(b.story, lines)
        elif isinstance(b, Sheet):
            sheets += 1
            emit("body", render_sheet(b))
        elif isinstance(b, Image):
            images += 1
            desc = b.type or "image"
            if b.width and b.height:
                desc += f" {b.width}×{b.height}"
            if b.sheet is not None:
                where = f" on sheet {b.sheet}"
                if b.row is not None and b.col is not None:
                    where += f" at {col_letter(b.col)}{b.row + 1}"
                desc += where
            emit(b.story, [f"*[image: {desc}]*"])
        elif isinstance(b, Meta):
            meta = b if meta is None else meta
            warnings.extend(b.warnings)
        elif isinstance(b, Failure):
            raise ExtractError(b.kind, b.message)
        elif isinstance(b, End):
            continue
    out = list(body)
    # Word's own story order (main, footnotes, headers/footers, comments, endnotes, text boxes).
    for story in ("footnote", "header", "footer", "comment", "endnote", "textbox"):
        if stories.get(story):
            out += [f"## [{_STORY_TITLES[story]}]", ""] + stories[story]
    while out and not out[-1]:
        out.pop()
    md = "\n".join(out) + ("\n" if out else "")
    return Rendered(md, tables, images, sheets, warnings, meta)
