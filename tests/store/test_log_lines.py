"""The JSON log renderer (msgspec): one line a call, UTF-8 kept, anything unencodable as its repr."""

from __future__ import annotations

import json
import os
import pathlib

from tender_pool.store import logs


def test_json_lines_keep_utf8_and_never_drop_a_line(tmp_path):
    out = tmp_path / "log"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT)
    saved = os.dup(2)
    os.dup2(fd, 2)
    try:
        log = logs.configure("slot1", as_json=True)
        log.info("job_started", user="用户", file=pathlib.Path("/in/招标.doc"), n=float("nan"))
        log.info("odd", table={(1, 2): "tuple key"})
    finally:
        os.dup2(saved, 2)
        os.close(fd)
        os.close(saved)
    raw = out.read_bytes()
    assert "用户".encode() in raw  # not \\u escapes
    first, second = [json.loads(line) for line in raw.decode().splitlines()]
    assert first["event"] == "job_started" and first["component"] == "slot1" and first["level"] == "info"
    assert first["file"] == repr(pathlib.Path("/in/招标.doc")) and first["n"] is None
    assert first["timestamp"].endswith("Z")
    assert second["event"] == "odd" and "tuple key" in json.dumps(second["table"], ensure_ascii=False)
