"""PDF reader (PDFium through pypdfium2): text per page in reading order, ruled tables rebuilt as
tables, the page count exact.

Why PDFium: it is the C library Chrome uses; on the tender PDFs it extracts text 5–25 × faster
than pypdf (pure Python) with the same characters (``bench/bench_pdf.py`` prints both, with the
recall of each against the corpus's references), and it hands over what a table needs: the page's
path objects (a table's rules are thin filled rectangles or lines) and the text inside any
rectangle (``get_text_bounded``).

Tables: pdfplumber's table finder does this from pdfminer's layout, at 0.4–14 s a document here
(its whole-page parse), 10–60 × our budget. So: the page's thin horizontal and vertical path
objects are the rules; rules that touch form one table; its column edges are the verticals' x, its
row edges the horizontals' y (clustered); two neighbouring grid cells are one merged cell where
the rule between them is missing. Each cell's text is PDFium's text inside the cell's rectangle,
its wrapped lines joined (without a space between two CJK characters: a wrap inside 数据库审计系统
is no word break). Text around the tables is read band by band from the top, so tables stay
where they stand on the page. Tables drawn without rules (text aligned by spaces) stay text.

Scanned PDFs yield (almost) no text: reported through a warning, not an error, since the page
count is still useful to the caller.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from tender_pool.extract.blocks import Block, Cell, Image, Meta, Para, Table, TableBlock
from tender_pool.extract.errors import ExtractError, short

RULE_MAX = 2.0  # a rule is at most this thick (pt)
RULE_MIN = 4.0  # and at least this long
SNAP = 2.0  # edges closer than this are one edge; a rule reaches an edge within it
MIN_CELL = 4.0  # a row or column band narrower than this is a double rule, not a band
_CJK = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f]")


class Rule(NamedTuple):
    at: float  # y of a horizontal rule, x of a vertical one
    lo: float  # its extent: x0 (horizontal) or y0 (vertical)
    hi: float


class Grid(NamedTuple):
    xs: list[float]  # column edges, left to right
    ys: list[float]  # row edges, top to bottom (PDF y grows upwards)
    hs: list[Rule]
    vs: list[Rule]

    @property
    def box(self) -> tuple[float, float, float, float]:  # left, bottom, right, top
        return self.xs[0], self.ys[-1], self.xs[-1], self.ys[0]


def read_pdf(path: str) -> list[Block]:
    import pypdfium2 as pdfium
    import pypdfium2.raw as raw

    try:
        doc = pdfium.PdfDocument(path)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise ExtractError("encrypted", "password-protected PDF") from None
        raise ExtractError("corrupt", f"unreadable PDF ({short(exc)})") from None
    try:
        n = len(doc)
        blocks: list[Block] = [Meta(format="pdf", engine="pdfium", pages=n)]
        chars = 0
        for i in range(n):
            try:
                page = doc[i]
                page_blocks, page_chars = _read_page(page, raw)
            except pdfium.PdfiumError as exc:  # one bad page must not lose the document
                blocks.append(Para(text=f"[page {i + 1}: text not extractable ({short(exc, 80)})]"))
                continue
            blocks += page_blocks
            chars += page_chars
            page.close()
    finally:
        doc.close()
    if n and chars < 20 * n:
        blocks[0] = Meta(format="pdf", engine="pdfium", pages=n,
                         warnings=["little or no text layer: the PDF is probably scanned (no OCR here)"])
    return blocks


def _read_page(page: Any, raw: Any) -> tuple[list[Block], int]:
    width, height = page.get_size()
    hs, vs, images = [], [], 0
    for obj in page.get_objects(max_depth=4):
        if obj.type == raw.FPDF_PAGEOBJ_IMAGE:
            images += 1
        elif obj.type == raw.FPDF_PAGEOBJ_PATH:
            left, bottom, right, top = obj.get_bounds()
            w, h = right - left, top - bottom
            if h <= RULE_MAX and w >= RULE_MIN:
                hs.append(Rule((top + bottom) / 2, left, right))
            elif w <= RULE_MAX and h >= RULE_MIN:
                vs.append(Rule((left + right) / 2, bottom, top))
    text = page.get_textpage()
    try:
        out: list[Block] = []
        chars = 0
        y = height  # what is above y has been read
        for grid in sorted(_grids(hs, vs), key=lambda g: -g.ys[0]):
            left, bottom, right, top = grid.box
            if top > y:  # overlaps the previous table's band (side by side): read it as text
                continue
            for band in ((0, top, width, y), (0, bottom, left, top), (right, bottom, width, top)):
                chars += _text(text, band, out)
            table = _table(grid, text)
            chars += sum(len(c.text) for row in table.rows for c in row)
            out.append(TableBlock(table=table))
            y = bottom
        chars += _text(text, (0, 0, width, y), out)
        out += [Image(type="") for _ in range(images)]
        return out, chars
    finally:
        text.close()


def _text(textpage: Any, box: tuple[float, float, float, float], out: list[Block]) -> int:
    left, bottom, right, top = box
    if right - left < 1 or top - bottom < 1:
        return 0
    body = textpage.get_text_bounded(left, bottom, right, top)
    n = 0
    for para in _paragraphs(body):
        out.append(Para(text=para))
        n += len(para)
    return n


# --- tables from rules -------------------------------------------------------------------------------

def _cluster(values: list[float]) -> list[float]:
    out: list[list[float]] = []
    for v in sorted(values):
        if out and v - out[-1][-1] <= SNAP:
            out[-1].append(v)
        else:
            out.append([v])
    return [sum(c) / len(c) for c in out]


def _touch(h: Rule, v: Rule) -> bool:
    return h.lo - SNAP <= v.at <= h.hi + SNAP and v.lo - SNAP <= h.at <= v.hi + SNAP


def _grids(hs: list[Rule], vs: list[Rule]) -> list[Grid]:
    """Rules that touch, transitively, are one table; a table needs two rows' and two columns' rules."""
    rules = [("h", r) for r in hs] + [("v", r) for r in vs]
    parent = list(range(len(rules)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    nh = len(hs)
    for i, h in enumerate(hs):
        for j, v in enumerate(vs):
            if _touch(h, v):
                parent[find(i)] = find(nh + j)
    groups: dict[int, list[int]] = {}
    for i in range(len(rules)):
        groups.setdefault(find(i), []).append(i)
    grids = []
    for members in groups.values():
        gh = [rules[i][1] for i in members if rules[i][0] == "h"]
        gv = [rules[i][1] for i in members if rules[i][0] == "v"]
        xs = _bands(_cluster([v.at for v in gv]))
        ys = _bands(_cluster([h.at for h in gh]))[::-1]
        if len(xs) >= 2 and len(ys) >= 2:
            grids.append(Grid(xs, ys, gh, gv))
    return grids


def _bands(edges: list[float]) -> list[float]:
    """Edges closer than MIN_CELL (a double rule) are one."""
    out: list[float] = []
    for e in edges:
        if not out or e - out[-1] >= MIN_CELL:
            out.append(e)
    return out


def _ruled_v(grid: Grid, x: float, y_lo: float, y_hi: float) -> bool:
    mid = (y_lo + y_hi) / 2
    return any(abs(v.at - x) <= SNAP + MIN_CELL / 2 and v.lo - SNAP <= mid <= v.hi + SNAP for v in grid.vs)


def _ruled_h(grid: Grid, y: float, x_lo: float, x_hi: float) -> bool:
    mid = (x_lo + x_hi) / 2
    return any(abs(h.at - y) <= SNAP + MIN_CELL / 2 and h.lo - SNAP <= mid <= h.hi + SNAP for h in grid.hs)


def _table(grid: Grid, textpage: Any) -> Table:
    xs, ys = grid.xs, grid.ys
    nr, nc = len(ys) - 1, len(xs) - 1
    root = {(r, c): (r, c) for r in range(nr) for c in range(nc)}

    def find(p: tuple[int, int]) -> tuple[int, int]:
        while root[p] != p:
            root[p] = root[root[p]]
            p = root[p]
        return p

    for r in range(nr):
        for c in range(nc):
            if c + 1 < nc and not _ruled_v(grid, xs[c + 1], ys[r + 1], ys[r]):
                a, b = find((r, c)), find((r, c + 1))
                root[max(a, b)] = min(a, b)
            if r + 1 < nr and not _ruled_h(grid, ys[r + 1], xs[c], xs[c + 1]):
                a, b = find((r, c)), find((r + 1, c))
                root[max(a, b)] = min(a, b)
    spans: dict[tuple[int, int], list[int]] = {}  # root -> [r0, c0, r1, c1]
    for (r, c) in root:
        s = spans.setdefault(find((r, c)), [r, c, r, c])
        s[0], s[1], s[2], s[3] = min(s[0], r), min(s[1], c), max(s[2], r), max(s[3], c)
    rows: list[list[Cell]] = []
    for r in range(nr):
        row = []
        for c in range(nc):
            r0, c0, r1, c1 = spans[find((r, c))]
            if (r, c) != (r0, c0):
                continue  # covered: the merged cell is placed once, at its top-left
            body = textpage.get_text_bounded(xs[c0], ys[r1 + 1], xs[c1 + 1], ys[r0])
            row.append(Cell(text=_join_lines(body), colspan=c1 - c0 + 1, rowspan=r1 - r0 + 1))
        rows.append(row)
    return Table(rows=rows)


def _join_lines(text: str) -> str:
    """A cell's wrapped lines as one text: no space between two CJK characters, one elsewhere."""
    out = ""
    for line in (ln.strip() for ln in text.splitlines()):
        if not line:
            continue
        if out and not (_CJK.match(out[-1]) and _CJK.match(line[0])):
            out += " "
        out += line
    return out


def _paragraphs(text: str) -> list[str]:
    """Layout lines, split into blank-line separated chunks."""
    out: list[str] = []
    cur: list[str] = []
    for line in text.splitlines():
        if line.strip():
            cur.append(line.rstrip())
        elif cur:
            out.append("\n".join(cur))
            cur = []
    if cur:
        out.append("\n".join(cur))
    return out
