"""Bad input that tracebacked or was silently accepted is refused.

CONTRACT.md, ``history``: "2 bad input (a state that is not terminal, a time that is not finite)";
``BadInput`` is "where the CLI exits 2". The sweep of the other options: a duration (``--timeout``,
``--interval``) is a finite number of seconds above 0 (``nan`` never compared past a deadline,
``inf`` overflowed ``time.sleep``, 0 meant "no timeout" to ``scale``/``drain``/``extract``), and
``Client.history`` refuses the pages the CLI refuses instead of clamping them to another page.
The commands run in-process (click's runner): the same code path from argv on, milliseconds each.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tender_pool.client import BadInput, Client
from tender_pool.supervisor.cli import main

pytestmark = pytest.mark.timeout(60)


def run_cli(h, *args: str):
    return CliRunner().invoke(main, [*args, "-c", str(h.config())], catch_exceptions=True)


def refused_in_one_line(res) -> str:
    """Exit 2, one ``tender-pool: `` line on stderr, no traceback (click's runner keeps the
    exception of a traceback in ``res.exception``)."""
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    assert not res.exception or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("tender-pool: "), res.stderr
    return lines[0]


@pytest.mark.parametrize("args", [
    ("--started-after", "inf"),
    ("--ended-before", "1e400"),
    ("--ended-after", "-inf"),
    ("--started-before", "nan"),
    ("--started-after", ""),
    ("--ended-after", "yesterday"),
    ("--status", "bogus"),
    ("--status", "running"),
    ("--status", "queued"),
    ("--status", "completed", "--status", "waiting"),
    ("--status", "Completed"),
])
def test_history_refuses_a_state_that_is_not_terminal_and_a_time_that_is_not_finite(h, args):
    line = refused_in_one_line(run_cli(h, "history", *args))
    assert args[-1] in line or repr(args[-1]) in line, line  # it names the value it refused


def test_history_still_answers_good_filters(h):
    """The refusals above are about the input: the same command with good values exits 0."""
    res = run_cli(h, "history", "--json", "--status", "completed", "--status", "skipped", "--started-after",
                  "2026-01-01", "--ended-before", "1e12", "--page", "3")
    assert res.exit_code == 0, (res.output, res.exception)
    assert '"total":0' in res.stdout


@pytest.mark.parametrize("kw", [
    {"status": ["bogus"]},
    {"status": ["running"]},
    {"started_after": float("inf")},
    {"ended_before": float("-inf")},
    {"ended_after": float("nan")},
    {"started_before": "1700000000000"},
    {"page": 0},
    {"page": -1},
    {"page_size": 0},
    {"page_size": 1001},
])
def test_client_history_raises_bad_input_for_the_same(redis_server, kw):
    c = Client(redis_server.url, prefix="bad", socket_timeout=3)
    try:
        with pytest.raises(BadInput):
            c.history(**kw)
        assert c.history(status=["completed"], ended_after=0, ended_before=10**13, page=2, page_size=1000).total == 0
    finally:
        c.close()


@pytest.mark.parametrize("args", [
    ("status", "--watch", "--interval", "inf"),
    ("status", "--watch", "--interval", "nan"),
    ("status", "--interval", "0"),
    ("scale", "2", "--wait", "--timeout", "nan"),
    ("scale", "2", "--wait", "--timeout", "0"),
    ("drain", "--timeout", "-1"),
    ("drain", "--timeout", "inf"),
])
def test_durations_are_finite_and_above_zero(h, args):
    line = refused_in_one_line(run_cli(h, *args))
    assert args[-1] in line, line


@pytest.mark.parametrize("timeout", ["nan", "inf", "0", "-5"])
def test_submit_refuses_a_bad_wait_timeout_before_it_queues_anything(h, timeout):
    res = run_cli(h, "submit", "--user", "u1", "--kind", "behave", "--wait", "--timeout", timeout)
    refused_in_one_line(res)
    assert not h.r.keys(f"{h.prefix}:*"), "the job was queued although the command was refused"


@pytest.mark.parametrize("timeout", ["nan", "inf", "0"])
def test_extract_refuses_a_timeout_that_is_no_deadline(tmp_path, timeout):
    doc = tmp_path / "a.csv"
    doc.write_text("a,b\n1,2\n")
    res = CliRunner().invoke(main, ["extract", str(doc), "--timeout", timeout])
    refused_in_one_line(res)


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1.0])
def test_wait_refuses_a_timeout_that_is_not_a_finite_number_of_seconds(client, timeout):
    job = client.submit("u1", "k", {})
    with pytest.raises(BadInput):
        client.wait(job.id, timeout=timeout)
