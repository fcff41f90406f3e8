"""The four file tools, each built on :class:`~harness_lab.sandbox.boundary.Boundary`.

Every function returns a :class:`~harness_lab.records.tools.ToolResult` or raises
:class:`~harness_lab.sandbox.boundary.Refusal` (the facade turns that into a result). Writes go to
a fresh temporary name in the target directory and are renamed into place, so a write never goes
*through* an existing inode (a hard link stays untouched) and a reader never sees half a file.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass

from harness_lab.records.tools import ToolResult
from harness_lab.sandbox.boundary import Boundary, Refusal, check_regular

__all__ = ["TEMP_PREFIX", "Target", "delete_file", "inspect_target", "list_dir", "read_file", "write_debris",
           "write_file"]


@dataclass(frozen=True)
class Target:
    """A resolved write/delete target: its names and whether a regular file exists there now."""

    names: tuple[str, ...]
    path: str
    exists: bool


def read_file(b: Boundary, path: object, max_bytes: int) -> ToolResult:
    names = b.parts(path)
    assert isinstance(path, str)
    fd, st = b.open_regular(names, path)
    if path.endswith(_DIR_SPELLED):  # a directory spelling of a file: refused, as open(2) does
        os.close(fd)
        raise _not_a_dir(path, names)
    try:
        with os.fdopen(fd, "rb", closefd=False) as fh:
            raw = fh.read(max_bytes + 1)
    finally:
        os.close(fd)
    truncated = len(raw) > max_bytes
    raw = raw[:max_bytes]
    try:
        text = raw.decode("utf-8")
        binary = False
    except UnicodeDecodeError as exc:
        if truncated and exc.reason == "unexpected end of data" and exc.end == len(raw):
            text, binary = raw[:exc.start].decode("utf-8"), False  # the cap cut one character in two
        else:
            text, binary = raw.decode("utf-8", errors="replace"), True
    rel = "/".join(names)
    return ToolResult.success("read_file", text, path=rel, size=st.st_size, truncated=truncated,
                              binary=binary, mechanism=b.mechanism)


_SUFFIX = {"dir": "/", "symlink": "@", "special": "|", "file": ""}


def list_dir(b: Boundary, path: object, max_bytes: int) -> ToolResult:
    """The entries of a directory, sorted; like read_file, at most ``max_bytes`` of listing."""
    names = b.parts("." if path is None else path)
    fd = b.open_dir(names, path if isinstance(path, str) else ".")
    entries: list[dict[str, object]] = []
    lines: list[str] = []
    used, escapes, truncated = 0, False, False
    try:
        found = sorted(os.listdir(fd))
        for name in found:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # vanished between listdir and stat
            label, escaped = _shown(name)
            kind = _kind(st.st_mode)
            line = label + _SUFFIX[kind]
            used += len(line.encode("utf-8")) + 1
            if used > max_bytes:
                truncated = True  # the rest is neither stat'ed nor listed
                break
            entry: dict[str, object] = {"name": label, "type": kind, "size": st.st_size}
            if escaped:
                entry["escaped"] = escapes = True
            entries.append(entry)
            lines.append(line)
    finally:
        os.close(fd)
    if escapes:
        lines.append("(some names are not printable UTF-8 and are shown with escapes such as \\n and \\xff)")
    if truncated:
        lines.append(f"({len(found) - len(entries)} more entries not shown: a listing is capped at {max_bytes} "
                     "bytes; list a subdirectory, or run_command with a filter)")
    content = "\n".join(lines) if lines else "(empty directory)"
    return ToolResult.success("list_dir", content, path="/".join(names) or ".", entries=entries,
                              truncated=truncated, total=len(found), mechanism=b.mechanism)


def _shown(name: str) -> tuple[str, bool]:
    """A name as one line of valid UTF-8: any byte string can be a file name (a command may make
    one), but a listing goes into the context and the checkpoint as JSON text, and a newline in a
    name would read as two entries."""
    if name.isprintable():  # lone surrogates (undecodable bytes) and control characters are not
        return name, False
    text = os.fsencode(name).decode("utf-8", "backslashreplace")
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text), True


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISREG(mode):
        return "file"
    return "special"


def inspect_target(b: Boundary, path: object, tool: str) -> Target:
    """Resolve the parent of a write/delete target and check what is there now."""
    names = b.parts(path)
    assert isinstance(path, str)
    if not names:
        raise Refusal("error", "the path names the workspace root", "name a file inside the workspace")
    dir_spelled = path.endswith(_DIR_SPELLED)
    try:
        dfd = b.open_dir(names[:-1], path)
    except Refusal as r:
        # A missing parent is fine for write_file (it creates directories), not for delete_file.
        if tool == "write_file" and r.reason.endswith("does not exist"):
            return _new_file(names, path, dir_spelled)
        raise
    try:
        st = b.lstat_in(dfd, names[-1])
    finally:
        os.close(dfd)
    if st is None:
        if tool == "delete_file":
            raise Refusal("error", f"'{path}' does not exist", "list_dir the parent to see what is there")
        return _new_file(names, path, dir_spelled)
    if stat.S_ISDIR(st.st_mode) and tool == "delete_file":
        return Target(names, path, exists=True)
    check_regular(st, path)
    if dir_spelled:  # delete_file 'notes.md/': not the file notes.md
        raise _not_a_dir(path, names)
    return Target(names, path, exists=True)


# A trailing '/' (or '/.') names a directory: POSIX refuses it for a file (ENOTDIR, EISDIR).
_DIR_SPELLED = ("/", "/.")


def _new_file(names: tuple[str, ...], path: str, dir_spelled: bool) -> Target:
    if dir_spelled:  # 'notes/' would otherwise become a file named notes
        raise Refusal("error", f"'{path}' ends with '/', which names a directory",
                      "write_file needs a file name: drop the trailing '/'")
    return Target(names, path, exists=False)


def _not_a_dir(path: str, names: tuple[str, ...]) -> Refusal:
    return Refusal("error", f"'{path}' ends with '/', but '{'/'.join(names)}' is a file, not a directory",
                   "drop the trailing '/' to name the file")


# A write lands in a temporary file beside its target, renamed over it when whole: a reader never
# sees half a file, and a process killed mid-write leaves at most one such file (see write_debris).
TEMP_PREFIX = ".hl-tmp-"
_TEMP_NAME = re.compile(re.escape(TEMP_PREFIX) + "[0-9a-f]{12}")


def write_debris(paths: Iterable[str], target: str) -> list[str]:
    """The workspace paths (of *paths*) a write of *target* killed before its rename may have left:
    temporary files named like :func:`write_file`'s, in the target's directory."""
    parent = posixpath.dirname(target)
    return sorted(p for p in paths
                  if posixpath.dirname(p) == parent and _TEMP_NAME.fullmatch(posixpath.basename(p)))


def write_file(b: Boundary, target: Target, data: bytes, owner: tuple[int, int] | None) -> ToolResult:
    dfd = b.open_dir(target.names[:-1], target.path, create=True, owner=owner)
    name = target.names[-1]
    tmp = f"{TEMP_PREFIX}{os.urandom(6).hex()}"
    try:
        before = b.lstat_in(dfd, name)
        mode = 0o644
        if before is not None:
            check_regular(before, target.path)  # re-check under the same dir fd, just before acting
            mode = stat.S_IMODE(before.st_mode) & 0o777
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     mode, dir_fd=dfd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)  # umask must not change the mode an overwrite keeps
            if owner is not None:
                os.fchown(fd, owner[0], owner[1])
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except IsADirectoryError:
        _discard(tmp, dfd)
        raise Refusal("error", f"'{target.path}' is a directory", "choose a file name") from None
    except BaseException:
        _discard(tmp, dfd)
        raise
    finally:
        os.close(dfd)
    rel = "/".join(target.names)
    return ToolResult.success("write_file", f"wrote {len(data)} bytes to {rel}", path=rel,
                              bytes=len(data), overwrote=before is not None, mechanism=b.mechanism)


def _discard(name: str, dfd: int) -> None:
    try:
        os.unlink(name, dir_fd=dfd)
    except OSError:
        pass


def delete_file(b: Boundary, target: Target) -> ToolResult:
    dfd = b.open_dir(target.names[:-1], target.path)
    name = target.names[-1]
    try:
        st = b.lstat_in(dfd, name)
        if st is None:
            raise Refusal("error", f"'{target.path}' does not exist", "list_dir the parent first")
        if stat.S_ISDIR(st.st_mode):
            try:
                os.rmdir(name, dir_fd=dfd)
            except OSError:
                raise Refusal("error", f"'{target.path}' is a directory that is not empty",
                              "delete the files inside it first") from None
            kind = "dir"
        else:
            check_regular(st, target.path)
            os.unlink(name, dir_fd=dfd)
            kind = "file"
    finally:
        os.close(dfd)
    rel = "/".join(target.names)
    return ToolResult.success("delete_file", f"deleted {rel}", path=rel, kind=kind, mechanism=b.mechanism)
