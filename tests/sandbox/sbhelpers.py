"""Helpers shared by the sandbox tests (imported as a plain module: tests/sandbox is on sys.path)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness_lab.records.tools import ToolResult
from harness_lab.sandbox.command import detect_isolation

SECRET = "TOP-SECRET-outside-the-workspace"
PY = "/usr/bin/python3"  # a system interpreter the dropped uid can execute (venvs may live in /root)
RESOLUTIONS = ["openat2", "walk"]


def isolation_or_skip(kind: str = "auto") -> None:
    """Skip containment tests on machines that cannot provide the mechanism (never in CI)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to a dedicated uid (run the tests as root, as CI does)")
    if kind == "bwrap" and not shutil.which("bwrap"):
        pytest.skip("bubblewrap not installed (apt-get install bubblewrap)")
    if not shutil.which("unshare") and not shutil.which("bwrap"):
        pytest.skip("needs bubblewrap or util-linux unshare (apt-get install bubblewrap)")
    found = dict(detect_isolation(kind, os.geteuid()))["kind"]
    if found == "none" or (kind != "auto" and found != kind):
        pytest.skip(f"{kind} cannot create namespaces here (needs root with CAP_SYS_ADMIN, "
                    "e.g. not an unprivileged container)")


def hide_wrappers(monkeypatch: pytest.MonkeyPatch, *names: str) -> Iterator[None]:
    """A machine without ``names`` (e.g. "bwrap", "unshare"): the probe's ``shutil.which`` finds none of
    them, for this test only (the probe's cache is cleared before and after)."""
    from harness_lab.sandbox import command

    real = shutil.which
    monkeypatch.setattr(command.shutil, "which", lambda cmd, *a, **kw: None if cmd in names else real(cmd, *a, **kw))
    command.detect_isolation.cache_clear()
    try:
        yield
    finally:  # the patch goes with the test's monkeypatch; the probes it cached must go now
        command.detect_isolation.cache_clear()


def journal_or_skip(sb: Any) -> None:
    """The journal tests need inotify; only a per-user kernel limit held by other processes skips them."""
    tracking = sb.capabilities["change_tracking"]
    if tracking != "inotify" and "max_user_instances" in tracking:
        sb.close()
        pytest.skip(f"no inotify instance left for this user: {tracking}")
    assert tracking == "inotify", tracking


def guarded(fn: Callable[[], ToolResult], seconds: float = 30.0) -> ToolResult:
    """Run one call in a thread and fail the test if it does not return in time: a hang guard, not a
    speed claim, so the bound is far above any loaded machine's time for one call."""
    box: list[Any] = []
    t = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"call did not return within {seconds} s"
    assert box, "call raised instead of returning a ToolResult"
    result = box[0]
    assert isinstance(result, ToolResult)
    return result


def build_world(base: Path) -> dict[str, Path]:
    """ws/ with every kind of trap in it, plus outside/ and ws-evil/ holding secrets."""
    ws, outside, evil = base / "ws", base / "outside", base / "ws-evil"
    for d in (ws, outside, evil, ws / "sub"):
        d.mkdir(parents=True)
    (outside / "secret.txt").write_text(SECRET)
    (evil / "secret.txt").write_text(SECRET)
    (ws / "real.txt").write_text("inside")
    (ws / "sub" / "inner.txt").write_text("inner")
    links = {
        "link_file": str(outside / "secret.txt"),
        "link_rel": "../outside/secret.txt",
        "link_dir": str(outside),
        "link_dir_rel": "../outside",
        "dangling": "/nonexistent/nowhere",
        "inside_link": "real.txt",
        "loop1": "loop2",
        "loop2": "loop1",
        "self_loop": "self_loop",
        "proc_root": "/proc/self/root",
        "proc_cwd": "/proc/self/cwd",
        "proc_fd": "/proc/self/fd/0",
        "sub/up": "..",
        "sub/up2": "../../outside",
    }
    for name, target in links.items():
        os.symlink(target, ws / name)
    os.link(outside / "secret.txt", ws / "hard")
    os.mkfifo(ws / "fifo")
    if os.geteuid() == 0:
        os.mknod(ws / "devnull", 0o666 | 0o020000, os.makedev(1, 3))
    return {"ws": ws, "outside": outside, "evil": evil}


def outside_state(world: dict[str, Path]) -> list[tuple[str, str, int]]:
    """Everything about the outside that an escape could change."""
    out = []
    for d in (world["outside"], world["evil"]):
        for p in sorted(d.rglob("*")):
            st = p.lstat()
            out.append((str(p), p.read_text() if p.is_file() else "", st.st_mtime_ns))
    return out


def uid_processes(uid: int) -> list[int]:
    """Live processes of ``uid``. A zombie has already died: without a pid namespace, a killed
    process whose parent died too waits for the machine's init to reap it, which under load (a
    second test job) can take longer than the test waits, and says nothing about the sandbox."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.stat(f"/proc/{pid}").st_uid != uid:
                    continue
                with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
                    state = fh.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in ("Z", "X"):
                found.append(int(pid))
    return found


def assert_no_process_left(uid: int, seconds: float = 1.0) -> None:
    """No live process of ``uid`` (a sandbox's) is left, once the kernel had ``seconds`` to tear down."""
    deadline = time.monotonic() + seconds
    while uid_processes(uid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert uid_processes(uid) == [], "a process of the sandbox uid outlived the call"
