"""The results disk check asks for 4 × the input's size free, so a nearly full
small disk fails jobs whose result would have fit. The ``storage`` error says so, with the figures:
the path, the bytes free, the bytes needed and the rule that made them."""

import os

from tender_pool.slots.kinds import storage_problem


def test_the_storage_error_gives_free_and_needed_bytes_the_path_and_the_rule(tmp_path):
    out = tmp_path / "results"
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    size = free // 2 + (1 << 20)  # 4 × this is more than the disk has, though the input itself would fit
    msg = storage_problem(str(out), size)
    assert msg is not None and msg.startswith(f"results directory {out}: "), msg
    bytes_free = int(msg.split(" bytes free")[0].rsplit(" ", 1)[1])
    assert abs(bytes_free - free) < (64 << 20), msg  # the free figure is the disk's (other writers aside)
    assert f"{4 * size} bytes needed" in msg and f"4 × the input's size ({size} bytes)" in msg, msg
    assert storage_problem(str(out), 0) is None or "at least 1.0 MiB" in storage_problem(str(out), 0)
