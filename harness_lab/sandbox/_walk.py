"""The walk beneath :class:`~harness_lab.sandbox.scan.Scanner`: directory entries into manifest
entries, hashing a file only when its stat key says it may have changed (a stat cache).

The walk opens every directory with O_NOFOLLOW relative to its parent's descriptor, so a symlink
swapped in during the walk cannot lead it outside. A file is hashed again when its stat key
(size, mtime_ns, ctime_ns, inode, device) changed, when a sandbox tool wrote it since the last
scan, or when its timestamps were too close to the moment it was last hashed to prove it was not
modified again within the same clock tick (git's "racily clean" problem). A full walk updates the
last manifest in place and notes only what differs; a directory found exactly as the last walk
recorded it (same names, same stat keys, same journal) is taken whole, and one whose own stat key is
unchanged is not even listed: the walk's cost is then one fstatat per entry, in C, near what a bare
``os.scandir`` walk costs. ``Scanner`` inherits this and owns the state declared here (read
:mod:`harness_lab.sandbox.scan` first).
"""

from __future__ import annotations

import operator
import os
import stat
import time
from collections.abc import Container
from dataclasses import dataclass, field

from harness_lab.sandbox._dirs import DIR_FLAGS as _DIR_FLAGS
from harness_lab.sandbox._dirs import open_dirs as _open_dirs
from harness_lab.sandbox._dirs import take_ownership as _take_ownership
from harness_lab.sandbox.blobs import BlobStore
from harness_lab.sandbox.journal import Journal

__all__ = ["DirRecord", "Entry", "Manifest", "TreeWalk", "WalkPass"]

Entry = tuple[str, str, int]
Manifest = dict[str, Entry]
_StatKey = tuple[int, int, int, int, int]
_DirKey = tuple[int, int, int, int]
# What a walk met in one directory, when all of it was proven: names, their stat keys (same order),
# the subdirectories' names, the journal's stamp then, and the directory's own stat key when it was
# old enough to prove its names (None: racily clean; see TreeWalk._scan_dir).
DirRecord = tuple[list[str], list[_StatKey], list[str], tuple[int, int], _DirKey | None]

_STAT = operator.methodcaller("stat", follow_symlinks=False)
_KEY = operator.attrgetter("st_size", "st_mtime_ns", "st_ctime_ns", "st_ino", "st_dev")
_NAME = operator.attrgetter("name")
_DIR_KEY = operator.attrgetter("st_mtime_ns", "st_ctime_ns", "st_ino", "st_dev")

_RACY_NS = 50_000_000  # timestamps come from a coarse clock (one jiffy); 50 ms is well above it


def _key(st: os.stat_result) -> _StatKey:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


@dataclass
class WalkPass:
    """What one walk gathers: the entries that changed, the paths met (one by one, or a directory's
    names at once), and the directory records it made (``None``: make and use none)."""

    changes: dict[str, Entry | None] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)
    seen_dirs: list[tuple[str, list[str]]] = field(default_factory=list)  # (prefix, names)
    records: dict[str, DirRecord] | None = None
    dirty_dirs: frozenset[str] = frozenset()  # directories holding a path a tool wrote: never taken whole
    stamp: tuple[int, int] = (0, 0)

    def met(self) -> int:
        return len(self.seen) + sum(len(names) for _, names in self.seen_dirs)

    def met_paths(self) -> set[str]:
        out = set(self.seen)
        for prefix, names in self.seen_dirs:
            out.update(prefix + name for name in names)
        return out


class TreeWalk:
    """Reading entries and whole subtrees into a manifest; the stat cache of file hashes."""

    root_fd: int
    blobs: BlobStore
    hashed_last: int
    _cache: dict[str, tuple[_StatKey, str]]
    _sizes: dict[str, int]  # path -> st_size of the regular file its manifest entry describes
    _dirty: set[str]
    _fresh: set[str]
    _journal: Journal | None
    # directory path ("" the root) -> what the last walk proved there; dropped when anything
    # changes one of its entries (Scanner._account), so a record always matches the manifest.
    _records: dict[str, DirRecord]
    _pending: list[str] | None

    def _remember(self, path: str, st: os.stat_result, digest: str, hashed_at: int) -> None:
        if hashed_at - max(st.st_mtime_ns, st.st_ctime_ns) > _RACY_NS:
            self._cache[path] = (_key(st), digest)
        else:
            self._cache.pop(path, None)  # racily clean: prove it again next time

    def _refresh(self, rel: str, manifest: Manifest, walked: set[str], changed: set[str]) -> None:
        changed.add(rel)
        old = manifest.pop(rel, None)
        if rel in self._fresh and old is not None and old[0] == "d":
            # Removed and made again (or another directory moved in): nothing beneath is known.
            for p in [p for p in manifest if p.startswith(rel + "/")]:
                del manifest[p]
                changed.add(p)
            old = None
        entry = self._lookup(rel, manifest, walked, old, changed)
        if entry is not None:
            manifest[rel] = entry
        if old is not None and old[0] == "d" and (entry is None or entry[0] != "d"):
            for p in [p for p in manifest if p.startswith(rel + "/")]:
                del manifest[p]  # a directory that is gone (or replaced) takes its entries along
                changed.add(p)

    def _lookup(self, rel: str, manifest: Manifest, walked: set[str], old: Entry | None,
                changed: set[str]) -> Entry | None:
        *dirs, name = rel.split("/")
        try:
            dfd = _open_dirs(self.root_fd, dirs)
        except OSError:
            return None  # the parent is gone or is no longer a directory: so is the entry
        try:
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                return None
            entry = self._entry(dfd, name, rel, st)
            if entry is not None and entry[0] == "d" and (old is None or old[0] != "d"):
                walked.add(rel)  # a directory new to us: walk it (tools made it, so it is small)
                stack = [(os.open(name, _DIR_FLAGS, dir_fd=dfd), rel + "/")]
                found: Manifest = {}
                while stack:
                    cfd, prefix = stack.pop()
                    try:
                        self._scan_dir(cfd, prefix, found, stack, None, WalkPass())
                    finally:
                        os.close(cfd)
                manifest.update(found)
                changed.update(found)
            return entry
        finally:
            os.close(dfd)

    def _entry(self, dfd: int, name: str, rel: str, st: os.stat_result) -> Entry | None:
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            return ("d", "", stat.S_IMODE(mode) & 0o777)
        if stat.S_ISLNK(mode):
            try:
                return ("l", os.readlink(name, dir_fd=dfd), 0)
            except OSError:
                return None
        if stat.S_ISREG(mode):
            digest = self._digest(dfd, name, rel, st)
            if digest is None:
                return None
            self._sizes[rel] = st.st_size
            return ("f", digest, stat.S_IMODE(mode) & 0o777)
        return ("s", "", 0)

    def _scan_dir(self, dfd: int, prefix: str, out: Manifest, stack: list[tuple[int, str]],
                  owner: tuple[int, int] | None, walk: WalkPass) -> None:
        """Bring ``out``'s entries of one directory up to date: what it meets goes into ``walk``,
        each entry that differs from ``out`` into ``out`` and ``walk.changes``; subdirectories onto ``stack``.

        A directory whose names and stat keys all equal its record (same order, same journal) is
        taken whole: its entries are what the record's walk put in the manifest, and nothing changed
        them since (a change drops the record). When the directory's own key is the recorded one its
        names are the recorded ones, so it is not even listed: one fstatat per entry and a list
        compare in C, no Python per entry. Otherwise each entry is looked at: an unchanged file
        costs two dict lookups and a tuple compare; nothing is built for it (no entry, no Path, no hash).
        """
        cache, dirty, s_isreg, journal = self._cache, self._dirty, stat.S_ISREG, self._journal
        here = prefix[:-1]
        records = walk.records if owner is None else None
        rec = self._records.get(here) if records is not None and here not in walk.dirty_dirs else None
        if rec is not None and rec[3] != walk.stamp:
            rec = None
        if rec is not None and rec[4] is not None and _DIR_KEY(os.fstat(dfd)) == rec[4]:
            # The same directory inode, no name added, removed or renamed in it since the record
            # (each would move its mtime and ctime): stat the recorded names, without listing. Its
            # watch is the one the record's walk added (same inode, same journal, nothing let go).
            lstat = os.lstat
            try:
                keys: list[_StatKey] | None = list(map(_KEY, [lstat(name, dir_fd=dfd) for name in rec[0]]))
            except OSError:
                keys = None  # gone since: looked at one by one below
            if keys == rec[1]:
                self._take_whole(dfd, prefix, rec, stack, walk)
                return
        watched: Container[str] = ()
        if journal is not None:
            journal.watch_dir(dfd, here)  # before listing: what is written after is reported
            watched = journal.watched_files()
        listed_at = time.time_ns()
        with os.scandir(dfd) as it:
            entries = list(it)
        if rec is not None:
            try:
                keys = list(map(_KEY, map(_STAT, entries)))
            except OSError:
                keys = None  # gone since listed: looked at one by one below
            if keys == rec[1] and rec[0] == list(map(_NAME, entries)):
                # Names back as they were (e.g. a file made and removed): the directory's new key
                # proves them from now on.
                self._take_whole(dfd, prefix, (*rec[:4], self._names_key(dfd, listed_at)), stack, walk)
                return
        changes, seen = walk.changes, walk.seen
        names: list[str] = []
        keys_made: list[_StatKey] = []
        subs: list[str] = []
        whole = records is not None  # every entry proven and cached: the directory gets a record
        for dirent in entries:
            name = dirent.name
            rel = prefix + name
            try:
                st = dirent.stat(follow_symlinks=False)  # cached by the DirEntry when stat above
                if owner is not None and st.st_uid != owner[0]:
                    st = _take_ownership(dfd, name, st, owner)
            except FileNotFoundError:
                whole = False
                continue
            mode = st.st_mode
            key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
            if s_isreg(mode):
                hit = cache.get(rel)
                if hit is not None and rel not in dirty and hit[0] == key:
                    seen.append(rel)
                    old = out.get(rel)
                    if old is None or old[1] != hit[1] or old[2] != mode & 0o777 or old[0] != "f":
                        out[rel] = changes[rel] = ("f", hit[1], mode & 0o777)
                        self._sizes[rel] = st.st_size
                    if journal is not None and rel not in watched:
                        journal.watch_file(dfd, name, rel)
                    if whole:
                        names.append(name)
                        keys_made.append(hit[0])
                    continue
            entry = self._entry(dfd, name, rel, st)
            if entry is None:
                whole = False
                continue
            seen.append(rel)
            if out.get(rel) != entry:
                out[rel] = changes[rel] = entry
            if whole:
                if entry[0] == "f" and ((c := cache.get(rel)) is None or c[0] != key):
                    whole = False  # racily clean, or changed while read: prove it again next walk
                names.append(name)
                keys_made.append(key)
            if entry[0] == "d":
                try:
                    stack.append((os.open(name, _DIR_FLAGS, dir_fd=dfd), rel + "/"))
                except OSError:
                    whole = False
                    continue  # swapped for something else mid-walk; the entry stays listed
                subs.append(name)
        if whole and records is not None:
            records[here] = (names, keys_made, subs, walk.stamp, self._names_key(dfd, listed_at))

    @staticmethod
    def _names_key(dfd: int, listed_at: int) -> _DirKey | None:
        """The directory's key, when it proves the names just listed: any later name change moves
        its mtime and ctime past this, unless the listing was within a clock tick of the last one."""
        st = os.fstat(dfd)
        return _DIR_KEY(st) if listed_at - max(st.st_mtime_ns, st.st_ctime_ns) > _RACY_NS else None

    def _take_whole(self, dfd: int, prefix: str, rec: DirRecord, stack: list[tuple[int, str]],
                    walk: WalkPass) -> None:
        """A directory found as its record has it: its entries stand, its subdirectories are walked."""
        walk.seen_dirs.append((prefix, rec[0]))
        assert walk.records is not None
        walk.records[prefix[:-1]] = rec
        for sub in rec[2]:
            try:
                stack.append((os.open(sub, _DIR_FLAGS, dir_fd=dfd), prefix + sub + "/"))
            except OSError:
                continue  # swapped for something else since: what was beneath is gone

    def _digest(self, dfd: int, name: str, rel: str, st: os.stat_result) -> str | None:
        cached = self._cache.get(rel)
        if cached is not None and cached[0] == _key(st) and rel not in self._dirty:
            return cached[1]
        if self._pending is not None:  # a walk within a quota: hashed once the total fits (Scanner.scan)
            self._pending.append(rel)
            return ""
        if self._journal is not None:
            self._journal.watch_file(dfd, name, rel)  # before reading: a later write is reported
        hashed_at = time.time_ns()
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError:
            return None
        try:
            st2 = os.fstat(fd)
            if not stat.S_ISREG(st2.st_mode):
                return None
            digest = self.blobs.put_fd(fd, st2.st_size)
        finally:
            os.close(fd)
        self.hashed_last += 1
        self._remember(rel, st2, digest, hashed_at)
        return digest
