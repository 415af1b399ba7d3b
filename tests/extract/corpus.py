"""Corpus access and the coverage measure shared by the corpus tests and bench/bench_extract.py.

Coverage = fraction of the reference's letters/digits (NFKC) found, in order, in our Markdown.
Why LCS: rapidfuzz's bit-parallel LCSseq gives the exact in-order matched-character count in a few
seconds even at ~300k characters per side. Beyond ``GLOBAL_LIMIT`` (product of lengths) the reference
is cut into chunks aligned against a sliding window of our text (approximate, order-preserving).
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from pathlib import Path

from rapidfuzz.distance import LCSseq

REPO = Path(__file__).resolve().parents[2]


def corpus_dir() -> Path:
    return Path(os.environ.get("TENDER_POOL_CORPUS", REPO.parent / "shared" / "corpus"))


def manifest() -> list[dict]:
    return json.loads((corpus_dir() / "manifest.json").read_text("utf-8"))["files"]


def name_of(entry: dict) -> str:
    return entry["file"].split("/", 1)[1]


def reference_path(entry: dict) -> Path | None:
    refs = corpus_dir() / "refs"
    name = name_of(entry)
    truth = refs / f"{name}.truth.txt"
    if truth.exists():
        return truth
    note = entry.get("note") or ""
    # e.g. "LibreOffice's text export omits the footnote ...; catdoc includes them"
    m = re.search(r"(\w+) includes them", note)
    if m and "omits" in note:
        alt = entry.get("refs", {}).get(m.group(1))
        if alt:
            return corpus_dir() / alt
    ref = refs / f"{name}.ref.txt"
    return ref if ref.exists() else None


_MARKERS = re.compile(r"^==== HEADERS/FOOTERS ====$|^#HEADER:|^#FOOTER:|\{PAGE\}|\{NUMPAGES\}|"
                      r"^=== SHEET: | ===( \[hidden\])?$", re.M)


def normalise(text: str, *, strip_markers: bool = False) -> str:
    if strip_markers:
        text = _MARKERS.sub(" ", text)
    text = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in text if ch.isalnum())


GLOBAL_LIMIT = 2e11


def coverage(reference: str, ours: str, chunk: int = 400) -> float:
    ref = normalise(reference, strip_markers=True)
    hyp = normalise(ours)
    if not ref:
        return 1.0
    if len(ref) * max(1, len(hyp)) <= GLOBAL_LIMIT:
        return LCSseq.similarity(ref, hyp) / len(ref)
    matched = 0
    p = 0
    for i in range(0, len(ref), chunk):
        c = ref[i: i + chunk]
        # re-anchor on the chunk's opening characters when they occur near (or after) the cursor
        for k in (0, len(c) // 3, 2 * len(c) // 3):
            key = c[k: k + 12]
            if len(key) < 12:
                break
            at = hyp.find(key, max(0, p - 2000))
            if at != -1:
                p = max(0, at - k)
                break
        lo = max(0, p - 300)
        window = hyp[lo: p + 4 * len(c) + 1000]
        ops = LCSseq.opcodes(c, window)
        m = 0
        last = None
        for op in ops:
            if op.tag == "equal":
                m += op.src_end - op.src_start
                if op.src_end - op.src_start >= 3:
                    last = lo + op.dest_end
        matched += m
        p = last if last is not None else p + len(c) // 2
    return matched / len(ref)
