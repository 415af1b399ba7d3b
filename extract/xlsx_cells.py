"""A worksheet's cells by regular expressions over its bytes: the fast path of the streaming .xlsx reader.

``fast_cells`` reads the common shapes of sheetData (every writer's ``<c r s t>``) with one pattern and
builds the cells a kind at a time (``cells_of``); it returns None for any other shape, which the element path
(``xlsx_elements``) then reads with the same cell semantics: shared and inline strings, booleans, errors, ISO
dates, numbers cast to int or float, date and duration styles converted with the workbook's epoch, number
formats as displayed (``numfmt``), wrap flags from the cell's alignment.
"""

from __future__ import annotations

import functools
import itertools
import operator
import re

from tender_pool.extract.blocks import SheetCell
from tender_pool.extract.formula import Formula
from tender_pool.extract.numfmt import format_all, format_value, formatter, general
from tender_pool.extract.xlsx_formulas import Pending, SheetValues
from tender_pool.extract.xlsx_parts import NeedsOpenpyxl, Styles, col_index, float_or
from tender_pool.extract.xlsx_strings import decode_texts, unescape, unescape_all, unescape_each
from tender_pool.extract.xlsx_view import Dim, SheetView

_COL, _ROW, _STYLE = (operator.itemgetter(i) for i in range(3))  # of every matched cell's tuple
_TYPE, _FORMULA = operator.itemgetter(3), operator.itemgetter(4)  # of _CELL's


_ROW_TAG = re.compile(rb'<row r="([0-9]++)"([^>]*+)>')  # the attributes end with "/" in an empty row
_DEFAULT_HEIGHT = re.compile(rb'<(?:\w+:)?sheetFormatPr\b[^>]*?\bdefaultRowHeight="([^"]*)"')
_ROW_HT, _ROW_HIDDEN, _ROW_CUSTOM = (re.compile(rb'\s%s="([^"]*)"' % a) for a in (b"ht", b"hidden", b"customHeight"))
# the cell shape every common writer uses (attributes r, s, t in this order; an optional formula; a value)
# (group 7: a plain inline string, as openpyxl writes every string). The formula element: a greedy scan to its
# first ">" then its text, before the self-closing form: a lazy "[^>]*?/>" first tried "/>" at every character of
# the attributes (LibreOffice writes aca="false" on each), half the time of the whole match. Quantifiers are
# possessive (no backtracking: nothing after them could match what they gave back) but the self-closing formula's
# scan, which must give back its "/"; a 12k-row bill's cells 63 -> 40 ms
_CELL = re.compile(rb'<c r="([A-Z]{1,3}+)([0-9]++)"(?: s="([0-9]++)")?+(?: t="([a-zA-Z]++)")?+\s*+'
                   rb'(?:/>|>(<f\b[^>]*+>[^<]*+</f>|<f\b[^>]*/>)?+'
                   rb'(?:<v>([^<]*+)</v>|<v/>|<is><t(?: xml:space="preserve")?+>([^<]*+)</t></is>)?+</c>)')
# the commonest shapes in one pattern (see cells_of): a shared string (group 4), an empty cell (no value; its
# column still counts for the sheet's width), a number (group 5; cached values of formulas too), a formula's
# cached text result as LibreOffice writes every one (group 6 its type, 7 its formula, 8 its text, maybe empty)
_OTHER_TYPE = re.compile(rb' t="(?!s"|n"|str")[a-zA-Z]+">')  # a typed cell with content _SN_CELL never matches
_SN_CELL = re.compile(rb'<c r="([A-Z]{1,3}+)([0-9]++)"(?: s="([0-9]++)")?+(?: t="s"><v>([0-9]++)</v></c>'
                      rb'|(?: t="[a-zA-Z]++")?+/>'
                      rb'|(?: t="n")?+>(?:<f\b[^>]*+>[^<]*+</f>|<f\b[^>]*/>)?+<v>([^<]++)</v></c>'
                      rb'|( t="str")>(<f\b[^>]*+>[^<]*+</f>|<f\b[^>]*/>)?+<v>([^<]*+)</v></c>)')


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
    # ("!" first: one byte is found by memchr, ~50x faster than the search for "<!--" through every "<", and most
    # sheets hold no "!" at all: ~3.5 ms of the 12k-row bill's 4.2)
    if (b"!" in body and b"<!--" in body) or b":c " in body:
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
    # nor does a cell of another type with content (but t="str"): one search saves a whole findall that would
    # fall short
    common = _SN_CELL.findall(body) if b"<is>" not in body and _OTHER_TYPE.search(body) is None else []
    pending: list = []
    if len(common) == total:  # the commonest shapes are all there is
        sst = common
        strs = [x for x in common if x[3]]
        nums = [x for x in common if x[4]]
        # text results as the general shape's tuples (type at 3, text at 5) for cells_of's other types
        rest = [(c, r, s, b"str", f, v, b"") for c, r, s, _, _, _, f, v in common if v] if b' t="str"' in body else []
        sv, nv = 3, 4
        values = SheetValues(lambda: {c + r: (b"s", si, None) if si else (b"n", num, None) if num else
                                      (b"str", v or None, f or None)
                                      for c, r, _, si, num, t, f, v in sst if si or num or t},
                             strings, True, (), unescape,
                             lambda: {(c + r).decode(): float(num) for c, r, _, _, num, _, _, _ in nums})
    else:  # other types, formulas, inline strings, values in other spellings: the general shape, same kinds
        found = _CELL.findall(body)
        if len(found) != total:
            return None  # some cell did not match the general shape either (rich inline strings, CDATA …)
        if b"<f" in body:
            pending = _pending(found)
        common = found  # (column, row, style first, as in _SN_CELL's)
        types = list(map(_TYPE, found))
        texts = None
        if set(types) <= {b"", b"n", b"inlineStr"}:  # openpyxl's: numbers, formulas, inline strings, picked in C
            strs = []
            nums = [x for x in itertools.compress(found, map(b"inlineStr".__ne__, types)) if x[5]]
            inline = list(itertools.compress(found, map(b"inlineStr".__eq__, types)))
            rest = [x for x in inline if x[5] or x[6]]
            # every other cell a number, a formula without a value or nothing (no formula with an inline string;
            # every <is> an inline string's): what formulas read of the sheet but numbers is these texts
            if body.count(b"<is>") == body.count(b't="inlineStr"><is>') and not any(map(_FORMULA, inline)):
                texts = functools.partial(_text_column, inline)
        else:
            strs = [x for x in found if x[3] == b"s" and x[5]]
            nums = [x for x in found if x[5] and (not x[3] or x[3] == b"n")]
            rest = [x for x in found if x[3] and (x[5] or x[6]) and x[3] != b"s" and x[3] != b"n"]
        sv = nv = 5
        # the numbers in the second lambda, the pending formulas in ``pending``: the first holds the other cells
        values = SheetValues(lambda: {c + r: (t, v or inl or None, f or None) for c, r, _, t, f, v, inl in found
                                      if (not v or (t and t != b"n"))
                                      and not (f and not v and not inl and t != b"str")},
                             strings, True, pending, unescape,
                             lambda: {(x[0] + x[1]).decode(): float(x[5]) for x in nums},
                             lambda k: {c + r: (t, v or inl or None, f or None) for c, r, _, t, f, v, inl in found
                                        if c == k and (not v or (t and t != b"n"))
                                        and not (f and not v and not inl and t != b"str")}, texts)
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
        cells = cells_of(strs, nums, rest, rowmap, colmap, ids, strings, styles, epoch, sv, nv)
    except KeyError:  # a row or style spelled otherwise (r="07", s="01") or out of range: maps from the cells
        rowmap = {r: int(r) - 1 for r in {x[1] for part in (common, rest) for x in part}}
        ids = {s: int(s) if s else 0 for s in {x[2] for part in (common, rest) for x in part}}
        cells = cells_of(strs, nums, rest, rowmap, colmap, ids, strings, styles, epoch, sv, nv)
    return cells, max_col, rest_xml, values, pending


def _text_column(inline: list, letters: bytes) -> dict[str, str]:
    """{reference: text} of one column's inline strings (``SheetValues``'s ``texts``), decoded in one parse."""
    cells = list(itertools.compress(inline, map(letters.__eq__, map(_COL, inline))))
    return dict(zip([(c + r).decode() for c, r, *_ in cells], unescape_each([x[5] or x[6] for x in cells])))


def _pending(found: list) -> list[Pending]:
    """The regex path's formula cells without a cached value (a formula whose cached text result is empty, as
    LibreOffice stores ="" results, has one: the empty string). Shared formulas are left to openpyxl, which
    translates a shared formula to each cell of its range."""
    cells = [x for x in found if x[4] and not x[5] and not x[6] and x[3] != b"str"]
    elements = list(map(_FORMULA, cells))
    if all(map(bytes.startswith, elements, itertools.repeat(b"<f>"))):
        bodies = [f[3:-4] for f in elements]  # every one a plain <f>…</f> (openpyxl's): no head to look at
    else:
        heads = [f[: f.find(b">") + 1] for f in elements]
        if any(h.endswith(b"/>") or b'"shared"' in h for h in heads):
            raise NeedsOpenpyxl("shared formula without a cached value")
        bodies = [f[len(h): -4] for f, h in zip(elements, heads)]  # (_CELL: the element ends with </f>)
    sids = {s: int(s) if s else 0 for s in set(map(_STYLE, cells))}  # (int() of bytes, a call per cell: slow)
    rows = list(map(_ROW, cells))
    texts, templated = _texts(bodies, rows)
    return list(map(Formula, texts, map(bytes.decode, rows), map(bytes.decode, map(_COL, cells)),
                    map(sids.__getitem__, map(_STYLE, cells)), templated))


# a character reference to a digit or "#": its text could hold the row number or the placeholder where the bytes
# do not (see _texts)
_DIGIT_REF = re.compile(rb"&#(?:0*(?:35|4[89]|5[0-7])|x0*(?:23|3[0-9]));")
_AMP_DIGIT = re.compile(rb"&[0-9]")
_REF = re.compile(rb"&(?:#[0-9]+|#x[0-9a-fA-F]+|amp|lt|gt|quot|apos);")  # xlsx_strings._ENTITY's, whole


def _texts(bodies: list[bytes], rows: list[bytes]) -> tuple[list[str], list[bool]]:
    """The decoded text of each formula, and whether it is its row template (``formula``'s: the row number replaced
    by ``#``), which is decoded once per distinct template instead of once per cell: a bill's 26k formula texts
    are ~20 templates, and every one of its IF texts holds references (``&gt;``, ``&#22797;``) to decode.

    A template is decoded where the bytes' template is the decoded text's: past the checks below, the references
    decode to no digit and hold none the replacement touched, so decoding and replacing the row's digits
    commute. Where it might not be, the cell's own text is decoded: a row number replaced inside a reference
    (``&#22797;`` in row 2: every ``&`` must still start a whole reference), a reference to a digit or ``#``
    (its text could hold the row number where the bytes do not); every text where one holds a ``#`` outside a
    reference (the evaluator refuses those) or an ``&`` the row's ``#`` could make a reference of (``&12;``).
    One parse for all (``unescape_all``), as before templates: a text it cannot parse sends all to its fallback."""
    joined = b"\0".join(bodies)
    if joined.count(b"#") != joined.count(b"&#") or _AMP_DIGIT.search(joined):
        templates = bodies
        good = []
    else:
        templates = list(map(bytes.replace, bodies, rows, itertools.repeat(b"#")))
        good = [t for t in set(templates) if b"&" not in t
                or t.count(b"&") == len(_REF.findall(t)) and _DIGIT_REF.search(t) is None]
    ok = set(good)
    own = len(ok) < len(set(templates))  # some cells decode their own text
    mine = [b for b, t in zip(bodies, templates) if t not in ok] if own else []
    escaped = [t for t in good if b"&" in t or b"\r" in t]
    decoded = iter(unescape_all(escaped + [b for b in mine if b"&" in b or b"\r" in b]))  # one parse: references, CRs
    texts = dict(zip(escaped, decoded))
    texts.update((t, t.decode()) for t in good if t not in texts)
    out = list(map(texts.get, templates))
    if not own:
        return out, [True] * len(out)
    theirs = iter([next(decoded) if b"&" in b or b"\r" in b else b.decode() for b in mine])
    return [t if t is not None else next(theirs) for t in out], list(map(ok.__contains__, templates))


def cells_of(strs: list, nums: list, rest: list, rowmap: dict, colmap: dict, ids: dict, strings: list[str],
             styles: Styles, epoch, sv: int, nv: int) -> list:
    """SheetCells of the matched cells, a kind at a time. Every cell is a tuple (column, row, style, …) as the
    pattern matched it; its text is at index ``sv`` in ``strs`` (the shared-string index), at ``nv`` in ``nums``
    (the number, formatted style by style through ``numfmt.format_all``), and in ``rest`` (the other types:
    ``_CELL``'s tuples, type at 3) at 5 or, an inline string's, at 6. Why: one Python loop body per cell was
    ~2 µs (0.2 s for a 12k-row bill); comprehensions and C-level ``map`` over a kind, the tuples as matched (no
    tuple rebuilt per cell), take a fraction. The list is thus in that order, not the sheet's (nothing reads
    cells in order). ``ids``: style index by its attribute's bytes (a KeyError for one missing, as for a row
    missing from ``rowmap``)."""
    from openpyxl.utils.datetime import from_excel, from_ISO8601

    codes, dates, durations, wrap = styles.codes, styles.dates, styles.durations, styles.wrap
    nstyles = len(codes)
    wrap_of = {s: i in wrap for s, i in ids.items()}
    rows, cols = rowmap.__getitem__, colmap.__getitem__
    cells = list(map(SheetCell, map(rows, map(_ROW, strs)), map(cols, map(_COL, strs)),
                     map(strings.__getitem__, map(int, map(operator.itemgetter(sv), strs))),
                     itertools.repeat("string"), map(wrap_of.__getitem__, map(_STYLE, strs))))
    if "" in strings:
        cells = [c for c in cells if c.v]
    append = cells.append
    number_of = operator.itemgetter(nv)
    # style by style: one sort in C, not one pass over the cells per style (a copy: the caller's list keeps the
    # document order its numbers' index is built in)
    for style, same in itertools.groupby(sorted(nums, key=_STYLE), _STYLE):
        sid = ids[style]
        group = list(same)
        vals = list(map(number_of, group))
        if sid in dates:  # dates and durations: one by one
            code = codes[sid] if sid < nstyles else "General"
            for x, v in zip(group, vals):
                num = float(v) if (b"." in v or b"E" in v or b"e" in v) else int(v)
                try:
                    value = from_excel(num, epoch, timedelta=sid in durations)
                except (OverflowError, ValueError):
                    append(SheetCell(rowmap[x[1]], colmap[x[0]], "#VALUE!", "error"))
                    continue
                if sid in durations:  # a timedelta: openpyxl's reader does not call it a date
                    append(SheetCell(rowmap[x[1]], colmap[x[0]], format_value(value, code, is_date=False), "number"))
                else:
                    append(SheetCell(rowmap[x[1]], colmap[x[0]], format_value(value, code, is_date=True), "date"))
            continue
        show = formatter(codes[sid]) if sid < nstyles else general
        exact = False
        try:
            values = list(map(int, vals))
            all_int = True
        except ValueError:
            all_int = False
            if (show is general or hasattr(show, "spec")) and (max(map(len, vals)) <= 15 or all(
                    b"." in v or b"e" in v or b"E" in v for v in vals if len(v) > 15)):
                values = list(map(float, vals))  # these two show an int < 1e15 and its float alike (a longer
                # text with a point or an exponent is a float below as well)
                if hasattr(show, "spec"):  # no ties to round (more decimals than shown), no -0: one format() each
                    joined = b" ".join(vals)
                    exact = (b"-" not in joined and b"e" not in joined and b"E" not in joined
                             and re.search(rb"\.[0-9]{%d}" % (show.decimals + 1), joined) is None)
            else:
                values = [float(v) if (b"." in v or b"E" in v or b"e" in v) else int(v) for v in vals]
        texts = format_all(show, values, all_int or exact)
        cells += map(SheetCell, map(rows, map(_ROW, group)), map(cols, map(_COL, group)), texts,
                     itertools.repeat("number"))
    texts = decode_texts([x[5] or x[6] for x in rest])
    # text cells (openpyxl writes every string inline, LibreOffice formula text results as str) in one pass
    types = set(map(_TYPE, rest))
    if types <= {b"inlineStr"}:  # (an empty inline string is no cell) the tuples as matched, by C-level map
        kept = list(itertools.compress(rest, texts))
        cells += map(SheetCell, map(rows, map(_ROW, kept)), map(cols, map(_COL, kept)), filter(None, texts),
                     itertools.repeat("string"), map(wrap_of.__getitem__, map(_STYLE, kept)))
        return cells
    cells += [SheetCell(rowmap[x[1]], colmap[x[0]], v, "string", wrap_of[x[2]]) for x, v in zip(rest, texts)
              if (x[3] == b"inlineStr" and v) or x[3] == b"str"]
    others = [(x, v) for x, v in zip(rest, texts) if x[3] != b"inlineStr" and x[3] != b"str"]  # (no loop over those)
    for (c, r, s, t, *_), v in others:
        r0, c0, sid = rowmap[r], colmap[c], ids[s]
        if t == b"b":
            append(SheetCell(r0, c0, "TRUE" if int(v) else "FALSE", "bool"))
        elif t == b"e":
            append(SheetCell(r0, c0, v, "error", sid in wrap))
        elif t == b"d":
            append(SheetCell(r0, c0, format_value(from_ISO8601(v), codes[sid] if sid < nstyles else "General",
                                                  is_date=True), "date"))
    return cells
