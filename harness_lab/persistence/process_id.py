"""Which process of this machine is which: alive or not, and an identity that a reused process id does
not share (the boot and the process's start time). The run lease (``store/_lease.py``) and the heartbeat
(:mod:`harness_lab.persistence.heartbeat`) judge a recorded pid with these; this module imports nothing of harness-lab.
"""

from __future__ import annotations

import os
import socket

__all__ = ["host_name", "process_alive", "process_identity"]


def process_alive(pid: int) -> bool:
    """Whether a process of this machine has this id (a zombie, killed but not yet reaped, is not alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def process_identity(pid: int) -> str:
    """``"<boot id>:<start time in clock ticks>"`` of a live process; ``""`` when it is gone, a zombie, or
    /proc cannot tell (then only :func:`process_alive` can judge it). A pid reused later, or after a
    reboot, has another identity."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[-1].split()
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            boot = fh.read().strip()
    except OSError:
        return ""
    # After the name: state is field 3, starttime field 22 (proc(5)); counted from the state on.
    if len(fields) < 20 or fields[0] == b"Z":
        return ""
    return f"{boot}:{fields[19].decode('ascii', 'replace')}"


def host_name() -> str:
    """This machine's name, as a lease records it (a pid means nothing on another host)."""
    return socket.gethostname() or "?"
