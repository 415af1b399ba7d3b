"""A tiny evaluator for formulas stored without cached results (generator-written .xlsx).

Why: openpyxl and many web exports write ``=SUM(D3:D9)`` with no value; the LLM needs the number.
Only a safe, small subset is evaluated — numbers, + - * / ^, unary minus, parentheses, cell and
range references (also ``'Sheet'!A1``), SUM/AVERAGE/MIN/MAX/COUNT/ROUND/ABS/PRODUCT. Anything else
raises ``Unsupported`` and the caller shows the formula text instead. No ``eval``.
"""

from __future__ import annotations

import re

from openpyxl.utils.cell import column_index_from_string, range_boundaries

_TOKEN = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)|(?P<ref>(?:'(?:[^']|'')+'|[A-Za-z_][\w.]*)?!?"
                    r"\$?[A-Za-z]{1,3}\$?\d+(?::\$?[A-Za-z]{1,3}\$?\d+)?)|(?P<fn>[A-Za-z][A-Za-z0-9.]*)\(|"
                    r"(?P<op>[-+*/^(),:]))")
_FUNCS = {"SUM", "AVERAGE", "MIN", "MAX", "COUNT", "ROUND", "ABS", "PRODUCT"}


class Unsupported(Exception):
    pass


class Evaluator:
    def __init__(self, wb):
        self.wb = wb
        self.memo: dict[tuple[str, int, int], float | None] = {}
        self.stack: set[tuple[str, int, int]] = set()

    def cell(self, sheet: str, row: int, col: int):
        key = (sheet, row, col)
        if key in self.memo:
            return self.memo[key]
        if key in self.stack or len(self.stack) > 200:
            raise Unsupported("circular or too deep")
        try:
            v = self.wb[sheet].cell(row=row, column=col).value
        except KeyError:
            raise Unsupported(f"no sheet {sheet}") from None
        if isinstance(v, str) and v.startswith("="):
            self.stack.add(key)
            try:
                v = self.evaluate(v, sheet)
            finally:
                self.stack.discard(key)
        elif isinstance(v, bool) or not isinstance(v, (int, float)):
            v = None if v is None or isinstance(v, str) else v
        self.memo[key] = v
        return v

    def evaluate(self, formula: str, sheet: str):
        toks = self._tokens(formula[1:])
        saved = getattr(self, "toks", None), getattr(self, "i", 0), getattr(self, "sheet", sheet)
        self.toks, self.i, self.sheet = toks, 0, sheet
        try:
            v = self._expr()
            if self.i != len(toks):
                raise Unsupported("trailing tokens")
        finally:
            self.toks, self.i, self.sheet = saved
        if isinstance(v, list):
            raise Unsupported("range as a value")
        return v

    def _tokens(self, s: str):
        out = []
        pos = 0
        s = s.strip()
        while pos < len(s):
            m = _TOKEN.match(s, pos)
            if not m or m.end() == pos:
                raise Unsupported(f"cannot parse {s[pos:pos + 10]!r}")
            kind = m.lastgroup
            out.append((kind, m.group(kind)))
            pos = m.end()
        return out

    def _peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else (None, None)

    def _expr(self):
        v = self._term()
        while self._peek() in (("op", "+"), ("op", "-")):
            op = self.toks[self.i][1]
            self.i += 1
            r = self._term()
            v = _num(v) + _num(r) if op == "+" else _num(v) - _num(r)
        return v

    def _term(self):
        v = self._power()
        while self._peek() in (("op", "*"), ("op", "/")):
            op = self.toks[self.i][1]
            self.i += 1
            r = self._power()
            if op == "*":
                v = _num(v) * _num(r)
            else:
                if _num(r) == 0:
                    raise Unsupported("#DIV/0!")
                v = _num(v) / _num(r)
        return v

    def _power(self):
        v = self._unary()
        if self._peek() == ("op", "^"):
            self.i += 1
            v = _num(v) ** _num(self._unary())
        return v

    def _unary(self):
        if self._peek() == ("op", "-"):
            self.i += 1
            return -_num(self._unary())
        if self._peek() == ("op", "+"):
            self.i += 1
            return self._unary()
        return self._atom()

    def _atom(self):
        kind, val = self._peek()
        self.i += 1
        if kind == "num":
            return float(val)
        if kind == "ref":
            return self._ref(val)
        if kind == "fn":
            name = val.upper()
            if name not in _FUNCS:
                raise Unsupported(name)
            args = []
            if self._peek() != ("op", ")"):
                args.append(self._expr())
                while self._peek() == ("op", ","):
                    self.i += 1
                    args.append(self._expr())
            if self._peek() != ("op", ")"):
                raise Unsupported("missing )")
            self.i += 1
            return _call(name, args)
        if (kind, val) == ("op", "("):
            v = self._expr()
            if self._peek() != ("op", ")"):
                raise Unsupported("missing )")
            self.i += 1
            return v
        raise Unsupported(f"unexpected {val!r}")

    def _ref(self, text: str):
        sheet = self.sheet
        if "!" in text:
            sheet, text = text.rsplit("!", 1)
            sheet = sheet[1:-1].replace("''", "'") if sheet.startswith("'") else sheet
        text = text.replace("$", "")
        if ":" in text:
            c1, r1, c2, r2 = range_boundaries(text)
            if (r2 - r1 + 1) * (c2 - c1 + 1) > 100000:
                raise Unsupported("range too large")
            return [self.cell(sheet, r, c) for r in range(r1, r2 + 1) for c in range(c1, c2 + 1)]
        m = re.fullmatch(r"([A-Za-z]+)(\d+)", text)
        if not m:
            raise Unsupported(text)
        return self.cell(sheet, int(m.group(2)), column_index_from_string(m.group(1).upper()))


def _num(v) -> float:
    if isinstance(v, list):
        raise Unsupported("range in arithmetic")
    return 0.0 if v is None else float(v)


def _flat(args) -> list[float]:
    out: list[float] = []
    for a in args:
        if isinstance(a, list):
            out += [float(x) for x in a if isinstance(x, (int, float))]
        elif a is not None:
            out.append(float(a))
    return out


def _call(name: str, args):
    if name == "ROUND":
        if len(args) != 2:
            raise Unsupported("ROUND arity")
        digits = int(_num(args[1]))
        x = _num(args[0])
        q = 10.0 ** digits
        return float(int(abs(x) * q + 0.5)) / q * (1 if x >= 0 else -1)
    if name == "ABS":
        return abs(_num(args[0]))
    vals = _flat(args)
    if name == "SUM":
        return sum(vals)
    if name == "PRODUCT":
        p = 1.0
        for v in vals:
            p *= v
        return p
    if name == "COUNT":
        return float(len(vals))
    if not vals:
        raise Unsupported(f"{name} of nothing")
    if name == "AVERAGE":
        return sum(vals) / len(vals)
    if name == "MIN":
        return min(vals)
    return max(vals)
