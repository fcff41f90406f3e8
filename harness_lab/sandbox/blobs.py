"""Content-addressed file contents for snapshots: ``<dir>/<sha[:2]>/<sha[2:]>``, written once.

A blob is written to a temporary name and renamed into place, so a reader (or a crash) never
sees half a blob under its final name. Identical contents are stored once, whatever their paths.

:meth:`BlobStore.hold` keeps the next new blobs in memory instead (up to a byte budget), each written
the first time anything asks for its :meth:`~BlobStore.path`: a fork's first scan reads every file it
just wrote, and storing them all again (a folder and a file per blob) was most of a fork's cost, for
contents that only a rollback or a later fork ever reads. Snapshots live only in this process, so a
blob held in memory is as durable as one on disk.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Callable

__all__ = ["BlobStore"]

_CHUNK = 1 << 20


class BlobStore:
    """Content-addressed file contents: ``<dir>/<sha[:2]>/<sha[2:]>``, written once, never changed."""

    def __init__(self, directory: str, before_make: Callable[[], None] | None = None) -> None:
        """``before_make``: called once before ``directory`` is made (its snapshot store's own folder, made
        lazily too: see SnapshotStore)."""
        self.directory = directory  # made on the first write: a run that stores nothing costs no mkdir
        self._made = False
        self._before_make = before_make
        self._known: set[str] = set()
        self._subdirs: set[str] = set()  # fan-out directories known to exist (saves a syscall per blob)
        self._held: dict[str, bytes] = {}  # stored, not yet written (see hold)
        self._hold_left = 0
        self._share: BlobStore | None = None

    def _ensure_root(self) -> None:
        if not self._made:
            if self._before_make is not None:
                self._before_make()
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            self._made = True

    def _ensure_subdir(self, digest: str) -> None:
        if digest[:2] not in self._subdirs:
            self._ensure_root()
            os.makedirs(os.path.join(self.directory, digest[:2]), mode=0o700, exist_ok=True)
            self._subdirs.add(digest[:2])

    def hold(self, limit: int, share: BlobStore | None = None) -> None:
        """Keep new blobs in memory, up to ``limit`` bytes in all (0: stop), written when first needed.
        ``share``: a store holding the same contents (the fork's source): a blob past the budget is
        linked from it when it can be, as :meth:`adopt` does."""
        self._hold_left, self._share = limit, share if limit > 0 else None

    def path(self, digest: str) -> str:
        """Where blob ``digest`` lies (a held one is written now: the caller reads the file)."""
        data = self._held.pop(digest, None)
        if data is not None:
            self._write(digest, data)
        return self._where(digest)

    def _where(self, digest: str) -> str:
        return os.path.join(self.directory, digest[:2], digest[2:])

    def has(self, digest: str) -> bool:
        if digest in self._known or digest in self._held:
            return True
        if os.path.exists(self._where(digest)):
            self._known.add(digest)
            return True
        return False

    def adopt(self, digest: str, other: BlobStore) -> bool:
        """Share ``other``'s blob ``digest`` by a hard link (blobs never change once written, and
        each store removes only its own name). False when no link can be made (another file
        system, link limit): then the blob is written here when it is next stored."""
        if self.has(digest):
            return True
        self._ensure_subdir(digest)
        try:
            os.link(other.path(digest), self._where(digest))
        except FileExistsError:
            pass
        except OSError:
            return False
        self._known.add(digest)
        return True

    def put_bytes(self, data: bytes, digest: str | None = None) -> str:
        """Store ``data``; ``digest``: its sha256, when the caller has just computed it from these bytes."""
        if digest is None:
            digest = hashlib.sha256(data).hexdigest()
        if self.has(digest):
            return digest
        if len(data) <= self._hold_left:
            self._held[digest] = data
            self._hold_left -= len(data)
        elif self._share is None or not self._share.has(digest) or not self.adopt(digest, self._share):
            self._write(digest, data)
        return digest

    def _write(self, digest: str, data: bytes) -> None:
        final = self._where(digest)
        self._ensure_subdir(digest)
        tmp = f"{final}.tmp-{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, final)  # atomic: a reader sees the whole blob or none
        self._known.add(digest)

    def put_fd(self, fd: int, size_hint: int) -> str:
        """Hash an open file and store its bytes (streams files too large to hold in memory)."""
        if size_hint <= 8 * _CHUNK:
            data = _read_all(fd)
            return self.put_bytes(data)
        h = hashlib.sha256()
        self._ensure_root()
        tmp = os.path.join(self.directory, f"incoming-{os.getpid()}-{os.urandom(4).hex()}")
        with open(tmp, "wb") as out:
            while chunk := os.read(fd, _CHUNK):
                h.update(chunk)
                out.write(chunk)
        digest = h.hexdigest()
        if self.has(digest):
            os.unlink(tmp)
        else:
            self._ensure_subdir(digest)
            os.replace(tmp, self._where(digest))
            self._known.add(digest)
        return digest

    def copy_to(self, digest: str, out_fd: int) -> None:
        """Write a blob's bytes to ``out_fd``: in the kernel (copy_file_range) where it can."""
        fd = os.open(self.path(digest), os.O_RDONLY | os.O_CLOEXEC)
        try:
            left = os.fstat(fd).st_size
            try:
                while left > 0:
                    n = os.copy_file_range(fd, out_fd, left)
                    if n == 0:
                        break
                    left -= n
                return
            except OSError as exc:  # e.g. across file systems on an older kernel: copy by hand
                if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP) \
                        or os.lseek(out_fd, 0, os.SEEK_CUR) != 0:
                    raise
            os.lseek(fd, 0, os.SEEK_SET)
            while chunk := os.read(fd, _CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out_fd, view):]
        finally:
            os.close(fd)

    def read(self, digest: str) -> bytes:
        with open(self.path(digest), "rb") as fh:
            return fh.read()


def _read_all(fd: int) -> bytes:
    parts: list[bytes] = []
    while chunk := os.read(fd, _CHUNK):
        parts.append(chunk)
    return b"".join(parts)

