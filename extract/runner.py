"""What a daemon slot's forked child runs for one ``parse_markdown`` job.

Why files and not a pipe: results can be large (hundreds of pages of Markdown); the daemon stores
only the small ``JobOutput`` dict and the paths. Both files are written to a temporary name in the
target directory and renamed, so a reader never sees half a file, even if the job is killed.
No fsync: it cost ~10 ms per file, more than the warm JVM's whole answer for a small .doc (measured by
bench/bench_extract.py --large). A killed job cannot tear a file (rename is atomic); only a host crash
within the kernel's writeback window (~30 s) can lose a result, and a result is a pure function of its
input that the job re-creates when run again.
No threads, no module-level state: this runs right after fork.
"""

from __future__ import annotations

import os
import tempfile
import time

import msgspec

from tender_pool.extract.api import Extraction, extract

_enc = msgspec.json.Encoder()


class JobOutput(msgspec.Struct):
    markdown_path: str
    metadata_path: str
    pages: int
    format: str


def atomic_write(path: str, data: bytes) -> None:
    d = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def metadata_of(x: Extraction) -> dict:
    """The metadata file: everything in the extraction JSON except the Markdown itself (derived, so
    the two can never drift apart)."""
    meta = msgspec.structs.asdict(x)
    del meta["markdown"]
    return meta


def run_job(path: str, out_dir: str, stem: str, *, timeout: float | None, jvm_heap: str = "512m",
            jvm=None, marks: list[float] | None = None) -> JobOutput:
    """Extract ``path`` and write its two files. ``marks``: gets the monotonic times at which the
    extraction returned and the files were written (the slot's step timings, ``slots/attempt.py``)."""
    x = extract(path, timeout=timeout, jvm_heap=jvm_heap, jvm=jvm)
    if marks is not None:
        marks.append(time.monotonic())
    os.makedirs(out_dir, exist_ok=True)
    md_path = os.path.join(out_dir, f"{stem}.md")
    meta_path = os.path.join(out_dir, f"{stem}.json")
    atomic_write(md_path, x.markdown.encode("utf-8"))
    atomic_write(meta_path, _enc.encode(metadata_of(x)))
    if marks is not None:
        marks.append(time.monotonic())
    return JobOutput(markdown_path=os.path.abspath(md_path), metadata_path=os.path.abspath(meta_path),
                     pages=x.pages, format=x.format)
