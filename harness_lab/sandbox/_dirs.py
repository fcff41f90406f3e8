"""Directory helpers shared by the scanner and rollback: every step opened with O_NOFOLLOW."""

from __future__ import annotations

import os
import stat

__all__ = ["DIR_FLAGS", "ancestors", "open_dirs", "take_ownership"]

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def open_dirs(root_fd: int, names: list[str]) -> int:
    fd = os.dup(root_fd)
    try:
        for name in names:
            nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def take_ownership(dfd: int, name: str, st: os.stat_result, owner: tuple[int, int]) -> os.stat_result:
    # Only directories and single-link regular files: chown on a hard link would change the
    # owner of the same inode wherever its other name lives.
    mode = st.st_mode
    if stat.S_ISDIR(mode) or (stat.S_ISREG(mode) and st.st_nlink == 1):
        try:
            os.chown(name, owner[0], owner[1], dir_fd=dfd, follow_symlinks=False)
            return os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            return st
    return st
