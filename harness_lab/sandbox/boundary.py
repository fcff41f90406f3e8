"""Resolving a model-supplied path to an open file descriptor that provably lies inside the root.

Two layers, both fail closed:

1. A lexical check (:meth:`Boundary.parts`): the path becomes a tuple of plain names. ``..``
   anywhere, NUL bytes, absolute paths not under the root (compared component-wise, so ``/ws-evil``
   is not under ``/ws``), names over 255 bytes and paths over 4095 bytes are refused here.
2. A kernel-checked open relative to a descriptor of the root held since construction, so no
   string check is ever followed by a separate open (no TOCTOU). With ``openat2`` (Linux >= 5.6,
   syscall 437 on x86_64 and aarch64, called through ctypes) every open uses RESOLVE_BENEATH |
   RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV. Without it, a component-by-component
   walk opens each name with O_NOFOLLOW relative to the previous directory descriptor and refuses
   mount crossings by comparing ``st_dev`` and the mount id (``mnt_id`` in ``/proc/self/fdinfo``): a
   bind mount of another folder of the same file system has the same ``st_dev``.

Rules the tools built on this follow: no symlink is ever followed (a symlink anywhere in the path,
dangling or not, inside or outside, is refused); special files (FIFOs, devices, sockets) are refused
after an O_PATH open, which never blocks and has no device side effects; a regular file with
``st_nlink > 1`` is refused for read, overwrite and delete, because another name for the same inode
may lie outside the workspace and the sandbox cannot see where.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import platform
import stat
from collections.abc import Callable
from typing import Any

from harness_lab.errors import SandboxEnvironmentError

__all__ = ["Boundary", "Refusal", "check_regular", "openat2_available"]

_PATH_MAX = 4095
_NAME_MAX = 255
_RESOLVE_NO_XDEV = 0x01
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_XDEV
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437}.get(platform.machine())
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refusal(Exception):
    """A path the boundary will not open; converted to a ToolResult by the caller."""

    def __init__(self, status: str, reason: str, hint: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.hint = hint


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


@functools.lru_cache(maxsize=1)  # one libc handle per process; loading it is the slow part
def _libc_syscall() -> Callable[..., Any] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    fn = libc.syscall
    fn.restype = ctypes.c_long
    fn.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
    return fn


def _openat2(dirfd: int, name: str, flags: int, mode: int = 0) -> int:
    fn = _libc_syscall()
    if fn is None or _SYS_OPENAT2 is None:
        raise OSError(errno.ENOSYS, "openat2 unavailable")
    how = _OpenHow(flags | os.O_CLOEXEC, mode, _RESOLVE)
    fd = int(fn(_SYS_OPENAT2, dirfd, os.fsencode(name), ctypes.byref(how), ctypes.sizeof(how)))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), name)
    return fd


def openat2_available(dirfd: int) -> bool:
    """True when the kernel accepts openat2 with our resolve flags (probe on a real directory)."""
    try:
        fd = _openat2(dirfd, ".", os.O_PATH | os.O_DIRECTORY)
    except OSError:
        return False
    os.close(fd)
    return True


def _denied(reason: str, hint: str) -> Refusal:
    return Refusal("denied", reason, hint)


def _error(reason: str, hint: str) -> Refusal:
    return Refusal("error", reason, hint)


_HINT_INSIDE = "use a relative path inside the workspace, e.g. 'notes/a.txt'"


def _map_os_error(exc: OSError, path: str) -> Refusal:
    code = exc.errno
    if code == errno.ELOOP:
        return _denied(f"'{path}' goes through a symbolic link; the sandbox follows no symlinks",
                       "address the real file by its own path inside the workspace")
    if code == errno.EXDEV:
        return _denied(f"'{path}' would leave the workspace (escape or mount crossing)", _HINT_INSIDE)
    if code == errno.ENAMETOOLONG:
        return _denied(f"'{path[:80]}...' is too long", "use a shorter path")
    if code == errno.ENOENT:
        return _error(f"'{path}' does not exist", "check the spelling, or list_dir the parent first")
    if code == errno.ENOTDIR:
        return _error(f"a component of '{path}' is not a directory", "list_dir the parent first")
    if code == errno.EISDIR:
        return _error(f"'{path}' is a directory", "use list_dir for directories")
    if code in (errno.EACCES, errno.EPERM):
        return _denied(f"permission denied for '{path}'", "this file is not accessible to the sandbox")
    if code == errno.ENXIO:
        return _denied(f"'{path}' is a special file", "only regular files and directories are allowed")
    if code == errno.EAGAIN:
        return Refusal("error", f"'{path}' changed while being resolved", "retry the call")
    return _error(f"cannot open '{path}': {os.strerror(code or 0)}", "check the path")


class Boundary:
    """Opens paths beneath one root directory, never outside it."""

    def __init__(self, root: str, resolution: str = "auto") -> None:
        if not os.path.isdir(root):
            raise SandboxEnvironmentError(f"workspace root {root!r} is not an existing directory")
        self.root = os.path.abspath(root)
        self.real_root = os.path.realpath(root)
        self.root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.root_dev = os.fstat(self.root_fd).st_dev
        have = openat2_available(self.root_fd)
        if resolution == "openat2" and not have:
            os.close(self.root_fd)
            raise SandboxEnvironmentError("policy asks for openat2 but this kernel does not provide it")
        self.mechanism = "openat2" if have and resolution != "walk" else "walk"
        # Only the walk compares mounts (openat2 refuses a crossing itself): /proc is read for it alone.
        self.root_mount = mount_id(self.root_fd) if self.mechanism == "walk" else None

    def close(self) -> None:
        if self.root_fd >= 0:
            os.close(self.root_fd)
            self.root_fd = -1

    # -- lexical layer ---------------------------------------------------------------------
    def parts(self, path: object) -> tuple[str, ...]:
        """Split ``path`` into plain names under the root, or raise :class:`Refusal`."""
        if not isinstance(path, str):
            raise _error("path must be a string", "pass path='relative/name.txt'")
        if "\x00" in path:
            raise _denied("path contains a NUL byte", _HINT_INSIDE)
        try:  # strict: a lone surrogate would name a non-UTF-8 file and make the result unserialisable
            raw = path.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _error("path is not valid UTF-8 text", _HINT_INSIDE) from exc
        if len(raw) > _PATH_MAX:
            raise _denied(f"path is too long ({len(raw)} bytes, limit {_PATH_MAX})", "use a shorter path")
        rel = path
        if path.startswith("/"):
            rel = self._strip_root(path)
        names: list[str] = []
        for name in rel.split("/"):
            if name in ("", "."):
                continue
            if name == "..":
                raise _denied(f"'{path}' uses '..'; parent references are refused", _HINT_INSIDE)
            if len(os.fsencode(name)) > _NAME_MAX:
                raise _denied(f"a name in '{path[:80]}' exceeds {_NAME_MAX} bytes", "use shorter names")
            names.append(name)
        return tuple(names)

    def _strip_root(self, path: str) -> str:
        comps = [c for c in path.split("/") if c not in ("", ".")]
        if ".." in comps:
            raise _denied(f"'{path}' uses '..'; parent references are refused", _HINT_INSIDE)
        for base in (self.root, self.real_root):
            base_comps = [c for c in base.split("/") if c]
            # Component-wise: '/ws-evil/x' does not start with ['ws'] + ... as '/ws' would by string.
            if comps[: len(base_comps)] == base_comps:
                return "/".join(comps[len(base_comps):])
        raise _denied(f"'{path}' is outside the workspace", _HINT_INSIDE)

    # -- kernel layer ----------------------------------------------------------------------
    def _open_one(self, dirfd: int, name: str, flags: int, mode: int = 0) -> int:
        if self.mechanism == "openat2":
            return _openat2(dirfd, name, flags, mode)
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dirfd)

    def _check_dir_fd(self, fd: int, path: str) -> None:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            raise _error(f"a component of '{path}' is not a directory", "list_dir the parent first")
        if st.st_dev != self.root_dev or (self.mechanism == "walk" and mount_id(fd) != self.root_mount):
            raise _denied(f"'{path}' crosses a mount point", _HINT_INSIDE)

    def _explain(self, dirfd: int, name: str, exc: OSError, path: str) -> Refusal:
        # ENOTDIR from O_DIRECTORY|O_NOFOLLOW on a symlink must read as a symlink refusal.
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            with contextlib.suppress(OSError):
                if stat.S_ISLNK(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode):
                    return _map_os_error(OSError(errno.ELOOP, "symlink"), path)
        return _map_os_error(exc, path)

    def open_dir(self, names: tuple[str, ...], path: str, *, create: bool = False,
                 owner: tuple[int, int] | None = None) -> int:
        """An O_RDONLY descriptor of directory ``names`` (``()`` is the root itself)."""
        fd = os.dup(self.root_fd)
        try:
            for name in names:
                try:
                    nfd = self._open_one(fd, name, _DIR_FLAGS)
                except FileNotFoundError:
                    if not create:
                        raise _map_os_error(OSError(errno.ENOENT, "missing"), path) from None
                    try:
                        os.mkdir(name, 0o755, dir_fd=fd)
                        if owner is not None:
                            os.chown(name, owner[0], owner[1], dir_fd=fd, follow_symlinks=False)
                        nfd = self._open_one(fd, name, _DIR_FLAGS)
                    except OSError as exc:
                        raise self._explain(fd, name, exc, path) from None
                except OSError as exc:
                    raise self._explain(fd, name, exc, path) from None
                os.close(fd)
                fd = nfd
                self._check_dir_fd(fd, path)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def lstat_in(self, dirfd: int, name: str) -> os.stat_result | None:
        """``lstat`` of one name in an open directory; ``None`` when it does not exist."""
        try:
            return os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def open_regular(self, names: tuple[str, ...], path: str) -> tuple[int, os.stat_result]:
        """Open a regular single-link file for reading; never blocks, never follows links."""
        if not names:
            raise _error("the workspace root is a directory", "use list_dir for directories")
        dfd = self.open_dir(names[:-1], path)
        try:
            try:
                pfd = self._open_one(dfd, names[-1], os.O_PATH | os.O_NOFOLLOW)
            except OSError as exc:
                raise self._explain(dfd, names[-1], exc, path) from None
            try:
                st = os.fstat(pfd)
            finally:
                os.close(pfd)
            check_regular(st, path)
            try:
                # O_NONBLOCK: if the name was swapped for a FIFO since the O_PATH open, we still
                # do not block, and the inode comparison below refuses it.
                fd = self._open_one(dfd, names[-1], os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
            except OSError as exc:
                raise self._explain(dfd, names[-1], exc, path) from None
        finally:
            os.close(dfd)
        st2 = os.fstat(fd)
        if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)
            raise Refusal("error", f"'{path}' changed while being opened", "retry the call")
        if st2.st_dev != self.root_dev or (self.mechanism == "walk" and mount_id(fd) != self.root_mount):
            os.close(fd)  # a file bind-mounted over a name (openat2's RESOLVE_NO_XDEV refuses it itself)
            raise _denied(f"'{path}' crosses a mount point", _HINT_INSIDE)
        try:
            check_regular(st2, path)
        except Refusal:
            os.close(fd)
            raise
        return fd, st2


def mount_id(fd: int) -> int | None:
    """The id of the mount ``fd`` lies on (``mnt_id`` of ``/proc/self/fdinfo/<fd>``, Linux >= 3.15); None
    without /proc, and then the walk compares ``st_dev`` only."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as fh:
            for line in fh:
                if line.startswith(b"mnt_id:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_regular(st: os.stat_result, path: str) -> None:
    """Refuse anything but a regular file with exactly one link."""
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise _error(f"'{path}' is a directory", "use list_dir for directories")
    if stat.S_ISLNK(mode):
        raise _denied(f"'{path}' is a symbolic link; the sandbox follows no symlinks",
                      "address the real file by its own path inside the workspace")
    if not stat.S_ISREG(mode):
        raise _denied(f"'{path}' is a special file (FIFO, device or socket)",
                      "only regular files and directories are allowed")
    if st.st_nlink > 1:
        raise _denied(f"'{path}' has {st.st_nlink} hard links; another name may lie outside the workspace",
                      "copy the content into a new file instead of linking")
