"""The parent of a command run without a pid namespace (isolation ``none``), as a script.

Run as ``python -I -S _reaper.py HARNESS_PID ARGV...``. Without a pid namespace nothing kills what
a command started when the command ends or the harness dies: the parent-death signal reaches only
the direct child, and a process that calls setsid() leaves the process group the harness kills.
This script makes itself a child subreaper (PR_SET_CHILD_SUBREAPER), so every orphan of the
command's tree is reparented to it, whatever session it is in; it runs the command as its child
and, when the command's process exits or the harness dies (its parent-death signal, SIGTERM
here, so it can act), kills every process beneath it and exits with the command's status. Only
SIGKILL sent to this script itself (root, or the same uid without a uid drop) defeats it; the
command still dies then (its own parent-death signal), its descendants do not.

Standard library only (``-I -S``): it runs before the uid drop, outside the harness's imports.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from types import FrameType

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _descendants(me: int) -> list[int]:
    """Every live process beneath ``me``, from the parent pids in /proc."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    out, todo = [], list(kids.get(me, ()))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, ()))
    return out


def _kill_all() -> None:
    """SIGKILL everything beneath this process until nothing is left to reap. A process forked
    just before its parent was killed becomes an orphan, hence our child: the next round gets it."""
    me = os.getpid()
    while True:
        for pid in _descendants(me):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(-1, 0)  # a killed child exits: one round per wake-up
        except ChildProcessError:
            return


def _harness_died(signum: int, frame: FrameType | None) -> None:
    _kill_all()
    os._exit(128 + signal.SIGKILL)


def main(argv: list[str]) -> None:
    parent, command = int(argv[1]), argv[2:]
    prctl = ctypes.CDLL(None).prctl
    prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    signal.signal(signal.SIGTERM, _harness_died)
    prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)  # replaces the SIGKILL the harness set
    if os.getppid() != parent:  # the harness died before the prctl took effect
        os._exit(128 + signal.SIGKILL)
    me = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # should this script be SIGKILLed
            if os.getppid() != me:
                os._exit(128 + signal.SIGKILL)
            os.execvp(command[0], command)
        except OSError as exc:
            os.write(2, f"{command[0]}: {exc.strerror}\n".encode("utf-8", "replace"))
            os._exit(126 if isinstance(exc, PermissionError) else 127)
    while True:  # orphans that exit before the command are reaped on the way
        got, status = os.waitpid(-1, 0)
        if got == pid:
            break
    _kill_all()
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # report the command's signal as our own (the harness reads it from the status)
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # the only two without a handler to reset
            signal.signal(-code, signal.SIG_DFL)
        os.kill(me, -code)
        code = 128 - code
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv)
