"""examples/section_writer.py as the README shows it: a run of 48 sections, an async function that
streams chunks, watched with `runs watch` until it completes."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import REPO, TENDER_POOL

from .fnhelp import events, fn_handlers


@pytest.mark.timeout(180)
def test_section_writer_run_of_48_watched(h, tmp_path):
    out = tmp_path / "sections"
    out.mkdir()
    body = (f'function = "section_writer:write_section"\ntimeout = 60\nper_user = 2\n'
            f'path = ["{REPO / "examples"}"]\nafter_fork = "section_writer:after_fork"')
    h.daemon(workers=2, handlers=fn_handlers(write_section=body))
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"key": f"s{i}", "payload": {"section": f"{i}", "words": 30,
                                                                      "out_dir": str(out)}}) + "\n"
                             for i in range(1, 49)))
    p = h.cli("runs", "submit", "--user", "u42", "--kind", "write_section", "--items", str(items))
    assert p.returncode == 0, p.stderr
    run_id = p.stdout.strip()
    watch = subprocess.run([TENDER_POOL, "runs", "watch", run_id, "-c", str(h.tmp / "a.toml")], env=h.env(),
                           capture_output=True, text=True, timeout=150)
    assert watch.returncode == 0, watch.stdout[-2000:] + watch.stderr
    lines = watch.stdout.splitlines()
    assert lines[-1].split()[-1] == "run_finished" and "48/48 done (completed 48" in lines[-1]
    # the snapshot first (sections done before the watch began are in its counts), then live events
    assert 0 < sum("job_completed" in x for x in lines) <= 48 and any("job_progress" in x and "chars" in x for x in lines)

    run = json.loads(h.cli("runs", "show", run_id, "--json").stdout)
    assert run["state"] == "completed" and run["counts"]["completed"] == 48
    k = h.k
    evs = events(h, k.run_events(run_id))
    for job in run["jobs"]:
        rec = h.job(job["id"])
        text = (out / f"{job['key']}.md").read_text()
        # the return value is the result; the file is what the chunks streamed; usage counted per attempt
        assert rec.result == {"value": {"chars": len(text), "tokens": 30}}, rec.result
        streamed = "".join(e["chunk"] or "" for e in evs if e.get("job_id") == job["id"] and e["type"] == "job_progress")
        assert text == f"## {job['key'][1:]}\n\n{streamed}\n"
