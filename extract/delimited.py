"""CSV/TSV reader (stdlib csv): one sheet, delimiter and encoding sniffed (UTF-8/16, GB18030).

Why a sheet: downstream a CSV is a table like any worksheet, so it shares the sheet rendering.
"""

from __future__ import annotations

import csv
import io
import os

from tender_pool.extract.blocks import Block, Meta, Sheet, SheetCell
from tender_pool.extract.errors import ExtractError
from tender_pool.extract.sniff import decode_text


def read_csv(path: str) -> list[Block]:
    with open(path, "rb") as fh:
        raw = fh.read()
    dec = decode_text(raw)
    if dec is None:
        raise ExtractError("unsupported", "binary data, not CSV text")
    text, enc = dec
    sample = text[:65536]
    try:
        dialect = csv.Sniffer().sniff(sample, delimiters="\t,;|")
        delim = dialect.delimiter
    except csv.Error:
        first = sample.splitlines()[0] if sample else ""
        delim = max("\t,;|", key=first.count)
    cells: list[SheetCell] = []
    reader = csv.reader(io.StringIO(text), delimiter=delim)
    try:
        for r, row in enumerate(reader):
            for c, v in enumerate(row):
                v = v.strip()
                if v:
                    cells.append(SheetCell(r, c, v))
    except csv.Error as exc:
        raise ExtractError("corrupt", f"malformed CSV ({exc})") from None
    name = os.path.splitext(os.path.basename(path))[0] or "Sheet1"
    return [Meta(format="csv", engine=f"csv ({enc}, {'TAB' if delim == chr(9) else delim})"),
            Sheet(name=name, cells=cells)]
