"""RTF reader (striprtf) with table rows recovered.

Why striprtf: small, maintained, decodes ``\\'xx`` by the document's ANSI code page and ``\\uN``.
It flattens tables into ``a|b|`` text, which a real ``|`` in a paragraph would make ambiguous, so
``\\cell`` is rewritten to a private-use character first and rows are rebuilt from it.
"""

from __future__ import annotations

import re

from tender_pool.extract.blocks import Block, Cell, Meta, Para, Table, TableBlock
from tender_pool.extract.errors import ExtractError, short

CELL_MARK = "\ue000"
_CELL_RE = re.compile(r"\\(?:nest)?cell(?![a-z])")
_CPG_RE = re.compile(r"\\ansicpg(\d+)")


def read_rtf(path: str) -> list[Block]:
    from striprtf.striprtf import rtf_to_text

    with open(path, "rb") as fh:
        raw = fh.read()
    text = raw.decode("latin-1")  # RTF is 7-bit; \'xx escapes carry the code page bytes
    m = _CPG_RE.search(text[:4096])
    encoding = f"cp{m.group(1)}" if m else "cp1252"
    if encoding == "cp65001":
        encoding = "utf-8"
    text = _CELL_RE.sub(r"\\u57344?", text)
    try:
        plain = rtf_to_text(text, encoding=encoding, errors="replace")
    except LookupError:
        plain = rtf_to_text(text, encoding="cp1252", errors="replace")
    except (RecursionError, ValueError, IndexError) as exc:
        raise ExtractError("corrupt", f"unreadable RTF ({short(exc)})") from None
    blocks: list[Block] = [Meta(format="rtf", engine="striprtf")]
    rows: list[list[Cell]] = []

    def flush() -> None:
        if rows:
            blocks.append(TableBlock(Table(rows=list(rows))))
            rows.clear()

    for line in plain.splitlines():
        if CELL_MARK in line:
            cells = line.split(CELL_MARK)
            if cells and not cells[-1].strip():
                cells = cells[:-1]
            rows.append([Cell(text=c.strip()) for c in cells])
            continue
        flush()
        if line.strip():
            blocks.append(Para(text=line.strip()))
    flush()
    return blocks
