"""The warm JVMs' memory is visible — ``jvm_rss_bytes`` per slot in ``status --json`` and
``tender_pool_jvm_resident_memory_bytes{slot}`` on /metrics — and apart from the slot's own RSS."""

import json
import shutil
import socket
import urllib.request

import pytest

from conftest import wait_until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(90)
def test_status_and_metrics_show_the_warm_jvms_rss(h, tmp_path, corpus_dir, jvm_build):
    docs = tmp_path / "in"
    docs.mkdir()
    shutil.copy(corpus_dir / "files" / "tender-01-notice.doc", docs / "a.doc")
    port = _free_port()
    cfg = h.config(workers=1, input_roots=[str(docs)], extra=f'results_dir = "{tmp_path / "results"}"')
    cfg.write_text(cfg.read_text().replace('listen = ""', f'listen = "127.0.0.1:{port}"'))
    d = h.daemon()
    d.wait_slots(1)
    jid = h.submit(kind="parse_markdown", user="u1", payload={"file": str(docs / "a.doc")})
    h.wait_state(jid, timeout=60)

    def rows():
        r = h.cli("status", "--json")
        st = json.loads(r.stdout)
        got = [s for s in st["slots"] if s.get("jvm_rss_bytes")]
        return got or None

    row = wait_until(rows, 15, interval=0.5, what="a slot showing its JVM's RSS")[0]
    assert 8 << 20 < row["jvm_rss_bytes"] < 1 << 30, row
    assert row["rss_bytes"] is None or row["rss_bytes"] < row["jvm_rss_bytes"] + (200 << 20)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    lines = [ln for ln in text.splitlines() if ln.startswith("tender_pool_jvm_resident_memory_bytes{")]
    assert lines and float(lines[0].rsplit(" ", 1)[1]) > 8 << 20, lines
