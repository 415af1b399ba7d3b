"""Per-file wall time through ``extract()`` on the corpus, the page-estimate distribution and coverage.

Run: ``.venv/bin/python bench/bench_extract.py [--kinds docx,xlsx,pdf,doc,xls] [--warm]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "extract"))

from corpus import corpus_dir, coverage, manifest, name_of, reference_path  # noqa: E402

from tender_pool.extract.api import extract  # noqa: E402
from tender_pool.extract.errors import ExtractError  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default="docx,xlsx,pdf,doc,xls")
    ap.add_argument("--warm", action="store_true", help="use one WarmJvm for doc/xls")
    args = ap.parse_args()
    kinds = set(args.kinds.split(","))
    warm = None
    if args.warm:
        from tender_pool.extract.jvm import WarmJvm
        warm = WarmJvm()
    ratios: list[tuple[float, str, int, int, str, str]] = []
    covs: list[float] = []
    print(f"{'file':48s} {'engine':10s} {'wall s':>7s} {'pages':>11s} {'src':9s} {'coverage':>8s}")
    for e in manifest():
        if e["kind"] not in kinds:
            continue
        name = name_of(e)
        t0 = time.monotonic()
        try:
            x = extract(str(corpus_dir() / e["file"]), timeout=120, jvm=warm if e["kind"] in ("doc", "xls") else None)
        except ExtractError as exc:
            print(f"{name:48s} {'-':10s} {time.monotonic() - t0:7.2f} {'':>11s} {exc.kind}")
            continue
        wall = time.monotonic() - t0
        cov = ""
        if e["expect"] == "ok":
            ref = reference_path(e)
            if ref is not None:
                c = coverage(ref.read_text("utf-8", "replace"), x.markdown)
                covs.append(c)
                cov = f"{c:8.4f}"
            if e.get("pages"):
                ratios.append((x.pages / e["pages"], name, x.pages, e["pages"], x.pages_source, x.format))
        print(f"{name:48s} {x.engine:10s} {wall:7.2f} {x.pages:5d}/{e.get('pages') or '-':<5} {x.pages_source:9s} {cov}")
    if warm is not None:
        warm.close()
    if ratios:
        within = [r for r in ratios if 0.8 <= r[0] <= 1.2]
        worst = sorted(ratios, key=lambda r: -max(r[0], 1 / r[0]))[:5]
        print(f"\npage estimate: {len(within)}/{len(ratios)} = {len(within) / len(ratios):.0%} within ±20 %; "
              f"median ratio {statistics.median(r[0] for r in ratios):.2f}; worst 5: "
              + ", ".join(f"{w[1]} {w[2]}/{w[3]}" for w in worst))
        for label, kinds_of in (("word processing", ("doc", "docx", "rtf", "html")), ("sheets", ("xls", "xlsx", "csv"))):
            sub = [r for r in ratios if r[5] in kinds_of]
            if sub:
                ok = sum(1 for r in sub if 0.8 <= r[0] <= 1.2)
                print(f"  {label}: {ok}/{len(sub)} within ±20 %")
        for src in ("stored", "exact", "estimated"):
            sub = [r for r in ratios if r[4] == src]
            if sub:
                ok = sum(1 for r in sub if 0.8 <= r[0] <= 1.2)
                print(f"  {src}: {ok}/{len(sub)} within ±20 %")
    if covs:
        print(f"coverage mean {statistics.mean(covs):.4f} over {len(covs)} ok files, min {min(covs):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
