"""run_command attacks by escape class: each script tries an escape and prints ESCAPED only if it worked.

The outside world (files beside the workspace, the snapshot store, the parent process, root-only
files, the network) must be unchanged and unreadable afterwards, whatever the script printed.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from sbhelpers import SECRET, build_world, isolation_or_skip, outside_state

from harness_lab.sandbox import Sandbox, SandboxPolicy


@pytest.fixture(autouse=True)
def _needs_isolation() -> None:
    isolation_or_skip()


def _attacks(outside: Path, snaps: Path, parent_pid: int, port: int) -> dict[str, str]:
    py = "/usr/bin/python3 -c"
    return {
        "write_outside_absolute": f"echo ESCAPED > {outside}/secret.txt && cat {outside}/secret.txt",
        "write_outside_dotdot": "echo ESCAPED > ../outside/secret.txt && cat ../outside/secret.txt",
        "create_outside": f"touch {outside}/new && echo ESCAPED",
        "read_outside_secret": f"cat {outside}/secret.txt ../outside/secret.txt; grep -q {SECRET} "
                               f"{outside}/secret.txt && echo ESCAPED",
        "write_system": "echo x > /etc/hl-pwned && echo ESCAPED",
        "read_root_only": "cat /etc/shadow >/dev/null 2>&1 && echo ESCAPED",
        "snapshot_store": f"ls {snaps} >/dev/null 2>&1 && echo ESCAPED; "
                          f"find {snaps} -name '*.json' -exec cat {{}} + 2>/dev/null | grep -q . && echo ESCAPED",
        "symlink_then_write": f"ln -s {outside}/secret.txt l && echo ESCAPED > l && cat l",
        "proc_root_magic": f"echo ESCAPED > /proc/self/root{outside}/secret.txt && echo wrote",
        "proc_parent_root": f"ls /proc/{parent_pid}/root/ >/dev/null 2>&1 && echo ESCAPED",
        "signal_parent": f"kill -9 {parent_pid} && echo ESCAPED",
        "regain_root": f"{py} 'import os; os.setuid(0); print(\"ESCAPED\")'",
        "setuid_binary": "su -c 'echo ESCAPED' root </dev/null 2>/dev/null; "
                         "sudo -n echo ESCAPED 2>/dev/null; true",
        "network_loopback": f"{py} 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 1); "
                            "print(\"ESCAPED\")'",
        "network_raw_socket": f"{py} 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1); "
                              "print(\"ESCAPED\")'",
        "mount": "mount -t tmpfs none /mnt 2>/dev/null && echo ESCAPED",
        "chroot_breakout": "chroot / true 2>/dev/null && echo ESCAPED",
        "hardlink_outside": f"ln {outside}/secret.txt hl 2>/dev/null && echo ESCAPED > hl && cat hl",
        "background_survivor": "nohup sh -c 'sleep 1; echo ESCAPED > survivor' >/dev/null 2>&1 & echo started",
        "new_session_survivor": "setsid sh -c 'sleep 1; touch survivor2' >/dev/null 2>&1 & echo started",
    }


@pytest.fixture(params=["bwrap", "unshare"])
def arena(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    isolation_or_skip(str(request.param))
    world = build_world(tmp_path)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.05)
    snaps = tmp_path / "snaps"
    sb = Sandbox(world["ws"], policy=SandboxPolicy(isolation=request.param), snapshot_dir=snaps)
    yield world, sb, snaps, server
    sb.close()
    server.close()


def test_no_command_escapes(arena: Any) -> None:
    world, sb, snaps, server = arena
    before = outside_state(world)
    attacks = _attacks(world["outside"], snaps, os.getpid(), server.getsockname()[1])
    for name, script in attacks.items():
        result = sb.call("run_command", argv=["sh", "-c", script], timeout=5)
        assert "ESCAPED" not in (result.content or ""), (name, result.content)
        assert SECRET not in (result.content or ""), name
        assert outside_state(world) == before, name
        assert not os.path.exists("/etc/hl-pwned"), name
        with pytest.raises(OSError):
            server.accept()  # nobody connected from inside
    # background processes died with their call: nothing appears later
    time.sleep(1.5)
    assert not (world["ws"] / "survivor").exists() and not (world["ws"] / "survivor2").exists()
    assert outside_state(world) == before
