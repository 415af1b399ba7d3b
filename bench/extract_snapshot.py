"""Snapshot of ``extract()`` over the corpus's .xlsx/.xls/.docx files (and the generated formula bills), to show a
speed change alters no output: Markdown, pages, engine, warnings and, for the bills, every cell of every sheet.

Run: ``.venv/bin/python bench/extract_snapshot.py OUT.json`` before and after a change, then
``.venv/bin/python bench/extract_snapshot.py --diff BEFORE.json AFTER.json`` (exit 1 on any difference).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "extract"))


def snapshot() -> dict:
    import bigbook

    from tender_pool.extract.api import extract
    from tender_pool.extract.errors import ExtractError
    from tender_pool.extract.xlsx import read_xlsx

    corpus = Path(os.environ.get("TENDER_POOL_CORPUS", "/work/shared/corpus")) / "files"
    paths = sorted(p for p in corpus.rglob("*") if p.suffix.lower() in (".xlsx", ".xls", ".docx"))
    paths += [p for scale in (10, 1) for p in bigbook.formula_paths(scale)]
    out = {}
    for p in paths:
        try:
            x = extract(str(p), timeout=300)
            rec = {"md": hashlib.sha256(x.markdown.encode()).hexdigest(), "pages": x.pages,
                   "pages_source": x.pages_source, "engine": x.engine, "warnings": x.warnings}
        except ExtractError as exc:
            rec = {"error": [exc.kind, str(exc)]}
        if p.suffix.lower() == ".xlsx":  # every cell, in order, of the stream's (or openpyxl's) blocks
            try:
                cells = [(b.name, [(c.r, c.c, c.v, c.type, getattr(c, "wrap", None)) for c in b.cells])
                         for b in read_xlsx(str(p)) if hasattr(b, "cells")]
                rec["cells"] = hashlib.sha256(repr(cells).encode()).hexdigest()
            except Exception as exc:  # noqa: BLE001 - recorded as it is
                rec["cells"] = f"{type(exc).__name__}: {exc}"
        out[str(p)] = rec
    return out


def main() -> int:
    if sys.argv[1] == "--diff":
        a, b = (json.loads(Path(f).read_text()) for f in sys.argv[2:4])
        bad = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        for k in bad:
            print(f"DIFFERS {k}\n  before {a.get(k)}\n  after  {b.get(k)}")
        print(f"{len(a)} files before, {len(b)} after, {len(bad)} differ")
        return 1 if bad else 0
    Path(sys.argv[1]).write_text(json.dumps(snapshot(), indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
