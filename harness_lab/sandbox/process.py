"""Watching one child process: collect its output, end it, leave nothing behind."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time

__all__ = ["collect"]


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as fh:
            return [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        pass
    kids = []  # kernel without CONFIG_PROC_CHILDREN: scan parent pids
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return kids


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill everything the call started without orphaning anything.

    Killing the wrapper and its child at once would orphan the child (the init of the pid
    namespace) as a zombie for the machine's init to reap. So the wrapper's children die first
    (which takes the whole namespace with them), the wrapper reaps them and exits, then the
    group is killed for whatever is left (only possible without a pid namespace).
    """
    kids = [] if _has_exited(proc.pid) else _children(proc.pid)
    for kid in kids:
        try:
            os.kill(kid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + 1.0
    while kids and not _has_exited(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.005)
    _killpg(proc.pid)


def collect(proc: subprocess.Popen[bytes], deadline: float, cap: int) -> tuple[bytes, str]:
    """Read combined output until EOF, the deadline or the cap; always kill the group after."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    buf = bytearray()
    why = "exit"
    exited_at: float | None = None
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= deadline:
                why = "timeout"
                break
            if exited_at is None and _has_exited(proc.pid):
                exited_at = now
                _killpg(proc.pid)  # the leader is a zombie, so its pgid cannot be reused yet
            if exited_at is not None and now - exited_at > 0.5:
                break  # something escaped the group and holds the pipe; stop waiting for it
            if not sel.select(min(deadline - now, 0.05)):
                continue
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                break
            buf += chunk
            if len(buf) > cap:
                why = "output"
                del buf[cap:]
                break
    if why == "exit":
        # EOF is not the end: a program may close its output and keep running (or be about to
        # exit). The command ends when its main process does, or at the deadline.
        pause = 0.001
        while not _has_exited(proc.pid):
            if time.monotonic() >= deadline:
                why = "timeout"
                break
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
    _stop(proc)
    proc.stdout.close()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not take this long
        proc.kill()
        proc.wait()
    return bytes(buf), why


def _has_exited(pid: int) -> bool:
    try:
        res = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return res is not None
