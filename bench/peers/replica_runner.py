"""The replica's per-job runner (bench/docs; runs in our venv, a new process for every job, as the
platform starts one today): our readers in-process, and for .doc/.xls a cold JVM running the same
POI CLI as ours (``extract()`` with no warm JVM: ``jvm.run_cold``, one JVM per document).

    replica_runner.py INPUT OUT.md      # exit 0 and the Markdown in OUT.md; else exit 3, the error on stderr
"""

import sys


def main() -> int:
    from tender_pool.extract.api import extract
    from tender_pool.extract.errors import ExtractError

    path, out = sys.argv[1], sys.argv[2]
    try:
        x = extract(path, timeout=600)
    except ExtractError as e:
        print(f"{e.kind}: {e}", file=sys.stderr)
        return 3
    with open(out, "w", encoding="utf-8") as f:
        f.write(x.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
