"""An evaluator for formulas stored without cached results (generator-written .xlsx).

Why: openpyxl and many web exports write ``=ROUND(F5*G5,2)`` with no value; the LLM needs the number, and a
12,000-row bill of quantities holds tens of thousands of such cells, so evaluation must cost a few µs a cell.

How it stays fast: a formula is compiled once into a Python function, and rows share compilations. A bill's
formulas differ from row to row only in their row number (``F5*G5``, ``F6*G6``), so the text is compiled as a
*template*: every occurrence of the cell's own row number replaced by ``#`` (``F#*G#``), and each leaf that holds
a ``#`` (a reference, a number, a string) puts the row number back when it runs. Replacing and putting back are
exact inverses for a given row (a text holding ``#`` itself is refused), so a template computes exactly what its
text says, for whichever row it was compiled from. The template is compiled to Python source (``_Gen``) whose
constants all sit in a tuple ``P`` beside it, so templates of one shape (``SUM(H3:H202)``, ``SUM(H204:H403)``)
share one code object; a reference is one dict look-up in the sheet's grid (``Evaluator.grid``), a number needs
no coercion call, and only what is not a number takes the slow path (``Evaluator.slow``). The source is written
by ``_Gen`` alone, from the tokens: the formula's text reaches it only as values in ``P``, never as code.

What is evaluated (Excel semantics, the subset bills use): numbers, strings, TRUE/FALSE; + - * / ^ %, unary
minus, & (concatenation), = <> < > <= >=; cell and range references, also ``'Sheet'!A1`` and ``Sheet!A1:B9``;
SUM, AVERAGE, MIN, MAX, COUNT, COUNTA, PRODUCT, SUMPRODUCT, ROUND, ROUNDUP, ROUNDDOWN, INT, ABS, MOD, IF, IFERROR,
AND, OR, NOT, CONCATENATE. Errors (#DIV/0!, #VALUE!, #NUM!) are values, as in Excel. Anything else (names, whole
columns, other functions) raises ``Unsupported`` and the caller shows the formula text.

The workbook is reached through one callable, ``cell(sheet, col, row) -> value``: ``None``, a float, a str, a
bool, an ``XlError``, or a ``Formula`` (a cell whose value must be computed first); the fast reader
(``xlsx_stream``) and the openpyxl path each provide one, and the fast reader also a sheet's numbers and
formulas at once (``prefill``).
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import re
from typing import Callable

import msgspec

__all__ = ["Evaluator", "Formula", "Unsupported", "XlError", "general_text"]

MAX_RANGE = 100_000  # cells in one range reference
MAX_DEPTH = 60  # formulas waiting on other formulas; past this (or Python's own limit) the cell is Unsupported


class Unsupported(Exception):
    pass


class XlError:
    """An Excel error value (``#DIV/0!`` …): it propagates through arithmetic and is displayed as is."""

    __slots__ = ("code",)

    def __init__(self, code: str):
        self.code = code

    def __eq__(self, other):
        return isinstance(other, XlError) and other.code == self.code

    def __hash__(self):
        return hash(self.code)

    def __repr__(self):
        return self.code


DIV0, VALUE, NUM = XlError("#DIV/0!"), XlError("#VALUE!"), XlError("#NUM!")


class Formula(msgspec.Struct, gc=False):  # strings and an int: no cycles; a Struct is made in C (a bill: 26k)
    """A cell holding a formula without a cached value: its text (no leading ``=``) and its row number; the fast
    reader also keeps its column letters and style index here (its pending cells are these objects). With
    ``templated`` the text is already the row template (the row number replaced by ``#``, no other ``#``): the
    fast reader decodes one text per template, not per cell (``xlsx_cells._texts``)."""

    text: str
    row: str
    col: str = ""
    sid: int = 0
    templated: bool = False

    def formula_text(self) -> str:
        """The formula as written (no leading ``=``)."""
        return self.text.replace("#", self.row) if self.templated else self.text


class _Raise(Exception):
    """Carries an error value out of nested closures (arithmetic on an error)."""

    def __init__(self, err: XlError):
        self.err = err


_MISS = object()
_ACTIVE = object()  # the grid entry of a formula while it runs


class Evaluator:
    """``cell(sheet, col, row)`` reads the workbook; ``prefill`` (optional) maps a sheet title to a callable that
    returns that sheet's known values at once ({"F12": value or Formula}), read on the sheet's first reference:
    most references then cost one dict look-up in the compiled code instead of a call down to the workbook.

    Each sheet's values live in one dict (its *grid*) keyed by reference ("F12"), which is also the memo: a
    formula cell's entry is replaced by its value once computed, a cell read from ``cell`` is stored there."""

    def __init__(self, cell: Callable[[str, str, str], object],
                 prefill: dict[str, Callable[[], dict]] | None = None):
        self._cell = cell
        self._prefill = prefill or {}
        self.grids: dict[str, dict] = {}
        self._depth = 0  # formulas running, each waiting on the next

    def grid(self, sheet: str) -> dict:
        g = self.grids.get(sheet)
        if g is None:
            fill = self._prefill.get(sheet)
            g = self.grids[sheet] = fill() if fill is not None else {}
        return g

    def slow(self, g: dict, sheet: str, key: str, v):
        """The value of reference ``key`` whose grid entry ``v`` was not a number: not yet read (``_MISS``), a
        formula to compute, or another value (returned as is). While a formula runs its entry is ``_ACTIVE``, so
        a reference back to it is circular (a mark in the grid: a set of marks cost a tuple and two set
        operations a cell); a formula that fails leaves its entry as it was."""
        if v is _MISS:
            col = key.rstrip(_DIGITS)
            v = self._cell(sheet, col, key[len(col):])
            if type(v) is not Formula:
                g[key] = v
                return v
        elif type(v) is not Formula:
            if v is _ACTIVE:
                raise Unsupported("circular or too deeply nested references")
            return v
        before = g.get(key, _MISS)  # (a formula the caller passed may be running already: its entry says so)
        if before is _ACTIVE or self._depth >= MAX_DEPTH:
            raise Unsupported("circular or too deeply nested references")
        g[key] = _ACTIVE
        self._depth += 1
        try:
            v = self._run(v.text, sheet, v.row, g, v.templated)
        except BaseException:
            if before is _MISS:
                del g[key]
            else:
                g[key] = before
            raise
        finally:
            self._depth -= 1
        g[key] = v
        return v

    def value(self, sheet: str, col: str, row: str):
        """The value of a cell (computed if it is a Formula), memoised."""
        g = self.grid(sheet)
        key = col + row
        v = g.get(key, _MISS)
        return v if type(v) is float else self.slow(g, sheet, key, v)

    def compute(self, sheet: str, col: str, row: str, text: str):
        """``value`` of a cell the caller knows to hold formula ``text`` (no second look-up of the cell)."""
        g = self.grid(sheet)
        key = col + row
        v = g.get(key, _MISS)
        if v is _MISS or type(v) is Formula or v is _ACTIVE:
            v = self.slow(g, sheet, key, Formula(text, row))
        return v

    def evaluate(self, text: str, sheet: str, row: str):
        """The value of formula ``text`` (no leading ``=``) in a cell of ``sheet`` at ``row`` (its digits)."""
        return self._run(text, sheet, row, self.grid(sheet))

    def _run(self, text: str, sheet: str, row: str, g: dict, templated: bool = False):
        if templated:  # (its maker refused a "#" of its own)
            fn, params = _compile(text)
        else:
            if "#" in text:
                raise Unsupported("error literal or '#' in the formula")
            fn, params = _compile(text.replace(row, "#") if row in text else text)
        try:
            v = fn(self, sheet, g, row, params)
        except _Raise as e:
            return e.err
        except ZeroDivisionError:
            return DIV0
        except (OverflowError, ValueError):
            return NUM
        except RecursionError:
            raise Unsupported("too deeply nested") from None
        if type(v) is list:
            if len(v) != 1:
                raise Unsupported("a range as the result")
            v = v[0]
        if type(v) is float and not math.isfinite(v):
            return NUM
        return 0.0 if v is None else v


_DIGITS = "0123456789"


# ---------------------------------------------------------------- coercions (Excel's)


def _num(v) -> float:
    """A value in arithmetic: empty 0, TRUE 1, numeric text its number, other text #VALUE!, errors propagate."""
    t = type(v)
    if t is float:
        return v
    if v is None:
        return 0.0
    if t is bool or t is int:
        return float(v)
    if t is str:
        try:
            return float(v.strip())
        except ValueError:
            raise _Raise(VALUE) from None
    if t is XlError:
        raise _Raise(v)
    if t is list:
        if len(v) == 1:
            return _num(v[0])
        raise _Raise(VALUE)
    raise _Raise(VALUE)


def general_text(x: float) -> str:
    """A number as concatenation shows it (General, 15 significant digits): 3 -> "3", 0.1+0.2 -> "0.3"."""
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    s = f"{x:.15g}"
    if "e" in s:
        mant, exp = s.split("e")
        return f"{mant}E{exp[0]}{int(exp[1:]):02d}"
    return s


def _text(v) -> str:
    t = type(v)
    if t is str:
        return v
    if v is None:
        return ""
    if t is bool:
        return "TRUE" if v else "FALSE"
    if t is float or t is int:
        return general_text(float(v))
    if t is XlError:
        raise _Raise(v)
    if t is list and len(v) == 1:
        return _text(v[0])
    raise _Raise(VALUE)


def _truth(v) -> bool:
    t = type(v)
    if t is bool:
        return v
    if v is None:
        return False
    if t is float or t is int:
        return v != 0
    if t is str:
        u = v.upper()
        if u in ("TRUE", "FALSE"):
            return u == "TRUE"
        raise _Raise(VALUE)
    if t is XlError:
        raise _Raise(v)
    if t is list and len(v) == 1:
        return _truth(v[0])
    raise _Raise(VALUE)


def _rank(v):
    """Excel's comparison order: numbers < text (case-insensitive) < FALSE < TRUE."""
    t = type(v)
    if t is float or t is int:
        return (0, float(v))
    if t is str:
        return (1, v.lower())
    if t is bool:
        return (2, v)
    raise _Raise(v if t is XlError else VALUE)


def _compare(op: str, a, b) -> bool:
    if type(a) is list:
        a = a[0] if len(a) == 1 else _bad()
    if type(b) is list:
        b = b[0] if len(b) == 1 else _bad()
    if a is None:  # an empty cell compares as 0, "" or FALSE, whichever the other side is
        a = "" if type(b) is str else False if type(b) is bool else 0.0
    if b is None:
        b = "" if type(a) is str else False if type(a) is bool else 0.0
    x, y = _rank(a), _rank(b)
    if op == "=":
        return x == y
    if op == "<>":
        return x != y
    if op == "<":
        return x < y
    if op == ">":
        return x > y
    if op == "<=":
        return x <= y
    return x >= y


def _bad():
    raise _Raise(VALUE)


# ---------------------------------------------------------------- functions


def _numbers(args) -> list[float]:
    """Numbers of a statistical function's arguments: in ranges only numbers count; typed-in arguments are coerced."""
    out: list[float] = []
    for a in args:
        if type(a) is list:
            for x in a:
                t = type(x)
                if t is float or t is int:
                    out.append(x)
                elif t is XlError:
                    raise _Raise(x)
        elif a is not None:
            out.append(_num(a))
    return out


def _round(x: float, digits: float, mode: str) -> float:
    """ROUND (half away from zero), ROUNDUP (away from zero), ROUNDDOWN (toward zero) of the scaled value taken to
    15 significant digits, as Excel and LibreOffice do (ROUND(2.675, 2) is 2.68 although 2.675 * 100 is
    267.49999999999997 in binary)."""
    q = 10.0 ** int(digits)
    z = abs(x) * q
    n = None
    if z < 1e15:  # the 15-digit text only matters within its rounding (< 5e-15 z) of a tie or an integer: else
        fl = math.floor(z)  # the float decides, without formatting (exact: below 2^52 z - floor(z) is exact)
        fr = z - fl
        eps = z * 1e-13
        if mode == "half-up":
            if abs(fr - 0.5) > eps:
                n = fl + 1 if fr > 0.5 else fl
        elif fr == 0.0:
            n = fl
        elif eps < fr < 1.0 - eps:
            n = fl + 1 if mode == "up" else fl
    if n is None:
        y = float(f"{z:.15g}")
        n = math.floor(y + 0.5) if mode == "half-up" else math.ceil(y) if mode == "up" else math.floor(y)
    r = n / q if q >= 1 else n * (1 / q)
    return -r if x < 0 else r


def _call(name: str, args: list):
    if name == "SUM":
        return math.fsum(_numbers(args)) if len(args) != 1 or type(args[0]) is not list else _sum_range(args[0])
    if name in ("ROUND", "ROUNDUP", "ROUNDDOWN"):
        if len(args) != 2:
            raise Unsupported(f"{name} needs 2 arguments")
        mode = {"ROUND": "half-up", "ROUNDUP": "up", "ROUNDDOWN": "down"}[name]
        return _round(_num(args[0]), _num(args[1]), mode)
    if name == "AVERAGE":
        vals = _numbers(args)
        if not vals:
            raise _Raise(DIV0)
        return math.fsum(vals) / len(vals)
    if name in ("MIN", "MAX"):
        vals = _numbers(args)
        return (min(vals) if name == "MIN" else max(vals)) if vals else 0.0
    if name == "COUNT":
        n = 0
        for a in args:
            if type(a) is list:
                n += sum(1 for x in a if type(x) is float or type(x) is int)
            elif a is not None and not isinstance(a, XlError):
                try:
                    _num(a)
                    n += 1
                except _Raise:
                    pass
        return float(n)
    if name == "COUNTA":
        n = 0
        for a in args:
            if type(a) is list:
                n += sum(1 for x in a if x is not None)
            else:
                n += 1
        return float(n)
    if name == "PRODUCT":
        p = 1.0
        for v in _numbers(args):
            p *= v
        return p
    if name == "SUMPRODUCT":
        lists = [a if type(a) is list else [a] for a in args]
        if not lists or len({len(x) for x in lists}) != 1:
            raise _Raise(VALUE)
        total = 0.0
        for row in zip(*lists):
            p = 1.0
            for x in row:
                if type(x) is XlError:
                    raise _Raise(x)
                p *= x if (type(x) is float or type(x) is int) else 0.0
            total += p
        return total
    if name == "ABS":
        return abs(_num(_one(name, args)))
    if name == "INT":
        return float(math.floor(_num(_one(name, args))))
    if name == "MOD":
        if len(args) != 2:
            raise Unsupported("MOD needs 2 arguments")
        a, b = _num(args[0]), _num(args[1])
        if b == 0:
            raise _Raise(DIV0)
        return a - b * math.floor(a / b)
    if name in ("AND", "OR"):
        vals = []
        for a in args:
            if type(a) is list:
                vals += [_truth(x) for x in a if x is not None and type(x) is not str]
            else:
                vals.append(_truth(a))
        if not vals:
            raise _Raise(VALUE)
        return all(vals) if name == "AND" else any(vals)
    if name == "NOT":
        return not _truth(_one(name, args))
    if name == "CONCATENATE":
        return "".join(_text(a) for a in args)
    raise Unsupported(name)


def _sum_range(values: list) -> float:
    total = 0.0
    for x in values:
        t = type(x)
        if t is float or t is int:
            total += x
        elif t is XlError:
            raise _Raise(x)
    return total


def _one(name: str, args: list):
    if len(args) != 1:
        raise Unsupported(f"{name} needs 1 argument")
    return args[0]


_FUNCS = {"SUM", "AVERAGE", "MIN", "MAX", "COUNT", "COUNTA", "PRODUCT", "SUMPRODUCT", "ROUND", "ROUNDUP",
          "ROUNDDOWN", "INT", "ABS", "MOD", "IF", "IFERROR", "AND", "OR", "NOT", "CONCATENATE"}

# ---------------------------------------------------------------- tokens and the compiler

_SHEET = r"(?:'(?P<qs>(?:[^']|'')+)'|(?P<us>[^\W\d][\w.#]*))!"
_CELLREF = r"\$?[A-Za-z]{1,3}\$?[0-9#]+"
_TOKEN = re.compile(
    r"\s*(?:"
    r'(?P<str>"(?:[^"]|"")*")'
    rf"|(?P<ref>(?:{_SHEET})?(?P<a>{_CELLREF})(?::(?P<b>{_CELLREF}))?)(?![\w(])"
    r"|(?P<fn>(?:_xlfn\.)?[A-Za-z][A-Za-z0-9.]*)\("
    r"|(?P<bool>TRUE|FALSE)(?![\w(])"
    r"|(?P<num>[0-9#]+(?:\.[0-9#]*)?(?:[eE][+-]?[0-9#]+)?|\.[0-9#]+(?:[eE][+-]?[0-9#]+)?)"
    r"|(?P<op><>|<=|>=|[-+*/^&=<>%(),])"
    r")", re.I)
_SPLIT = re.compile(r"\$?([A-Za-z]{1,3})\$?([0-9#]+)")


def _col_number(letters: str) -> int:
    n = 0
    for ch in letters:
        n = n * 26 + ord(ch) - 64
    return n


@functools.lru_cache(maxsize=None)
def _col_letters(n: int) -> str:
    s = ""
    while n:
        n, r = divmod(n - 1, 26)
        s = chr(65 + r) + s
    return s


def _tokens(s: str) -> list[tuple[str, str, re.Match]]:
    out = []
    pos = 0
    s = s.rstrip()
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if not m or m.end() == pos:
            raise Unsupported(f"cannot parse {s[pos:pos + 12]!r}")
        kind = next(k for k in ("str", "ref", "fn", "bool", "num", "op") if m.group(k) is not None)
        out.append((kind, m.group(kind), m))
        pos = m.end()
    return out


def _range(ev: Evaluator, g: dict, sheet: str, cols: tuple, r1: int, r2: int) -> list:
    """A range reference's values, row by row, each column of a row in turn."""
    if r1 > r2:
        r1, r2 = r2, r1
    if (r2 - r1 + 1) * len(cols) > MAX_RANGE:
        raise Unsupported("range too large")
    keys = [c + rs for rs in map(str, range(r1, r2 + 1)) for c in cols]
    out = list(map(g.get, keys, itertools.repeat(_MISS)))  # (a number in the grid is final: read them all at once)
    kinds = list(map(type, out))
    if kinds.count(float) != len(kinds):  # the others in order, each read again (one before may have computed it)
        get, slow = g.get, ev.slow
        for i in itertools.compress(range(len(kinds)), map(operator.is_not, kinds, itertools.repeat(float))):
            k = keys[i]
            v = get(k, _MISS)
            out[i] = v if type(v) is float else slow(g, sheet, k, v)
    return out


def _iferror(x: Callable, alt: Callable):
    try:
        v = x()
    except (_Raise, ZeroDivisionError, OverflowError, ValueError):
        return alt()
    return alt() if type(v) is XlError else v


_PY_OP = {"=": "==", "<>": "!=", "<": "<", ">": ">", "<=": "<=", ">=": ">="}
_NAMESPACE = {"_num": _num, "_text": _text, "_truth": _truth, "_compare": _compare, "_call": _call,
              "_round": _round, "_range": _range, "_iferror": _iferror, "_M": _MISS, "float": float, "int": int,
              "type": type, "bool": bool}
_templates: dict[str, tuple[Callable, tuple]] = {}
_shapes: dict[str, Callable] = {}


def _compile(template: str) -> tuple[Callable, tuple]:
    """(function, its constants) of a row template: the function is compiled once per *shape* (the generated
    source, which holds every constant as ``P[i]``), so ``SUM(H3:H202)`` and ``SUM(H204:H403)`` share one."""
    got = _templates.get(template)
    if got is None:
        if len(_templates) > 20_000:
            _templates.clear()
        src, params = _Gen(template).source()
        fn = _shapes.get(src)
        if fn is None:
            if len(_shapes) > 5_000:
                _shapes.clear()
            ns = dict(_NAMESPACE)
            exec(compile(src, "<formula>", "exec"), ns)  # source generated from our own tokens, never the text
            fn = _shapes[src] = ns["_f"]
        got = _templates[template] = (fn, tuple(params))
    return got


def _with_row(pattern: str):
    """A leaf text that may hold the row placeholder: (constant text, None) or (None, pattern)."""
    return (pattern, None) if "#" not in pattern else (None, pattern)


class _Gen:
    """Recursive descent over the tokens, Excel's precedence from loosest: comparison, &, + -, * /, ^, %,
    unary minus, reference. Each method returns a node ``(source, kind)`` of Python source over ``ev`` (the
    Evaluator), ``s`` (the sheet), ``R`` (the row digits), ``g`` (the sheet's grid) and ``P`` (the constants);
    kind "num" is a float for sure, "str" a text and "bool" a boolean for sure (no coercion call: a bill's
    IF(H5>=1000000,"复核:"&E5,"") makes none), "ref" a reference (then the node has a third item: its source as a
    number). The source is Python only we write: every constant of the text goes into ``P``, never into the source."""

    def __init__(self, text: str):
        self.toks = _tokens(text)
        self.i = 0
        self.params: list = []
        self.temps = 0

    def source(self) -> tuple[str, list]:
        e = self.comparison()
        if self.i != len(self.toks):
            raise Unsupported("trailing tokens")
        return f"def _f(ev, s, g, R, P):\n    return {e[0]}\n", self.params

    def param(self, value) -> str:
        self.params.append(value)
        return f"P[{len(self.params) - 1}]"

    def tmp(self) -> str:
        self.temps += 1
        return f"_t{self.temps}"

    def num(self, e) -> str:
        if e[1] == "num":
            return e[0]
        if e[1] == "ref":
            return e[2]
        t = self.tmp()
        return f"({t} if type({t} := {e[0]}) is float else _num({t}))"

    def text(self, e) -> str:
        return e[0] if e[1] == "str" else f"_text({e[0]})"

    def truth(self, e) -> str:
        if e[1] == "bool":
            return e[0]
        t = self.tmp()
        return f"({t} if type({t} := {e[0]}) is bool else _truth({t}))"

    def peek(self):
        return self.toks[self.i][:2] if self.i < len(self.toks) else (None, None)

    def take_op(self, ops) -> str | None:
        k, v = self.peek()
        if k == "op" and v in ops:
            self.i += 1
            return v
        return None

    def comparison(self):
        f = self.concat()
        while True:
            op = self.take_op(("=", "<>", "<", ">", "<=", ">="))
            if op is None:
                return f
            g = self.concat()
            a, b = self.tmp(), self.tmp()  # two numbers compare in Python; anything else by Excel's order
            if g[1] == "num":  # (a float for sure, evaluated after the left side either way)
                f = (f"({a} {_PY_OP[op]} {g[0]} if type({a} := {f[0]}) is float else _compare({op!r}, {a}, {g[0]}))",
                     "bool")
            else:
                f = (f"({a} {_PY_OP[op]} {b} if (type({a} := {f[0]}) is float) & (type({b} := {g[0]}) is float) "
                     f"else _compare({op!r}, {a}, {b}))", "bool")

    def concat(self):
        f = self.additive()
        while self.take_op(("&",)):
            g = self.additive()
            f = (f"({self.text(f)} + {self.text(g)})", "str")
        return f

    def additive(self):
        f = self.term()
        while True:
            op = self.take_op(("+", "-"))
            if op is None:
                return f
            g = self.term()
            f = (f"({self.num(f)} {op} {self.num(g)})", "num")

    def term(self):
        f = self.power()
        while True:
            op = self.take_op(("*", "/"))
            if op is None:
                return f
            g = self.power()
            f = (f"({self.num(f)} {op} {self.num(g)})", "num")

    def power(self):
        f = self.percent()
        while self.take_op(("^",)):
            g = self.percent()
            f = (f"({self.num(f)} ** {self.num(g)})", "any")  # a negative base's fraction power is complex
        return f

    def percent(self):
        f = self.unary()
        while self.take_op(("%",)):
            f = (f"({self.num(f)} / 100.0)", "num")
        return f

    def unary(self):
        op = self.take_op(("-", "+"))
        if op == "-":
            return (f"(-{self.num(self.unary())})", "num")
        if op == "+":
            return self.unary()
        return self.atom()

    def atom(self):
        if self.i >= len(self.toks):
            raise Unsupported("unexpected end")
        kind, val, m = self.toks[self.i]
        self.i += 1
        if kind == "num":
            const, pat = _with_row(val)
            if pat is None:
                return (self.param(float(const)), "num")
            return (f"float({self.param(pat)}.replace('#', R))", "num")
        if kind == "str":
            const, pat = _with_row(val[1:-1].replace('""', '"'))
            if pat is None:
                return (self.param(const), "str")
            return (f"{self.param(pat)}.replace('#', R)", "str")
        if kind == "bool":
            return ("True" if val.upper() == "TRUE" else "False", "any")
        if kind == "ref":
            return self.reference(m)
        if kind == "fn":
            return self.function(val.upper().removeprefix("_XLFN."))
        if (kind, val) == ("op", "("):
            f = self.comparison()
            if not self.take_op((")",)):
                raise Unsupported("missing )")
            return f
        raise Unsupported(f"unexpected {val!r}")

    def row_int(self, row: str) -> str:
        if row == "#":
            return "int(R)"
        if "#" in row:
            return f"int({self.param(row)}.replace('#', R))"
        return self.param(int(row))

    def reference(self, m: re.Match):
        sheet = m.group("qs")
        sheet = sheet.replace("''", "'") if sheet is not None else m.group("us")
        if sheet is not None and "#" in sheet:
            raise Unsupported("a sheet name holding the row number")
        if sheet is None:
            grid, name = "g", "s"
        else:
            name = self.param(sheet)
            grid = f"ev.grid({name})"
        a = _SPLIT.fullmatch(m.group("a"))
        col, row = a.group(1).upper(), a.group(2)
        if m.group("b") is None:
            if row == "#":  # the cell's own row: most references of a bill's row formulas
                key = f"{self.param(col)} + R"
            elif "#" in row:
                key = f"{self.param(col)} + {self.param(row)}.replace('#', R)"
            else:
                key = self.param(col + row)
            v, k = self.tmp(), self.tmp()
            if sheet is None:
                look, slow = f"g.get({k} := {key}, _M)", f"ev.slow(g, s, {k}, {v})"
            else:
                gt = self.tmp()
                look, slow = (f"({gt} := {grid}).get({k} := {key}, _M)", f"ev.slow({gt}, {name}, {k}, {v})")
            return (f"({v} if type({v} := {look}) is float else {slow})", "ref",
                    f"({v} if type({v} := {look}) is float else _num({slow}))")
        b = _SPLIT.fullmatch(m.group("b"))
        c1, c2 = sorted((_col_number(col), _col_number(b.group(1).upper())))
        cols = tuple(_col_letters(c) for c in range(c1, c2 + 1))
        return (f"_range(ev, {grid}, {name}, {self.param(cols)}, {self.row_int(row)}, {self.row_int(b.group(2))})",
                "list")

    def function(self, name: str):
        if name not in _FUNCS:
            raise Unsupported(name)
        args = []
        if not self.take_op((")",)):
            while True:
                if self.peek() in (("op", ","), ("op", ")")):
                    args.append(("None", "any"))  # an omitted argument
                else:
                    args.append(self.comparison())
                if self.take_op((")",)):
                    break
                if not self.take_op((",",)):
                    raise Unsupported("missing , or )")
        if name == "IF":
            if not 1 <= len(args) <= 3:
                raise Unsupported("IF arity")
            yes = args[1][0] if len(args) > 1 else "True"
            no = args[2][0] if len(args) > 2 else "False"
            return (f"({yes} if {self.truth(args[0])} else {no})", "any")
        if name == "IFERROR":
            if len(args) != 2:
                raise Unsupported("IFERROR arity")
            return (f"_iferror(lambda: {args[0][0]}, lambda: {args[1][0]})", "any")
        if name in ("ROUND", "ROUNDUP", "ROUNDDOWN") and len(args) == 2:  # the commonest calls, without _call
            mode = {"ROUND": "half-up", "ROUNDUP": "up", "ROUNDDOWN": "down"}[name]
            return (f"_round({self.num(args[0])}, {self.num(args[1])}, {mode!r})", "num")
        return (f"_call({name!r}, [{', '.join(a[0] for a in args)}])", "any")
