"""Page count: stored where the file has a trustworthy one, exact for PDF, else estimated.

Why an estimate at all: the queue and the LLM budget want a size in pages, and LibreOffice-written
.doc/.xls carry no page count. The estimate models what LibreOffice's pagination would give:

* word processing: a line model per section (``Section`` blocks carry each section's paper, orientation,
  margins and columns; A4 where none is stored): every paragraph and table row takes whole lines of the
  section's text width at ``FONT_PT`` (CJK one em, Latin half), plus spacing; a page holds the section's
  text height. Landscape sections thus hold fewer, longer lines. Hard page breaks and new-page section
  breaks (``Meta.page_breaks``) add ``BREAK_COST`` each.
* sheets: LibreOffice's own pagination modelled from the sheet's page setup (``Sheet.setup``): paper,
  orientation, margins, scale / fit-to-pages, print areas, manual breaks, column widths in the default font's
  digits and row heights as stored; empty pages are skipped, as LibreOffice does (see ``_sheet_pages``).

The constants were fitted on the corpus as a whole (see bench/bench_extract.py), not per file.
"""

from __future__ import annotations

import itertools
import math
import operator
import re

from tender_pool.extract.blocks import Block, Image, Meta, PageSetup, Para, Section, Sheet, TableBlock

DENSITY = 1.0  # scales the word-processing line model below (fitted with BREAK_COST and ROUNDING on the whole corpus)
BREAK_COST = 0.7  # pages a hard page break or new-page section break adds on average (its page's unused rest)
ROUNDING = 0.65


def _is_wide(ch: str) -> bool:
    o = ord(ch)
    return 0x2E80 <= o <= 0x9FFF or 0xAC00 <= o <= 0xD7AF or 0xF900 <= o <= 0xFAFF or 0xFF00 <= o <= 0xFFEF


# _is_wide as character classes, counted by the regex engine (per-character Python costs ~0.4 s on a 100k-cell sheet)
_R, _C, _V = operator.attrgetter("r"), operator.attrgetter("c"), operator.attrgetter("v")  # of a SheetCell
_WIDE = re.compile("[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")
_WIDE_INK = re.compile("[\u2e80-\u2fff\u3001-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")  # U+3000 is a space
_OTHER = re.compile("[^\x00-\x7f\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")  # neither ASCII nor wide
# neither printable ASCII nor wide ink (U+3000 and the other blanks, line breaks, controls, Latin-1 …)
_NOT_PLAIN = re.compile("[^\x20-\x7e\u2e80-\u2fff\u3001-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")
_BLANK = re.compile(r"[^\S ]")  # whitespace other than the plain space: takes no room


# Paper sizes by Excel paper code, inches (width, height).
PAPER = {1: (8.5, 11.0), 2: (8.5, 11.0), 3: (11.0, 17.0), 4: (17.0, 11.0), 5: (8.5, 14.0), 6: (5.5, 8.5),
         7: (7.25, 10.5), 8: (11.69, 16.54), 9: (8.27, 11.69), 10: (8.27, 11.69), 11: (5.83, 8.27),
         12: (10.12, 14.33), 13: (7.17, 10.12), 66: (16.54, 23.39), 70: (4.13, 5.83)}
DEFAULT_PAPER = (8.27, 11.69)  # A4 where the file stores none (fitted: A4 and Letter score alike)
DEFAULT_MARGINS = [0.75, 0.75, 1.0, 1.0]
CHAR_PT = 5.25 * 1.2  # points per character of column width where the default font is not known (fitted)
# A column width counts digits of the workbook's default font; LibreOffice measures that digit in the font it
# draws with: the metric-compatible Liberation fonts stand in for Arial, Times New Roman and Courier New, and
# every other font it lacks (Calibri, Cambria, the CJK fonts …) falls back to DejaVu Sans, whose digits are
# wider. Digit advance in ems by family; the reference host's LibreOffice (tests/extract/test_pages.py) gave
# 5.546 pt per character for Arial 10, 7.00 for Calibri 11 and 7.646 for 宋体 12.
DIGIT_EM = {"arial": 0.5547, "helvetica": 0.5547, "liberation sans": 0.5547, "arimo": 0.5547,
            "times new roman": 0.5, "times": 0.5, "liberation serif": 0.5, "tinos": 0.5,
            "courier new": 0.6001, "courier": 0.6001, "liberation mono": 0.6001, "cousine": 0.6001,
            "dejavu sans": 0.6366}
FALLBACK_EM = 0.6366  # DejaVu Sans


def char_pt(setup: PageSetup) -> float:
    """Points per character of column width for this workbook."""
    if not setup.font or setup.font_pt <= 0:
        return CHAR_PT
    return DIGIT_EM.get(setup.font.strip().lower(), FALLBACK_EM) * setup.font_pt


TEXT_PT = 5.25 * 1.2  # points per character of cell text, for text running over into empty cells
CJK_TEXT = 1.6  # a CJK character's width in Latin characters (wrap and overflow)


def _default_chars(s: PageSetup) -> float:
    """The default column width in characters of the default font, as LibreOffice sets it: the stored standard
    width, else the default width plus the padding Excel adds for the font's height (LibreOffice's
    XclTools::GetXclDefColWidthCorrection); 5 px of 7 where the font is not known."""
    if s.standard_width > 0:
        return s.standard_width
    dw = s.default_width or 8
    if s.font_pt > 0:
        return dw + (40960 / max(s.font_pt * 20 - 15, 60) + 50) / 256
    return (dw * 7 + 5) / 7


def _sheet_pages(sheet: Sheet, pictures: list[Image] = ()) -> int:
    """Printed pages of one sheet, the way LibreOffice paginates it.

    The sheet's own page setup counts: paper, orientation and scale (these two ignored when the file marks
    its settings unset),
    margins, scale or fit-to-pages (never enlarging), print areas, repeated rows and manual breaks.
    Columns and rows fill pages greedily, at their stored widths and heights (see ``char_pt``);
    unwrapped text runs on over empty cells to its right (LibreOffice extends the print range for it);
    pages without any cell are not printed (LibreOffice's default). Pictures are printed content too: the
    pages their anchors' cell rectangles cross count, and a sheet of pictures alone prints.
    """
    rects = [(p.row, p.col, max(p.row, p.row2 if p.row2 is not None else p.row),
              max(p.col, p.col2 if p.col2 is not None else p.col))
             for p in pictures if p.row is not None and p.col is not None]
    if sheet.hidden or not (sheet.cells or rects):
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
    cpt = char_pt(s)
    default_col = _default_chars(s) * cpt
    widths = [default_col if w == s.default_width else w * cpt for w in s.widths]
    # every stored height as stored: LibreOffice keeps a row's height on load, refitted flag or not (wrapped text
    # does not grow a row until the sheet is edited), so rows print at their stored or the default height
    heights: dict[int, float] = {int(e[0]): float(e[1]) for e in s.heights}
    line = s.default_height or 12.75
    rs = list(map(_R, cells))  # (C-level maps: a 12k-row bill has ~100k cells)
    cs = list(map(_C, cells))
    strings = [c for c in cells if not c.wrap and c.type == "string"]  # may run over empty cells to their right
    last_r = max([*rs, *(r[2] for r in rects)])
    last_c = max([*cs, *(r[3] for r in rects)])
    areas = s.areas or [[0, 0, last_r, last_c]]
    total = 0
    for r1, c1, r2, c2 in areas:
        whole = r1 <= 0 and c1 <= 0 and r2 >= last_r and c2 >= last_c
        if whole:
            if not s.areas:
                r2, c2 = last_r, last_c
            in_r, in_c = rs, cs
        else:
            inside = [(r, c) for r, c in zip(rs, cs) if r1 <= r <= r2 and c1 <= c <= c2]
            if not inside and not rects:
                continue
            in_r, in_c = [r for r, _ in inside], [c for _, c in inside]
        colw = [widths[c] if c < len(widths) else default_col for c in range(c1, c2 + 1)]
        rowh = [heights.get(r, line) for r in range(r1, r2 + 1)]
        # unwrapped text: which columns right of its cell it runs over (may extend past the area's end)
        runs: list[tuple[int, int, int]] = []
        ncolw = len(colw)
        wide_text = CJK_TEXT * TEXT_PT
        if whole:  # every cell inside: a text's length against its column, in C
            ink = map(wide_text.__rmul__, map(len, map(_V, strings)))
            long = list(itertools.compress(strings, map(operator.gt, ink,
                                                        map(colw.__getitem__, map(c1.__rsub__, map(_C, strings))))))
        else:
            long = [c for c in strings if r1 <= c.r <= r2 and c1 <= c.c <= c2
                    and len(c.v) * wide_text > colw[c.c - c1]]  # else it cannot be wider than its cell
        wider = [(c, w) for c, w in zip(long, _widths([c.v for c in long]))
                 if w is None or w * TEXT_PT - colw[c.c - c1] > 0]
        if wider:  # (row, column) of the cells in the rows that matter
            need = {c.r for c, _ in wider}
            occupied = set(zip([c.r for c in cells if c.r in need], [c.c for c in cells if c.r in need]))
        for c, width in wider:
            room = colw[c.c - c1]
            if width is None:
                width = _width(max(c.v.split("\n"), key=len))
            over = width * TEXT_PT - room
            if over <= 0:
                continue
            k = c.c + 1
            while over > 0 and (c.r, k) not in occupied and k < c1 + 256:
                if k - c1 >= ncolw:
                    colw.append(widths[k] if k < len(widths) else default_col)
                    ncolw += 1
                over -= colw[k - c1]
                k += 1
            if k > c.c + 1:
                runs.append((c.r, c.c + 1, k - 1))
        # the zoom after the run-over columns are known: LibreOffice fits the print range they extend
        if s.fit:
            z = 1.0
            if s.fit_width > 0:
                z = min(z, page_w * s.fit_width / max(1.0, sum(colw)))
            if s.fit_height > 0:
                z = min(z, page_h * s.fit_height / max(1.0, sum(rowh)))
            z = max(z, 0.1)
        else:
            z = max(10, min(400, s.scale or 100)) / 100.0 if s.valid else 1.0
        rep = sum(rowh[: s.repeat_rows]) if s.repeat_rows else 0.0
        # fit-to-pages wins over manual breaks, as in Excel (fitted: LibreOffice's count agrees better so)
        row_breaks = set() if s.fit else {b - r1 for b in s.row_breaks}
        col_breaks = set() if s.fit else {b - c1 for b in s.col_breaks}
        pr = _paginate(rowh, page_h, z, row_breaks, rep)
        pc = _paginate(colw, page_w, z, col_breaks, 0.0)
        if r1 or c1:
            in_r, in_c = [r - r1 for r in in_r], [c - c1 for c in in_c]
        pages = set(zip(map(pr.__getitem__, in_r), map(pc.__getitem__, in_c)))
        for a, b, c, d in rects:  # a picture: every page its cell rectangle crosses, within the area
            a, b, c, d = max(a, r1), max(b, c1), min(c, r2), min(d, c2)
            if a <= c and b <= d:
                across = {pc[k - c1] for k in range(b, d + 1)}
                pages.update((p, q) for p in {pr[r - r1] for r in range(a, c + 1)} for q in across)
        for r, a, b in runs:
            pages.update((pr[r - r1], pc[k - c1]) for k in range(a, b + 1))
        total += len(pages)
    return total


def _width(text: str) -> float:
    wide = _WIDE.subn("", text)[1]  # a count without a list of matches (~30 % faster than findall)
    return (len(text) - wide) + CJK_TEXT * wide


def _widths(texts: list[str]) -> list[float | None]:
    """``_width`` of each one-line text (None for one with line breaks), without a regex pass per text: where
    every character is ASCII or wide (all wide ranges take 3 bytes in UTF-8), a text's wide characters are
    (UTF-8 bytes − characters) / 2; the few texts with other characters are measured one by one."""
    if not texts:
        return []
    joined = "\n".join(texts)
    if joined.count("\n") != len(texts) - 1:  # some text has line breaks: one by one
        return [None if "\n" in t else _width(t) for t in texts]
    try:
        wides = [(b - n) // 2 for n, b in zip(map(len, texts), map(len, map(str.encode, texts)))]
    except UnicodeEncodeError:  # a lone surrogate: one by one
        return list(map(_width, texts))
    out = [(n - w) + CJK_TEXT * w for n, w in zip(map(len, texts), wides)]
    if _OTHER.search(joined) is not None:  # the texts with other characters: one by one
        search = _OTHER.search
        for i in [i for i, t in enumerate(texts) if search(t)]:
            out[i] = _width(texts[i])
    return out


def _paginate(sizes: list[float], limit: float, zoom: float, breaks: set[int], repeat: float) -> list[int]:
    """Page index of each row (or column): fill greedily; a manual break starts a new page."""
    out: list[int] = []
    page, acc = 0, 0.0
    for i, size in enumerate(sizes):
        size *= zoom
        room = limit - (repeat * zoom if page > 0 else 0.0)
        if acc > 0 and (acc + size > room + 1e-6 or i in breaks):  # a fitted zoom fills a page exactly
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
        pictures: dict[str | None, list[Image]] = {}
        for b in blocks:
            if isinstance(b, Image):
                pictures.setdefault(b.sheet, []).append(b)
        return max(1, sum(_sheet_pages(s, pictures.get(s.name, [])) for s in sheets)), "estimated"
    breaks = (meta.page_breaks or 0) if meta is not None else 0
    return max(1, round(_word_pages(blocks) + BREAK_COST * breaks + ROUNDING)), "estimated"


# Word processing, line model: every paragraph and table row takes whole lines of the section's text width;
# a page holds as many lines as the section's text height allows (landscape sections: wider, fewer lines).
FONT_PT = 10.5  # body font size where the file's styles are not read (fitted)
LINE = 1.3  # line height / font size (CJK fonts in LibreOffice run ~1.3)
LATIN_EM = 0.5  # a Latin character's width in ems
PARA_SPACE = 12.0  # points between paragraphs
ROW_PAD = 4.0  # points of padding and border per table row
CELL_PAD = 11.0  # points of left+right cell padding
A4_TEXT = ((11906 - 2 * 1417) / 20, (16838 - 2 * 1304) / 20)  # text area where no section geometry is stored


def _ems(text: str) -> float:
    wide = _WIDE_INK.subn("", text)[1]
    blank = _BLANK.subn("", text)[1] if not text.isprintable() or "\u3000" in text else 0
    return wide + LATIN_EM * (len(text) - wide - blank)


def _lines(text: str, width_pt: float) -> int:
    per_line = max(1.0, width_pt / FONT_PT)
    return sum(max(1, math.ceil(_ems(piece) / per_line)) for piece in text.split("\n"))


def _lines_all(texts: list[str], widths: list[float]) -> list[int]:
    """``[_lines(t, w) for t, w in zip(texts, widths)]`` with one character-class scan over all the texts
    instead of two regex passes per text: where every character is printable ASCII or wide ink, a text's wide
    characters are (UTF-8 bytes − characters) / 2 (the 130-page .doc: 14 ms -> a few)."""
    if not texts:
        return []
    if "\n" in "".join(texts):
        pieces = [p for t in texts for p in t.split("\n")]
        counts = [t.count("\n") + 1 for t in texts]
        per = [max(1.0, w / FONT_PT) for w, k in zip(widths, counts) for _ in range(k)]
    else:
        pieces, counts, per = texts, None, [max(1.0, w / FONT_PT) for w in widths]
    try:
        lens = list(map(len, pieces))
        wides = [(b - n) // 2 for n, b in zip(lens, map(len, map(str.encode, pieces)))]
    except UnicodeEncodeError:  # a lone surrogate: one by one
        ems = list(map(_ems, pieces))
    else:
        ems = [w + LATIN_EM * (n - w) for n, w in zip(lens, wides)]
        if _NOT_PLAIN.search("".join(pieces)) is not None:  # the texts with other characters: one by one
            search = _NOT_PLAIN.search
            for i in [i for i, p in enumerate(pieces) if search(p)]:
                ems[i] = _ems(pieces[i])
    lines = [max(1, math.ceil(e / p)) for e, p in zip(ems, per)]
    if counts is None:
        return lines
    out, i = [], 0
    for k in counts:
        out.append(sum(lines[i: i + k]))
        i += k
    return out


def _table_height(table, width_pt: float) -> float:
    h = 0.0
    texts: list[str] = []
    widths: list[float] = []
    where: list[int] = []  # the row of each text
    for ri, row in enumerate(table.rows):
        n = max(1, len(row))
        for c in row:
            w = (c.width / 20.0) if c.width else width_pt / n
            w = max(FONT_PT, w - CELL_PAD)
            if c.text.strip():
                texts.append(c.text)
                widths.append(w)
                where.append(ri)
            if c.table is not None:
                h += _table_height(c.table, w)
    tallest = [1] * len(table.rows)
    for ri, k in zip(where, _lines_all(texts, widths)):
        if k > tallest[ri]:
            tallest[ri] = k
    for k in tallest:
        h += k * FONT_PT * LINE + ROW_PAD
    return h


def _word_pages(blocks: list[Block]) -> float:
    """Pages of the body, section by section (a Section block closes the blocks before it)."""
    total = 0.0
    pending: list[Block] = []

    def flush(sec: Section | None) -> float:
        w, h = A4_TEXT
        if sec is not None and sec.width > sec.left + sec.right and sec.height > sec.top + sec.bottom:
            w = (sec.width - sec.left - sec.right) / 20.0 / max(1, sec.columns)
            h = (sec.height - sec.top - sec.bottom) / 20.0 * max(1, sec.columns)
        used = 0.0
        paras = [b.text for b in pending if isinstance(b, Para)]
        lines = iter(_lines_all(paras, [w] * len(paras)))
        for b in pending:
            if isinstance(b, Para):
                used += next(lines) * FONT_PT * LINE + PARA_SPACE
            else:
                used += _table_height(b.table, w)
        pending.clear()
        return used / max(72.0, h)

    for b in blocks:
        if isinstance(b, (Para, TableBlock)) and b.story == "body":
            pending.append(b)
        elif isinstance(b, Section):
            total += flush(b)
    if pending:
        total += flush(None)
    return total * DENSITY
