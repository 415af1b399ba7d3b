"""CONTRACT (Python client): ``markdown(job_id)`` returns a parse_markdown result's text from any
host: results up to ``[pool] inline_result_max`` are kept in Redis with the job, larger ones are read
from ``markdown_path`` where it is reachable."""

import shutil

import pytest

from tender_pool.client import Client, Unavailable


@pytest.mark.timeout(90)
@pytest.mark.parametrize("limit", [1 << 20, 10])
def test_markdown_comes_from_redis_up_to_the_limit(h, tmp_path, corpus_dir, limit):
    docs = tmp_path / "in"
    docs.mkdir()
    shutil.copy(corpus_dir / "files" / "tender-01-notice.docx", docs / "a.docx")
    results = tmp_path / "results"
    cfg = h.config(workers=1, input_roots=[str(docs)], extra=f'results_dir = "{results}"\ninline_result_max = {limit}')
    h.daemon()
    jid = h.submit(kind="parse_markdown", user="u1", payload={"file": str(docs / "a.docx")})
    h.wait_state(jid, timeout=60)
    pool = Client.from_config(str(cfg), env={})
    on_disk = pool.markdown(jid)
    assert "招标" in on_disk
    # Given another host, where this host's results directory is not reachable
    shutil.rmtree(results)
    if limit >= len(on_disk.encode()):
        assert pool.markdown(jid) == on_disk  # kept in Redis beside the job
    else:
        with pytest.raises(Unavailable):
            pool.markdown(jid)  # too large to keep inline: only the file, gone here
