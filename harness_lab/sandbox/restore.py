"""Rollback: make the workspace equal a snapshot's manifest, touching only what differs.

Every name is replaced by rename from a fresh temporary file in the same directory, so a restore
never writes *through* whatever is there now (a planted symlink or a hard link to an outside file
is replaced, its target untouched). Directories are opened with O_NOFOLLOW relative to their
parent's descriptor, so a directory swapped for a symlink cannot redirect the restore.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

from harness_lab.sandbox._dirs import DIR_FLAGS as _DIR_FLAGS
from harness_lab.sandbox._dirs import open_dirs
from harness_lab.sandbox.blobs import BlobStore
from harness_lab.sandbox.scan import Entry, Manifest, Scanner

__all__ = ["apply_manifest"]



def apply_manifest(root_fd: int, scanner: Scanner, blobs: BlobStore, target: Manifest,
                   owner: tuple[int, int] | None, since: set[str] | None = None) -> dict[str, int]:
    """Make the workspace equal ``target``: write only what differs, remove what is extra.

    The current state comes from ``scanner.current()``: proven by the change journal when there
    is one (cost: what changed since the last scan), by a full walk otherwise. ``since``: the
    paths that may differ between ``target`` and the last snapshot stored from ``scanner``; with
    it (and a scanner that knows what changed since that snapshot) only those paths are compared,
    so the cost follows the change, not the tree. Without it every entry is compared.
    """
    current = scanner.current()
    pending = scanner.since_last_save() if since is not None else None
    if pending is None or since is None:
        paths: Iterable[str] = current.keys() | target.keys()
    else:
        paths = since | pending
    extra = [p for p in paths if (e := current.get(p)) is not None
             and ((t := target.get(p)) is None or t[0] != e[0] or t[0] == "s")]
    removed = 0
    for path in sorted(extra, key=lambda p: p.count("/"), reverse=True):
        if _remove(root_fd, path):
            removed += 1
    gone = set(extra)
    dirs = tuple(p + "/" for p in extra if current[p][0] == "d")
    if dirs:  # whatever lay beneath a removed directory went with it
        gone.update(p for p in paths if p.startswith(dirs) and p in current)
    todo = [p for p in paths if (t := target.get(p)) is not None and t[0] != "s"
            and (p in gone or current.get(p) != t)]
    settled: dict[str, Entry | None] = dict.fromkeys(gone)
    written = 0
    try:
        for path in sorted(todo, key=lambda p: (p.count("/"), p)):  # parents before children
            have = None if path in gone else current.get(path)
            written += _restore(root_fd, path, target[path], have, scanner, blobs, owner)
            settled[path] = target[path]
    except BaseException:
        scanner.invalidate()  # half restored: the next scan walks the tree
        raise
    scanner.settle(settled)
    return {"written": written, "removed": removed}


def _open_parent(root_fd: int, path: str) -> tuple[int, str]:
    *dirs, name = path.split("/")
    return open_dirs(root_fd, dirs), name


def _remove(root_fd: int, path: str) -> bool:
    try:
        dfd, name = _open_parent(root_fd, path)
    except OSError:
        return False  # its parent is gone already
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            _rmtree_at(dfd, name)
        else:
            os.unlink(name, dir_fd=dfd)
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(dfd)


def _rmtree_at(dfd: int, name: str) -> None:
    fd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
    try:
        for child in os.listdir(fd):
            st = os.stat(child, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                _rmtree_at(fd, child)
            else:
                os.unlink(child, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dfd)


def _restore(root_fd: int, path: str, want: Entry, have: Entry | None, scanner: Scanner,
             blobs: BlobStore, owner: tuple[int, int] | None) -> int:
    kind, payload, mode = want
    dfd, name = _open_parent(root_fd, path)
    try:
        if kind == "d":
            if have is None:
                os.mkdir(name, mode, dir_fd=dfd)
            os.chmod(name, mode, dir_fd=dfd, follow_symlinks=False)
            if owner is not None:
                os.chown(name, owner[0], owner[1], dir_fd=dfd, follow_symlinks=False)
            return 0
        tmp = f".hl-restore-{os.urandom(6).hex()}"
        if kind == "l":
            os.symlink(payload, tmp, dir_fd=dfd)
        else:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         mode, dir_fd=dfd)
            try:
                blobs.copy_to(payload, fd)
                os.fchmod(fd, mode)
                if owner is not None:
                    os.fchown(fd, owner[0], owner[1])
            finally:
                os.close(fd)
        # rename replaces the name, never writes through an existing inode (hard links stay intact)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        if kind == "f":
            scanner.note_content(path, os.stat(name, dir_fd=dfd, follow_symlinks=False), payload)
        return 1
    finally:
        os.close(dfd)
