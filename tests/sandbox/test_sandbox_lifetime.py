"""What a command shares with the host besides files and network: its lifetime and System V IPC."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sbhelpers import isolation_or_skip

import harness_lab
from harness_lab.sandbox import Sandbox

PY = "/usr/bin/python3"  # a system interpreter the dropped uid can execute (venvs may live in /root)
_IPC_CREAT, _IPC_RMID = 0o1000, 0


def _live_with_marker(marker: str) -> list[int]:
    """Live processes whose argv is the command's (not the wrappers', which repeat it)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if cmdline == b"sleep\0" + marker.encode() + b"\0" and state not in ("Z", "X"):
                found.append(int(pid))
    return found


# The marker sleep as the command itself, and as a grandchild in a session of its own (setsid):
# without a pid namespace only a reaper that outlives the command's own process can find it.
_SHAPES = {"itself": "exec sleep {m}", "in a new session": "setsid sleep {m} & wait"}


@pytest.mark.parametrize("shape", list(_SHAPES))
@pytest.mark.parametrize("iso", ["bwrap", "unshare", "none"])
def test_a_command_dies_with_the_harness_that_started_it(iso: str, shape: str, tmp_path: Path) -> None:
    # The timeout is enforced by the harness process: if it is killed (OOM killer, a notebook
    # kernel restart), a command left behind runs on with no deadline at all.
    isolation_or_skip("auto" if iso == "none" else iso)
    ws = tmp_path / "ws"
    ws.mkdir()
    marker = f"{1000 + uuid.uuid4().int % 1000}.25"  # sleep seconds, unique enough to find
    harness = textwrap.dedent(f"""
        import sys
        from harness_lab.sandbox import Sandbox, SandboxPolicy
        sb = Sandbox({str(ws)!r}, SandboxPolicy(isolation={iso!r}), snapshot_dir={str(tmp_path / "snaps")!r})
        print("started", flush=True)
        sb.call("run_command", argv=["sh", "-c", {_SHAPES[shape].format(m=marker)!r}])
    """)
    proc = subprocess.Popen([sys.executable, "-c", harness], stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(Path(harness_lab.__file__).parents[1])})
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"started\n"
        deadline = time.monotonic() + 10
        while not _live_with_marker(marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _live_with_marker(marker), "the command never started"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 2
        while _live_with_marker(marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        left = _live_with_marker(marker)
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    for pid in left:  # only what this test started, by id
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"the command outlived its harness under {iso}"


@pytest.mark.parametrize("iso", ["bwrap", "unshare", "none"])
def test_nothing_a_command_started_outlives_the_call(iso: str, tmp_path: Path, make_sandbox: Any) -> None:
    # A process in a session of its own escapes the process group kill; it must not escape the call.
    isolation_or_skip("auto" if iso == "none" else iso)
    ws = tmp_path / "ws"
    ws.mkdir()
    marker = f"{1000 + uuid.uuid4().int % 1000}.75"
    sb: Sandbox = make_sandbox(ws, isolation=iso)
    result = sb.call("run_command", argv=["sh", "-c", f"setsid sleep {marker} >/dev/null 2>&1 & echo started"])
    assert result.ok and result.content == "started\n", result
    deadline = time.monotonic() + 2
    while _live_with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.02)
    left = _live_with_marker(marker)
    for pid in left:  # only what this test started, by id
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"a process the command started outlived the call under {iso}"


@pytest.mark.parametrize("iso", ["bwrap", "unshare"])
def test_a_command_cannot_reach_host_system_v_shared_memory(iso: str, tmp_path: Path, make_sandbox: Any) -> None:
    isolation_or_skip(iso)
    if not os.access(PY, os.X_OK):
        pytest.skip(f"needs {PY} (apt-get install python3)")
    ws = tmp_path / "ws"
    ws.mkdir()
    libc = ctypes.CDLL(None, use_errno=True)
    key = 0x4C000000 + uuid.uuid4().int % 0xFFFFFF
    shm = libc.shmget(key, 4096, _IPC_CREAT | 0o666)  # world-accessible, as some services make them
    assert shm >= 0, os.strerror(ctypes.get_errno())
    try:
        probe = f"import ctypes; print(ctypes.CDLL(None).shmget({key}, 0, 0))"
        sb: Sandbox = make_sandbox(ws, isolation=iso)
        result = sb.call("run_command", argv=[PY, "-c", probe])
    finally:
        libc.shmctl(shm, _IPC_RMID, None)
    assert result.ok, result
    assert (result.content or "").strip() == "-1", "the host's shared memory segment was reachable"
