"""A worksheet's cells by regular expressions over its bytes: the fast path of the streaming .xlsx reader.

``fast_cells`` reads the common shapes of sheetData (every writer's ``<c r s t>``) with one pattern and
builds the cells a kind at a time (``cells_of``); it returns None for any other shape, which the element path
(``xlsx_elements``) then reads with the same cell semantics: shared and inline strings, booleans, errors, ISO
dates, numbers cast to int or float, date and duration styles converted with the workbook's epoch, number
formats as displayed (``numfmt``), wrap flags from the cell's alignment.
"""

from __future__ import annotations

import itertools
import operator
import re

from tender_pool.extract.blocks import SheetCell
from tender_pool.extract.formula import Formula
from tender_pool.extract.numfmt import format_all, format_value, formatter, general
from tender_pool.extract.xlsx_formulas import Pending, SheetValues
from tender_pool.extract.xlsx_parts import NeedsOpenpyxl, Styles, col_index, float_or
from tender_pool.extract.xlsx_strings import unescape, unescape_all
from tender_pool.extract.xlsx_view import Dim, SheetView

_FIRST = operator.itemgetter(0)


_ROW_TAG = re.compile(rb'<row r="([0-9]+)"([^>]*)>')  # the attributes end with "/" in an empty row
_DEFAULT_HEIGHT = re.compile(rb'<(?:\w+:)?sheetFormatPr\b[^>]*?\bdefaultRowHeight="([^"]*)"')
_ROW_HT, _ROW_HIDDEN, _ROW_CUSTOM = (re.compile(rb'\s%s="([^"]*)"' % a) for a in (b"ht", b"hidden", b"customHeight"))
# the cell shape every common writer uses (attributes r, s, t in this order; an optional formula; a value)
# (group 7: a plain inline string, as openpyxl writes every string). The formula element: a greedy scan to its
# first ">" then its text, before the self-closing form: a lazy "[^>]*?/>" first tried "/>" at every character of
# the attributes (LibreOffice writes aca="false" on each), half the time of the whole match
_CELL = re.compile(rb'<c r="([A-Z]{1,3})([0-9]+)"(?: s="([0-9]+)")?(?: t="([a-zA-Z]+)")?\s*'
                   rb'(?:/>|>(<f\b[^>]*>[^<]*</f>|<f\b[^>]*/>)?'
                   rb'(?:<v>([^<]*)</v>|<v/>|<is><t(?: xml:space="preserve")?>([^<]*)</t></is>)?</c>)')
# the commonest shapes in one pattern (see cells_of): a shared string (group 4), an empty cell (no value; its
# column still counts for the sheet's width), a number (group 5; cached values of formulas too)
_OTHER_TYPE = re.compile(rb' t="(?!s"|n")[a-zA-Z]+">')  # a typed cell with content _SN_CELL never matches
_SN_CELL = re.compile(rb'<c r="([A-Z]{1,3})([0-9]+)"(?: s="([0-9]+)")?(?: t="s"><v>([0-9]+)</v></c>'
                      rb'|(?: t="[a-zA-Z]+")?/>|(?: t="n")?>(?:<f\b[^>]*>[^<]*</f>|<f\b[^>]*/>)?<v>([^<]+)</v></c>)')


def fast_cells(data: bytes, view: SheetView, strings: list[str], styles: Styles, epoch):
    """The sheetData of a worksheet by two regular expressions instead of an XML tree: (cells, max column,
    the part without its cells) — or None for a shape this does not model (namespace prefixes, cells without
    ``r``, inline strings, CDATA or comments), which the element path then reads. Same cell semantics as
    ``sheet_elements`` (tests/extract/test_xlsx.py compares both): a 12k-row sheet in ~1/10 of the time."""
    start = data.find(b"<sheetData")
    if start < 0 or data.find(b"<sheetData", start + 1) >= 0:
        return None
    open_end = data.find(b">", start)
    if data[open_end - 1: open_end] == b"/":
        end = open_end + 1
        body = b""
    else:
        close = data.find(b"</sheetData>", open_end)
        if close < 0:
            return None
        end = close + len(b"</sheetData>")
        body = data[open_end + 1: close]
    # comments could hide cells from nothing but a parser; prefixed names (x:c) from the counts below. Inline
    # strings, CDATA and other shapes match neither cell pattern, so the counts refuse them.
    if b"<!--" in body or b":c " in body:
        return None
    rest_xml = data[:start] + b"<sheetData/>" + data[end:]
    rows = _ROW_TAG.findall(body)
    if len(rows) != body.count(b"<row"):
        return None  # a row without r="…" first: the element path counts rows itself
    # only a height or the hidden flag reaches the page setup (xlsx_setup.page_setup); other attributes would
    # give a Dim it skips, so such rows are not looked at further. Rows mostly share one attribute string
    # (LibreOffice writes ht, hidden and customHeight on every row): one Dim each, shared by its rows.
    # A row refitted by the application at the default height is left out here as xlsx_setup.page_setup leaves
    # it out (LibreOffice stores one on every row).
    fmt = _DEFAULT_HEIGHT.search(data, 0, start)
    default_height = float_or(fmt.group(1), 15.0) if fmt else 15.0
    dims = {}
    for attrs in {a for _, a in rows}:
        if b"ht=" not in attrs and b"hidden=" not in attrs:
            continue
        ht = _ROW_HT.search(attrs)
        hidden = _ROW_HIDDEN.search(attrs)
        custom = _ROW_CUSTOM.search(attrs)
        dim = Dim(hidden=hidden is not None and hidden.group(1) in (b"1", b"true"),
                   ht=float_or(ht.group(1)) if ht else None,
                   custom=custom is not None and custom.group(1) in (b"1", b"true"))
        if dim.hidden or dim.customHeight or dim.ht is not None and dim.ht != default_height:
            dims[attrs] = dim
    if dims:
        view.row_dimensions.update({int(r): dims[a] for r, a in rows if a in dims})
    total = body.count(b"<c")  # every cell (sheetData holds no other element starting so; <c> was refused)
    # inline strings (openpyxl writes every string so) never match the common shapes: straight to the general one
    # nor does a cell of another type with content (LibreOffice's t="str" formula results): one search saves
    # a whole findall that would fall short
    common = _SN_CELL.findall(body) if b"<is>" not in body and _OTHER_TYPE.search(body) is None else []
    pending: list = []
    if len(common) == total:  # the commonest shapes are all there is
        rest: list = []
        sst = common
        values = SheetValues(lambda: {c + r: (b"s" if si else b"n", si or num or None, None)
                                      for c, r, _, si, num in sst if si or num}, strings, True, (), unescape,
                             lambda: {(c + r).decode(): float(num) for c, r, _, si, num in sst if num})
        strs = [(c, r, s, si) for c, r, s, si, _ in common if si]
        nums = [(s, c, r, num) for c, r, s, _, num in common if num]
    else:  # other types, formulas, inline strings, values in other spellings: the general shape, same kinds
        found = _CELL.findall(body)
        if len(found) != total:
            return None  # some cell did not match the general shape either (rich inline strings, CDATA …)
        if b"<f" in body:
            pending = _pending(found)
        common = found  # (column, row, style first, as in _SN_CELL's)
        strs = [(c, r, s, v) for c, r, s, t, _, v, _ in found if t == b"s" and v]
        nums = [(s, c, r, v) for c, r, s, t, _, v, _ in found if v and (t == b"n" or not t)]
        rest = [(c, r, s, t, v or inl) for c, r, s, t, _, v, inl in found
                if (v or inl) and t and t != b"s" and t != b"n"]
        values = SheetValues(lambda: {c + r: (t, v or inl or None, f or None) for c, r, _, t, f, v, inl in found
                                      if not v or (t and t != b"n")},  # numbers: in the lambda below
                             strings, True, pending, unescape,
                             lambda: {(c + r).decode(): float(v) for c, r, _, t, _, v, _ in found
                                      if v and (not t or t == b"n")})
    if not common:
        return [], 0, rest_xml, values, pending
    letters = {x[0] for x in common}
    colmap = {c: col_index(c.decode(), {}) for c in letters}
    max_col = max(colmap.values())
    colmap = {c: i - 1 for c, i in colmap.items()}
    rowmap = {r: int(r) - 1 for r, _ in rows}
    nstyles = len(styles.codes)
    ids = {str(i).encode(): i for i in range(nstyles)}
    ids[b""] = 0
    try:
        cells = cells_of(strs, nums, rest, rowmap, colmap, ids, strings, styles, epoch)
    except KeyError:  # a row or style spelled otherwise (r="07", s="01") or out of range: maps from the cells
        rowmap = {r: int(r) - 1 for r in {x[1] for part in (common, rest) for x in part}}
        ids = {s: int(s) if s else 0 for s in {x[2] for part in (common, rest) for x in part}}
        cells = cells_of(strs, nums, rest, rowmap, colmap, ids, strings, styles, epoch)
    return cells, max_col, rest_xml, values, pending


def _pending(found: list) -> list[Pending]:
    """The regex path's formula cells without a cached value (a formula whose cached text result is empty, as
    LibreOffice stores ="" results, has one: the empty string). Shared formulas are left to openpyxl, which
    translates a shared formula to each cell of its range."""
    cells = [(c, r, s, f) for c, r, s, t, f, v, inl in found if f and not v and not inl and t != b"str"]
    heads = [f[: f.find(b">") + 1] for _, _, _, f in cells]
    if any(h.endswith(b"/>") or b'"shared"' in h for h in heads):
        raise NeedsOpenpyxl("shared formula without a cached value")
    bodies = [f[len(h): -4] for (_, _, _, f), h in zip(cells, heads)]  # (_CELL: the element ends with </f>)
    escaped = iter(unescape_all([b for b in bodies if b"&" in b or b"\r" in b]))  # one parse: references, CRs
    texts = [next(escaped) if b"&" in b or b"\r" in b else b.decode() for b in bodies]
    return [Formula(text, r.decode(), c.decode(), int(s) if s else 0) for (c, r, s, _), text in zip(cells, texts)]


def cells_of(strs: list, nums: list, rest: list, rowmap: dict, colmap: dict, ids: dict, strings: list[str],
             styles: Styles, epoch) -> list:
    """SheetCells of the matched cells, a kind at a time: ``strs`` (column, row, style, shared-string index) the
    shared strings, ``nums`` (style, column, row, number) the numbers, style by style through
    ``numfmt.format_all`` (sorted here, in place); ``rest`` (column, row, style, type, value) the other types.
    Why: one Python loop body per cell was ~2 µs (0.2 s for a 12k-row bill); comprehensions and C-level ``map``
    over a kind take a fraction. The list is thus in that order, not the sheet's (nothing reads cells in order).
    ``ids``: style index by its attribute's bytes (a KeyError for one missing, as for a row missing from ``rowmap``)."""
    from openpyxl.utils.datetime import from_excel, from_ISO8601

    codes, dates, durations, wrap = styles.codes, styles.dates, styles.durations, styles.wrap
    nstyles = len(codes)
    wrap_of = {s: i in wrap for s, i in ids.items()}
    cells = [SheetCell(rowmap[r], colmap[c], strings[int(v)], "string", wrap_of[s]) for c, r, s, v in strs]
    if "" in strings:
        cells = [c for c in cells if c.v]
    append = cells.append
    nums.sort(key=_FIRST)  # style by style: one sort in C, not one pass over the cells per style
    for style, same in itertools.groupby(nums, _FIRST):
        sid = ids[style]
        group = [(c, r, v) for _, c, r, v in same]
        if sid in dates:  # dates and durations: one by one
            code = codes[sid] if sid < nstyles else "General"
            for c, r, v in group:
                num = float(v) if (b"." in v or b"E" in v or b"e" in v) else int(v)
                try:
                    value = from_excel(num, epoch, timedelta=sid in durations)
                except (OverflowError, ValueError):
                    append(SheetCell(rowmap[r], colmap[c], "#VALUE!", "error"))
                    continue
                if sid in durations:  # a timedelta: openpyxl's reader does not call it a date
                    append(SheetCell(rowmap[r], colmap[c], format_value(value, code, is_date=False), "number"))
                else:
                    append(SheetCell(rowmap[r], colmap[c], format_value(value, code, is_date=True), "date"))
            continue
        vals = [v for _, _, v in group]
        show = formatter(codes[sid]) if sid < nstyles else general
        exact = False
        try:
            values = list(map(int, vals))
            all_int = True
        except ValueError:
            all_int = False
            if (show is general or hasattr(show, "spec")) and max(map(len, vals)) <= 15:
                values = list(map(float, vals))  # these two show an int < 1e15 and its float alike
                if hasattr(show, "spec"):  # no ties to round (more decimals than shown), no -0: one format() each
                    joined = b" ".join(vals)
                    exact = (b"-" not in joined and b"e" not in joined and b"E" not in joined
                             and re.search(rb"\.[0-9]{%d}" % (show.decimals + 1), joined) is None)
            else:
                values = [float(v) if (b"." in v or b"E" in v or b"e" in v) else int(v) for v in vals]
        texts = format_all(show, values, all_int or exact)
        cells += [SheetCell(rowmap[r], colmap[c], t, "number") for (c, r, _), t in zip(group, texts)]
    escaped = [x[4] for x in rest if b"&" in x[4]]
    plain = iter(unescape_all(escaped))
    texts = [next(plain) if b"&" in x[4] else x[4].decode() for x in rest]
    # text cells (openpyxl writes every string inline, LibreOffice formula text results as str) in one pass
    cells += [SheetCell(rowmap[x[1]], colmap[x[0]], v, "string", wrap_of[x[2]]) for x, v in zip(rest, texts)
              if (x[3] == b"inlineStr" and v) or x[3] == b"str"]
    for (c, r, s, t, _), v in zip(rest, texts):
        if t == b"inlineStr" or t == b"str":
            continue
        r0, c0, sid = rowmap[r], colmap[c], ids[s]
        if t == b"str":
            append(SheetCell(r0, c0, v, "string", sid in wrap))
        elif t == b"b":
            append(SheetCell(r0, c0, "TRUE" if int(v) else "FALSE", "bool"))
        elif t == b"e":
            append(SheetCell(r0, c0, v, "error", sid in wrap))
        elif t == b"inlineStr":
            if v:
                append(SheetCell(r0, c0, v, "string", sid in wrap))
        elif t == b"d":
            append(SheetCell(r0, c0, format_value(from_ISO8601(v), codes[sid] if sid < nstyles else "General",
                                                  is_date=True), "date"))
    return cells
