"""Excel number formats → the string a spreadsheet displays (the subset tender sheets use).

Why our own: openpyxl and xlrd return raw floats/datetimes plus a format code; the LLM must see
``1,234.50``, ``12.5%`` and ``2024-03-01`` as the user does. Covered: General, fixed decimals,
thousands separators, percent, scientific, literal prefixes/suffixes, date/time codes (incl. Chinese
年月日), sections ``pos;neg;zero;text``. Anything exotic falls back to General.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import math
import re

_DATE_TOKENS = re.compile(r"(yyyy|yy|mmmm|mmm|mm|m|dddd|ddd|dd|d|hh|h|ss|s|am/pm|a/p)", re.I)
_QUOTED = re.compile(r'"([^"]*)"|\\(.)')
_BUILTIN_DATE_IDS = {14, 15, 16, 17, 22, 27, 28, 29, 30, 31, 34, 35, 36, 50, 51, 52, 53, 54, 55, 56, 57, 58}
EXCEL_EPOCH = dt.datetime(1899, 12, 30)


def general(v: float) -> str:
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(v)
    if v != v or v in (float("inf"), float("-inf")):
        return "#NUM!"
    # LibreOffice (the reference display) prints General with up to 15 significant digits
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    a = abs(v)
    if 0 < a < 1:
        return _general_fraction(v)
    if a >= 1e15:
        s = f"{v:.5E}"
        mant, exp = s.split("E")
        mant = mant.rstrip("0").rstrip(".")
        return f"{mant}E{exp[0]}{int(exp[1:]):02d}"
    s = f"{v:.15g}"
    if "e" in s:
        s = f"{v:.15f}".rstrip("0").rstrip(".")
    return s


def _general_fraction(v: float) -> str:
    """0 < |v| < 1 under General, as Excel and LibreOffice show it (POI's NumberToTextConverter): 15 significant
    digits, written out unless that takes more than 20 characters (-4.19095158576965E-09, 0.000123)."""
    mant, exp = f"{abs(v):.14e}".split("e")
    digits = mant.replace(".", "").rstrip("0") or "0"
    e = int(exp)
    sign = "-" if v < 0 else ""
    if 2 + (-e - 1) + len(digits) > 20:
        return f"{sign}{digits[0]}{'.' + digits[1:] if len(digits) > 1 else ''}E-{-e:02d}"
    if e >= 0:  # rounded up to 1
        return f"{sign}1"
    return f"{sign}0.{'0' * (-e - 1)}{digits}"


@functools.lru_cache(maxsize=512)
def _strip_codes(section: str) -> str:
    section = re.sub(r"\[\$([^\]\-]*)(?:-[^\]]*)?\]", lambda m: f'"{m.group(1)}"' if m.group(1) else "", section)  # [$$-409]
    section = re.sub(r"\[[^\]]*\]", "", section)  # [Red], [$-804], [DBNum1]
    section = section.replace("_)", "").replace("_(", "")
    section = re.sub(r"_.|_$", "", section)  # a padding space ("_)"), also where the code's end was stripped
    section = re.sub(r"\*.", "", section)
    return section


def is_date_format(code: str) -> bool:
    code = _QUOTED.sub("", _strip_codes(code.split(";")[0]))
    return bool(re.search(r"[ymdhs]", code, re.I)) and not re.search(r"[#?]|0[.,]", code)


def format_date(value: dt.datetime | dt.date | dt.time, code: str) -> str:
    section = _strip_codes(code.split(";")[0])
    if isinstance(value, dt.time):
        value = dt.datetime.combine(dt.date(1899, 12, 30), value)
    elif not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    out: list[str] = []
    # tokenise with literals preserved
    tokens = re.findall(r'"[^"]*"|\\.|yyyy|yy|mmmm|mmm|mm|m|dddd|ddd|dd|d|hh|h|ss|s|am/pm|AM/PM|a/p|\.0+|.', section)
    has_ampm = any(t.lower() in ("am/pm", "a/p") for t in tokens)
    prev_h = False
    for i, tok in enumerate(tokens):
        low = tok.lower()
        if tok.startswith('"'):
            out.append(tok[1:-1])
        elif tok.startswith("\\"):
            out.append(tok[1:])
        elif low == "yyyy":
            out.append(f"{value.year:04d}")
        elif low == "yy":
            out.append(f"{value.year % 100:02d}")
        elif low in ("mm", "m"):
            # minutes when after hours or before seconds
            nxt = next((t.lower() for t in tokens[i + 1:] if re.match(r"[a-z]", t, re.I)), "")
            if prev_h or nxt.startswith("s"):
                out.append(f"{value.minute:02d}" if low == "mm" else str(value.minute))
            else:
                out.append(f"{value.month:02d}" if low == "mm" else str(value.month))
        elif low == "mmm":
            out.append(value.strftime("%b"))
        elif low == "mmmm":
            out.append(value.strftime("%B"))
        elif low == "dd":
            out.append(f"{value.day:02d}")
        elif low == "d":
            out.append(str(value.day))
        elif low == "ddd":
            out.append(value.strftime("%a"))
        elif low == "dddd":
            out.append(value.strftime("%A"))
        elif low in ("hh", "h"):
            h = value.hour % 12 or 12 if has_ampm else value.hour
            out.append(f"{h:02d}" if low == "hh" else str(h))
        elif low in ("ss", "s"):
            out.append(f"{value.second:02d}" if low == "ss" else str(value.second))
        elif low in ("am/pm", "a/p"):
            out.append("AM" if value.hour < 12 else "PM")
        elif tok.startswith(".0"):
            out.append("." + f"{value.microsecond:06d}"[: len(tok) - 1])
        else:
            out.append(tok)
        if re.match(r"[a-z]", tok, re.I):
            prev_h = low in ("hh", "h")
    return "".join(out)


@functools.lru_cache(maxsize=512)
def _plan(section: str) -> tuple:
    """A number section parsed once: ("text", literal) without a numeric core, ("exp", prefix, suffix,
    percent, decimals), or ("fixed", prefix, suffix, percent, thousands scaling, decimals, required, thousands, min_int)."""
    text = section
    # split literal text around the numeric core
    core_match = re.search(r"[#0?][#0?,.]*(E[+-][0#]+)?%?|%", _QUOTED.sub(lambda m: "\x00" * len(m.group(0)), text))
    if not core_match:
        return ("text", _QUOTED.sub(lambda m: m.group(1) or m.group(2), text))
    prefix = _QUOTED.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), text[: core_match.start()])
    suffix_raw = text[core_match.end():]
    core = text[core_match.start(): core_match.end()]
    percent = "%" in core or "%" in suffix_raw
    suffix = _QUOTED.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), suffix_raw)
    if percent and "%" in core:
        suffix = "%" + suffix
    core_num = core.replace("%", "")
    if "E" in core_num.upper():
        mant = core_num.upper().split("E")[0]
        return ("exp", prefix, suffix, percent, len(mant.split(".")[1]) if "." in mant else 0)
    # trailing commas scale by 1000
    thousands_scale = 0
    while core_num.endswith(","):
        thousands_scale += 1
        core_num = core_num[:-1]
    int_part, _, dec_part = core_num.partition(".")
    return ("fixed", prefix, suffix, percent, thousands_scale, len(dec_part), dec_part.count("0"), "," in int_part,
            int_part.replace(",", "").count("0"))


def _half_up(v: float, decimals: int) -> float:
    """v nudged one ulp away from zero when it lies exactly halfway at ``decimals`` places: spreadsheets round
    such ties up (4521330.625 shows 4,521,330.63), Python's format() rounds them to even."""
    x = v * _TENS[decimals] if decimals < len(_TENS) else v
    if x - math.floor(x) == 0.5:
        return math.nextafter(v, math.copysign(math.inf, v))
    return v


_TENS = [10.0 ** k for k in range(16)]


def _format_number(v: float, section: str) -> str:
    plan = _plan(section)
    if plan[0] == "text":
        return plan[1].replace("@", general(v))
    prefix, suffix, percent = plan[1], plan[2], plan[3]
    if percent:
        v = v * 100
    if plan[0] == "exp":
        s = f"{v:.{plan[4]}E}"
        m, e = s.split("E")
        return prefix + f"{m}E{e[0]}{int(e[1:]):02d}" + suffix
    _, _, _, _, scale, decimals, required_dec, thousands, min_int = plan
    for _ in range(scale):
        v /= 1000
    v = _half_up(abs(v), decimals)
    s = f"{v:,.{decimals}f}" if thousands else f"{v:.{decimals}f}"
    if decimals and required_dec < decimals:
        whole, frac = s.split(".")
        frac = frac.rstrip("0")
        if len(frac) < required_dec:
            frac = frac + "0" * (required_dec - len(frac))
        s = whole + ("." + frac if frac else ".")
    whole = s.split(".")[0].replace(",", "")
    if min_int == 0 and whole == "0":
        s = s[1:] if s.startswith("0") else s
    elif len(whole) < min_int:
        s = "0" * (min_int - len(whole)) + s
    return prefix + s + suffix


def format_value(value, code: str | None, *, is_date: bool | None = None) -> str:
    """Display string for ``value`` under ``code`` (Excel format code)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    code = (code or "General").strip()
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        if code.lower() == "general" or not re.search(r"[ymdhs]", _QUOTED.sub("", code), re.I):
            if isinstance(value, dt.datetime) and value.time() == dt.time(0):
                return value.strftime("%Y-%m-%d")
            if isinstance(value, dt.datetime):
                return value.strftime("%Y-%m-%d %H:%M:%S")
            return value.isoformat()
        try:
            return format_date(value, code)
        except (ValueError, OverflowError):
            return str(value)
    if isinstance(value, dt.timedelta):
        return str(value)
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if code.lower() in ("general", "@", ""):
        return general(value if isinstance(value, int) else v)
    sections = code.split(";")
    try:
        if is_date or (is_date is None and is_date_format(code)):
            try:
                return format_date(EXCEL_EPOCH + dt.timedelta(days=v), code)
            except (OverflowError, ValueError):
                return general(v)
        if v < 0 and len(sections) >= 2:
            sec = _strip_codes(sections[1])
            return _format_number(-v, sec) if sec.strip() else ""
        if v == 0 and len(sections) >= 3:
            sec = _strip_codes(sections[2])
            return _format_number(v, sec) if sec.strip() else ""
        out = _format_number(abs(v), _strip_codes(sections[0]))
        if v < 0 and not out.startswith("-"):
            out = "-" + out
        return out
    except (ValueError, IndexError, OverflowError):
        return general(v)


def _section_formatter(section: str):
    """``_format_number(x, section)`` as a function of x; one ``format()`` call for plain fixed-decimal plans."""
    plan = _plan(section)
    if plan[0] == "fixed":
        _, prefix, suffix, percent, scale, decimals, required, thousands, min_int = plan
        if not scale and required == decimals and min_int == 1 and decimals < len(_TENS):
            spec = f"{',' if thousands else ''}.{decimals}f"
            tens = _TENS[decimals]

            def fixed(x):
                if percent:
                    x = x * 100
                t = x * tens
                if t - math.floor(t) == 0.5:  # an exact tie: half up, as _half_up
                    x = math.nextafter(x, math.copysign(math.inf, x))
                return prefix + format(x, spec) + suffix
            return fixed
    return lambda x: _format_number(x, section)


@functools.lru_cache(maxsize=256)
def formatter(code: str):
    """``format_value(v, code, is_date=False)`` for a number v, compiled once per format code.

    Why: a large sheet formats tens of thousands of numbers under a handful of codes; sections are split and
    planned once here, and plain fixed-decimal sections (``0.000``, ``#,##0.00``, ``$#,##0.00_);($#,##0.00)``)
    become one ``format()`` call (~0.5 µs instead of ~5 µs). Same results as ``format_value``."""
    c = (code or "General").strip()
    if c.lower() in ("general", "@", ""):
        return general
    if is_date_format(c):
        return lambda v: format_value(v, code, is_date=False)
    sections = c.split(";")
    if len(sections) == 1:
        plan = _plan(_strip_codes(c))
        if plan[0] == "fixed" and plan[1:5] == ("", "", False, 0) and plan[6] == plan[5] and plan[8] == 1 \
                and plan[5] < len(_TENS):
            spec, tens = f"{',' if plan[7] else ''}.{plan[5]}f", _TENS[plan[5]]

            def plain(v) -> str:  # the commonest codes (0.00, #,##0.00): sign and digits straight from format()
                if isinstance(v, bool):
                    return "TRUE" if v else "FALSE"
                t = v * tens
                if t - math.floor(t) == 0.5:
                    v = math.nextafter(v, math.copysign(math.inf, v))
                out = format(v, spec)
                return out[1:] if out[0] == "-" and not v < 0 else out
            plain.spec, plain.tens, plain.decimals = spec, tens, plan[5]  # format_all formats a column by them
            return plain
    pos = _section_formatter(_strip_codes(sections[0]))
    neg = zero = None
    if len(sections) >= 2:
        sec = _strip_codes(sections[1])
        neg = _section_formatter(sec) if sec.strip() else (lambda x: "")
    if len(sections) >= 3:
        sec = _strip_codes(sections[2])
        zero = _section_formatter(sec) if sec.strip() else (lambda x: "")

    def show(v) -> str:
        if isinstance(v, bool):
            return "TRUE" if v else "FALSE"
        v = float(v)
        try:
            if v < 0 and neg is not None:
                return neg(-v)
            if v == 0 and zero is not None:
                return zero(v)
            out = pos(abs(v))
            if v < 0 and not out.startswith("-"):
                out = "-" + out
            return out
        except (ValueError, IndexError, OverflowError):
            return general(v)
    return show


def format_all(show, nums: list, exact: bool = False) -> list[str]:
    """``[show(x) for x in nums]`` for a ``formatter`` and numbers parsed from a file (never bools), a column at
    a time: General integers are ``str``, and the plain fixed-decimal codes are one C-level ``format`` per number
    with only the exact ties and zeros (a -0.0) formatted again one by one. Why: a 12k-row bill formats ~50k
    numbers; one Python call each was a sixth of its reading time. ``exact``: the caller knows there are no
    ties or -0 (every number an int, or no more decimals than the code shows and no sign); with General, it
    must mean every number is an int."""
    if show is general and exact:
        return list(map(str, nums))
    spec = getattr(show, "spec", None)
    if spec is None:
        return list(map(show, nums))
    out = list(map(format, nums, itertools.repeat(spec)))
    if not exact:  # an int times 10**k is never a tie, and never -0
        tens, floor = show.tens, math.floor
        for i in [i for i, x in enumerate(nums) if x == 0 or (t := x * tens) - floor(t) == 0.5]:
            out[i] = show(nums[i])
    return out
