"""Table cells in place: a generated document's tables (its ``truth.json``) against the tables a reader
gave (``TableBlock``s), the way every format's tables are judged: each truth row is matched with the
extracted row (of any table) that has the most of its cells at the same column, merged cells placed
at their top-left position; the score is the share of the truth's non-empty cells so found.
Text is compared without whitespace (a PDF's line wraps inside a cell are not the document's)."""

from __future__ import annotations

import re

_WS = re.compile(r"\s+")


def norm(text: str | None) -> str:
    return _WS.sub("", text or "")


def place(rows: list[list[dict]]) -> list[list[str | None]]:
    """Rows of cells with colspan/rowspan → rows of texts by grid column (None: covered by a merge)."""
    occupied: set[tuple[int, int]] = set()
    out: list[list[str | None]] = []
    for ri, row in enumerate(rows):
        line: dict[int, str | None] = {}
        col = 0
        for cell in row:
            while (ri, col) in occupied:
                line[col] = None
                col += 1
            span, down = max(1, cell.get("colspan", 1)), max(1, cell.get("rowspan", 1))
            for k in range(span):
                line[col + k] = cell.get("text", "") if k == 0 else None
                for rr in range(1, down):
                    occupied.add((ri + rr, col + k))
            col += span
        width = max(line) + 1 if line else 0
        out.append([line.get(c) for c in range(width)])
    return out


def truth_tables(truth: dict) -> list[list[list[dict]]]:
    """Every table of a truth.json (nested ones too), as rows of cell dicts."""
    found: list[list[list[dict]]] = []

    def walk(obj):
        if isinstance(obj, dict):
            if obj.get("type") == "table" or ("rows" in obj and isinstance(obj["rows"], list)
                                              and obj["rows"] and isinstance(obj["rows"][0], list)):
                found.append(obj["rows"])
            for v in obj.values():
                walk(v)
        elif isinstance(obj, list):
            for v in obj:
                walk(v)
    walk(truth.get("blocks", truth))
    return found


def block_rows(table) -> list[list[dict]]:
    """A ``blocks.Table`` as rows of cell dicts."""
    return [[{"text": c.text, "colspan": c.colspan, "rowspan": c.rowspan} for c in row] for row in table.rows]


def in_place(truth: dict, tables: list) -> tuple[int, int]:
    """(cells in place, non-empty truth cells) for the extracted ``blocks.Table``s."""
    ours = [[norm(t) if t is not None else None for t in row] for tb in tables for row in place(block_rows(tb))]
    found = total = 0
    for rows in truth_tables(truth):
        for row in place(rows):
            want = [(c, norm(t)) for c, t in enumerate(row) if t is not None and norm(t)]
            total += len(want)
            best = 0
            for got in ours:
                hits = sum(1 for c, t in want if c < len(got) and got[c] == t)
                best = max(best, hits)
            found += best
    return found, total
