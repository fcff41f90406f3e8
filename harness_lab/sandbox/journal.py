"""A change journal: the kernel tells the sandbox which workspace paths anyone wrote (Linux inotify).

The scanner watches every directory of the workspace (names created, removed, renamed; attributes)
and every regular file's inode (content and attribute changes). A write through *any* name of a
watched inode is reported, so a hard link from outside, an editor, another process or a
``run_command`` child cannot change a file silently. Between two scans the journal is drained:
the paths it names are looked at again, nothing else is, so the cost follows the change.

What inotify does not report, and the journal therefore cannot promise: writes through a shared
memory mapping (``mmap(MAP_SHARED)``) and changes made by another machine on a network file
system. The scanner therefore still walks the whole tree after every ``run_command`` (the model's
code may map files), and ``rescan=True`` walks it on request. When the kernel's event queue
overflows, or a watch cannot be added (watch limit), the journal says it lost track and the next
scan walks the tree in full (after an overflow with a fresh journal).

Each sandbox holds one inotify instance until it is closed (or collected); closing one that holds
watches finishes in a short-lived thread, because the kernel's teardown waits for a grace period.
The kernel limits instances per user (``fs.inotify.max_user_instances``, often 128) and watches
per user (``fs.inotify.max_user_watches``); past either limit a sandbox walks instead of trusting
the journal, and ``capabilities["change_tracking"]`` says why.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import functools
import os
import select
import struct
import sys
import threading
from collections.abc import Container
from dataclasses import dataclass, field

__all__ = ["Journal", "JournalChanges", "open_journal"]

_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x2, 0x4, 0x8
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF = 0x400, 0x800
_IN_UNMOUNT, _IN_Q_OVERFLOW, _IN_IGNORED = 0x2000, 0x4000, 0x8000
_IN_ONLYDIR, _IN_DONT_FOLLOW, _IN_ISDIR = 0x01000000, 0x02000000, 0x40000000
_CONTENT = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE
_DIR_MASK = (_CONTENT | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF
             | _IN_MOVE_SELF | _IN_ONLYDIR)  # added through /proc/self/fd/N, a link that must be followed
_FILE_MASK = _CONTENT | _IN_DONT_FOLLOW
_HEADER = struct.Struct("iIII")
_BUF = 256 * 1024


@dataclass
class JournalChanges:
    """What a drain found: paths to look at again, directories to walk whole, or: track lost."""

    paths: set[str] = field(default_factory=set)
    fresh_dirs: set[str] = field(default_factory=set)  # appeared (created or moved in): walk them whole
    lost: bool = False


class Journal:
    """One inotify instance over one workspace; see the module docstring."""

    def __init__(self, libc: ctypes.CDLL, fd: int) -> None:
        self._libc, self.fd = libc, fd
        self._dirs: dict[int, str] = {}  # watch descriptor -> directory path ("" is the root)
        self._files: dict[int, set[str]] = {}  # watch descriptor -> the paths of that inode
        self._file_wd: dict[str, int] = {}
        self.lost = False  # a watch could not be added or the queue overflowed
        self.unbound = 0  # times watched paths were let go while their inodes live on (see _forget_under)
        self._poll: select.poll | None = None

    def quiet(self) -> bool:
        """True when no event waits to be read and track was never lost: the tree is as last scanned.
        One poll(2) with a zero timeout (~0.5 µs), against a read that fails with EAGAIN (~2 µs)."""
        if self.lost or self.fd < 0:
            return False
        if self._poll is None:
            self._poll = select.poll()
            self._poll.register(self.fd, select.POLLIN)
        return not self._poll.poll(0)

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            if self._dirs or self._files:
                _close_in_background(fd)
            else:
                os.close(fd)

    def _add(self, path: str, mask: int, gone_ok: bool) -> int:
        wd = int(self._libc.inotify_add_watch(self.fd, os.fsencode(path), mask))
        if wd < 0 and not (gone_ok and ctypes.get_errno() in (errno.ENOENT, errno.ENOTDIR)):
            self.lost = True  # ENOSPC (the watch limit) or worse: this directory would go unseen
        return wd

    def watch_dir(self, dfd: int, rel: str) -> None:
        """Watch an open directory (before listing it, so nothing written after goes unseen)."""
        wd = self._add(f"/proc/self/fd/{dfd}", _DIR_MASK, gone_ok=False)
        if wd >= 0:
            self._dirs[wd] = rel

    def watch_file(self, dfd: int, name: str, rel: str) -> None:
        """Watch a regular file's inode (before hashing it)."""
        if self._file_wd.get(rel) is not None:
            self._unbind(rel)
        wd = self._add(f"/proc/self/fd/{dfd}/{name}", _FILE_MASK, gone_ok=True)
        if wd >= 0:
            self._files.setdefault(wd, set()).add(rel)
            self._file_wd[rel] = wd

    def watched_files(self) -> Container[str]:
        """The paths whose inode is watched, live (a walk asks once per directory, not a call per file)."""
        return self._file_wd.keys()

    def _unbind(self, rel: str) -> None:
        wd = self._file_wd.pop(rel, None)
        if wd is not None and (paths := self._files.get(wd)) is not None:
            paths.discard(rel)

    def _forget_under(self, rel: str) -> None:
        # A directory moved away or removed: its watches would name paths that are no longer here.
        prefix = rel + "/"
        self.unbound += 1  # a walk may no longer trust a directory's record of watched files
        for wd in [wd for wd, p in self._dirs.items() if p == rel or p.startswith(prefix)]:
            del self._dirs[wd]
            self._libc.inotify_rm_watch(self.fd, wd)
        for path in [p for p in self._file_wd if p.startswith(prefix)]:
            self._unbind(path)

    def drain(self) -> JournalChanges:
        """Read every queued event; never blocks."""
        out = JournalChanges(lost=self.lost)
        while True:
            try:
                buf = os.read(self.fd, _BUF)
            except BlockingIOError:
                break
            self._parse(buf, out)
        self.lost = out.lost
        return out

    def _parse(self, buf: bytes, out: JournalChanges) -> None:
        pos, size = 0, len(buf)
        dirs, files = self._dirs, self._files
        while pos < size:
            wd, mask, _cookie, length = _HEADER.unpack_from(buf, pos)
            pos += _HEADER.size
            name = os.fsdecode(buf[pos:pos + length].rstrip(b"\0")) if length else ""
            pos += length
            if mask & (_IN_Q_OVERFLOW | _IN_UNMOUNT):
                out.lost = True
                continue
            base = dirs.get(wd)
            if base is None:
                for path in files.get(wd, ()):
                    out.paths.add(path)
                if mask & _IN_IGNORED:
                    for path in files.pop(wd, ()):
                        if self._file_wd.get(path) == wd:
                            del self._file_wd[path]
                continue
            if mask & _IN_IGNORED:
                del dirs[wd]
                continue
            if not name:  # an event on the watched directory itself
                if base == "" and mask & (_IN_DELETE_SELF | _IN_MOVE_SELF):
                    out.lost = True
                elif base:
                    out.paths.add(base)
                continue
            path = f"{base}/{name}" if base else name
            out.paths.add(path)
            if mask & _IN_ISDIR:
                if mask & _IN_MOVED_FROM:  # a removed directory was emptied first: IN_IGNORED cleans up
                    self._forget_under(path)
                if mask & (_IN_DELETE | _IN_MOVED_FROM):
                    out.fresh_dirs.discard(path)
                if mask & (_IN_CREATE | _IN_MOVED_TO):
                    out.fresh_dirs.add(path)


def _close_in_background(fd: int) -> None:
    """Close an inotify instance that holds watches without waiting for it.

    Tearing the watches down waits for the kernel's SRCU grace period (fsnotify): 0.1 to 20 ms
    measured here, longest when instances close back to back. Nothing in this process needs that
    wait, so a short-lived thread takes it; the descriptor is this journal's alone (it was taken
    from the journal before the thread starts)."""
    try:
        threading.Thread(target=_close_quietly, args=(fd,), name="harness-lab-journal-close", daemon=True).start()
    except RuntimeError:  # the interpreter is shutting down: no new threads
        os.close(fd)


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):  # nothing to report to: the journal is gone already
        os.close(fd)


def open_journal() -> Journal | str:
    """A journal, or why there is none on this machine (the scanner then walks instead)."""
    if not sys.platform.startswith("linux"):
        return f"inotify is Linux only (this is {sys.platform})"
    if not os.path.isdir("/proc/self/fd"):
        return "/proc is not mounted (watches are added through /proc/self/fd)"
    libc = _libc()
    if isinstance(libc, str):
        return libc
    fd = int(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    if fd < 0:
        err = ctypes.get_errno()
        hint = " (fs.inotify.max_user_instances reached)" if err == errno.EMFILE else ""
        return f"inotify_init1 failed: {os.strerror(err)}{hint}"
    return Journal(libc, fd)


@functools.lru_cache(maxsize=1)  # one handle per process: find_library runs ldconfig in a subprocess (~2 ms)
def _libc() -> ctypes.CDLL | str:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError) as exc:
        return f"inotify is unavailable: {exc}"
    return libc
