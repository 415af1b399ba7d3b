"""A submission that can never run is refused at submit with one line
and exit 2, and nothing is queued."""

import os
import subprocess

import pytest

from conftest import TENDER_POOL


def _queued(h) -> int:
    return h.r.llen(h.k.ready_lo) + h.r.llen(h.k.ready_hi) + len(list(h.r.scan_iter(match=h.k.job_pattern)))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "args, says",
    [
        (["--job-id", "~wake"], "job id '~wake'"),
        (["--job-id", "x" * 512], "1-200 characters"),
        (["--job-id", "a b"], "letters, digits"),
        (["--job-id", "self1", "--after", "self1"], "cannot wait for itself"),
        (["--after", "nosuchjob"], "--after nosuchjob: no such job"),
        (["--user", "a{b}"], "user"),
        (["--user", "x" * 201], "user"),
        (["--payload", "[" * 60000 + "]" * 60000], "nested deeper"),
        (["--payload", '{"a":' * 100 + "1" + "}" * 100], "nested deeper"),
    ],
)
def test_bad_submissions_exit_2_with_one_line(h, args, says):
    h.config()
    base = ["submit", "--kind", "behave"]
    if "--user" not in args:
        base += ["--user", "u1"]
    r = h.cli(*base, *args)
    assert r.returncode == 2, (r.returncode, r.stderr[-500:])
    assert says in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert _queued(h) == 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("opt", ["--user", "--payload", "--job-id"])
def test_non_utf8_arguments_exit_2_with_one_line(h, opt):
    h.config()
    bad = b'{"a": "\xff\xfe"}' if opt == "--payload" else b"bad\xff\xfe"
    argv = [os.fsencode(TENDER_POOL), b"submit", b"--kind", b"behave", b"-c", os.fsencode(str(h.tmp / "a.toml"))]
    argv += [b"--user", b"u1"] if opt != "--user" else []
    argv += [opt.encode(), bad]
    r = subprocess.run(argv, env=h.env(), capture_output=True, timeout=30)
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 2, err[-500:]
    assert "not valid UTF-8" in err and "Traceback" not in err
    assert _queued(h) == 0


@pytest.mark.timeout(60)
def test_after_an_existing_job_is_accepted(h):
    h.config()
    first = h.cli("submit", "--kind", "behave", "--user", "u1", "--job-id", "dep-1")
    assert first.returncode == 0, first.stderr
    r = h.cli("submit", "--kind", "behave", "--user", "u1", "--after", "dep-1", "--json")
    assert r.returncode == 0, r.stderr
