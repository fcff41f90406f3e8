"""run_command gets private /tmp, /var/tmp, /dev/shm and an empty /run (also with an allowlist) in both wrappers.

The host's shared scratch directories hold other users' files and Unix sockets (a network
namespace does not cover sockets reached by path). A command must neither leave files there nor
connect to a socket listening there, while the workspace, often itself under /tmp, stays usable.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness_lab.sandbox import Quotas, Sandbox

PY = "/usr/bin/python3"  # a system interpreter the dropped uid can execute (venvs may live in /root)
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    d = tmp_path / "ws"
    d.mkdir()
    assert str(d.resolve()).startswith("/tmp/"), "these tests need the workspace under /tmp (pytest's default)"
    return d


@pytest.fixture
def host_names() -> Iterator[dict[str, str]]:
    """A fresh name in each host scratch directory that exists here; removed afterwards."""
    tag = f"hl-sandbox-{uuid.uuid4().hex}"
    names = {d: f"{d}/{tag}" for d in SCRATCH if os.path.isdir(d)}
    yield names
    for path in names.values():
        if os.path.lexists(path):
            os.unlink(path)


def test_scratch_writes_stay_private_and_the_workspace_under_tmp_works(
        ws: Path, host_names: dict[str, str], make_sandbox: Any, iso: str) -> None:
    sb: Sandbox = make_sandbox(ws, isolation=iso)
    assert sb.capabilities["mount_namespace"] is True
    assert sb.call("write_file", path="in.txt", content="from tool").ok
    writes = "; ".join(f"echo private > {p} && cat {p}" for p in host_names.values())
    script = f"{writes}; cat in.txt; echo; echo made > out.txt; cat {ws}/out.txt; pwd"
    mounts = Path("/proc/self/mountinfo").read_text()
    result = sb.call("run_command", argv=["sh", "-c", script])
    assert result.ok, result
    assert Path("/proc/self/mountinfo").read_text() == mounts, "a mount of the command reached the host"
    for path in host_names.values():
        assert not os.path.lexists(path), f"{path} was created on the host"
    lines = (result.content or "").splitlines()
    # the scratch directories work inside (TMPDIR=/tmp must be usable), just not shared
    assert lines == ["private"] * len(host_names) + ["from tool", "made", str(ws)], result.content
    assert (ws / "out.txt").read_text() == "made\n"


@pytest.mark.parametrize("where", ["/tmp", "/run", "/dev/shm"])
def test_a_command_cannot_connect_to_a_host_unix_socket_in_a_hidden_directory(
        where: str, ws: Path, make_sandbox: Any, iso: str) -> None:
    if not os.path.isdir(where):
        pytest.skip(f"{where} does not exist on this machine")
    path = f"{where}/hl-sandbox-{uuid.uuid4().hex}.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o777)  # the dropped uid could connect if it could reach the path
    server.listen(4)
    server.settimeout(0.2)
    try:
        probe = (f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({path!r}); "
                 "print('CONNECTED')")
        result = make_sandbox(ws, isolation=iso).call("run_command", argv=[PY, "-c", probe], timeout=10)
        assert "CONNECTED" not in (result.content or ""), result
        assert result.status == "error" and result.exit_status == 1, result
        with pytest.raises(TimeoutError):
            server.accept()[0].close()
    finally:
        server.close()
        os.unlink(path)


@pytest.mark.parametrize("allow", [(), ("example.org:443",)])
def test_run_is_empty_also_with_a_network_allowlist(
        allow: tuple[str, ...], ws: Path, make_sandbox: Any, iso: str) -> None:
    # An allowlist keeps the private network namespace (the harness relays the listed pairs and resolves
    # their names), so the host's /run, and the Unix sockets in it, stay out of reach there too.
    marker = f"/run/hl-sandbox-{uuid.uuid4().hex}"
    Path(marker).write_text("host")
    try:
        sb: Sandbox = make_sandbox(ws, isolation=iso, network_allow=allow)
        result = sb.call("run_command", argv=["sh", "-c", f"cat {marker} 2>/dev/null || echo absent"])
    finally:
        os.unlink(marker)
    assert result.ok, result
    assert (result.content or "").strip() == "absent"


def test_the_private_scratch_directories_are_capped_by_a_quota(ws: Path, make_sandbox: Any, iso: str) -> None:
    # tmpfs pages are not charged to RLIMIT_AS, and RLIMIT_FSIZE caps one file, not how many:
    # unbounded, a command could fill the host's memory through /tmp or /dev/shm.
    sb: Sandbox = make_sandbox(ws, isolation=iso, quotas=Quotas(scratch_bytes=4 << 20))
    if iso == "bwrap" and not sb.capabilities["scratch_size_limit"]:
        pytest.skip("this bubblewrap cannot size a tmpfs (--size needs bubblewrap >= 0.7)")
    for where in ("/tmp", "/dev/shm"):
        script = (f"head -c 3000000 /dev/zero > {where}/a && echo first; "
                  f"head -c 3000000 /dev/zero > {where}/b && echo second; echo done")
        result = sb.call("run_command", argv=["sh", "-c", script])
        assert result.ok, result
        lines = (result.content or "").splitlines()
        assert lines[0] == "first" and "second" not in lines and lines[-1] == "done", result.content
        assert "No space left on device" in (result.content or ""), result.content
