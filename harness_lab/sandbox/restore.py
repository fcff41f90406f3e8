"""Rollback: make the workspace equal a snapshot's manifest, touching only what differs.

Every name is replaced by rename from a fresh temporary file in the same directory, so a restore
never writes *through* whatever is there now (a planted symlink or a hard link to an outside file
is replaced, its target untouched). Directories are opened with O_NOFOLLOW relative to their
parent's descriptor, so a directory swapped for a symlink cannot redirect the restore.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Iterator

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
    # Shallow first, so a parent is handled before what lies beneath it: only the topmost of what
    # is extra is removed (with all beneath it), and gone follows from the parent in one pass.
    extra = sorted((p for p in paths if (e := current.get(p)) is not None
                    and ((t := target.get(p)) is None or t[0] != e[0] or t[0] == "s")), key=_depth)
    extra_set = set(extra)
    gone: set[str] = set()
    for path in sorted((p for p in paths if p in current), key=_depth):
        if path in extra_set or _parent(path) in gone:
            gone.add(path)
    removed = 0
    parents = _Parents(root_fd)
    try:
        for path in extra:
            if _parent(path) in gone:
                removed += 1  # went with the directory above it
            elif _remove(parents, path):
                removed += 1
        todo = [p for p in paths if (t := target.get(p)) is not None and t[0] != "s"
                and (p in gone or current.get(p) != t)]
        settled: dict[str, Entry | None] = dict.fromkeys(gone)
        written = 0
        try:
            for path in sorted(todo, key=lambda p: (p.count("/"), p)):  # parents before children
                have = None if path in gone else current.get(path)
                written += _restore(parents, path, target[path], have, scanner, blobs, owner)
                settled[path] = target[path]
        except BaseException:
            scanner.invalidate()  # half restored: the next scan walks the tree
            raise
    finally:
        parents.close()
    scanner.settle(settled)
    return {"written": written, "removed": removed}


def _depth(path: str) -> int:
    return path.count("/")


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


class _Parents:
    """Descriptors of the directory last opened, so a chain of paths, parents first, costs one open
    per level instead of a walk from the root for each (quadratic in the depth of the chain)."""

    def __init__(self, root_fd: int) -> None:
        self._root_fd = root_fd
        self._path: str | None = None
        self._fd = -1

    def open(self, path: str) -> tuple[int, str]:
        """The open parent directory of ``path`` and its last name (the descriptor stays owned here)."""
        parent, _, name = path.rpartition("/")
        if parent != self._path:
            if self._path is not None and _parent(parent) == self._path and parent:
                fd = os.open(parent.rpartition("/")[2], _DIR_FLAGS, dir_fd=self._fd)
            else:
                fd = open_dirs(self._root_fd, parent.split("/") if parent else [])
            self.close()
            self._path, self._fd = parent, fd
        return self._fd, name

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._path, self._fd = None, -1


def _remove(parents: _Parents, path: str) -> bool:
    try:
        dfd, name = parents.open(path)
    except OSError:
        return False  # its parent is gone already
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        with _writable(dfd):
            if stat.S_ISDIR(st.st_mode):
                _rmtree_at(dfd, name)
            else:
                os.unlink(name, dir_fd=dfd)
        return True
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def _writable(dfd: int) -> Iterator[None]:
    """Let the owner change names in a directory whose mode forbids it (e.g. 0o555, as Go's module
    cache makes them), then put its mode back; root needs no such help."""
    mode = stat.S_IMODE(os.fstat(dfd).st_mode)
    if mode & 0o300 == 0o300 or os.geteuid() == 0:
        yield
        return
    os.fchmod(dfd, mode | 0o300)
    try:
        yield
    finally:
        os.fchmod(dfd, mode)


def _open_doomed(name: str, dfd: int) -> int:
    """Open a directory about to be removed, made writable by its owner (it is going away)."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
    if os.geteuid() != 0 and stat.S_IMODE(os.fstat(fd).st_mode) & 0o700 != 0o700:
        with contextlib.suppress(OSError):  # not ours: the removal fails as it would have
            os.fchmod(fd, 0o700)
    return fd


def _rmtree_at(dfd: int, name: str) -> None:
    """Remove directory ``name`` and all beneath it, holding two descriptors whatever its depth: each
    grandchild directory is moved up into the top one (a rename inside the tree), so nothing
    recurses and no chain of descriptors is held open."""
    top = _open_doomed(name, dfd)
    try:
        while children := os.listdir(top):
            for child in children:
                if not stat.S_ISDIR(os.stat(child, dir_fd=top, follow_symlinks=False).st_mode):
                    os.unlink(child, dir_fd=top)
                    continue
                cfd = _open_doomed(child, top)
                try:
                    for grand in os.listdir(cfd):
                        if stat.S_ISDIR(os.stat(grand, dir_fd=cfd, follow_symlinks=False).st_mode):
                            os.rename(grand, f".hl-rm-{os.urandom(6).hex()}", src_dir_fd=cfd, dst_dir_fd=top)
                        else:
                            os.unlink(grand, dir_fd=cfd)
                finally:
                    os.close(cfd)
                os.rmdir(child, dir_fd=top)
    finally:
        os.close(top)
    os.rmdir(name, dir_fd=dfd)


def _restore(parents: _Parents, path: str, want: Entry, have: Entry | None, scanner: Scanner,
             blobs: BlobStore, owner: tuple[int, int] | None) -> int:
    kind, payload, mode = want
    dfd, name = parents.open(path)
    with _writable(dfd):
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
        # rename replaces the name, never writes through an existing inode (hard links stay intact).
        # A regular file there is unlinked first: a rename over one makes ext4 write the new file's
        # data out before it returns (auto_da_alloc), half the wall time of an 8 MiB restore.
        if kind == "f" and have is not None and have[0] == "f":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dfd)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    if kind == "f":
        scanner.note_content(path, os.stat(name, dir_fd=dfd, follow_symlinks=False), payload)
    return 1
