"""HTML and MHT (web archive) reader on the stdlib parser.

Why: portals export "Word" and "Excel" files as HTML/MHT with a .doc/.xls name. html.parser is
tolerant of the tag soup those exporters write and needs no dependency. Tables keep colspan/rowspan
and nesting; scripts/styles are dropped.
"""

from __future__ import annotations

import email
import email.policy
import re
from html.parser import HTMLParser

from tender_pool.extract.blocks import Block, Cell, Image, Meta, Para, Table, TableBlock
from tender_pool.extract.errors import ExtractError
from tender_pool.extract.sniff import decode_text

_BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "header",
          "footer", "blockquote", "pre", "dt", "dd", "title", "hr", "center", "form", "address"}
_SKIP = {"script", "style", "head", "noscript", "template", "xml"}
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([\w-]+)""", re.I)


def _int(v: str | None) -> int:
    try:
        return max(1, min(1000, int((v or "1").strip().rstrip(";"))))
    except ValueError:
        return 1


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[Block] = []
        self.buf: list[str] = []
        self.heading = 0
        self.list_stack: list[list] = []  # [kind, counter]
        self.li_marker = ""
        self.skip = 0
        # table state: stack of dicts {table, row, cell, buf}
        self.tables: list[dict] = []

    # -- text sinks
    def _sink(self) -> list[str]:
        if self.tables and self.tables[-1]["cell"] is not None:
            return self.tables[-1]["cell_buf"]
        return self.buf

    def flush(self) -> None:
        if self.tables and self.tables[-1]["cell"] is not None:
            self.tables[-1]["cell_buf"].append("\n")
            return
        text = re.sub(r"[ \t\r\n\u00a0]+", " ", "".join(self.buf)).strip()
        self.buf = []
        if text:
            level = len(self.list_stack) - 1 if self.list_stack else 0
            self.blocks.append(Para(text=text, heading=self.heading, list_marker=self.li_marker if self.list_stack else "",
                                    list_level=max(0, level)))
        self.li_marker = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in _SKIP:
            self.skip += 1
            return
        if self.skip:
            return
        if tag == "table":
            self.flush()
            self.tables.append({"rows": [], "row": None, "cell": None, "cell_buf": [], "nested": None})
            return
        if self.tables:
            t = self.tables[-1]
            if tag == "tr":
                self._end_cell(t)
                if t["row"] is not None:
                    t["rows"].append(t["row"])
                t["row"] = []
                return
            if tag in ("td", "th"):
                self._end_cell(t)
                if t["row"] is None:
                    t["row"] = []
                t["cell"] = Cell(colspan=_int(a.get("colspan")), rowspan=_int(a.get("rowspan")))
                t["cell_buf"] = []
                return
        if tag == "img":
            self.blocks.append(Image(type=(a.get("src") or "").rsplit(".", 1)[-1][:5].lower()))
            return
        if tag in ("ul", "ol"):
            self.flush()
            self.list_stack.append([tag, 0])
            return
        if tag == "li":
            self.flush()
            if self.list_stack:
                self.list_stack[-1][1] += 1
                kind, n = self.list_stack[-1]
                self.li_marker = f"{n}." if kind == "ol" else "-"
            return
        if tag in _BLOCK:
            self.flush()
            if tag in ("br",):
                return
            if tag[0] == "h" and tag[1:].isdigit():
                self.heading = int(tag[1:])

    def _end_cell(self, t: dict) -> None:
        if t["cell"] is not None:
            cell = t["cell"]
            text = "".join(t["cell_buf"])
            lines = [re.sub(r"[ \t\r\u00a0]+", " ", ln).strip() for ln in text.split("\n")]
            cell.text = "\n".join(ln for ln in lines if ln)
            if t.get("nested") is not None:
                cell.table = t["nested"]
                t["nested"] = None
            if t["row"] is None:
                t["row"] = []
            t["row"].append(cell)
            t["cell"] = None

    def handle_endtag(self, tag):
        if tag in _SKIP:
            self.skip = max(0, self.skip - 1)
            return
        if self.skip:
            return
        if tag == "table" and self.tables:
            t = self.tables.pop()
            self._end_cell(t)
            if t["row"] is not None:
                t["rows"].append(t["row"])
            table = Table(rows=[r for r in t["rows"] if r])
            if self.tables:
                parent = self.tables[-1]
                if parent["cell"] is not None:
                    if parent.get("nested") is None:
                        parent["nested"] = table
                    else:
                        parent["nested"].rows.extend(table.rows)
                    return
            if table.rows:
                self.blocks.append(TableBlock(table))
            return
        if self.tables and tag in ("td", "th"):
            self._end_cell(self.tables[-1])
            return
        if self.tables and tag == "tr":
            t = self.tables[-1]
            self._end_cell(t)
            if t["row"] is not None:
                t["rows"].append(t["row"])
                t["row"] = None
            return
        if tag in ("ul", "ol"):
            self.flush()
            if self.list_stack:
                self.list_stack.pop()
            return
        if tag in _BLOCK:
            self.flush()
            if tag[0] == "h" and tag[1:].isdigit():
                self.heading = 0

    def handle_data(self, data):
        if self.skip:
            return
        self._sink().append(data)


def _html_from_mht(raw: bytes) -> str:
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    for part in msg.walk():
        if part.get_content_type() == "text/html":
            payload = part.get_payload(decode=True) or b""
            charset = part.get_content_charset() or _charset(payload) or "utf-8"
            return _decode(payload, charset)
    raise ExtractError("unsupported", "MIME archive without an HTML part")


def _charset(raw: bytes) -> str | None:
    m = _META_CHARSET.search(raw[:8192])
    return m.group(1).decode("ascii", "replace").lower() if m else None


def _decode(raw: bytes, charset: str | None) -> str:
    if charset:
        if charset.lower() in ("gb2312", "gbk"):
            charset = "gb18030"
        try:
            return raw.decode(charset)
        except (LookupError, UnicodeDecodeError):
            pass
    dec = decode_text(raw)
    return dec[0] if dec else raw.decode("utf-8", "replace")


def read_html(path: str, *, mht: bool = False) -> list[Block]:
    with open(path, "rb") as fh:
        raw = fh.read()
    text = _html_from_mht(raw) if mht else _decode(raw, _charset(raw))
    b = _Builder()
    b.feed(text)
    b.close()
    b.flush()
    while b.tables:  # unclosed tables
        b.handle_endtag("table")
    return [Meta(format="html", engine="html.parser" + ("+mht" if mht else ""))] + b.blocks
