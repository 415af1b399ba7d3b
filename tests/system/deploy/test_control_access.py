"""Control requests are refused to users outside the status socket's group.

Tests run as root, which ignores file modes; so the clients here run as two users the test creates,
one in the socket's group and one outside it. The client is our own CLI, called in a forked child
that dropped to that user (the venv's interpreter lives where those users cannot exec it)."""

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import wait_until


def as_user(name: str, args: list[str]) -> tuple[int, str]:
    """Run ``tender-pool ARGS`` as NAME (uid, gid and supplementary groups from /etc/group)."""
    import pwd

    from tender_pool.supervisor import cli, control, render
    from tender_pool.client import status_client# noqa: F401  (loaded before dropping root)

    pw = pwd.getpwnam(name)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            os.close(r)
            os.initgroups(name, pw.pw_gid)
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            res = CliRunner().invoke(cli.main, args)  # .output: stdout and stderr, in click 8.1 and 8.2
            os.write(w, (res.output + (repr(res.exception) if res.exit_code not in (0, 1, 2) else "")).encode())
            code = res.exit_code
        finally:
            os._exit(code)
    os.close(w)
    out = b""
    while chunk := os.read(r, 65536):
        out += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode()


@pytest.fixture
def accounts():
    tag = uuid.uuid4().hex[:6]
    group, member, outsider = f"tpops{tag}", f"tpin{tag}", f"tpout{tag}"
    try:
        subprocess.run(["groupadd", group], check=True)
        subprocess.run(["useradd", "-M", "-N", "-G", group, member], check=True)
        subprocess.run(["useradd", "-M", "-N", outsider], check=True)
        yield group, member, outsider
    finally:
        for u in (member, outsider):
            subprocess.run(["userdel", u], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)


@pytest.fixture
def public_dir():
    """A socket and config the test users can reach (pytest's tmp dirs are root-only)."""
    d = Path(tempfile.mkdtemp(prefix="tp-access-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.timeout(60)
def test_only_the_socket_group_may_control(h, accounts, public_dir):
    group, member, outsider = accounts
    pub = public_dir
    h.config(workers=2)
    cfg = h.tmp / "a.toml"
    sock = pub / "status.sock"
    text = cfg.read_text().replace(f'socket = "{h.tmp / "state-a"}/status.sock"', f'socket = "{sock}"\ngroup = "{group}"')
    (pub / "a.toml").write_text(text)
    os.chmod(pub / "a.toml", 0o644)
    cfg.write_text(text)
    d = h.daemon()
    d.wait_slots(2)
    wait_until(sock.exists, 10, what="status socket")
    import grp
    st = os.stat(sock)
    assert oct(st.st_mode & 0o777) == "0o660" and st.st_gid == grp.getgrnam(group).gr_gid
    c = str(pub / "a.toml")
    # outside the group: refused at connect, for reads and control alike; nothing changes
    code, out = as_user(outsider, ["scale", "1", "-c", c])
    assert code == 2 and "permission denied" in out, out
    code, out = as_user(outsider, ["drain", "-c", c])
    assert code == 2 and "permission denied" in out, out
    assert len(d.slot_pids()) == 2
    # in the group: reads and control work
    code, out = as_user(member, ["status", "-c", c])
    assert code == 0, out
    code, out = as_user(member, ["scale", "1", "--wait", "--timeout", "15", "-c", c])
    assert code == 0 and "scaling from 2 to 1" in out, out
    assert len(d.slot_pids()) == 1
    assert d.stop() == 0
