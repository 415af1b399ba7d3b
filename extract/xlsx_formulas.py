"""Formula cells without cached values in the streaming .xlsx path: the cell values the evaluator reads, and the
cells of what it computed.

Why here and not in openpyxl's path: generators (openpyxl itself, most web exports) store formulas without their
results, and a 12,000-row bill of quantities took ~10x longer through openpyxl's full load. The stream
already has every cell's raw value; ``SheetValues`` indexes one sheet's on first use (a sheet no formula reads is
never indexed), ``formula.Evaluator`` computes each pending cell, and ``computed_cells`` turns the results into
the SheetCells a cached value would have given: numbers go through the same number-format path as cached numbers
(``xlsx_cells.cells_of``), text, booleans and errors as the cached ``str``/``b``/``e`` cells do.
"""

from __future__ import annotations

import functools
import itertools
from typing import Callable

from tender_pool.extract.blocks import SheetCell
from tender_pool.extract.formula import Evaluator, Formula, Unsupported, XlError

__all__ = ["SheetValues", "Pending", "evaluate_workbook", "formula_warnings"]


def Pending(col: str, row: str, sid: int, text: str) -> Formula:
    """A formula cell without a cached value: column letters, row digits, style index, formula text (no ``=``),
    as the ``Formula`` the evaluator's grid holds (the regex path builds these directly)."""
    return Formula(text, row, col, sid)


COLUMN_INDEXES = 3  # columns a sheet's values are indexed by one at a time, before one index of all


class SheetValues:
    """One sheet's cell values for the evaluator. ``raw`` builds {reference: (type, value text, formula text)} on
    first use (bytes keys and fields from the regex path, str from the element path); ``get`` converts one."""

    def __init__(self, build, strings: list[str], binary: bool, pending: list[Pending] = (),
                 decode: Callable[[bytes], str] | None = None, numbers: Callable[[], dict] | None = None,
                 column: Callable[[bytes], dict] | None = None, texts: Callable[[bytes], dict] | None = None):
        self._build = build
        # ``build`` restricted to one column (the regex path): formulas read text from a column or two of a sheet
        # (a bill: its unit column), and indexing only those skips ~half the work of indexing every cell
        self._column = column
        self._columns: dict[str, dict] = {}
        # {reference: text} of one column's inline strings, where no other cell but numbers and formulas without a
        # value holds anything (the regex path over openpyxl's shapes): a cell in neither is then empty, and a bill's
        # reads of its unit column skip the raw entries (a column's index, a conversion per cell read)
        self._texts = texts
        self._text_columns: dict[str, dict] = {}
        self._numbers = numbers  # {reference: float} of the plain number cells, built in one comprehension
        self._number_cells = None
        self._cells = None
        self._strings = strings
        self._binary = binary
        self._decode = decode  # bytes between tags -> text, references decoded (the binary entries)
        self._formulas = {p.col + p.row: p for p in pending}  # Formula objects, their text decoded

    def prefill(self) -> dict:
        """The evaluator's first grid of this sheet: every number at once, and each pending formula."""
        g = dict(self._numbers_of())
        g.update(self._formulas)
        return g

    def _numbers_of(self) -> dict:
        if self._number_cells is None:
            self._number_cells = self._numbers() if self._numbers is not None else {}
        return self._number_cells

    def get(self, col: str, row: str):
        key = col + row
        formula = self._formulas.get(key)
        if formula is not None:
            return formula
        number = self._numbers_of().get(key)
        if number is not None:  # (the regex path's raw entries leave the plain numbers out)
            return number
        if self._texts is not None:
            texts = self._text_columns.get(col)
            if texts is None:
                texts = self._text_columns[col] = self._texts(col.encode())
            return texts.get(key)
        cells = self._cells
        if cells is None:
            cells = self._columns.get(col)
            if cells is None:
                if self._column is not None and len(self._columns) < COLUMN_INDEXES:
                    cells = self._columns[col] = self._column(col.encode())
                else:  # (past a few columns, one index of every cell)
                    cells = self._cells = self._build()
                    self._build = self._column = None
                    self._columns = {}
        entry = cells.get(key.encode() if self._binary else key)
        if entry is None:
            return None
        t, v, f = entry
        if f is None and (t == b"" or t == b"n") and v:  # the common case: a number
            return float(v)
        if self._binary:
            t = t.decode()
            if v is not None:
                v = self._decode(v)
            if f is not None:  # the whole <f …>…</f> element the regex captured
                if f.endswith(b"/>"):
                    if not v and t != "str":
                        raise Unsupported("a formula without text or value")  # a shared formula's member
                    f = None
                else:
                    f = self._decode(f[f.index(b">") + 1: f.rindex(b"</")])
        if f is not None and not v and t != "str":
            return Formula(f, row)
        if t in ("", "n"):
            return float(v) if v else None
        if t == "s":
            return self._strings[int(v)]
        if t in ("str", "inlineStr"):
            return v or ""
        if t == "b":
            return v in ("1", "true")
        if t == "e":
            return XlError(v)
        return v  # "d" (ISO dates) and unknown types: their text


def evaluate_workbook(sheets: list[tuple[str, SheetValues, list[Pending]]], styles, epoch, cells_of) -> tuple[
        dict[str, list[SheetCell]], int, int]:
    """Computes every pending cell: ({sheet title: its new cells}, computed, shown as formula text). Pending cells
    are evaluated sheet by sheet in row order, so a running total reads the row above it already computed.
    ``cells_of`` is the stream's number formatter (``xlsx_cells.cells_of``), so a computed number is shown as
    the same number cached would be."""
    by_title = {title: values for title, values, _ in sheets}
    folded = {title.casefold(): values for title, values, _ in sheets}

    def cell(sheet: str, col: str, row: str):
        values = by_title.get(sheet) or folded.get(sheet.casefold())
        if values is None:
            raise Unsupported(f"no sheet {sheet}")
        return values.get(col, row)

    ev = Evaluator(cell, {title: values.prefill for title, values, _ in sheets})
    out: dict[str, list[SheetCell]] = {}
    computed = shown = 0
    wrap = styles.wrap
    slow = ev.slow
    for title, _, pending in sheets:
        if not pending:
            continue
        g = ev.grid(title)
        rows = list(map(int, [p.row for p in pending]))
        if any(map(int.__gt__, rows, rows[1:])):  # (document order is row order but for a malformed sheet)
            pending = [p for _, _, p in sorted(zip(rows, itertools.count(), pending))]
        values = []
        append = values.append
        for p in pending:  # the values first, then the cells of each kind by comprehension
            key = p.col + p.row
            v = g.get(key)  # p itself, or its value if another formula needed it first
            if v is None or type(v) is Formula:
                try:
                    v = slow(g, title, key, p)
                except Unsupported:
                    v = _SHOWN
            append(v)
        kinds = list(map(type, values))
        numbers = [(p.col, p.row, p.sid, b"%.15g" % v) for p, v, t in zip(pending, values, kinds)
                   if t is float or t is int]
        # the other cells in document order, as one loop appended them
        cells = [SheetCell(int(p.row) - 1, _col0(p.col), v, "string", p.sid in wrap) if t is str else
                 _cell_of(p, v, t, wrap) for p, v, t in zip(pending, values, kinds)
                 if t is str and v or t is bool or t is XlError or t is _Shown]
        failed = kinds.count(_Shown)
        shown += failed
        computed += len(values) - failed
        if numbers:
            rowmap = {r: int(r) - 1 for _, r, _, _ in numbers}
            colmap = {c: _col0(c) for c in {n[0] for n in numbers}}
            ids = {s: s for s in {n[2] for n in numbers}}
            cells += cells_of([], numbers, [], rowmap, colmap, ids, [], styles, epoch, 3, 3)
        out[title] = cells
    return out, computed, shown


class _Shown:
    """The value of a pending cell the evaluator cannot compute: its formula text is shown."""


_SHOWN = _Shown()


def _cell_of(p: Formula, v, t: type, wrap) -> SheetCell:
    """The SheetCell of a computed boolean or error, or of a formula shown as its text."""
    r0, c0 = int(p.row) - 1, _col0(p.col)
    if t is bool:
        return SheetCell(r0, c0, "TRUE" if v else "FALSE", "bool")
    if t is XlError:
        return SheetCell(r0, c0, v.code, "error", p.sid in wrap)
    return SheetCell(r0, c0, "=" + p.formula_text(), "formula")


def formula_warnings(computed: int, shown: int) -> list[str]:
    """The warnings both .xlsx paths give about formula cells that had no cached result."""
    out = []
    if computed:
        out.append(f"{computed} formula cells had no cached result; their values were computed by tender-pool's "
                   "formula evaluator (arithmetic, comparison, &, SUM/AVERAGE/MIN/MAX/COUNT/ROUND/IF and a few more)")
    if shown:
        out.append(f"{shown} formula cells have no cached result (the file was written without calculation); "
                   "their formula text is shown instead")
    return out


@functools.lru_cache(maxsize=4096)
def _col0(letters: str) -> int:
    n = 0
    for ch in letters:
        n = n * 26 + ord(ch) - 64
    return n - 1
