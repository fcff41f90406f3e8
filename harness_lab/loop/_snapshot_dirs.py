"""Where a run keeps its snapshots: a new folder in the temporary folder per run, named by its process, and
the sweep that removes the folders of processes that are gone (kill -9 runs no finalizer).

:class:`~harness_lab.loop.run.Run` makes one per run (and removes it when closed or collected).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path

from ..process_id import process_identity

__all__ = ["snapshot_dir"]


def snapshot_dir(*, make: bool = True) -> Path:
    """A new snapshot folder in the temporary folder, named by this process (its pid and identity: see
    :mod:`harness_lab.process_id`). Only a finalizer removes it, which kill -9 never runs: so the first run of a process
    in a temporary folder removes the folders of this user's processes that are gone (one per run they made).
    ``make=False``: its name only, random and new, for a sandbox that makes it when first needed
    (``Sandbox(snapshot_dir_new=True)``): most runs with a store, and forks, take no snapshot."""
    pid = os.getpid()
    where = tempfile.gettempdir()
    if where not in _SWEPT:
        _SWEPT.add(where)
        _sweep_snapshot_dirs(Path(where))
    if pid not in _OWN_TAG:  # this process's identity is fixed while it lives: /proc is read once per pid
        _OWN_TAG[pid] = _identity_tag(pid)
    prefix = f"{_SNAPSHOTS}{pid}-{_OWN_TAG[pid]}-"
    if not make:  # mkdtemp's name without its mkdir: the sandbox makes it exclusively (mode 0o700) or fails
        return Path(where) / f"{prefix}{secrets.token_hex(8)}"
    return Path(tempfile.mkdtemp(prefix=prefix))


def _identity_tag(pid: int) -> str:
    return hashlib.sha256(process_identity(pid).encode()).hexdigest()[:12]


def _sweep_snapshot_dirs(where: Path) -> None:
    try:
        entries = list(os.scandir(where))
    except OSError:
        return  # nothing to sweep where nothing can be listed; mkdtemp says what is wrong with the folder
    for entry in entries:
        if (named := _SNAPSHOT_NAME.match(entry.name)) is None:
            continue
        try:
            mine = entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.geteuid()
        except OSError:
            continue
        if mine and _identity_tag(int(named["pid"])) != named["tag"]:  # its process is gone (or another now)
            shutil.rmtree(entry.path, ignore_errors=True)


_SNAPSHOTS = "harness-lab-snapshots-"
_SNAPSHOT_NAME = re.compile(rf"{_SNAPSHOTS}(?P<pid>\d{{1,10}})-(?P<tag>[0-9a-f]{{12}})-")
_SWEPT: set[str] = set()  # temporary folders this process has swept already
_OWN_TAG: dict[int, str] = {}  # pid -> this process's tag (a child of os.fork has its own pid)
